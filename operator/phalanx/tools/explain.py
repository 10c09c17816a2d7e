"""`phalanx explain job/NAME`: why a gang waits now, in plain words, and as JSON.

It says what the status of the target's groups says (conditions, phase, domain, pods) and, for a gang
whose pods wait, runs the placement engine on a snapshot of the live cluster, as one pass of Phalanx's
scheduling loop would: `decide` (or `decide_composite` for a tree of groups, a sliced Job's slices) and,
per topology domain, the engine's own diagnosis (`placement.diagnose`, `Diagnosis.summary()`: how many
pods fit and which filter or resource keeps the other nodes out). Those sentences are the ones Phalanx
writes into the PodGroups' Admitted condition, so `explain` and `kubectl describe` never disagree on
why. Pure: `targets.gather` does the reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api import conditions as c
from phalanx.api import keys
from phalanx.api.cluster_objects import node_info
from phalanx.api.job_layout import PREFERRED, REQUIRED, TopologyModeKind, group_topology_mode
from phalanx.bodies import mapping
from phalanx.placement import (
    Admit,
    CompositeAdmit,
    CompositeRequest,
    Diagnosis,
    DomainReport,
    GroupRequest,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    decide,
    decide_composite,
    diagnose,
    resolve_mode,
)
from phalanx.tools.kueue_view import KUEUE, KueueView, kueue_view
from phalanx.tools.kueue_view import lines as kueue_lines
from phalanx.tools.kueue_view import to_json as kueue_json
from phalanx.tools.targets import (
    JOBSET,
    TRAINJOB,
    Facts,
    Gang,
    Target,
    members_by_label,
    min_count_of,
    name_of,
    parent_of,
)
from phalanx.tools.topologies import levels_of_key
from phalanx.tools.view import PodView, snapshot_of

BINARY_RESOURCES = ("memory", "ephemeral-storage")
SCHEMA_VERSION = 1
"""The version of `-o json`'s shape (docs/cli.md); bumped only by a change that breaks a reader."""
NOT_RUNNING = ("suspended", "succeeded", "failed")


# ------------------------------------------------------------------ words


def format_amount(resource: str, amount: int) -> str:
    """A canonical amount (millicores for cpu, units otherwise) as a person writes it: 500m, 2, 16Gi."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in BINARY_RESOURCES or resource.startswith("hugepages-"):
        for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            unit = 1 << power
            if abs(amount) >= unit:
                return f"{amount // unit}{suffix}" if amount % unit == 0 else f"{amount / unit:.1f}{suffix}"
    return str(amount)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe_requests(requirements: PodRequirements) -> str:
    """What one pod asks of a node, e.g. `nvidia.com/gpu 8, cpu 500m` (a pod slot always)."""
    parts = [f"{r} {format_amount(r, a)}" for r, a in requirements.requests if a > 0]
    text = ", ".join(parts) if parts else "no resources (a pod slot only)"
    if requirements.node_selector:
        text += ", nodeSelector " + ",".join(f"{k}={v}" for k, v in requirements.node_selector)
    return text


def _asks(pods: Sequence[PodView]) -> str:
    """What the pods ask for, by shape as `describe_requests` says it (pods that differ in what it does not
    say, tolerations the apiserver added to a live pod and not to a slot, say, are one shape)."""
    shapes: dict[str, int] = {}
    for pod in pods:
        text = describe_requests(pod.requirements)
        shapes[text] = shapes.get(text, 0) + 1
    if len(shapes) == 1:
        return next(iter(shapes))
    return "; ".join(f"{count} × {text}" for text, count in shapes.items())


# ------------------------------------------------------------------ the explanation, as data


@dataclass(frozen=True)
class Counts:
    """A group's pods: live ones by where they are, terminal ones by phase."""

    live: int
    bound: int
    released: int
    gated: int
    """Held by Phalanx's gate."""
    elsewhere: int
    """Neither placed nor held by Phalanx: kube-scheduler has them."""
    succeeded: int
    failed: int
    blocked: int
    """Of the gated ones, how many also carry another controller's gate."""
    other_gates: tuple[str, ...]


@dataclass(frozen=True)
class ConditionView:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class ReservationView:
    """Room held for the group (`status.reservation`): freed by preemption, or kept for a gang that waited
    too long (bounded waiting)."""

    cause: str
    """Preemption or BoundedWaiting."""
    domain: str | None
    nodes: tuple[str, ...]
    victims: int
    since: str
    """BoundedWaiting: since when the group has waited; Preemption: when the victims were chosen."""
    until: str

    def text(self) -> str:
        where = f" in {self.domain}" if self.domain else ""
        nodes = sorted(set(self.nodes))
        held = f"{_plural(len(nodes), 'node')}{where} ({', '.join(nodes)})"
        if self.cause == "BoundedWaiting":
            return (
                f"{held} held for it (bounded waiting: it has waited since {self.since}, longer than "
                "--starvation-age); no later gang is placed on them until it is admitted"
            )
        return (
            f"{held} being freed for it by preempting {_plural(self.victims, 'pod')}, held until "
            f"{self.until} or its admission"
        )


