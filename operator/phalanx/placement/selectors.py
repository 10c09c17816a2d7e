"""Label selectors, pod (anti-)affinity terms and host ports, matched like kube-scheduler v1.37.

Reference definitions, one pod at a time (labels.Selector.Matches, framework.AffinityTerm.Matches,
HostPortInfo.CheckConflict); constraints.py applies them to a whole group and the tests check the
engine against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .filters import label_requirement_matches
from .model import DEFAULT_BIND_ALL_IP, HostPort, LabelSelector, NodeSelectorRequirement, PodAffinityTerm

__all__ = [
    "NOTHING",
    "host_ports_conflict",
    "merged_spread_selector",
    "selector_matches",
    "term_covers_namespace",
    "term_matches",
]

NOTHING: Final = LabelSelector(nothing=True)
_SELECTOR_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """labels.Selector.Matches: every requirement holds; the nil selector matches nothing."""
    if selector.nothing:
        return False
    return all(
        r.operator in _SELECTOR_OPERATORS and label_requirement_matches(r, labels.get(r.key))
        for r in selector.requirements
    )


def term_covers_namespace(term: PodAffinityTerm, owner_namespace: str, namespace: str) -> bool | None:
    """Whether `term` (of a pod in `owner_namespace`) looks at pods of `namespace`.

    None when only its non-empty namespaceSelector could say: Phalanx does not read namespace
    labels, so callers decide which way is safe (anti-affinity: assume it does).
    """
    if term.all_namespaces or namespace in term.namespaces:
        return True
    if term.own_namespace and namespace == owner_namespace:
        return True
    if term.namespace_selector is not None and not term.namespace_selector.nothing:
        return None
    return False


def term_matches(
    term: PodAffinityTerm, owner_namespace: str, namespace: str, labels: Mapping[str, str]
) -> bool | None:
    """AffinityTerm.Matches(pod): the pod's namespace is covered and its labels match the selector.

    None when the labels match and only an unknown namespaceSelector decides.
    """
    if not selector_matches(term.selector, labels):
        return False
    return term_covers_namespace(term, owner_namespace, namespace)


def host_ports_conflict(a: HostPort, b: HostPort) -> bool:
    """HostPortInfo.CheckConflict: same protocol and port, and one binds all addresses or both the same."""
    if a.port <= 0 or b.port <= 0 or a.port != b.port or a.protocol != b.protocol:
        return False
    return a.ip == DEFAULT_BIND_ALL_IP or b.ip == DEFAULT_BIND_ALL_IP or a.ip == b.ip


def merged_spread_selector(
    selector: LabelSelector, match_label_keys: tuple[str, ...], labels: Mapping[str, str]
) -> LabelSelector:
    """The constraint's selector with `key=value` added for each matchLabelKeys key the pod has.

    Like PodTopologySpread (the API server merges them at pod creation too; adding the same
    requirement twice changes nothing). A nil selector stays nil.
    """
    if selector.nothing or not match_label_keys:
        return selector
    extra = tuple(
        NodeSelectorRequirement(key, "In", (labels[key],)) for key in match_label_keys if key in labels
    )
    if not extra:
        return selector
    return LabelSelector(requirements=extra + selector.requirements)
