"""Filters that depend on other pods or on volumes, for one group decision (kube-scheduler v1.37).

InterPodAffinity, NodePorts, PodTopologySpread (DoNotSchedule), VolumeBinding (with CSIStorageCapacity),
VolumeZone, VolumeRestrictions (ReadWriteOncePod) and NodeVolumeLimits (volume_limits.py), checked for the
whole group together: the group's own pods count against each other. `GroupConstraints.of` is None for a
group none of this concerns, which keeps such groups on the engine's vectorised path.

Phalanx releases a pod pinned to its node (nodeSelector kubernetes.io/hostname) and kube-scheduler
then binds the released pods one by one, in an order Phalanx does not know. So a placement is
accepted only if every pod passes every filter whatever the order the others were bound in:

- anti-affinity and host ports are pairwise conflicts, checked between every two pods of the group
  and against every pod already placed, released or terminating (more pods can only refuse more);
- required affinity is met either by a pod that is bound and not terminating in the same domain
  (it will be there whatever the order), or — only when no pod anywhere matches (the scheduler's
  "first pod of a self-affine series" rule) — by keeping every pod of the group that matches the
  terms in the pod's domain, so whichever is bound first, the others find it;
- topology spread is checked as kube-scheduler would without the pin, placing the pods one at a
  time (the order the greedy uses is one valid order); with the pin, kube-scheduler only counts the
  pinned node (nodeAffinityPolicy Honor), which never refuses unless minDomains > 1 (then it caps the
  matching pods on the node at maxSkew, checked on the final placement), and with
  nodeAffinityPolicy Ignore it counts every node, checked against the final counts and the minimum
  of bound pods only.

This can give up a placement kube-scheduler could have found; it never accepts one it would refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import messages
from .columns import BoolArray, IndexArray, IntArray
from .model import (
    HONOR,
    IGNORE,
    BoundPod,
    ClaimInfo,
    HostPort,
    LabelSelector,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    PodTraits,
    RejectReason,
    SpreadConstraint,
)
from .podindex import PodIndex
from .selectors import (
    host_ports_conflict,
    merged_spread_selector,
    selector_matches,
    term_covers_namespace,
    term_matches,
)
from .snapshot import Snapshot
from .volume_limits import REASON_VOLUME_COUNT, LimitState, VolumeLimits

__all__ = [
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "REASON_PORTS",
    "REASON_RESOURCES",
    "REASON_RWOP",
    "REASON_SPREAD",
    "REASON_STORAGE",
    "REASON_VOLUMES",
    "DomainState",
    "GroupConstraints",
    "Refusal",
]

# kube-scheduler's filter reasons, for the message of a group that does not fit.
REASON_RESOURCES = "node(s) didn't fit the pod (resources, taints, node selector or affinity)"
REASON_VOLUMES = "node(s) didn't match the pod's volumes (node affinity, zone, topology)"
REASON_RWOP = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use "
    "by another pod"
)
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_STORAGE = "node(s) did not have enough free storage"


def _maybe(value: bool | None) -> bool:
    """An anti-affinity match that only an unknown namespaceSelector decides counts as a match."""
    return value is not False


def _matches_all(terms: Sequence[PodAffinityTerm], owner_ns: str, ns: str, labels: Mapping[str, str]) -> bool:
    """podMatchesAllAffinityTerms (terms with unknown namespace selectors are refused beforehand)."""
    return bool(terms) and all(term_matches(t, owner_ns, ns, labels) is True for t in terms)


def _isin(codes: IndexArray, blocked: set[int]) -> BoolArray:
    if not blocked:
        return np.zeros(codes.shape, dtype=np.bool_)
    result: BoolArray = np.isin(codes, np.fromiter(blocked, dtype=np.intp, count=len(blocked)))
    return result


@dataclass(frozen=True, slots=True)
class Refusal:
    """The group cannot be placed anywhere now, before any node is looked at."""

    reason: RejectReason
    message: str


@dataclass(slots=True)
class _Anti:
    """One required anti-affinity term of pods of the group."""

    key: str
    codes: IndexArray  # per node, in the column of the term's topology key (-1: no label)
    existing: set[int]  # codes of domains holding existing pods the term matches
    hits: BoolArray  # per pending position: the term matches that pod


@dataclass(slots=True)
class _Affinity:
    """The required affinity terms of pods of the group (one tuple of terms, one owner namespace)."""

    codes: tuple[IndexArray, ...]  # per term
    by_sure_pods: BoolArray  # nodes whose domains hold, for every term, a bound pod matching all terms
    first_allowed: BoolArray  # nodes the "first pod of the series" may take (all zero if some pod matches)
    hits: BoolArray  # per pending position: the pod matches all terms


@dataclass(slots=True)
class _Spread:
    """One DoNotSchedule constraint as one pod of the group sees it (its selector, its eligible nodes)."""

    constraint: SpreadConstraint
    codes: IndexArray
    included: BoolArray  # nodes counted (they have all the pod's spread keys and pass the policies)
    present: IndexArray  # domain codes of included nodes (sorted, distinct)
    base: IntArray  # per domain code: matching pods (bound or released, not terminating)
    base_sure: IntArray  # per domain code: matching pods bound and not terminating
    base_node: IntArray | None  # per node (only for Honor with minDomains > 1)
    counts: BoolArray  # per pending position: the pod counts for this constraint
    self_match: BoolArray  # per pending position: selector matches the pod (the scheduler's self-match)


@dataclass(slots=True)
class _Pod:
    static: BoolArray | None = None  # volumes, existing ports, existing anti-affinity; None: all nodes
    static_reason: str = ""
    anti: list[int] = field(default_factory=list)  # own terms (indices into GroupConstraints.anti)
    anti_hit: list[int] = field(default_factory=list)  # group terms that match this pod
    affinity: int | None = None
    affinity_hit: list[int] = field(default_factory=list)
    spread: list[int] = field(default_factory=list)
    spread_hit: list[int] = field(default_factory=list)
    rwop: tuple[str, ...] = ()


class GroupConstraints:
    """Per decision: what of the other pods and the volumes every pending pod must respect."""

    def __init__(self, snapshot: Snapshot, pending: Sequence[PodRequest]) -> None:
        self.snapshot = snapshot
        self.table = snapshot.table
        self.pending = pending
        self.n = len(snapshot.node_names)
        self.pods: list[_Pod] = [_Pod() for _ in pending]
        self.anti: list[_Anti] = []
        self.affinities: list[_Affinity] = []
        self.spreads: list[_Spread] = []
        self.ports = any(p.requirements.host_ports for p in pending)
        self._index: PodIndex | None = None
        self.limits: VolumeLimits | None = None
        self._labels = [p.traits.label_map() for p in pending]

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def of(
        cls, snapshot: Snapshot, pending: Sequence[PodRequest], requirements: Sequence[PodRequirements]
    ) -> GroupConstraints | Refusal | None:
        """None when only resources and static node filters matter (the fast path); a Refusal when the
        group cannot be placed at all (unsupported fields, volumes the scheduler refuses everywhere).
        `requirements`: the distinct requirements of the pending pods."""
        refused = _unsupported(pending, requirements)
        if refused is not None:
            return refused
        interpod = any(r.interpod for r in requirements)
        volumes = any(p.traits.claims or p.traits.inline_csi for p in pending)
        special = snapshot.special_index()
        if special.unsettled:
            waiting = _unsettled(special.unsettled, pending)
            if waiting is not None:
                return waiting
        existing_anti = bool(special.anti) and _existing_anti_applies(special.anti, pending)
        if not (interpod or volumes or existing_anti):
            return None
        self = cls(snapshot, pending)
        waiting = self._volumes()
        if waiting is not None:
            return waiting
        if existing_anti:
            self._existing_anti(special.anti)
        if self.ports:
            self._existing_ports(special.ports)
        self._own_anti()
        self._own_affinity()
        self._own_spread()
        return self

    def index(self) -> PodIndex:
        if self._index is None:
            self._index = self.snapshot.pod_index()
        return self._index

    def _restrict(self, position: int, mask: BoolArray, reason: str) -> None:
        pod = self.pods[position]
        if pod.static is None:
            pod.static = mask.copy()
        else:
            pod.static &= mask
        if not pod.static_reason and not mask.all():
            pod.static_reason = reason

    def _volumes(self) -> Refusal | None:
        """Static node masks from each pod's claims; a Refusal if one waits for its volumes."""
        claims = self.snapshot.claims
        masks: dict[ClaimInfo, BoolArray] = {}
        for position, request in enumerate(self.pending):
            ns = request.traits.namespace
            rwop = []
            for name in request.traits.claims:
                key = f"{ns}/{name}"
                info = claims.get(key)
                if info is None:
                    why = f'persistentvolumeclaim "{name}" not found'
                    return Refusal("Unschedulable", messages.volume_waiting(request.id, why))
                if info.unsupported:
                    return Refusal("Unsupported", messages.unsupported(request.id, info.unsupported))
                if info.waiting:
                    return Refusal("Unschedulable", messages.volume_waiting(request.id, info.waiting))
                if info.read_write_once_pod:
                    if self.index().claim_in_use(key):
                        return Refusal("Unschedulable", messages.volume_waiting(request.id, REASON_RWOP))
                    rwop.append(key)
                mask = masks.get(info)
                if mask is None:
                    mask = masks[info] = self._claim_mask(info)
                self._restrict(position, mask, REASON_VOLUMES)
                if info.capacity_terms is not None:
                    self._restrict(position, self.table.terms(info.capacity_terms), REASON_STORAGE)
            self.pods[position].rwop = tuple(rwop)
        self.limits = VolumeLimits.of(self.snapshot, self.pending)
        if self.limits is not None:
            for position in range(len(self.pending)):
                for mask, reason in self.limits.static(position):
                    self._restrict(position, mask, reason)
        return None

    def _claim_mask(self, info: ClaimInfo) -> BoolArray:
        table = self.table
        mask = np.ones(self.n, dtype=np.bool_)
        for terms in info.node_terms:
            mask &= table.terms(terms, by_name=False)
        if info.zones:
            mask &= table.zones(info.zones)
        if info.selected_node:
            selected = np.zeros(self.n, dtype=np.bool_)
            i = table.name_index.get(info.selected_node)
            if i is not None:
                selected[i] = True
            mask &= selected
        return mask

    def _existing_anti(self, anti: Mapping[tuple[str, PodAffinityTerm], tuple[int, ...]]) -> None:
        """InterPodAffinity's satisfyExistingPodsAntiAffinity: terms of pods already on nodes."""
        cache: dict[tuple[str, tuple[tuple[str, str], ...]], BoolArray | None] = {}
        for position, request in enumerate(self.pending):
            key = (request.traits.namespace, request.traits.labels)
            if key not in cache:
                blocked = np.ones(self.n, dtype=np.bool_)
                touched = False
                for (owner_ns, term), nodes in anti.items():
                    if not _maybe(term_matches(term, owner_ns, key[0], self._labels[position])):
                        continue
                    codes = self.table.column(term.topology_key).codes
                    values = {int(c) for c in codes[list(nodes)] if c >= 0}
                    if values:
                        blocked &= ~_isin(codes, values)
                        touched = True
                cache[key] = blocked if touched else None
            mask = cache[key]
            if mask is not None:
                self._restrict(position, mask, REASON_EXISTING_ANTI_AFFINITY)

    def _existing_ports(self, ports: Mapping[int, tuple[HostPort, ...]]) -> None:
        cache: dict[tuple[HostPort, ...], BoolArray] = {}
        for position, request in enumerate(self.pending):
            wanted = request.requirements.host_ports
            if not wanted:
                continue
            mask = cache.get(wanted)
            if mask is None:
                mask = np.ones(self.n, dtype=np.bool_)
                for node, used in ports.items():
                    if any(host_ports_conflict(w, u) for w in wanted for u in used):
                        mask[node] = False
                cache[wanted] = mask
            self._restrict(position, mask, REASON_PORTS)

    def _own_anti(self) -> None:
        """The group's own anti-affinity terms: against existing pods (static) and each other (hits)."""
        ids: dict[tuple[str, PodAffinityTerm], int] = {}
        for position, request in enumerate(self.pending):
            owner_ns = request.traits.namespace
            for term in request.requirements.pod_anti_affinity:
                key = (owner_ns, term)
                if key not in ids:
                    ids[key] = len(self.anti)
                    codes = self.table.column(term.topology_key).codes
                    existing = {
                        int(codes[p.node])
                        for p in self.index().pods(_namespaces_of(term, owner_ns))
                        if codes[p.node] >= 0 and _maybe(term_matches(term, owner_ns, p.namespace, p.labels))
                    }
                    hits = np.fromiter(
                        (
                            _maybe(term_matches(term, owner_ns, other.traits.namespace, self._labels[q]))
                            for q, other in enumerate(self.pending)
                        ),
                        dtype=np.bool_,
                        count=len(self.pending),
                    )
                    self.anti.append(_Anti(term.topology_key, codes, existing, hits))
                self.pods[position].anti.append(ids[key])
        for a, anti in enumerate(self.anti):
            for position in np.flatnonzero(anti.hits).tolist():
                self.pods[position].anti_hit.append(a)
        for pod in self.pods:
            for a in pod.anti:
                if self.anti[a].existing:
                    pod_mask = ~_isin(self.anti[a].codes, self.anti[a].existing)
                    if pod.static is None:
                        pod.static = pod_mask
                    else:
                        pod.static &= pod_mask
                    pod.static_reason = pod.static_reason or REASON_ANTI_AFFINITY

    def _own_affinity(self) -> None:
        ids: dict[tuple[str, tuple[PodAffinityTerm, ...]], int] = {}
        for position, request in enumerate(self.pending):
            terms = request.requirements.pod_affinity
            if not terms:
                continue
            owner_ns = request.traits.namespace
            key = (owner_ns, terms)
            if key not in ids:
                ids[key] = len(self.affinities)
                self.affinities.append(self._affinity(owner_ns, terms))
            self.pods[position].affinity = ids[key]
        for a, affinity in enumerate(self.affinities):
            for position in np.flatnonzero(affinity.hits).tolist():
                self.pods[position].affinity_hit.append(a)

    def _affinity(self, owner_ns: str, terms: tuple[PodAffinityTerm, ...]) -> _Affinity:
        codes = tuple(self.table.column(t.topology_key).codes for t in terms)
        sure: list[set[int]] = [set() for _ in terms]
        any_match = False
        for pod in self.index().pods():
            if not _matches_all(terms, owner_ns, pod.namespace, pod.labels):
                continue
            node_codes = [int(c[pod.node]) for c in codes]
            if any(c >= 0 for c in node_codes):
                any_match = True  # the scheduler's count map is not empty: no "first pod" rule
            if pod.sure:
                for i, code in enumerate(node_codes):
                    if code >= 0:
                        sure[i].add(code)
        has_keys = np.ones(self.n, dtype=np.bool_)
        by_sure = np.ones(self.n, dtype=np.bool_)
        for i, column in enumerate(codes):
            has_keys &= column >= 0
            by_sure &= _isin(column, sure[i])
        first = has_keys if not any_match else np.zeros(self.n, dtype=np.bool_)
        hits = np.fromiter(
            (
                _matches_all(terms, owner_ns, other.traits.namespace, self._labels[q])
                for q, other in enumerate(self.pending)
            ),
            dtype=np.bool_,
            count=len(self.pending),
        )
        return _Affinity(codes, by_sure, first, hits)

    def _own_spread(self) -> None:
        ids: dict[tuple[SpreadConstraint, str, LabelSelector, PodRequirements], int] = {}
        for position, request in enumerate(self.pending):
            req = request.requirements
            if not req.spread:
                continue
            keys = tuple(sorted({c.topology_key for c in req.spread}))
            for constraint in req.spread:
                selector = merged_spread_selector(
                    constraint.selector, constraint.match_label_keys, self._labels[position]
                )
                # Inclusion depends on the pod's node affinity, tolerations and its spread keys only.
                req_key = PodRequirements(
                    requests=(),
                    node_selector=req.node_selector,
                    affinity_terms=req.affinity_terms,
                    tolerations=req.tolerations,
                    required_features=keys,
                )
                key = (constraint, request.traits.namespace, selector, req_key)
                if key not in ids:
                    ids[key] = len(self.spreads)
                    spread = self._spread(constraint, request.traits.namespace, selector, req, keys)
                    self.spreads.append(spread)
                self.pods[position].spread.append(ids[key])
        for s, spread in enumerate(self.spreads):
            for position in np.flatnonzero(spread.counts).tolist():
                self.pods[position].spread_hit.append(s)

    def _spread(
        self,
        constraint: SpreadConstraint,
        ns: str,
        selector: LabelSelector,
        req: PodRequirements,
        keys: tuple[str, ...],
    ) -> _Spread:
        table = self.table
        included = np.ones(self.n, dtype=np.bool_)
        for key in keys:
            included &= table.column(key).codes >= 0
        if constraint.node_affinity_policy == HONOR:
            included &= table.node_affinity(req)
        if constraint.node_taints_policy == HONOR:
            included &= table.tolerated(req.tolerations)
        codes = table.column(constraint.topology_key).codes
        size = len(table.column(constraint.topology_key))
        base = np.zeros(size, dtype=np.int64)
        base_sure = np.zeros(size, dtype=np.int64)
        per_node = constraint.node_affinity_policy == HONOR and constraint.min_domains > 1
        base_node = np.zeros(self.n, dtype=np.int64) if per_node else None
        counting = not selector.empty  # countPodsMatchSelector counts nothing for an empty selector
        if counting:
            for pod in self.index().pods(lambda candidate: candidate == ns):
                if pod.terminating or not included[pod.node] or not selector_matches(selector, pod.labels):
                    continue
                base[codes[pod.node]] += 1
                if pod.assigned:
                    base_sure[codes[pod.node]] += 1
                if base_node is not None:
                    base_node[pod.node] += 1
        counts = np.fromiter(
            (
                counting and other.traits.namespace == ns and selector_matches(selector, self._labels[q])
                for q, other in enumerate(self.pending)
            ),
            dtype=np.bool_,
            count=len(self.pending),
        )
        self_match = np.fromiter(
            (selector_matches(selector, labels) for labels in self._labels),
            dtype=np.bool_,
            count=len(self.pending),
        )
        present = np.unique(codes[included]).astype(np.intp)
        return _Spread(constraint, codes, included, present, base, base_sure, base_node, counts, self_match)

    # --- per placement ---------------------------------------------------------------------

    def static(self, position: int) -> BoolArray | None:
        return self.pods[position].static

    def start(self) -> DomainState:
        return DomainState(self)