def _reservation(group: Mapping[str, Any]) -> ReservationView | None:
    held = mapping(mapping(group.get("status")).get("reservation"))
    if not held:
        return None
    return ReservationView(
        cause=str(held.get("cause") or "Preemption"),
        domain=str(held["domain"]) if held.get("domain") else None,
        nodes=tuple(str(n) for n in held.get("nodes") or []),
        victims=len(held.get("victims") or []),
        since=str(held.get("waitingSince") or held.get("reservedAt") or ""),
        until=str(held.get("expiresAt") or ""),
    )


@dataclass(frozen=True)
class GroupReport:
    """One PodGroup or CompositePodGroup as its status says, with the engine's words for it now."""

    kind: str
    name: str
    parent: str | None
    policy: str | None
    """Gang or Basic."""
    min_count: int | None
    """minCount (minGroupCount for a composite)."""
    effective: int | None
    """What the loop asks for now: minCount clamped to the pods the owner has left to run."""
    topology_key: str | None
    phase: str | None
    domain: str | None
    conditions: tuple[ConditionView, ...]
    pods: Counts | None
    """None for a composite (its children hold the pods)."""
    topology_mode: TopologyModeKind = REQUIRED
    """The mode the engine decides it in: a PodGroup's `phalanx.dev/topology-mode` annotation (a Job's mode
    as at the group's creation), a LeaderWorkerSet's own; a tree's groups are required."""
    now: str | None = None
    """The engine's verdict for this group in the tree's placement now (None: not run)."""
    reservation: ReservationView | None = None
    """Room held for it (a tree's: on its root CompositePodGroup)."""
    to_come: int = 0
    """Pods its recorded decision (`status.admission`) places that do not exist yet: a staged unit's later
    pods (an InOrder JobSet's later child Job, a LeaderReady group's workers), their room held in slots."""


@dataclass(frozen=True)
class DomainFit:
    domain: str | None
    """The topology domain (a path with levels); None: the whole cluster (no topology key)."""
    fit: int
    reasons: tuple[tuple[str, int], ...]
    """(kube-scheduler's reason, nodes) for the nodes that take none of the pods."""
    text: str
    """`Diagnosis.summary()` for this domain alone."""


@dataclass(frozen=True)
class Placement:
    """The engine run on the live cluster for the waiting pods."""

    nodes: int
    holding: int
    """Pods holding capacity on a node."""
    asks: str
    need: int
    """Pods that must fit together now (the whole tree's for a composite)."""
    fits: bool
    verdict: str
    domains: tuple[DomainFit, ...] = ()
    """Closest first (single groups; a tree's groups have their own `now`)."""
    never_fits: bool = False
    best_when_empty: int | None = None
    notes: tuple[str, ...] = ()
    assignments: tuple[tuple[str, str], ...] = ()
    """(pod, node) the engine chose when it fits now."""


@dataclass(frozen=True)
class Explanation:
    target: Target
    namespace: str
    state: str
    """admitted, waiting, suspended, finished, not-managed, not-held, invalid, basic, no-group, no-pods,
    pending, or held-by-kueue."""
    summary: str
    owner: tuple[str, str, bool] | None
    """(kind, name, managed)."""
    composites: tuple[GroupReport, ...]
    groups: tuple[GroupReport, ...]
    placement: Placement | None
    pods: Counts
    """All the target's pods."""
    spec_gang: Gang | None = None
    """What the owner's spec asks for, when it has no PodGroup yet."""
    unassigned: int = 0
    """The owner's live pods that belong to none of its groups."""
    kueue: KueueView | None = None
    """Kueue's view beside Phalanx's, for an owner Kueue manages (kueue_view.py)."""
    others: tuple[tuple[str, str], ...] = ()
    """The owner's other gangs (a LeaderWorkerSet's other groups): (root group, phase)."""


# ------------------------------------------------------------------ reading the groups


def _conditions(group: Mapping[str, Any] | None) -> tuple[ConditionView, ...]:
    out = []
    for raw in mapping((group or {}).get("status")).get("conditions") or []:
        cond = mapping(raw)
        out.append(
            ConditionView(
                str(cond.get("type") or ""),
                str(cond.get("status") or ""),
                str(cond.get("reason") or ""),
                str(cond.get("message") or ""),
            )
        )
    return tuple(out)


def _condition(report: GroupReport | None, kind: str) -> ConditionView | None:
    return next((x for x in report.conditions if x.type == kind), None) if report else None


def _topology_key(group: Mapping[str, Any]) -> str | None:
    topology = mapping(mapping(group.get("spec")).get("schedulingConstraints")).get("topology") or []
    key = mapping(topology[0]).get("key") if topology else None
    return str(key) if key else None


