"""What a pod asks of a node, read from a plain pod-spec dict (JSON from the API, camelCase keys).

Requests follow k8s.io/component-helpers/resource.PodRequests (v1.37) so Phalanx and
kube-scheduler agree on whether a pod fits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from .model import PODS, NodeSelectorRequirement, NodeSelectorTerm, PodRequirements, Toleration
from .quantity import canonical_amount, parse_quantity

__all__ = ["pod_requests", "pod_requirements"]

# Pod-level resources (spec.resources) the scheduler honours; hugepages-* are matched by prefix.
_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_HUGEPAGES_PREFIX = "hugepages-"

_ResourceList = dict[str, Fraction]


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _resource_list(value: Any) -> _ResourceList:
    return {str(name): parse_quantity(q) for name, q in _as_mapping(value).items()}


def _container_requests(container: Mapping[str, Any]) -> _ResourceList:
    # API defaulting copies a limit into a missing request; doing it here too keeps
    # specs that never went through the API server (templates, tests) consistent.
    resources = _as_mapping(container.get("resources"))
    requests = _resource_list(resources.get("requests"))
    for name, limit in _resource_list(resources.get("limits")).items():
        requests.setdefault(name, limit)
    return requests


def _add(into: _ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, q in other.items():
        into[name] = into.get(name, Fraction(0)) + q


def _max(into: _ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, q in other.items():
        if name not in into or q > into[name]:
            into[name] = q


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _effective_requests(spec: Mapping[str, Any]) -> _ResourceList:
    total: _ResourceList = {}
    for container in _as_list(spec.get("containers")):
        _add(total, _container_requests(_as_mapping(container)))

    # Sidecars (restartable init containers) run for the pod's whole life, so they add to the
    # sum; a regular init container runs alone next to the sidecars started before it.
    sidecars: _ResourceList = {}
    init_peak: _ResourceList = {}
    for raw in _as_list(spec.get("initContainers")):
        container = _as_mapping(raw)
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            need = dict(requests)
            _add(need, sidecars)
            _max(init_peak, need)
    _max(total, init_peak)

    pod_level = _resource_list(_as_mapping(spec.get("resources")).get("requests"))
    if any(_is_pod_level_resource(name) for name in pod_level):
        for name, q in pod_level.items():
            if _is_pod_level_resource(name):
                total[name] = q

    _add(total, _resource_list(spec.get("overhead")))
    return total


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a pod, in canonical integers (cpu in millicores, the rest in units).

    Like PodRequests: max(sum of containers and sidecars, peak init need), then pod-level
    requests for cpu/memory/hugepages, plus overhead. Never contains "pods".
    """
    return {
        name: canonical_amount(name, q)
        for name, q in sorted(_effective_requests(pod_spec).items())
        if name != PODS
    }


def _requirement(raw: Any) -> NodeSelectorRequirement:
    item = _as_mapping(raw)
    return NodeSelectorRequirement(
        key=str(item.get("key", "")),
        operator=str(item.get("operator", "")),
        values=tuple(str(v) for v in _as_list(item.get("values"))),
    )


def _terms(raw_terms: Iterable[Any]) -> tuple[NodeSelectorTerm, ...]:
    terms = []
    for raw in raw_terms:
        term = _as_mapping(raw)
        terms.append(
            NodeSelectorTerm(
                match_expressions=tuple(_requirement(r) for r in _as_list(term.get("matchExpressions"))),
                match_fields=tuple(_requirement(r) for r in _as_list(term.get("matchFields"))),
            )
        )
    return tuple(terms)


def _toleration(raw: Any) -> Toleration:
    item = _as_mapping(raw)
    return Toleration(
        key=str(item.get("key") or ""),
        operator=str(item.get("operator") or "Equal"),
        value=str(item.get("value") or ""),
        effect=str(item.get("effect") or ""),
    )


def pod_requirements(pod_spec: Mapping[str, Any]) -> PodRequirements:
    """What the engine filters on: positive requests, nodeSelector, required node affinity, tolerations."""
    requests = tuple((name, amount) for name, amount in pod_requests(pod_spec).items() if amount > 0)
    node_selector = tuple(
        sorted((str(k), str(v)) for k, v in _as_mapping(pod_spec.get("nodeSelector")).items())
    )

    affinity_terms: tuple[NodeSelectorTerm, ...] | None = None
    node_affinity = _as_mapping(_as_mapping(pod_spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, Mapping):
        # Present but without terms matches no node, exactly like the scheduler.
        affinity_terms = _terms(_as_list(required.get("nodeSelectorTerms")))

    tolerations = tuple(_toleration(t) for t in _as_list(pod_spec.get("tolerations")))
    return PodRequirements(
        requests=requests,
        node_selector=node_selector,
        affinity_terms=affinity_terms,
        tolerations=tolerations,
    )
