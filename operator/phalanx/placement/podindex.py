"""The pods of one snapshot as other pods' filters see them: labels by namespace, anti-affinity, ports.

Built lazily, only for decisions that need it (a group with pod affinity, anti-affinity, host ports,
spread constraints or volumes, or existing pods whose anti-affinity could refuse it). Snapshots
derived with `assume` extend their parent's index instead of rebuilding it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from .model import BoundPod, CSIVolume, HostPort, LabelSelector, PodAffinityTerm
from .selectors import selector_matches

__all__ = ["NO_SPECIAL", "IndexedPod", "PodIndex", "SpecialIndex"]


@dataclass(frozen=True, slots=True)
class IndexedPod:
    node: int
    namespace: str
    labels: Mapping[str, str]
    assigned: bool
    """Bound by kube-scheduler (False: released by Phalanx, not yet bound)."""
    terminating: bool
    claims: tuple[str, ...]
    inline_csi: tuple[CSIVolume, ...] = ()

    @property
    def sure(self) -> bool:
        """Counted by kube-scheduler now and for a while: bound and not on its way out."""
        return self.assigned and not self.terminating


class _Part:
    __slots__ = ("by_namespace", "claims")

    def __init__(self, pods: Iterable[IndexedPod]) -> None:
        self.by_namespace: dict[str, list[IndexedPod]] = {}
        self.claims: set[str] = set()
        for pod in pods:
            self.by_namespace.setdefault(pod.namespace, []).append(pod)
            for claim in pod.claims:
                self.claims.add(f"{pod.namespace}/{claim}")


def indexed(node: int, pod: BoundPod) -> IndexedPod:
    traits = pod.traits
    return IndexedPod(
        node=node,
        namespace=traits.namespace,
        labels=traits.label_map(),
        assigned=pod.assigned,
        terminating=pod.terminating,
        claims=traits.claims,
        inline_csi=traits.inline_csi,
    )


class PodIndex:
    """Every pod of a snapshot (bound, terminating, released, assumed), by namespace."""

    __slots__ = ("_parts",)

    def __init__(self, parts: tuple[_Part, ...]) -> None:
        self._parts = parts

    @classmethod
    def of(cls, pods: Iterable[IndexedPod]) -> PodIndex:
        return cls((_Part(pods),))

    def extended(self, pods: Iterable[IndexedPod]) -> PodIndex:
        return PodIndex((*self._parts, _Part(pods)))

    def pods(self, namespaces: Callable[[str], bool] | None = None) -> Iterator[IndexedPod]:
        """Pods whose namespace passes `namespaces` (all pods when None)."""
        for part in self._parts:
            for namespace, pods in part.by_namespace.items():
                if namespaces is None or namespaces(namespace):
                    yield from pods

    def matching(self, selector: LabelSelector, namespaces: Callable[[str], bool] | None) -> list[IndexedPod]:
        if selector.nothing:
            return []
        return [p for p in self.pods(namespaces) if selector_matches(selector, p.labels)]

    def claim_in_use(self, key: str) -> bool:
        """Whether some pod of the snapshot mounts the claim "namespace/name"."""
        return any(key in part.claims for part in self._parts)


@dataclass(frozen=True, slots=True)
class SpecialIndex:
    """Pods that can refuse others by themselves: required anti-affinity terms and host ports."""

    anti: Mapping[tuple[str, PodAffinityTerm], tuple[int, ...]]
    """(owner namespace, term) -> node indices of its owners (sorted, repeated per owner)."""
    ports: Mapping[int, tuple[HostPort, ...]]
    """Node index -> host ports in use there."""
    unsettled: tuple[BoundPod, ...] = ()
    """Released, unbound pods whose affinity or spread constraints later placements could break."""

    @classmethod
    def of(cls, pods: Iterable[tuple[int, BoundPod]]) -> SpecialIndex:
        anti: dict[tuple[str, PodAffinityTerm], list[int]] = {}
        ports: dict[int, list[HostPort]] = {}
        unsettled: list[BoundPod] = []
        for node, pod in pods:
            for term in pod.anti_affinity:
                anti.setdefault((pod.traits.namespace, term), []).append(node)
            if pod.host_ports:
                ports.setdefault(node, []).extend(pod.host_ports)
            if pod.unsettled:
                unsettled.append(pod)
        return cls(
            anti={key: tuple(sorted(nodes)) for key, nodes in anti.items()},
            ports={node: tuple(p) for node, p in ports.items()},
            unsettled=tuple(sorted(unsettled, key=lambda p: p.id)),
        )

    @property
    def empty(self) -> bool:
        return not self.anti and not self.ports and not self.unsettled


NO_SPECIAL = SpecialIndex(anti={}, ports={})
