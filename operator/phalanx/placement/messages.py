"""Reject messages, worded like kube-scheduler v1.37's pod-group scheduling.

Users who know the in-tree gang scheduler read the same sentences here; the wording of
`unschedulable` and `too_few_pods` mirrors schedule_one_podgroup.go and the GangScheduling plugin.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "bound_node_missing",
    "bound_node_unlabelled",
    "bound_pods_span_domains",
    "no_domain",
    "too_few_pods",
    "unschedulable",
    "unsupported",
    "volume_waiting",
]

_PREFIX = "pod group is unschedulable"


def _min_count_status(min_count: int, scheduled: int, remaining: int) -> str:
    return f"minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"


def unschedulable(placements: int, min_count: int, scheduled: int, remaining: int, why: str = "") -> str:
    """No placement can hold minCount pods; the status is the one of the closest placement, and `why`
    the filter that stopped its next pod when it was not resources alone (kube-scheduler's words)."""
    message = (
        f"{_PREFIX}, 0/{placements} placements are available, first placement status: "
        f"{_min_count_status(min_count, scheduled, remaining)}"
    )
    return f"{message}: {why}" if why else message


def unsupported(pod: str, fields: str) -> str:
    """A pod uses a field kube-scheduler filters on that Phalanx does not model: it is never released."""
    return (
        f"{_PREFIX}: pod {pod} uses {fields}, which Phalanx does not model; it would not know whether "
        "kube-scheduler can bind the pod where it puts it, so it releases none (remove the field, or set "
        "phalanx.dev/policy: basic)"
    )


def volume_waiting(pod: str, why: str) -> str:
    """kube-scheduler refuses every node for the pod's volumes now (claim missing, unbound Immediate, ...)."""
    return f"{_PREFIX}: pod {pod}: {why}"


def too_few_pods(min_count: int, scheduled: int, remaining: int) -> str:
    """Fewer pods exist than minCount, so no placement is even tried."""
    return f"{_PREFIX}, {_min_count_status(min_count, scheduled, remaining)}"


def no_domain(topology_key: str) -> str:
    return f"{_PREFIX}, 0/0 placements are available: no node has the label {topology_key}"


_CONFLICT = f"{_PREFIX}, cannot determine domain for already scheduled pods"


def bound_pods_span_domains(domains: Iterable[str]) -> str:
    return f"{_CONFLICT}: more than 1 domain found for pod group: {', '.join(sorted(domains))}"


def bound_node_unlabelled(node: str, topology_key: str) -> str:
    return f"{_CONFLICT}: no topology domain found for node {node} (it has no label {topology_key})"


def bound_node_missing(node: str) -> str:
    return f"{_CONFLICT}: node {node} of a scheduled pod is not in the cluster snapshot"