def _topology_mode(group: Mapping[str, Any]) -> TopologyModeKind:
    """As the controller reads it (model/records.py): the group's annotation, required if none."""
    return group_topology_mode(mapping(group.get("metadata")))


def _last_domain(group: Mapping[str, Any]) -> str | None:
    """`status.lastDomain`: where the group was placed before its pods were made anew; the engine tries it
    first (`GroupRequest.preferred_domain`), as the controller does."""
    last = mapping(group.get("status")).get("lastDomain")
    return str(last) if last else None


def counts_of(views: Sequence[PodView]) -> Counts:
    live = [p for p in views if not p.terminal and not p.deleting]
    gated = [p for p in live if p.gated]
    placed = [p for p in live if p.usage_node]
    blocked = [p for p in gated if p.other_gates]
    return Counts(
        live=len(live),
        bound=sum(1 for p in placed if p.bound),
        released=sum(1 for p in placed if not p.bound),
        gated=len(gated),
        elsewhere=len(live) - len(placed) - len(gated),
        succeeded=sum(1 for p in views if p.terminal and p.phase == "Succeeded"),
        failed=sum(1 for p in views if p.terminal and p.phase == "Failed"),
        blocked=len(blocked),
        other_gates=tuple(sorted({g for p in blocked for g in p.other_gates})),
    )


def _report(
    kind: str, group: Mapping[str, Any], pods: Sequence[PodView] | None, remaining: int | None
) -> GroupReport:
    status = mapping(group.get("status"))
    minimum = min_count_of(group)
    effective = minimum
    if minimum is not None and remaining is not None and kind == "PodGroup":
        effective = max(1, min(minimum, remaining))
    return GroupReport(
        kind=kind,
        name=name_of(group),
        parent=parent_of(group),
        policy="Gang" if minimum is not None else "Basic",
        min_count=minimum,
        effective=effective,
        topology_key=_topology_key(group),
        topology_mode=_topology_mode(group),
        phase=str(status["phase"]) if status.get("phase") else None,
        domain=str(status["domain"]) if status.get("domain") else None,
        conditions=_conditions(group),
        pods=counts_of(pods) if pods is not None else None,
        reservation=_reservation(group),
        to_come=_to_come(status, pods),
    )


def _to_come(status: Mapping[str, Any], pods: Sequence[PodView] | None) -> int:
    """The assignments of the group's recorded decision beyond its pods that exist (live, or succeeded: a
    slot the pod released into it fills is still named by the slot, so the count, not the names)."""
    if pods is None:
        return 0
    assignments = mapping(status.get("admission")).get("assignments") or []
    there = sum(1 for p in pods if not p.deleting and (not p.terminal or p.phase == "Succeeded"))
    return max(0, len(assignments) - there)


# ------------------------------------------------------------------ the engine, on the live cluster


def _ready(pods: Sequence[PodView]) -> list[PodView]:
    """Pods the loop would try to place: held by Phalanx's gate alone."""
    return sorted(
        (p for p in pods if p.gated and not p.other_gates and not p.terminal and not p.deleting),
        key=lambda p: p.name,
    )


def _placed(pods: Sequence[PodView]) -> list[PodView]:
    return sorted(
        (p for p in pods if p.usage_node and not p.terminal and not p.deleting), key=lambda p: p.name
    )


def _request(
    name: str,
    pods: Sequence[PodView],
    min_count: int,
    key: str | None,
    levels: tuple[str, ...],
    mode: TopologyModeKind = REQUIRED,
    preferred_domain: str | None = None,
) -> GroupRequest:
    """The engine's request, as the controller builds it (plan/decide.py: the mode and the domain it had)."""
    return GroupRequest(
        name=name,
        pending=tuple(
            PodRequest(id=p.key, requirements=p.requirements, traits=p.traits) for p in _ready(pods)
        ),
        min_count=min_count,
        topology_key=key,
        bound_nodes=tuple(p.usage_node for p in _placed(pods)),
        levels=levels,
        mode=mode,
        preferred_domain=preferred_domain,
    )


def domain_text(diagnosis: Diagnosis, report: DomainReport) -> str:
    """The engine's sentence for one domain (`Diagnosis.summary()` of that domain alone)."""
    text = dataclasses.replace(diagnosis, domains=(report,), never_fits=False).summary()
    return text if report.domain is not None else f"all nodes: {text}"


def never_fits_text(diagnosis: Diagnosis) -> str:
    return dataclasses.replace(diagnosis, domains=()).summary().removeprefix("; ")