def _namespaces_of(term: PodAffinityTerm, owner_ns: str) -> Callable[[str], bool]:
    """Namespaces whose pods the term may look at (an unknown namespaceSelector: all of them)."""

    def covered(ns: str) -> bool:
        return _maybe(term_covers_namespace(term, owner_ns, ns))

    return covered


def _unsupported(pending: Sequence[PodRequest], requirements: Sequence[PodRequirements]) -> Refusal | None:
    if not any(r.unsupported for r in requirements):
        return None
    request = next(p for p in pending if p.requirements.unsupported)
    fields = "; ".join(request.requirements.unsupported)
    return Refusal("Unsupported", messages.unsupported(request.id, fields))


def _unsettled(unsettled: Sequence[BoundPod], pending: Sequence[PodRequest]) -> Refusal | None:
    """A released pod not yet bound whose required affinity or spread constraint a pod of this group
    could break (by matching it elsewhere): the group waits until kube-scheduler has bound it."""
    for other in unsettled:
        owner_ns = other.traits.namespace
        for request in pending:
            labels = request.traits.label_map()
            ns = request.traits.namespace
            what = ""
            if other.affinity and _matches_all(other.affinity, owner_ns, ns, labels):
                what = "required pod affinity"
            elif ns == owner_ns and any(
                (c.min_domains > 1 or c.node_affinity_policy != HONOR) and _counts(c, other.traits, labels)
                for c in other.spread
            ):
                what = "topology spread constraints"
            if what:
                why = (
                    f"waiting for pod {other.id} to be bound first: pods of this group would count in "
                    f"its {what}"
                )
                return Refusal("Unschedulable", messages.volume_waiting(request.id, why))
    return None


