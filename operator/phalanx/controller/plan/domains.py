"""Where a group's pods are now (pure), for its DOMAIN: the status must say where the pods run, not only
what was decided. A decision's domain stays while every placed pod's node still carries it (a path with
Topology levels ends in the key's value); a decision at a wider level (preferred mode climbed) names that
level's domain. Otherwise the values of the key on the placed pods' nodes, several joined with commas
(preferred mode spread without a common domain, or a node relabelled into another domain since)."""

from __future__ import annotations

from collections.abc import Mapping

from phalanx.controller.plan.work import LeafWork
from phalanx.placement import NodeInfo


def present_domain(leaf: LeafWork, nodes: Mapping[str, NodeInfo], key: str) -> str | None:
    """The DOMAIN of a leaf whose group has topology key `key` (None: none of its pods is placed)."""
    values = sorted(
        {
            node.labels[key]
            for pod in leaf.placed
            if (node := nodes.get(pod.usage_node)) is not None and key in node.labels
        }
    )
    admission = leaf.admission
    recorded = admission.domain if admission is not None and leaf.placed else None
    if recorded and admission is not None and (admission.level is not None or not values):
        return recorded  # the wider level's domain (or nothing known better)
    if recorded and values == [recorded.rsplit("/", 1)[-1]]:
        return recorded
    return ",".join(values) or None