def _single(snapshot: Snapshot, request: GroupRequest, holding: int, nodes: int, asks: str) -> Placement:
    decision = decide(snapshot, request)
    key = request.topology_key
    placed = len(request.bound_nodes)
    need = max(0, request.min_count - placed)
    base = Placement(nodes=nodes, holding=holding, asks=asks, need=need, fits=False, verdict="")
    if isinstance(decision, Admit):
        if not decision.assignments:
            verdict = f"its {placed} placed pods already meet minCount {request.min_count}; the rest wait"
            return dataclasses.replace(base, fits=True, verdict=verdict)
        # As the controller's Admitted message (plan/decide.py admitted_message): a wider level says so.
        at = key if decision.level is None else decision.level
        where = f" in {at}={decision.domain}" if at and decision.domain else ""
        how = ""
        if decision.mode_note:
            how = f" ({decision.mode_note})"
        elif decision.level is not None:
            how = f" (topology mode preferred: no domain of {key} has room for it)"
        on = ", ".join(node for _, node in decision.assignments)
        verdict = (
            f"it fits now: {_plural(len(decision.assignments), 'pod')}{where} on {on}{how}; Phalanx admits "
            "it at its next scheduling pass (if it keeps waiting, check that `phalanx run` is running)"
        )
        return dataclasses.replace(base, fits=True, verdict=verdict, assignments=decision.assignments)
    assert isinstance(decision, Reject)
    if len(request.pending) + placed < request.min_count:
        verdict = (
            f"only {len(request.pending) + placed} of its {request.min_count} pods exist ({placed} placed, "
            f"{len(request.pending)} waiting); the gang starts when the rest have been created"
        )
        return dataclasses.replace(base, fits=False, verdict=verdict)
    if decision.reason != "Unschedulable":
        # The engine's words, with auto's note as in the controller's condition (plan/decide.py explained).
        message = f"{decision.message} ({decision.mode_note})" if decision.mode_note else decision.message
        return dataclasses.replace(base, fits=False, verdict=message)
    diagnosis = diagnose(snapshot, request)  # an auto group at the level it is decided at
    key = resolve_mode(snapshot, request).topology_key
    domains = tuple(
        DomainFit(r.domain, r.fit, r.reasons, domain_text(diagnosis, r)) for r in diagnosis.domains
    )
    notes = [decision.mode_note] if decision.mode_note else []
    pinned = domains[0].domain if placed and key is not None and len(domains) == 1 else None
    if pinned is not None:
        notes.append(f"{_plural(placed, 'pod')} of the gang already run in {pinned}: only it is considered")
    best = domains[0] if domains else None
    got = best.fit if best else 0
    never_fits, best_when_empty = diagnosis.never_fits, diagnosis.best_when_empty
    if request.mode == PREFERRED and key is not None and pinned is None:
        # The engine tried every wider level up to all nodes: what the whole cluster has room for decides.
        whole = diagnose(
            snapshot,
            dataclasses.replace(request, topology_key=None, levels=(), mode=REQUIRED, preferred_domain=None),
        )
        never_fits, best_when_empty = whole.never_fits, whole.best_when_empty
        widest = whole.domains[0] if whole.domains else None
        room = widest.fit if widest is not None else 0
        notes.append(
            f"topology mode preferred: with no room in one domain of {key} the gang takes one of a wider "
            f"level, or any nodes (the lines below are the domains of {key})"
        )
        if never_fits:
            verdict = never_fits_text(whole)
        elif widest is not None and room >= need:
            together = domain_text(whole, widest)
            verdict = f"no domain of {key} or wider takes all {need} pods together: {together}"
        else:
            verdict = (
                f"no domain of {key} has room for {need} pods at once, nor does a wider level: the whole "
                f"cluster has room for {room} of them"
            )
    elif diagnosis.never_fits:
        verdict = never_fits_text(diagnosis)
    elif best is not None and got >= need:
        verdict = f"no {key or 'cluster'} domain takes all {need} pods together: {best.text}"
    elif key is None:
        verdict = f"the cluster has room for {got} of the {need} pods the gang needs at once"
    elif pinned is not None:
        verdict = (
            f"its {_plural(placed, 'placed pod')} hold it in {key}={pinned}, which has room for {got} of the "
            f"{need} more it needs"
        )
    elif got == 0:
        verdict = f"no {key} domain has room for {need} pods at once, nor for even one of them"
    else:
        assert best is not None
        closest = f"the closest is {best.domain}, with room for {got}"
        verdict = f"no {key} domain has room for {need} pods at once; {closest}"
    return dataclasses.replace(
        base,
        verdict=verdict,
        domains=domains,
        never_fits=never_fits,
        best_when_empty=best_when_empty,
        notes=tuple(notes),
    )


