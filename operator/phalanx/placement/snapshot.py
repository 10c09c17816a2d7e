"""Immutable cluster view for one scheduling pass, as numpy arrays.

Everything that depends only on nodes (labels, taints, allocatable, filter masks, domain
groups) lives in a shared `NodeTable` that `assume`/`without` reuse; only the usage array is
copied. Table caches are filled lazily and never invalidated: nodes do not change within
a snapshot's lifetime. `LiveSnapshot` (live.py) keeps one up to date between passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

import numpy as np

from .columns import BoolArray, DomainGroups, IndexArray, IntArray, LabelColumn, field_mask, readonly
from .filters import scheduling_taints, taints_tolerated, term_is_valid
from .model import (
    NO_CSI,
    PODS,
    AssumedPod,
    BoundPod,
    ClaimInfo,
    CSIView,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Taint,
    Toleration,
)
from .podindex import NO_SPECIAL, PodIndex, SpecialIndex, indexed

__all__ = ["SATURATED", "UNBOUNDED", "NodeTable", "Snapshot", "cap_for", "clipped"]

SATURATED: Final = 2**62 - 1
"""Usage saturates here so that usage plus one more pod cannot overflow int64."""

UNBOUNDED: Final = 2**63
"""An `alloc_bound` above every cap: some amount may have been clipped."""

_EligibilityKey = tuple[
    tuple[tuple[str, str], ...],
    tuple[NodeSelectorTerm, ...] | None,
    tuple[Toleration, ...],
    tuple[str, ...],
]
# Labels VolumeZone compares between a PersistentVolume and a node (beta keys fall back to GA ones).
ZONE_LABELS: Final = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
_GA_ZONE_LABEL: Final = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}


def cap_for(node_count: int) -> int:
    """Per-node amounts are capped so that any sum over nodes stays inside int64; the cap
    (2^62 / nodes, e.g. 84 TiB at 50,000 nodes) is far above any real node."""
    return max(1, SATURATED // max(node_count, 1))


def clipped(amount: int, cap: int) -> int:
    return min(max(int(amount), 0), cap)


class NodeTable:
    """Everything a snapshot knows that depends only on nodes, with lazily filled caches.

    Immutable once built (the caches only grow); `Snapshot.assume`/`without` share it, and
    `LiveSnapshot` derives the next table from the previous one (see table_update.py).
    """

    __slots__ = (
        "alloc",
        "alloc_bound",
        "base_mask",
        "columns",
        "eligibility",
        "feature_masks",
        "max_amount",
        "name_index",
        "names",
        "nodes",
        "offered",
        "path_columns",
        "resource_index",
        "resources",
        "taint_codes",
        "taint_sets",
        "term_masks",
        "toleration_masks",
        "totals",
    )

    def __init__(
        self,
        *,
        nodes: tuple[NodeInfo, ...],
        names: tuple[str, ...],
        name_index: dict[str, int],
        offered: Mapping[str, int],
        alloc_bound: int,
        alloc: IntArray,
        base_mask: BoolArray,
        taint_codes: IndexArray,
        taint_sets: tuple[tuple[Taint, ...], ...],
        columns: dict[str, LabelColumn] | None = None,
    ) -> None:
        """Parts must agree: nodes sorted by name, `alloc` clipped to cap_for(len(nodes)) with one
        row per sorted resource in `offered` plus "pods"."""
        self.nodes = nodes
        self.names = names
        self.name_index = name_index
        self.offered = offered
        """Resource -> how many nodes list it in allocatable (any value, 0 too)."""
        self.alloc_bound = alloc_bound
        """At least the largest allocatable amount of any node, before clipping."""
        self.resources: tuple[str, ...] = tuple(sorted(set(offered) | {PODS}))
        self.resource_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.max_amount: int = cap_for(len(names))
        assert alloc.shape == (len(self.resources), len(names)), "alloc rows follow the sorted resources"
        # Resource-major (resources x nodes): each resource is one contiguous row, so the engine's
        # per-resource arithmetic runs on contiguous 1-D arrays.
        self.alloc: IntArray = readonly(alloc)
        self.totals: tuple[int, ...] = tuple(int(t) for t in alloc.sum(axis=1))
        self.base_mask: BoolArray = readonly(base_mask)
        self.taint_codes: IndexArray = readonly(taint_codes)
        self.taint_sets = taint_sets
        self.columns: dict[str, LabelColumn] = columns if columns is not None else {}
        self.path_columns: dict[tuple[str, ...], LabelColumn] = {}
        """Domains as paths of level values (levels.py), by the levels down to the one wanted."""
        self.eligibility: dict[_EligibilityKey, BoolArray] = {}
        self.toleration_masks: dict[tuple[Toleration, ...], BoolArray] = {}
        self.feature_masks: dict[tuple[str, ...], BoolArray] = {}
        self.term_masks: dict[tuple[tuple[NodeSelectorTerm, ...], bool], BoolArray] = {}

    @classmethod
    def of(cls, nodes: Iterable[NodeInfo]) -> NodeTable:
        ordered = sorted(nodes, key=lambda n: n.name)
        names = tuple(n.name for n in ordered)
        name_index = {name: i for i, name in enumerate(names)}
        if len(name_index) != len(names):
            raise ValueError("duplicate node names in snapshot")
        n = len(names)
        offered = Counter(r for node in ordered for r in node.allocatable)
        resources = sorted(set(offered) | {PODS})
        resource_index = {r: i for i, r in enumerate(resources)}
        cap = cap_for(n)
        columns: list[list[int]] = [[0] * n for _ in resources]
        for i, node in enumerate(ordered):
            for r, v in node.allocatable.items():
                columns[resource_index[r]][i] = min(max(int(v), 0), cap)
        alloc = np.array(columns, dtype=np.int64).reshape(len(resources), n)
        # An amount at the cap may have been clipped from anything larger.
        top = int(alloc.max()) if alloc.size else 0
        taint_set_index: dict[tuple[Taint, ...], int] = {}
        taint_codes = np.fromiter(
            (
                taint_set_index.setdefault(scheduling_taints(node.taints), len(taint_set_index))
                for node in ordered
            ),
            dtype=np.intp,
            count=n,
        )
        return cls(
            nodes=tuple(ordered),
            names=names,
            name_index=name_index,
            offered=offered,
            alloc_bound=top if top < cap else UNBOUNDED,
            alloc=alloc,
            base_mask=np.fromiter(
                (node.ready and not node.unschedulable for node in ordered), dtype=np.bool_, count=n
            ),
            taint_codes=taint_codes,
            taint_sets=tuple(taint_set_index),
        )

    def column(self, key: str) -> LabelColumn:
        col = self.columns.get(key)
        if col is None:
            col = LabelColumn([node.labels.get(key) for node in self.nodes])
            self.columns[key] = col
        return col

    def tolerated(self, tolerations: tuple[Toleration, ...]) -> BoolArray:
        mask = self.toleration_masks.get(tolerations)
        if mask is None:
            # Few distinct taint sets exist, so check each once and spread by code.
            per_set = np.fromiter(
                (taints_tolerated(taints, tolerations) for taints in self.taint_sets),
                dtype=np.bool_,
                count=len(self.taint_sets),
            )
            mask = readonly(per_set[self.taint_codes])
            self.toleration_masks[tolerations] = mask
        return mask

    def features(self, required: tuple[str, ...]) -> BoolArray:
        """Nodes whose status.declaredFeatures include every required feature (NodeDeclaredFeatures)."""
        mask = self.feature_masks.get(required)
        if mask is None:
            wanted = frozenset(required)
            mask = readonly(
                np.fromiter(
                    (wanted <= node.declared_features for node in self.nodes),
                    dtype=np.bool_,
                    count=len(self.nodes),
                )
            )
            self.feature_masks[required] = mask
        return mask

    def terms(self, terms: tuple[NodeSelectorTerm, ...], *, by_name: bool = True) -> BoolArray:
        """Nodes matching any of the terms, cached. `by_name=False` matches fields against an empty node
        name, as volume.CheckNodeAffinity does (it builds a node from the labels alone)."""
        key = (terms, by_name)
        mask = self.term_masks.get(key)
        if mask is None:
            mask = readonly(self.affinity(terms, by_name=by_name))
            self.term_masks[key] = mask
        return mask

    def zones(self, zones: tuple[tuple[str, tuple[str, ...]], ...]) -> BoolArray:
        """VolumeZone: nodes without any zone/region label pass; others need each PV label's value."""
        n = len(self.names)
        labelled = np.zeros(n, dtype=np.bool_)
        for key in ZONE_LABELS:
            labelled |= self.column(key).codes >= 0
        mask = np.ones(n, dtype=np.bool_)
        for key, values in zones:
            own = self.column(key)
            ok = own.requirement_mask(NodeSelectorRequirement(key, "In", values))
            ga = _GA_ZONE_LABEL.get(key)
            if ga is not None:
                ok |= (own.codes < 0) & self.column(ga).requirement_mask(
                    NodeSelectorRequirement(ga, "In", values)
                )
            mask &= ok
        result: BoolArray = ~labelled | mask
        return result

    def affinity(self, terms: tuple[NodeSelectorTerm, ...], *, by_name: bool = True) -> BoolArray:
        n = len(self.names)
        any_term = np.zeros(n, dtype=np.bool_)
        for term in terms:
            if not (term.match_expressions or term.match_fields) or not term_is_valid(term):
                continue  # upstream: an empty or unparsable term selects nothing
            mask = np.ones(n, dtype=np.bool_)
            for req in term.match_expressions:
                mask &= self.column(req.key).requirement_mask(req)
            for req in term.match_fields:
                mask &= field_mask(req, self.name_index if by_name else {}, n)
            any_term |= mask
        return any_term

    def eligible(self, req: PodRequirements) -> BoolArray:
        key: _EligibilityKey = (
            req.node_selector,
            req.affinity_terms,
            req.tolerations,
            req.required_features,
        )
        mask = self.eligibility.get(key)
        if mask is None:
            m = self.base_mask & self.tolerated(req.tolerations)
            m &= self.node_affinity(req)
            if req.required_features:
                m &= self.features(req.required_features)
            mask = readonly(m)
            self.eligibility[key] = mask
        return mask

    def node_affinity(self, req: PodRequirements) -> BoolArray:
        """nodeSelector and required node affinity only (what a spread constraint's Honor policy checks)."""
        m = np.ones(len(self.names), dtype=np.bool_)
        for label, value in req.node_selector:
            m &= self.column(label).equals_mask(value)
        if req.affinity_terms is not None:
            m &= self.terms(req.affinity_terms)
        return m

    def entries(self, node: int, requests: Mapping[str, int]) -> list[tuple[int, int]]:
        """(flat index into the resources x nodes usage, amount) for one pod: a pod slot plus its requests."""
        n = len(self.names)
        out = [(self.resource_index[PODS] * n + node, 1)]
        cap = self.max_amount
        for r, v in requests.items():
            row = self.resource_index.get(r)
            # A resource no node offers cannot change any decision: every pod asking for it fails anyway.
            if row is not None and r != PODS and v > 0:
                out.append((row * n + node, min(int(v), cap)))
        return out


