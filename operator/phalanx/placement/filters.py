"""Static node filters with kube-scheduler semantics (v1.37), one node at a time.

These are the reference definitions. The snapshot evaluates the same rules on label
columns for all nodes at once (see columns.py) and the tests check both agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from .model import (
    NO_EXECUTE,
    NO_SCHEDULE,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
)

__all__ = [
    "NODE_NAME_FIELD",
    "affinity_matches",
    "field_requirement_matches",
    "label_requirement_matches",
    "node_eligible",
    "node_selector_matches",
    "parse_go_int",
    "requirement_is_valid",
    "scheduling_taints",
    "taints_tolerated",
    "term_is_valid",
    "tolerates",
]

NODE_NAME_FIELD: Final = "metadata.name"
_LABEL_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_FIELD_OPERATORS: Final = frozenset({"In", "NotIn"})
_GO_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint. Gt/Lt are alpha and off by default upstream: never match."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def scheduling_taints(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """The taints that block scheduling (PreferNoSchedule only affects scoring), in a canonical order."""
    return tuple(
        sorted(
            {t for t in taints if t.effect in (NO_SCHEDULE, NO_EXECUTE)},
            key=lambda t: (t.key, t.value, t.effect),
        )
    )


def taints_tolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> bool:
    tols = tuple(tolerations)
    return all(any(tolerates(tol, taint) for tol in tols) for taint in scheduling_taints(taints))


def parse_go_int(s: str) -> int | None:
    """strconv.ParseInt(s, 10, 64): optional sign, decimal digits, int64 range; None if invalid."""
    if not _GO_INT_RE.fullmatch(s):
        return None
    value = int(s)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def requirement_is_valid(req: NodeSelectorRequirement, *, is_field: bool = False) -> bool:
    """Whether the scheduler can parse the requirement; a term with an invalid one matches nothing.

    Label key/value syntax is not checked (the API server validates it on pod creation).
    """
    if is_field:
        return req.operator in _FIELD_OPERATORS and len(req.values) == 1
    if req.operator not in _LABEL_OPERATORS:
        return False
    if req.operator in ("In", "NotIn"):
        return len(req.values) > 0
    if req.operator in ("Exists", "DoesNotExist"):
        return len(req.values) == 0
    return len(req.values) == 1 and parse_go_int(req.values[0]) is not None


def label_requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    """labels.Requirement.Matches for one node; `value` is the node's label value, None if absent.

    Assumes `requirement_is_valid(req)`.
    """
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if value is None:
        return False
    node_value = parse_go_int(value)
    bound = parse_go_int(req.values[0])
    if node_value is None or bound is None:
        return False
    return node_value > bound if op == "Gt" else node_value < bound


def field_requirement_matches(req: NodeSelectorRequirement, node_name: str) -> bool:
    """Field selector on a node: only metadata.name exists, any other field reads as ""."""
    actual = node_name if req.key == NODE_NAME_FIELD else ""
    return (actual == req.values[0]) if req.operator == "In" else (actual != req.values[0])


def term_is_valid(term: NodeSelectorTerm) -> bool:
    return all(requirement_is_valid(r) for r in term.match_expressions) and all(
        requirement_is_valid(r, is_field=True) for r in term.match_fields
    )


def affinity_matches(terms: Iterable[NodeSelectorTerm], labels: Mapping[str, str], node_name: str) -> bool:
    """Required node affinity: terms ORed, requirements ANDed; empty or invalid terms match nothing."""
    for term in terms:
        if not (term.match_expressions or term.match_fields) or not term_is_valid(term):
            continue
        if all(label_requirement_matches(r, labels.get(r.key)) for r in term.match_expressions) and all(
            field_requirement_matches(r, node_name) for r in term.match_fields
        ):
            return True
    return False


def node_selector_matches(selector: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector)


def node_eligible(
    node: NodeInfo,
    node_selector: Iterable[tuple[str, str]],
    affinity_terms: Iterable[NodeSelectorTerm] | None,
    tolerations: Iterable[Toleration],
) -> bool:
    """All static (resource-independent) checks for one node."""
    return (
        node.ready
        and not node.unschedulable
        and taints_tolerated(node.taints, tolerations)
        and node_selector_matches(node_selector, node.labels)
        and (affinity_terms is None or affinity_matches(affinity_terms, node.labels, node.name))
    )