def _composite(
    snapshot: Snapshot,
    composites: Sequence[Mapping[str, Any]],
    leaves: Sequence[tuple[Mapping[str, Any], list[PodView], int]],
    levels: tuple[str, ...],
    holding: int,
    nodes: int,
    asks: str,
) -> tuple[Placement, dict[str, str]]:
    """decide_composite for the tree; the engine's verdict per group."""
    requests = {  # as the controller's request_of: each leaf's mode and the domain it had
        name_of(g): _request(name_of(g), pods, need, _topology_key(g), (), _topology_mode(g), _last_domain(g))
        for g, pods, need in leaves
    }
    parents = {name_of(g): parent_of(g) for g, _, _ in leaves}
    by_parent: dict[str | None, list[Mapping[str, Any]]] = {}
    for comp in composites:
        by_parent.setdefault(parent_of(comp), []).append(comp)

    def build(comp: Mapping[str, Any], depth: int) -> CompositeRequest:
        name = name_of(comp)
        children: list[GroupRequest | CompositeRequest] = [
            r for n, r in requests.items() if parents[n] == name
        ]
        children.extend(build(child, depth + 1) for child in by_parent.get(name, []))
        return CompositeRequest(
            name=name,
            children=tuple(children),
            min_count=min_count_of(comp) or 1,
            topology_key=_topology_key(comp),
            levels=levels if depth == 0 else (),
            preferred_domain=_last_domain(comp),
            mode=PREFERRED if _topology_mode(comp) == PREFERRED else REQUIRED,  # the root's is read
        )

    root = build(composites[0], 0)
    need = sum(max(0, r.min_count - len(r.bound_nodes)) for r in requests.values())
    decision = decide_composite(snapshot, root)
    base = Placement(nodes=nodes, holding=holding, asks=asks, need=need, fits=False, verdict="")
    if isinstance(decision, CompositeAdmit):
        assignments = tuple(a for _, admit in decision.admits for a in admit.assignments)
        where = decision.domain(root.name)
        at = root.topology_key if decision.level is None else decision.level
        where_text = f" in {at}={where}" if where and at else ""
        if decision.level is not None:
            where_text += (
                f" (no domain of {root.topology_key} has room for the whole tree: topology mode preferred)"
            )
        verdict = (
            f"it fits now: {_plural(len(assignments), 'pod')} of {_plural(len(requests), 'group')}"
            f"{where_text}; Phalanx admits the tree at its next scheduling pass (if it keeps waiting, check "
            "that `phalanx run` is running)"
        )
        now = {name: f"fits in {d}" if d else "fits" for name, d in decision.domains}
        return dataclasses.replace(base, fits=True, verdict=verdict, assignments=assignments), now
    head = decision.message
    for group_verdict in reversed(decision.groups):
        head = head.removesuffix(f"; {group_verdict.message}")
    now = {g.name: g.message.removeprefix(f"{g.name}: ") for g in decision.groups}
    return dataclasses.replace(base, fits=False, verdict=head), now


# ------------------------------------------------------------------ the whole explanation