def _counts(constraint: SpreadConstraint, owner: PodTraits, labels: Mapping[str, str]) -> bool:
    """Whether a pod with `labels` (same namespace) counts for the owner's constraint."""
    selector = merged_spread_selector(constraint.selector, constraint.match_label_keys, owner.label_map())
    return not selector.empty and selector_matches(selector, labels)


def _existing_anti_applies(
    anti: Mapping[tuple[str, PodAffinityTerm], tuple[int, ...]], pending: Sequence[PodRequest]
) -> bool:
    """Whether some existing pod's anti-affinity term matches some pending pod (cheap, no index)."""
    seen: set[PodTraits] = set()
    for request in pending:
        traits = request.traits
        if traits in seen:
            continue
        seen.add(traits)
        labels = traits.label_map()
        for owner_ns, term in anti:
            if _maybe(term_matches(term, owner_ns, traits.namespace, labels)):
                return True
    return False


class DomainState:
    """The group's pods placed so far in one domain, and what they demand of the next ones."""

    def __init__(self, cons: GroupConstraints) -> None:
        self.cons = cons
        # Per term of the group: domain codes of placed pods it matches, and of placed pods owning it.
        self.anti_matched: list[set[int]] = [set() for _ in cons.anti]
        self.anti_owned: list[set[int]] = [set() for _ in cons.anti]
        self.ports: dict[int, list[HostPort]] = {}
        self.affinity_matched: list[list[tuple[int, ...]]] = [[] for _ in cons.affinities]
        self.affinity_first: list[list[tuple[int, ...]]] = [[] for _ in cons.affinities]
        self.spread_counts: list[IntArray] = [np.zeros_like(s.base) for s in cons.spreads]
        self.spread_node: list[IntArray | None] = [
            None if s.base_node is None else np.zeros_like(s.base_node) for s in cons.spreads
        ]
        self.spread_owner_nodes: list[list[int]] = [[] for _ in cons.spreads]
        self.spread_owner_codes: list[set[int]] = [set() for _ in cons.spreads]
        self.rwop: set[str] = set()
        self.limits: LimitState | None = None if cons.limits is None else cons.limits.start()

    def allowed(self, position: int, nodes: IndexArray, mask: BoolArray) -> tuple[BoolArray, str]:
        """`mask` (over `nodes`) narrowed by the pods already placed; the reason if nothing is left."""
        cons = self.cons
        pod = cons.pods[position]
        m = mask.copy()
        if any(claim in self.rwop for claim in pod.rwop):
            return m & False, REASON_RWOP
        if self.limits is not None:
            m = self.limits.allowed(position, nodes, m)
            if not m.any():
                return m, REASON_VOLUME_COUNT
        wanted = cons.pending[position].requirements.host_ports
        if wanted and self.ports:
            taken = [
                node
                for node, used in self.ports.items()
                if any(host_ports_conflict(w, u) for w in wanted for u in used)
            ]
            if taken:
                m &= ~np.isin(nodes, np.array(taken, dtype=np.intp))
            if not m.any():
                return m, REASON_PORTS
        for a in pod.anti:
            if self.anti_matched[a]:
                m &= ~_isin(cons.anti[a].codes[nodes], self.anti_matched[a])
        for a in pod.anti_hit:
            if self.anti_owned[a]:
                m &= ~_isin(cons.anti[a].codes[nodes], self.anti_owned[a])
        if not m.any():
            return m, REASON_ANTI_AFFINITY
        m = self._affinity(position, nodes, m)
        if not m.any():
            return m, REASON_AFFINITY
        m = self._spread(position, nodes, m)
        if not m.any():
            return m, REASON_SPREAD
        return m, ""

    def _affinity(self, position: int, nodes: IndexArray, m: BoolArray) -> BoolArray:
        cons = self.cons
        pod = cons.pods[position]
        if pod.affinity is not None:
            aff = cons.affinities[pod.affinity]
            first = aff.first_allowed[nodes]
            if not aff.hits[position]:
                first = first & False  # the "first pod" rule needs the pod to match its own terms
            for placed in self.affinity_matched[pod.affinity]:
                first = first & _same_domains(aff.codes, nodes, placed)
            m &= aff.by_sure_pods[nodes] | first
        for a in pod.affinity_hit:
            for owner in self.affinity_first[a]:
                m &= _same_domains(cons.affinities[a].codes, nodes, owner)
        return m

    def _spread(self, position: int, nodes: IndexArray, m: BoolArray) -> BoolArray:
        cons = self.cons
        pod = cons.pods[position]
        for s in pod.spread:
            sp = cons.spreads[s]
            c = sp.constraint
            counts = sp.base + self.spread_counts[s]
            own = int(sp.self_match[position])
            low = int(counts[sp.present].min()) if len(sp.present) >= max(c.min_domains, 1) else 0
            codes = sp.codes[nodes]
            here = counts[np.maximum(codes, 0)] if counts.size else np.zeros(len(nodes), dtype=np.int64)
            m &= sp.included[nodes] & (codes >= 0) & (here + own - low <= c.max_skew)
            node_counts = self.spread_node[s]
            if sp.base_node is not None and node_counts is not None:
                m &= sp.base_node[nodes] + node_counts[nodes] + own <= c.max_skew
            if c.node_affinity_policy == IGNORE:
                m &= here + own - _low_sure(sp) <= c.max_skew
        for s in pod.spread_hit:
            sp = cons.spreads[s]
            c = sp.constraint
            node_counts = self.spread_node[s]
            if sp.base_node is not None and node_counts is not None:
                for owner in self.spread_owner_nodes[s]:
                    if sp.base_node[owner] + node_counts[owner] + 1 > c.max_skew:
                        m &= nodes != owner
            if c.node_affinity_policy == IGNORE:
                counts = sp.base + self.spread_counts[s]
                for code in self.spread_owner_codes[s]:
                    if counts[code] + 1 - _low_sure(sp) > c.max_skew:
                        m &= sp.codes[nodes] != code
        return m

    def place(self, position: int, node: int) -> None:
        cons = self.cons
        pod = cons.pods[position]
        self.rwop.update(pod.rwop)
        if self.limits is not None:
            self.limits.place(position, node)
        wanted = cons.pending[position].requirements.host_ports
        if wanted:
            self.ports.setdefault(node, []).extend(wanted)
        for a in pod.anti:
            code = int(cons.anti[a].codes[node])
            if code >= 0:
                self.anti_owned[a].add(code)
        for a in pod.anti_hit:
            code = int(cons.anti[a].codes[node])
            if code >= 0:
                self.anti_matched[a].add(code)
        if pod.affinity is not None and not cons.affinities[pod.affinity].by_sure_pods[node]:
            self.affinity_first[pod.affinity].append(_codes_at(cons.affinities[pod.affinity].codes, node))
        for a in pod.affinity_hit:
            self.affinity_matched[a].append(_codes_at(cons.affinities[a].codes, node))
        for s in pod.spread_hit:
            sp = cons.spreads[s]
            if sp.included[node]:
                self.spread_counts[s][sp.codes[node]] += 1
                node_counts = self.spread_node[s]
                if node_counts is not None:
                    node_counts[node] += 1
        for s in pod.spread:
            sp = cons.spreads[s]
            if sp.base_node is not None:
                self.spread_owner_nodes[s].append(node)
            if sp.constraint.node_affinity_policy == IGNORE and sp.codes[node] >= 0:
                self.spread_owner_codes[s].add(int(sp.codes[node]))


def _low_sure(sp: _Spread) -> int:
    """The lowest global minimum kube-scheduler can see when pods of the group bind (bound pods only)."""
    if len(sp.present) < max(sp.constraint.min_domains, 1):
        return 0
    return int(sp.base_sure[sp.present].min())


def _codes_at(codes: tuple[IndexArray, ...], node: int) -> tuple[int, ...]:
    return tuple(int(c[node]) for c in codes)


def _same_domains(codes: tuple[IndexArray, ...], nodes: IndexArray, at: tuple[int, ...]) -> BoolArray:
    same = np.ones(len(nodes), dtype=np.bool_)
    for c, value in zip(codes, at, strict=True):
        same &= c[nodes] == value
    return same