def _accumulate(entries: list[tuple[int, int]], size: int) -> IntArray:
    """Sum amounts per flat cell, saturating at SATURATED instead of overflowing."""
    out = np.zeros(size, dtype=np.int64)
    if not entries:
        return out
    flat = np.fromiter((e[0] for e in entries), dtype=np.intp, count=len(entries))
    amounts = np.fromiter((e[1] for e in entries), dtype=np.int64, count=len(entries))
    if int(amounts.max()) * int(np.bincount(flat).max()) <= SATURATED:
        np.add.at(out, flat, amounts)
        return out
    exact: dict[int, int] = {}
    for i, v in entries:
        exact[i] = exact.get(i, 0) + v
    for i, v in exact.items():
        out[i] = min(v, SATURATED)
    return out


class Snapshot:
    """Nodes, their capacity and what is already using it; never mutated after build.

    Besides usage it knows, for the filters that depend on other pods, every pod's traits (built into
    a `PodIndex` only when a decision needs them), the pods with anti-affinity or host ports
    (`special`), and the PersistentVolumeClaims as the controller resolved them (`claims`).
    """

    __slots__ = (
        "_assumed",
        "_assumed_special",
        "_claims",
        "_csi",
        "_index",
        "_pods",
        "_removed",
        "_s",
        "_special",
        "_special_index",
        "_used",
    )

    def __init__(
        self,
        table: NodeTable,
        used: IntArray,
        pods: Mapping[str, BoundPod],
        removed: frozenset[str],
        *,
        special: Mapping[str, BoundPod] | None = None,
        claims: Mapping[str, ClaimInfo] | None = None,
        csi: CSIView = NO_CSI,
        assumed: tuple[AssumedPod, ...] = (),
        assumed_special: tuple[BoundPod, ...] = (),
        index: PodIndex | None = None,
    ) -> None:
        """`pods`: the pods counted in `used`, all on nodes of `table`, by id; `special`: those of them
        with anti-affinity terms or host ports (computed from `pods` when None)."""
        self._s = table
        self._used = readonly(used)
        self._pods = pods  # shared between derived snapshots; read-only by convention
        self._removed = removed
        if special is None:
            special = {pod_id: pod for pod_id, pod in pods.items() if pod.special}
        self._special = special
        self._claims: Mapping[str, ClaimInfo] = claims if claims is not None else {}
        self._csi = csi
        self._assumed = assumed
        """Pods assumed in this pass (with traits), for the pod index; not in `pods`."""
        self._assumed_special = assumed_special
        """Those of them that are `special` (few), as BoundPods."""
        self._index = index
        self._special_index: SpecialIndex | None = None

    @classmethod
    def build(
        cls,
        nodes: Iterable[NodeInfo],
        pods: Iterable[BoundPod],
        claims: Mapping[str, ClaimInfo] | None = None,
        csi: CSIView = NO_CSI,
    ) -> Snapshot:
        """Pods on nodes that are not in `nodes` are ignored; with duplicate pod ids the last one wins."""
        table = NodeTable.of(nodes)
        latest: dict[str, BoundPod] = {}
        for pod in pods:
            latest[pod.id] = pod
        counted: dict[str, BoundPod] = {}
        flat: list[tuple[int, int]] = []
        for pod_id, pod in latest.items():
            node = table.name_index.get(pod.node)
            if node is None:
                continue
            counted[pod_id] = pod
            flat.extend(table.entries(node, pod.requests))
        used = _accumulate(flat, table.alloc.size).reshape(table.alloc.shape)
        return cls(table, used, counted, frozenset(), claims=dict(claims or {}), csi=csi)

    def assume(self, assignments: Iterable[tuple[str, Mapping[str, int]] | AssumedPod]) -> Snapshot:
        """A snapshot where each (node, requests) entry is one more pod on that node (plus pods=1).

        An `AssumedPod` entry (what `admitted_usage` gives) also brings the pod's traits and filters, so
        later decisions see it as a released, not yet bound pod. Shares the node table and its caches;
        copies only the usage array. Raises KeyError for an unknown node. Assumed pods are not in
        `bound_pod_ids`, so `without` cannot remove them.
        """
        s = self._s
        items = list(assignments)
        pods = [item for item in items if isinstance(item, AssumedPod)]
        delta = self._delta((item[0], item[1]) for item in items)
        if delta is None:
            return self
        used = np.minimum(self._used + delta, SATURATED)
        index = None
        if self._index is not None:
            index = self._index.extended(indexed(s.name_index[p.node], p.bound_pod()) for p in pods)
        special = tuple(p.bound_pod() for p in pods if p.special)
        return Snapshot(
            s,
            used,
            self._pods,
            self._removed,
            special=self._special,
            claims=self._claims,
            csi=self._csi,
            assumed=self._assumed + tuple(pods),
            assumed_special=self._assumed_special + special,
            index=index,
        )

    def release(self, usage: Iterable[tuple[str, Mapping[str, int]]]) -> Snapshot:
        """The inverse of `assume` for plain (node, requests) entries: each is one pod fewer on that node
        (never below zero). For room assumed for pods that may be decided again (a staged unit's held
        slots, when the unit places them afresh). Raises KeyError for an unknown node."""
        delta = self._delta(usage)
        return self if delta is None else self._with_used(np.maximum(self._used - delta, 0))

    def _delta(self, usage: Iterable[tuple[str, Mapping[str, int]]]) -> IntArray | None:
        """The usage array of those (node, requests) entries, each one pod (None: nothing at all). Raises
        KeyError for an unknown node."""
        s = self._s
        entries: list[tuple[int, int]] = []
        for node_name, requests in usage:
            node = s.name_index.get(node_name)
            if node is None:
                raise KeyError(f"node {node_name!r} is not in the snapshot")
            entries.extend(s.entries(node, requests))
        if not entries:
            return None
        return _accumulate(entries, s.alloc.size).reshape(s.alloc.shape)

    def _with_used(self, used: IntArray) -> Snapshot:
        """The same snapshot (pods, assumed pods, claims, index) with another usage array."""
        return Snapshot(
            self._s,
            used,
            self._pods,
            self._removed,
            special=self._special,
            claims=self._claims,
            csi=self._csi,
            assumed=self._assumed,
            assumed_special=self._assumed_special,
            index=self._index,
        )

    def without(self, pod_ids: Iterable[str]) -> Snapshot:
        """A snapshot where those bound pods no longer use capacity; unknown or removed ids are ignored."""
        gone = {p for p in pod_ids if p in self._pods and p not in self._removed}
        if not gone:
            return self
        s = self._s
        entries = [
            e for p in gone for e in s.entries(s.name_index[self._pods[p].node], self._pods[p].requests)
        ]
        delta = _accumulate(entries, self._s.alloc.size).reshape(self._s.alloc.shape)
        used = np.maximum(self._used - delta, 0)
        return Snapshot(
            self._s,
            used,
            self._pods,
            self._removed | gone,
            special=self._special,
            claims=self._claims,
            csi=self._csi,
            assumed=self._assumed,
            assumed_special=self._assumed_special,
        )

    def empty(self, keep: Iterable[str] = ()) -> Snapshot:
        """The same nodes with no pod on them (what the cluster offers at all, not today's free room); the
        claims and CSI view are kept (a pod's own volumes restrict its nodes whatever runs). The nodes named
        in `keep` keep their usage as it is (nodes where pods that stay run)."""
        used = np.zeros_like(self._used)
        kept = [i for name in keep if (i := self._s.name_index.get(name)) is not None]
        used[:, kept] = self._used[:, kept]
        return Snapshot(self._s, used, {}, frozenset(), special={}, claims=self._claims, csi=self._csi)

    def only(self, node_names: Iterable[str]) -> Snapshot:
        """A snapshot of those nodes alone with what holds capacity on them (bound pods not removed, and
        pods assumed in this pass), claims and CSI view: to decide inside one domain at its size."""
        index = self._s.name_index
        wanted = {name for name in node_names if name in index}
        nodes = [self._s.nodes[index[name]] for name in sorted(wanted)]
        pods = [p for p in self._pods.values() if p.node in wanted and p.id not in self._removed]
        built = Snapshot.build(nodes, pods, self._claims, self._csi)
        assumed = [a for a in self._assumed if a.node in wanted]
        return built.assume(assumed) if assumed else built

    def holding(self, node_names: Iterable[str]) -> Snapshot:
        """A snapshot where those nodes take no more pods (room held for a waiting gang: reservation.py);
        every other node is as it is. They stay full through `assume` and `without`; unknown names are
        ignored."""
        s = self._s
        held = [i for name in node_names if (i := s.name_index.get(name)) is not None]
        if not held:
            return self
        used = self._used.copy()
        used[:, held] = SATURATED
        return self._with_used(used)

    # --- other pods, volumes ----------------------------------------------------------------

    def _present(self, pods: Iterable[BoundPod], *, assumed: bool = False) -> Iterator[tuple[int, BoundPod]]:
        """(node index, pod) of those pods that count here: removed ones do not (assumed ones always do)."""
        index, removed = self._s.name_index, self._removed
        for pod in pods:
            if assumed or pod.id not in removed:
                node = index.get(pod.node)
                if node is not None:
                    yield node, pod

    def special_index(self) -> SpecialIndex:
        """Anti-affinity terms and host ports of the pods here (cheap: only pods that have them)."""
        if self._special_index is None:
            if not self._special and not self._assumed_special:
                self._special_index = NO_SPECIAL
            else:
                self._special_index = SpecialIndex.of(
                    [
                        *self._present(self._special.values()),
                        *self._present(self._assumed_special, assumed=True),
                    ]
                )
        return self._special_index

    def pod_index(self) -> PodIndex:
        """Every pod's namespace, labels and claims; built on first use (O(pods)), then cached."""
        if self._index is None:
            index = PodIndex.of(indexed(node, pod) for node, pod in self._present(self._pods.values()))
            if self._assumed:
                assumed = (p.bound_pod() for p in self._assumed)
                index = index.extended(
                    indexed(node, pod) for node, pod in self._present(assumed, assumed=True)
                )
            self._index = index
        return self._index

    @property
    def claims(self) -> Mapping[str, ClaimInfo]:
        """PersistentVolumeClaims by "namespace/name", as the controller resolved them."""
        return self._claims

    @property
    def csi(self) -> CSIView:
        """CSINodes, VolumeAttachments and strict CSI drivers (NodeVolumeLimits), as the controller saw."""
        return self._csi

    # --- read access -------------------------------------------------------------------------

    @property
    def node_names(self) -> tuple[str, ...]:
        """Sorted; node index i in every array is node_names[i]."""
        return self._s.names

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._s.nodes

    @property
    def resources(self) -> tuple[str, ...]:
        """Sorted resource names (columns of the arrays); always includes "pods"."""
        return self._s.resources

    @property
    def allocatable_array(self) -> IntArray:
        """nodes x resources, read-only (a transposed view of the resource-major storage)."""
        return self._s.alloc.T

    @property
    def used_array(self) -> IntArray:
        """nodes x resources, read-only (a transposed view of the resource-major storage)."""
        return self._used.T

    @property
    def allocatable_by_resource(self) -> IntArray:
        """resources x nodes, read-only, each row contiguous."""
        return self._s.alloc

    @property
    def used_by_resource(self) -> IntArray:
        """resources x nodes, read-only, each row contiguous."""
        return self._used

    @property
    def totals(self) -> tuple[int, ...]:
        """Allocatable per resource summed over all nodes (the normalisation of best fit)."""
        return self._s.totals

    @property
    def max_amount(self) -> int:
        """Per-node amounts above this are stored as this (keeps all sums inside int64)."""
        return self._s.max_amount

    @property
    def bound_pod_ids(self) -> frozenset[str]:
        return frozenset(self._pods.keys() - self._removed)

    def node_index(self, name: str) -> int | None:
        return self._s.name_index.get(name)

    def resource_index(self, resource: str) -> int | None:
        return self._s.resource_index.get(resource)

    def _row(self, node: str) -> int:
        i = self._s.name_index.get(node)
        if i is None:
            raise KeyError(f"node {node!r} is not in the snapshot")
        return i

    def free(self, node: str) -> dict[str, int]:
        """Allocatable minus used per resource (negative if the node is overcommitted)."""
        i = self._row(node)
        row = self._s.alloc[:, i] - self._used[:, i]
        return {r: int(v) for r, v in zip(self._s.resources, row, strict=True)}

    def used(self, node: str) -> dict[str, int]:
        i = self._row(node)
        return {r: int(v) for r, v in zip(self._s.resources, self._used[:, i], strict=True)}

    def column(self, key: str) -> LabelColumn:
        return self._s.column(key)

    def domain_groups(self, key: str) -> DomainGroups:
        return self._s.column(key).groups()

    def domains(self, key: str) -> tuple[str, ...]:
        """Sorted distinct values of label `key`."""
        return self._s.column(key).values

    def eligible(self, requirements: PodRequirements) -> BoolArray:
        """Static filters per node (ready, not cordoned, taints, nodeSelector, affinity, features), cached."""
        return self._s.eligible(requirements)

    @property
    def table(self) -> NodeTable:
        return self._s