def explain(facts: Facts) -> Explanation:
    """What the target's status says, and, when its gang waits, the engine run on the live cluster now."""
    row, owner = facts.owner_kind, facts.owner
    views = [PodView.of(p) for p in facts.target_pods]
    remaining = (
        row.remaining(owner) if row is not None and owner is not None and not facts.composites else None
    )
    if row is not None and owner is not None:
        members = row.members(facts.groups, views) if facts.groups else {}
    elif len(facts.groups) == 1 and not facts.composites:
        members = {name_of(facts.groups[0]): list(views)}  # they were read by its label
    else:
        members = members_by_label(facts.groups, views)
    groups = tuple(_report("PodGroup", g, members.get(name_of(g), []), remaining) for g in facts.groups)
    composites = tuple(_report("CompositePodGroup", comp, None, None) for comp in facts.composites)
    assigned = {p.key for pods in members.values() for p in pods}
    unassigned = sum(1 for p in views if p.key not in assigned and not p.terminal and not p.deleting)

    managed = row.managed(owner) if row is not None and owner is not None else True
    job_state = row.state(owner) if row is not None and owner is not None else ""
    spec_gang = row.gang(owner) if row is not None and owner is not None else None
    if spec_gang is not None and facts.jobset is not None:
        spec_gang = JOBSET.gang(facts.jobset)  # a TrainJob's gang is its JobSet's (kinds/trainjob.py)
    if row is not None and row.mode_from_owner and isinstance(spec_gang, Gang) and not composites:
        # The loop decides its group in the mode the owner says now (kinds/lws.py), not a kept one.
        groups = tuple(dataclasses.replace(r, topology_mode=spec_gang.topology_mode) for r in groups)
    gang: Gang | str
    if facts.groups:
        first = groups[0]
        gang = Gang(first.policy == "Gang", first.effective or 1, first.topology_key, first.topology_mode)
    elif spec_gang is not None:
        gang = spec_gang
        if isinstance(gang, Gang) and remaining is not None and gang.gang and gang.min_count is not None:
            gang = dataclasses.replace(gang, min_count=max(1, min(gang.min_count, remaining)))
    else:
        gang = "neither an owner nor a PodGroup"
    root = composites[0] if composites else (groups[0] if groups else None)
    admitted = _condition(root, c.ADMITTED)
    reason = admitted.reason if admitted is not None else ""

    # Run the engine for a gang whose pods wait now.
    placement: Placement | None = None
    ready = _ready(views)
    if (
        isinstance(gang, Gang)
        and gang.gang
        and gang.min_count is not None
        and ready
        and job_state not in NOT_RUNNING
        and managed
        and (facts.groups or (row is not None and owner is not None and row.held(owner)))
        and reason not in (c.REASON_ADMITTED, c.REASON_NOT_GATED, c.REASON_WAITING_FOR_GATES)
    ):
        node_infos = [node_info(n) for n in facts.nodes]
        cluster_pods = [PodView.of(p) for p in facts.pods]
        snapshot = snapshot_of(node_infos, cluster_pods)
        holding = sum(1 for p in cluster_pods if p.usage_node)
        # A staged owner's pods still to come are decided with the rest, in slots (as the loop does).
        slots = row.slots(facts, members) if row is not None and owner is not None and facts.groups else {}
        asks = _asks([*ready, *(s for leaf in slots.values() for s in leaf)])
        if composites:
            keys_of_tree = [r.topology_key for r in (*composites, *groups)]
            levels = next((lv for k in keys_of_tree if (lv := levels_of_key(facts.topologies, k))), ())
            leaves = [
                (g, [*members.get(name_of(g), []), *slots.get(name_of(g), [])], report.effective or 1)
                for g, report in zip(facts.groups, groups, strict=True)
            ]
            placement, now = _composite(
                snapshot, facts.composites, leaves, levels, holding, len(facts.nodes), asks
            )
            composites = tuple(dataclasses.replace(r, now=now.get(r.name)) for r in composites)
            groups = tuple(dataclasses.replace(r, now=now.get(r.name)) for r in groups)
        else:
            pods = views if not groups else [*members.get(groups[0].name, []), *slots.get(groups[0].name, [])]
            request = _request(
                f"{facts.namespace}/{facts.target.name}",
                pods,
                gang.min_count,
                gang.topology_key,
                levels_of_key(facts.topologies, gang.topology_key),
                gang.topology_mode,  # as the controller: the group's (or, none yet, the spec's)
                _last_domain(facts.groups[0]) if facts.groups else None,
            )
            placement = _single(snapshot, request, holding, len(facts.nodes), asks)

    state, summary = _summary(
        facts, groups, composites, gang, managed, job_state, reason, admitted, placement, views
    )
    kueue = kueue_view(owner, facts.kueue_workloads, facts.kueue_error)
    if kueue is not None and kueue.holder == KUEUE and state not in ("finished", "not-managed", "invalid"):
        state, summary = "held-by-kueue", f"held by Kueue: {kueue.summary}"
    held = root.reservation if root is not None else None
    if held is not None and state == "waiting":
        summary += f"; a reservation holds room for it: {held.text()}"
    owner_info = (row.kind, name_of(owner), managed) if row is not None and owner is not None else None
    return Explanation(
        facts.target,
        facts.namespace,
        state,
        summary,
        owner_info,
        composites,
        groups,
        placement,
        counts_of(views),
        gang if isinstance(gang, Gang) and not groups else None,
        unassigned,
        kueue,
        facts.others,
    )


def _summary(
    facts: Facts,
    groups: Sequence[GroupReport],
    composites: Sequence[GroupReport],
    gang: Gang | str,
    managed: bool,
    job_state: str,
    reason: str,
    admitted: ConditionView | None,
    placement: Placement | None,
    views: Sequence[PodView],
) -> tuple[str, str]:
    row, owner = facts.owner_kind, facts.owner
    kind = row.kind if row is not None else ""
    root = composites[0] if composites else (groups[0] if groups else None)
    counts = counts_of(views)
    if row is not None and owner is not None and not managed:
        text = (
            f"not managed by Phalanx: the {kind} has no label {keys.MANAGED_LABEL}=true, so kube-scheduler "
            "places its pods one by one (`kubectl describe pod` says why one waits)"
        )
        if groups:
            text += "; Phalanx is letting go of its PodGroup"
        return "not-managed", text
    if isinstance(gang, str):
        return "invalid", f"Phalanx cannot schedule it: {gang}"
    if not groups and row is not None and owner is not None and not row.held(owner):
        return "not-held", (
            f"not held by Phalanx: its pod template has no {keys.ADMISSION_GATE} gate, so Phalanx's webhook "
            "did not see its creation (was `phalanx run` installed then?); kube-scheduler places its pods "
            "one by one"
        )
    if reason == c.REASON_ADMITTED:
        assert root is not None
        where = f" in {root.topology_key}={root.domain}" if root.domain and root.topology_key else ""
        text = f"admitted{where}: {counts.bound} of {counts.live} pods bound"
        if counts.released:
            text += f", {counts.released} released to their nodes for kube-scheduler to bind"
        if counts.succeeded:
            text += f", {counts.succeeded} more succeeded (they count toward the gang)"
        if to_come := sum(g.to_come for g in groups):
            text += f", {to_come} more still to come (their room held)"
        if len(groups) > 1:
            text += f" ({_plural(len(groups), 'group')})"
        return "admitted", text
    if job_state == "suspended" or reason == c.REASON_SUSPENDED:
        return (
            "suspended",
            f"suspended: the {kind or 'owner'} is suspended (spec.suspend), so nothing is held for it",
        )
    if job_state in ("succeeded", "failed") or reason == c.REASON_FINISHED:
        return "finished", f"finished: the {kind or 'group'} {job_state or 'is finished'}"
    if reason in (c.REASON_WAITING_FOR_GATES, c.REASON_NOT_GATED, c.REASON_WAITING_FOR_PODS) and admitted:
        return "waiting", f"waiting ({reason}): {admitted.message}"
    if placement is not None:
        return "waiting", "waiting: " + placement.verdict
    if not gang.gang:
        return "basic", "basic policy: Phalanx holds nothing; kube-scheduler places the pods one by one"
    if not groups and kind == TRAINJOB.kind and not counts.live and owner is not None and not facts.jobset:
        # Its groups are its JobSet's, which Trainer makes: when Trainer cannot (a refusal of its JobSet's
        # creation), Trainer says why on the TrainJob, not Phalanx.
        return "no-group", (
            "no PodGroup yet: Phalanx makes the TrainJob's groups once Kubeflow Trainer has made its JobSet; "
            "if Trainer cannot make it, the TrainJob's events say why (`kubectl describe trainjob "
            f"{name_of(owner)}`: TrainJobResourcesCreationFailed); else check that `phalanx run` is running"
        )
    if not groups:
        return "no-group", (
            "no PodGroup yet: Phalanx creates one at its first pass after the creation (if none appears, "
            "check that `phalanx run` is running)"
        )
    if not counts.live:
        return "no-pods", f"no pods yet: the {kind or 'owner'} has not created them"
    assert root is not None
    return "pending", f"phase {root.phase or 'not set'}" + (f" ({reason})" if reason else "")


# ------------------------------------------------------------------ text


def _condition_line(cond: ConditionView | None) -> str:
    if cond is None:
        return "not set"
    text = f"{cond.status} ({cond.reason})"
    return f"{text}: {cond.message}" if cond.message else text


def _counts_line(counts: Counts) -> str:
    text = (
        f"{counts.live} ({counts.bound} bound, {counts.released} released, "
        f"{counts.gated} held by {keys.ADMISSION_GATE}"
    )
    if counts.elsewhere:
        text += f", {counts.elsewhere} pending in kube-scheduler"
    if counts.blocked:
        text += f" ({counts.blocked} also carry {', '.join(counts.other_gates)})"
    for n, phase in ((counts.succeeded, "succeeded"), (counts.failed, "failed")):
        if n:
            text += f", {n} {phase}"
    return text + ")"


def _gang_text(report: GroupReport) -> str:
    if report.policy != "Gang":
        return " (Basic)"
    where = f", topology {report.topology_key}" if report.topology_key else ", no topology key"
    if report.topology_key and report.topology_mode != REQUIRED:
        where += f" ({report.topology_mode})"
    what = "minGroupCount" if report.kind == "CompositePodGroup" else "minCount"
    left = ""
    if report.effective is not None and report.min_count is not None and report.effective < report.min_count:
        left = f", {report.effective} now: the last pods"
    return f" (Gang, {what} {report.min_count}{left}{where})"


def _group_lines(report: GroupReport, indent: str, tree: bool) -> list[str]:
    lines = [f"{indent}{report.kind}: {report.name}{_gang_text(report)}"]
    inner = indent + ("  " if tree else "")
    domain = f", domain {report.domain}" if report.domain else ""
    lines.append(f"{inner}Phase: {report.phase or 'not set'}{domain}")
    if report.pods is not None:
        lines.append(f"{inner}Pods: {_counts_line(report.pods)}")
    lines.append(f"{inner}{c.ADMITTED}: {_condition_line(_condition(report, c.ADMITTED))}")
    if report.kind == "PodGroup" and not tree:
        initially = _condition(report, c.POD_GROUP_INITIALLY_SCHEDULED)
        lines.append(f"{inner}{c.POD_GROUP_INITIALLY_SCHEDULED}: {_condition_line(initially)}")
    if report.reservation is not None:
        lines.append(f"{inner}Reservation ({report.reservation.cause}): {report.reservation.text()}")
    if report.now is not None:
        lines.append(f"{inner}Now: {report.now}")
    return lines


def render(e: Explanation) -> str:
    """The explanation as text: the verdict first, then the groups' status, then the placement now."""
    lines = [f"{e.target} in namespace {e.namespace}: {e.summary}"]
    tree = bool(e.composites)
    if tree:
        lines.append(f"  Pods: {_counts_line(e.pods)}")
    for report in (*e.composites, *e.groups):
        lines.extend(_group_lines(report, "  ", tree))
    if not e.groups:
        if e.owner is not None and e.owner[2]:
            gang = e.spec_gang
            spec = ""
            if gang is not None:
                where = f", topology {gang.topology_key}" if gang.topology_key else ", no topology key"
                if gang.topology_key and gang.topology_mode != REQUIRED:
                    where += f" ({gang.topology_mode})"
                size = (
                    f"minCount {gang.min_count}"
                    if gang.min_count is not None
                    else "minCount not known until Kubeflow Trainer makes its JobSet (its runtime sizes it)"
                )
                spec = f" (Gang, {size}{where})" if gang.gang else " (Basic)"
            lines.append(f"  PodGroup: none yet{spec}")
        lines.append(f"  Pods: {_counts_line(e.pods)}")
    if e.unassigned:
        lines.append(f"  {_plural(e.unassigned, 'live pod')} of the owner belong to none of its groups")
    if e.kueue is not None:
        lines.extend(kueue_lines(e.kueue))
    if e.others:
        listed = ", ".join(f"{name} ({phase or 'no phase yet'})" for name, phase in e.others)
        lines.append(f"  Its other gangs: {listed}")
    p = e.placement
    if p is not None and (p.domains or p.notes):
        lines.append("")
        lines.append(
            f"Placement now, computed from {_plural(p.nodes, 'node')} and the {_plural(p.holding, 'pod')} "
            f"holding capacity (each pod asks for {p.asks}):"
        )
        lines.extend(f"  {note}" for note in p.notes)
        lines.extend(f"  {d.text}" for d in p.domains)
    return "\n".join(lines)


# ------------------------------------------------------------------ JSON


def _counts_json(counts: Counts | None) -> dict[str, Any] | None:
    if counts is None:
        return None
    return {
        "live": counts.live,
        "bound": counts.bound,
        "released": counts.released,
        "gated": counts.gated,
        "pendingInScheduler": counts.elsewhere,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "otherGates": {"pods": counts.blocked, "gates": list(counts.other_gates)},
    }


def _group_json(r: GroupReport) -> dict[str, Any]:
    return {
        "kind": r.kind,
        "name": r.name,
        "parent": r.parent,
        "policy": r.policy,
        "minCount": r.min_count,
        "effectiveMinCount": r.effective,
        "topologyKey": r.topology_key,
        "topologyMode": r.topology_mode,
        "phase": r.phase,
        "domain": r.domain,
        "conditions": [
            {"type": x.type, "status": x.status, "reason": x.reason, "message": x.message}
            for x in r.conditions
        ],
        "pods": _counts_json(r.pods),
        "toCome": r.to_come,
        "now": r.now,
        "reservation": None
        if r.reservation is None
        else {
            "cause": r.reservation.cause,
            "domain": r.reservation.domain,
            "nodes": list(r.reservation.nodes),
            "victims": r.reservation.victims,
            "since": r.reservation.since,
            "until": r.reservation.until,
        },
    }


def to_json(e: Explanation) -> dict[str, Any]:
    """The documented `-o json` shape (docs/cli.md): stable keys, None for what does not apply."""
    p = e.placement
    return {
        "kind": "Explanation",
        "version": SCHEMA_VERSION,
        "target": {"kind": e.target.kind, "name": e.target.name, "namespace": e.namespace},
        "state": e.state,
        "summary": e.summary,
        "owner": None if e.owner is None else {"kind": e.owner[0], "name": e.owner[1], "managed": e.owner[2]},
        "composites": [_group_json(r) for r in e.composites],
        "groups": [_group_json(r) for r in e.groups],
        "pods": _counts_json(e.pods),
        "unassignedPods": e.unassigned,
        "kueue": kueue_json(e.kueue),
        "otherGangs": [{"name": name, "phase": phase} for name, phase in e.others],
        "placement": None
        if p is None
        else {
            "nodes": p.nodes,
            "holdingPods": p.holding,
            "asks": p.asks,
            "need": p.need,
            "fits": p.fits,
            "verdict": p.verdict,
            "domains": [
                {
                    "domain": d.domain,
                    "fit": d.fit,
                    "reasons": [{"reason": why, "nodes": n} for why, n in d.reasons],
                    "summary": d.text,
                }
                for d in p.domains
            ],
            "neverFits": p.never_fits,
            "bestWhenEmpty": p.best_when_empty,
            "notes": list(p.notes),
            "assignments": [{"pod": pod, "node": node} for pod, node in p.assignments],
        },
    }
