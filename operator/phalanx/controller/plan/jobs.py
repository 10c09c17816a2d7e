"""`plan()`: from one consistent view of the cluster to the actions of one scheduling pass (pure).

No I/O and no asyncio: the same state and time give the same actions. For every managed Job, in
order (priority, then age): make sure its Workload and PodGroup exist (a PodGroup planned in this
pass is scheduled in this pass too), keep the gang size in step with the Job, link its pods, and —
when the whole gang has a placement — record the decision before releasing any pod. The snapshot
assumes each admission, so the next group in the same pass cannot take its room.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from phalanx.api import conditions as c
from phalanx.api import keys
from phalanx.api.builders import build_pod_group, build_workload
from phalanx.api.group import API_VERSION, WORKLOAD_KIND
from phalanx.api.job_layout import NO_LAYOUT, JobLayout
from phalanx.api.job_policy import JobPolicy
from phalanx.api.naming import pod_group_label_value
from phalanx.api.podgroup import PodGroup
from phalanx.api.scheduling import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER, PreemptionPolicy, SchedulingPolicy
from phalanx.api.status import Admission, Assignment, PodGroupStatus, Reservation
from phalanx.api.suggest import closest
from phalanx.api.workload import Workload
from phalanx.controller.model.actions import (
    Action,
    CreatePodGroup,
    CreateWorkload,
    DeleteObject,
    EventType,
    GroupPlan,
    LabelPod,
    PatchMinCount,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    RequeueCause,
    ResumeJob,
    SuspendJob,
    UngatePod,
)
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    JobRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
)
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.plan import status as st
from phalanx.controller.plan.preempt import (
    GroupOfJob,
    Victims,
    actuate,
    reservation_active,
    reserved_usage,
)
from phalanx.controller.plan.slices import kept_slices, schedule_sliced_job
from phalanx.controller.plan.trees import (
    REQUEUED_BELOW_MIN_COUNT,
    REQUEUED_UNBINDABLE,
    TreeState,
    admitted_message,
    levels_of,
    schedule_tree,
    still_fit,
)
from phalanx.placement import (
    Admit,
    Diagnosis,
    GroupRequest,
    NodeInfo,
    PodRequest,
    Reject,
    Snapshot,
    admitted_usage,
    choose_victims,
    decide,
    diagnose,
)


@dataclass(frozen=True)
class JobState:
    """One managed Job with what Phalanx made for it and its pods, as the cache holds them now."""

    job: JobRecord
    pod_group: PodGroupRecord | None
    workload_name: str | None  # its Workload, if it exists
    pods: tuple[PodRecord, ...]
    workload_uid: str = ""
    composite: CompositePodGroupRecord | None = None  # a sliced Job's root group (plan_slices.py)
    slices: tuple[PodGroupRecord, ...] = ()  # and its slices


@dataclass(frozen=True)
class ClusterState:
    jobs: tuple[JobState, ...]
    snapshot: Snapshot
    nodes: Mapping[str, NodeInfo]
    priority_classes: Mapping[str, PriorityClassRecord] = field(default_factory=dict)
    announced: Mapping[str, str] = field(default_factory=dict)  # "<Job uid>/<what>" -> message announced
    backing_off: frozenset[str] = frozenset()  # group keys that wait before their next try
    pods: Mapping[str, PodRecord] = field(default_factory=dict)  # every pod, for victim choice
    unevictable: frozenset[str] = frozenset()  # pods a PodDisruptionBudget protected recently
    node_failure_grace: float = 30.0  # seconds a running gang may stay below minCount before a requeue
    # Trees rooted at a CompositePodGroup and standalone PodGroups no Job owns (plan_composite.py).
    trees: tuple[TreeState, ...] = ()
    # node label -> the levels (coarse to fine) of the Topology listing it (TopologyIndex.levels_for)
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    groups: tuple[GroupPlan, ...]
    waiting_by_reason: Mapping[str, int]  # groups not admitted, by the reason they wait
    decision_seconds: tuple[float, ...] = ()  # one per placement decision (for metrics)

    @property
    def actions(self) -> list[Action]:
        return [a for g in self.groups for a in g.actions]


@dataclass(frozen=True)
class _View:
    """One group, classified for scheduling."""

    state: JobState
    group: PodGroupRecord
    gang: bool
    min_count: int
    topology_key: str | None
    waiting: tuple[PodRecord, ...]  # gated by us, to place
    placed: tuple[PodRecord, ...]  # bound or released: they take node capacity now
    priority: int

    @property
    def job(self) -> JobRecord:
        return self.state.job

    @property
    def order(self) -> tuple[int, dt.datetime, str]:
        created = self.job.created or dt.datetime.max.replace(tzinfo=dt.UTC)
        return (-self.priority, created, self.job.key)


def _priority_class(job: JobRecord, classes: Mapping[str, PriorityClassRecord]) -> PriorityClassRecord | None:
    """The Job's PriorityClass, or the cluster's global default one when it names none (as the Priority
    admission plugin does for its pods)."""
    name = job.policy.priority_class_name if job.policy else None
    if name:
        return classes.get(name)
    return next((c for c in classes.values() if c.global_default), None)


def _preemption_policy(job: JobRecord, priority_class: PriorityClassRecord | None) -> PreemptionPolicy:
    """The Job's annotation, else its PriorityClass's, else PreemptLowerPriority."""
    if job.policy is not None and job.policy.preemption_policy is not None:
        return job.policy.preemption_policy
    if priority_class is not None and priority_class.preemption_policy == PREEMPT_NEVER:
        return PREEMPT_NEVER
    return PREEMPT_LOWER_PRIORITY


def _ensure_objects(
    state: JobState, classes: Mapping[str, PriorityClassRecord]
) -> tuple[PodGroupRecord | None, list[Action]]:
    """The group to schedule (planned if it does not exist yet) and the actions that create it."""
    job, group = state.job, state.pod_group
    policy = job.policy
    actions: list[Action] = []
    if group is not None:
        current = group.gang_min_count
        wanted = policy.min_count if policy is not None else None
        if wanted is not None and current is not None and current != wanted:
            # Like upstream, only the gang size follows the Job (min-count annotation or parallelism).
            actions.append(PatchMinCount(group.ref, wanted))
            actions.append(
                _event(job.ref, "Normal", "MinCountChanged", f"gang minCount {current} -> {wanted}")
            )
            # Schedule this pass with the size being written, as the patched object will say.
            policy_now = SchedulingPolicy.of_gang(wanted)
            spec = group.spec.model_copy(update={"scheduling_policy": policy_now})
            # Its version changes with that write: no precondition on a decision in the same pass.
            group = dataclasses.replace(
                group, spec=spec, generation=group.generation + 1, resource_version=""
            )
        return group, actions
    if policy is None:
        return None, actions
    priority_class = _priority_class(job, classes)
    priority = priority_class.value if priority_class is not None else None
    preemption = _preemption_policy(job, priority_class)
    workload_name = state.workload_name
    made = ""
    if workload_name is None:
        workload = Workload.model_validate(build_workload(job.body, policy, priority, preemption))
        workload_name = str(workload.metadata["name"])
        actions.append(CreateWorkload(workload))
        made = f"Workload {workload_name} and "
    pod_group = PodGroup.model_validate(
        build_pod_group(job.body, workload_name, policy, priority, preemption_policy=preemption)
    )
    actions.append(CreatePodGroup(pod_group, workload_name))
    name = str(pod_group.metadata["name"])
    actions.append(_event(job.ref, "Normal", "PodGroupCreated", f"created {made}PodGroup {name}"))
    planned = PodGroupRecord(
        uid="",  # known once created; the applier fills it in where an event needs it
        namespace=job.namespace,
        name=name,
        job_uid=job.uid,
        generation=1,
        spec=pod_group.spec,
        status=PodGroupStatus(),
        topology_mode=job.layout.topology_mode,
    )
    return planned, actions


def _event(involved: ObjectRef, type_: EventType, reason: str, message: str) -> PostEvent:
    return PostEvent(involved, type_, reason, message)


def _view(state: JobState, group: PodGroupRecord) -> _View:
    job = state.job
    min_count = group.gang_min_count
    pods = [p for p in state.pods if not p.terminal and not p.deleting]
    waiting = tuple(sorted((p for p in pods if p.gated), key=lambda p: p.name))
    placed = tuple(sorted((p for p in pods if p.usage_node), key=lambda p: p.name))
    priority = max((p.priority for p in pods), default=group.spec.priority or 0)
    if min_count is not None and job.remaining is not None:
        # Near the end of a Job with more completions than parallelism, fewer pods than minCount are
        # left to run; asking for minCount then would hold the last ones forever.
        min_count = max(1, min(min_count, job.remaining))
    return _View(
        state=state,
        group=group,
        gang=min_count is not None,
        min_count=min_count or 1,
        topology_key=group.topology_key,
        waiting=waiting,
        placed=placed,
        priority=priority,
    )


def _domain_of(view: _View, nodes: Mapping[str, NodeInfo]) -> str | None:
    if not view.topology_key:
        return None
    admission = view.group.status.admission
    if admission is not None and admission.domain and view.placed:
        return admission.domain  # a path when the key's Topology gives levels, or the wider preferred domain
    for pod in view.placed:
        node = nodes.get(pod.usage_node)
        if node is not None and view.topology_key in node.labels:
            return node.labels[view.topology_key]
    return None


@dataclass
class _Pass:
    snapshot: Snapshot
    nodes: Mapping[str, NodeInfo]
    now: dt.datetime
    victims: Victims
    node_failure_grace: float = 30.0
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClassRecord] = field(default_factory=dict)
    decision_seconds: list[float] = field(default_factory=list)
    waiting: Counter[str] = field(default_factory=Counter)
    preempted: Counter[str] = field(default_factory=Counter)  # group key -> pods it preempted this pass


def _schedule(view: _View, ctx: _Pass, actions: list[Action]) -> tuple[int, bool]:
    """Append the group's admission and status actions; returns (pods released, first admission)."""
    group, job = view.group, view.job
    outcome: st.Outcome | None = None
    domain = _domain_of(view, ctx.nodes)
    if domain is None and job.finished:
        domain = group.status.domain  # where it ran: its pods are gone, the answer stays
    admission = group.status.admission
    reservation: Reservation | None = None  # kept only while the group waits for room freed for it
    released_now = 0
    ungated = 0
    first = False
    if job.suspended or job.finished:
        pass  # nothing to place
    elif (missing := _missing_priority_class(view, ctx)) is not None:
        outcome = missing  # not "waiting for the Job's pods": they cannot come
    elif not view.gang:
        # A basic group's pods are never held (a template copied from a gang Job may carry the gate).
        actions.extend(UngatePod(p.ref) for p in view.waiting)
        ungated = len(view.waiting)
    elif not job.gated_template:
        outcome = st.Outcome(
            c.REASON_NOT_GATED,
            f"the Job was labelled {keys.MANAGED_LABEL} after its creation, so its pods are not held by "
            f"{keys.ADMISSION_GATE} and Phalanx admits nothing for it (kube-scheduler places them one by "
            "one); create the Job with the label to gang-schedule it",
        )
    elif (stranded := _stranded(view)) is not None:
        # Released pods kube-scheduler cannot bind: the release is rolled back whole.
        outcome = st.Outcome(c.REASON_REQUEUED, f"requeued by Phalanx: {stranded}")
        actions.extend(_requeue(view, stranded, "unbindable"))
    elif view.waiting:
        ready = [p for p in view.waiting if not p.other_gates]
        blocked = [p for p in view.waiting if p.other_gates]
        have = len(ready) + len(view.placed)
        if have < view.min_count and blocked:
            gates = sorted({g for p in blocked for g in p.other_gates})
            outcome = st.Outcome(
                c.REASON_WAITING_FOR_GATES,
                f"minCount ({view.min_count}) is not yet satisfied: {len(blocked)} pod(s) still carry "
                f"scheduling gates of other controllers ({', '.join(gates)}); Phalanx admits a pod only "
                "when its gate is the last one",
            )
        elif (finish := _finish_recorded(view, ready, ctx)) is not None:
            # A decision recorded earlier names these gated pods: release them where it said (a restart
            # after a partial release, or a view that lags behind a release made by a previous leader —
            # releasing again is then a no-op). No second decision is made.
            actions.extend(ReleasePod(p.ref, node, group.name) for p, node in finish)
            released_now = len(finish)
            ctx.snapshot = ctx.snapshot.assume([(node, p.requests) for p, node in finish])
            outcome = st.Outcome(c.REASON_ADMITTED, "")
            nodes = ", ".join(node for _, node in finish)
            message = f"released {released_now} more pod(s) of the recorded decision on {nodes}"
            actions.append(_event(job.ref, "Normal", "Admitted", message))
        elif have < view.min_count:
            outcome = st.Outcome(
                c.REASON_WAITING_FOR_PODS,
                f"minCount ({view.min_count}) is not yet satisfied: {len(view.placed)} scheduled, "
                f"{len(view.waiting)} waiting; waiting for the Job to create the other pods",
            )
        else:
            request = GroupRequest(
                name=group.key,
                pending=tuple(
                    PodRequest(id=p.key, requirements=p.requirements, traits=p.traits) for p in ready
                ),
                min_count=view.min_count,
                topology_key=view.topology_key,
                bound_nodes=tuple(p.usage_node for p in view.placed),
                levels=levels_of([view.topology_key], ctx.levels),
                mode=group.topology_mode,  # as at the Job's creation (a later change is not applied)
            )
            started = time.perf_counter()
            decision = decide(ctx.snapshot, request)
            ctx.decision_seconds.append(time.perf_counter() - started)
            if isinstance(decision, Admit) and decision.assignments:
                first = _never_admitted(group)
                admission = Admission(
                    domain=decision.domain,
                    assignments=[
                        Assignment(pod=pod.split("/", 1)[1], node=node) for pod, node in decision.assignments
                    ],
                    admitted_at=ctx.now,
                    attempt=st.next_attempt(group.status),
                    level=decision.level,
                )
                by_key = {p.key: p for p in ready}
                actions.append(RecordAdmission(group.ref, admission, group.resource_version))
                actions.extend(
                    ReleasePod(by_key[pod].ref, node, group.name) for pod, node in decision.assignments
                )
                released_now = len(decision.assignments)
                ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, decision))
                domain = decision.domain or domain
                outcome = st.Outcome(c.REASON_ADMITTED, "")
                message = admitted_message(released_now, view.topology_key, decision)
                actions.append(_event(job.ref, "Normal", "Admitted", message))
                actions.append(_event(group.ref, "Normal", "Admitted", message))
            elif isinstance(decision, Reject):
                message = decision.message
                if decision.reason == "Unschedulable":
                    # Upstream's sentence first, then why, per domain, in kube-scheduler's words (in
                    # Phalanx's Admitted condition; upstream's own condition keeps upstream's sentence).
                    message = f"{message}; {_explained(diagnose(ctx.snapshot, request))}"
                elif decision.reason == "NoDomain":
                    message += _label_hint(view.topology_key, ctx.nodes)
                outcome, reservation = _wait_or_preempt(view, request, message, ctx, actions, ready)
                if outcome.reason == c.REASON_UNSCHEDULABLE:
                    outcome = dataclasses.replace(outcome, upstream=decision.message)
                if outcome.reason == c.REASON_UNSCHEDULABLE:
                    outcome = _requeue_if_broken(view, outcome, ctx, actions) or outcome
            # An Admit without assignments: minCount is met by placed pods; the extras wait for room.

    if job.suspended or job.finished:
        admission = None  # nothing is held for a suspended or finished Job
    elif admission is not None and not view.placed and not released_now:
        admission = None  # the decision's pods are gone; the next one starts afresh
    facts = st.GroupFacts(
        gang=view.gang,
        min_count=view.min_count,
        scheduled=sum(1 for p in view.placed if p.bound),
        released=sum(1 for p in view.placed if not p.bound) + released_now,
        waiting=len(view.waiting) - released_now - ungated,
        domain=domain,
        suspended=job.suspended,
        finished=job.finished,
        held=job.gated_template or not view.gang,
        finished_how=job.finished_how,
        requeued=job.requeued,
        note=st.climbed_note(admission, view.topology_key),
    )
    # Every pod carries its PodGroup's name, also while it waits (a release sets it in the same request).
    label = pod_group_label_value(group.name)
    released = {a.pod.key for a in actions if isinstance(a, ReleasePod)}
    actions.extend(
        LabelPod(p.ref, group.name)
        for p in (*view.waiting, *view.placed)
        if p.pod_group != label and p.key not in released
    )
    desired = st.desired_status(
        group.status, facts, outcome, ctx.now, group.generation, admission, reservation
    )
    if st.status_changed(group.status, desired):
        actions.append(PatchStatus(group.ref, desired))
        actions.extend(_announce(view, group.status, desired))
    present = desired.condition(c.ADMITTED)
    if view.gang and facts.waiting and present is not None and present.reason != c.REASON_ADMITTED:
        ctx.waiting[present.reason] += 1
    return released_now, first


def _missing_priority_class(view: _View, ctx: _Pass) -> st.Outcome | None:
    """The Job's pod template names a PriorityClass that does not exist, and pods are missing: the Priority
    admission plugin refuses every pod the Job controller creates, so they never come until it exists."""
    policy = view.job.policy
    name = policy.priority_class_name if policy is not None else None
    if not name or name in ctx.priority_classes:
        return None
    if len(view.waiting) + len(view.placed) >= view.min_count:
        return None  # its pods exist (made before the class was deleted): nothing is missing yet
    return st.Outcome(
        c.REASON_PRIORITY_CLASS_NOT_FOUND,
        f"spec.template.spec.priorityClassName: PriorityClass {name!r} does not exist, so the Job controller "
        "cannot create the Job's pods (the Priority admission plugin refuses them); create the PriorityClass "
        "or change the Job",
    )


def _explained(diagnosis: Diagnosis) -> str:
    """Why the gang does not fit, per domain; for a gang that can never fit in this cluster only that, which
    stays true while other work comes and goes (so its condition, and the event, change only when it does)."""
    if not diagnosis.never_fits:
        return diagnosis.summary()
    # Pods that fit on no node even empty: the reasons are the static ones (a resource no node has enough of).
    shown = diagnosis.domains[:1] if diagnosis.best_when_empty == 0 else ()
    return dataclasses.replace(diagnosis, domains=shown).summary().removeprefix("; ")


def _label_hint(key: str | None, nodes: Mapping[str, NodeInfo]) -> str:
    """For a topology key no node carries: the node label it was probably meant to be."""
    if not key:
        return ""
    counts = Counter(label for node in nodes.values() for label in node.labels)
    match = closest(key, sorted(counts))
    if match is None:
        return f"; set {keys.TOPOLOGY_KEY_ANNOTATION} to a node label, or label the nodes"
    return f"; did you mean {match} (on {counts[match]} node(s))?"


def _stranded(view: _View) -> str | None:
    """Pods Phalanx released that kube-scheduler refuses to bind (their node filled up, was tainted or
    went away between the decision and the binding): never leave them Pending behind a stale nodeSelector."""
    if view.job.requeued:
        return None
    refused = [p for p in view.placed if p.released and p.unschedulable]
    if not refused:
        return None
    first = refused[0]
    why = (
        f"{REQUEUED_UNBINDABLE}: {len(refused)} released pod(s) cannot be bound where Phalanx placed them "
        f"({first.name} on {first.node_selector_host}: {first.unschedulable})"
    )
    return why


def _requeue(view: _View, why: str, cause: RequeueCause) -> list[Action]:
    """Suspend the Job to place it again whole; it is resumed once its pods are gone."""
    return [
        SuspendJob(view.job.ref, why, cause),
        _event(view.job.ref, "Warning", "Requeued", why),
        _event(view.group.ref, "Warning", "Requeued", why),
    ]


def _requeue_if_broken(
    view: _View, outcome: st.Outcome, ctx: _Pass, actions: list[Action]
) -> st.Outcome | None:
    """A running gang left below minCount (a node failed, its pods went) whose other pods do not fit in its
    domain any more holds nodes for nothing: after the grace period (at once for disruptionMode all), requeue
    the Job whole so that it is placed again as a whole, possibly in another domain."""
    job, group = view.job, view.group
    if not 0 < len(view.placed) < view.min_count or job.requeued:
        return None
    admitted = group.status.condition(c.ADMITTED)
    since = ctx.now
    if admitted is not None and admitted.status == c.FALSE and admitted.reason == c.REASON_UNSCHEDULABLE:
        since = admitted.last_transition_time
    all_mode = group.spec.disruption_mode.all is not None
    waited = (ctx.now - since).total_seconds()
    if not all_mode and waited < ctx.node_failure_grace:
        return None
    domain = _domain_of(view, ctx.nodes)
    where = f" in {domain}" if domain else ""
    why = (
        f"{REQUEUED_BELOW_MIN_COUNT}: {len(view.placed)} of its {view.min_count} pods were left{where} "
        f"and the others no longer fit there (after {waited:.0f} s)"
    )
    actions.extend(_requeue(view, why, "below-min-count"))
    return st.Outcome(c.REASON_REQUEUED, f"requeued by Phalanx: {why}")


def _may_preempt(view: _View) -> bool:
    """Not if its PodGroup, its Job's annotation or any of its pods (from their PriorityClass) say Never."""
    if view.group.spec.preemption_policy == PREEMPT_NEVER:
        return False
    policy = view.job.policy
    if policy is not None and policy.preemption_policy == PREEMPT_NEVER:
        return False
    return not any(p.never_preempts for p in view.waiting)


def _wait_or_preempt(
    view: _View,
    request: GroupRequest,
    rejected: str,
    ctx: _Pass,
    actions: list[Action],
    ready: list[PodRecord],
) -> tuple[st.Outcome, Reservation | None]:
    """A gang that does not fit now: wait for room being freed for it, preempt, or just wait."""
    group = view.group
    current = group.status.reservation
    if reservation_active(current, ctx.victims.pods, ctx.now):
        assert current is not None
        left = [v for v in current.victims if v in ctx.victims.pods]
        # Nobody else may be admitted into the room: later groups of this pass see it taken.
        ctx.snapshot = ctx.snapshot.assume(reserved_usage(current, ready))
        where = f" in {current.domain}" if current.domain else ""
        message = (
            f"waiting for {len(left)} preempted pod(s) to terminate{where}; the room they free is "
            f"reserved for this group until {current.expires_at.strftime('%H:%M:%SZ')}"
        )
        return st.Outcome(c.REASON_PREEMPTING, message), current
    if not _may_preempt(view):
        hint = "; it does not preempt (preemptionPolicy Never) and waits for room"
        return st.Outcome(c.REASON_UNSCHEDULABLE, rejected + hint), None
    started = time.perf_counter()
    preemption = choose_victims(
        ctx.snapshot,
        request,
        view.priority,
        ctx.victims.candidates,
        ctx.victims.groups,
        excluded_pods=ctx.victims.unevictable,
    )
    ctx.decision_seconds.append(time.perf_counter() - started)
    if preemption is None:
        return st.Outcome(c.REASON_UNSCHEDULABLE, rejected), None
    freeing, reservation, summary = actuate(preemption, group, view.job, ctx.victims, ctx.now)
    actions.extend(freeing)
    ctx.preempted[view.job.key] += len(preemption.victims)
    ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, preemption.admit))
    return st.Outcome(c.REASON_PREEMPTING, summary), reservation


def _finish_recorded(view: _View, ready: list[PodRecord], ctx: _Pass) -> list[tuple[PodRecord, str]] | None:
    """The ready pods the group's recorded decision assigned, with their nodes — if every one of them
    still fits there (node present, schedulable, its taints tolerated and selectors met, room left) and
    the recorded decision with the pods already placed reaches minCount. Else None: decide afresh."""
    admission = view.group.status.admission
    if admission is None:
        return None
    recorded = {a.pod: a.node for a in admission.assignments}
    chosen = [(p, recorded[p.name]) for p in ready if p.name in recorded]
    if not chosen or len(chosen) + len(view.placed) < view.min_count:
        return None
    return chosen if still_fit(chosen, ctx) else None


def _never_admitted(group: PodGroupRecord) -> bool:
    initial = group.status.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
    return initial is None or initial.status != c.TRUE


def _announce(view: _View, current: PodGroupStatus, desired: PodGroupStatus) -> list[Action]:
    """An event on the Job and the PodGroup whenever the reason or message of Admitted changes."""
    before = current.condition(c.ADMITTED)
    after = desired.condition(c.ADMITTED)
    if after is None or after.reason == c.REASON_ADMITTED:
        return []  # an admission has its own event
    if before is not None and (before.reason, before.message) == (after.reason, after.message):
        return []
    warn = (c.REASON_UNSCHEDULABLE, c.REASON_PRIORITY_CLASS_NOT_FOUND)
    type_: EventType = "Warning" if after.reason in warn else "Normal"
    return [
        _event(view.job.ref, type_, after.reason, after.message),
        _event(view.group.ref, type_, after.reason, after.message),
    ]


def _announce_once(state: ClusterState, job: JobRecord, what: str, reason: str, message: str) -> list[Action]:
    """A Warning on the Job, once per distinct message (not once per pass)."""
    key = f"{job.uid}/{what}"
    if state.announced.get(key) == message:
        return []
    return [_event(job.ref, "Warning", reason, message), RememberAnnounced(key, message)]


def _immutable_changes(policy: JobPolicy, group: PodGroupRecord, layout: JobLayout = NO_LAYOUT) -> str:
    """Annotations changed after creation (around the webhook, e.g. with Phalanx down): said, not applied."""
    current_policy = "gang" if group.gang_min_count is not None else "basic"
    current_mode = "all" if group.spec.disruption_mode.all is not None else "single"
    changes = [
        f"{annotation}: {after!r} differs from {before!r}, which the PodGroup keeps"
        for annotation, before, after in (
            (keys.POLICY_ANNOTATION, current_policy, policy.policy),
            (keys.TOPOLOGY_KEY_ANNOTATION, group.topology_key, policy.topology_key),
            (keys.DISRUPTION_MODE_ANNOTATION, current_mode, policy.disruption_mode),
            (
                keys.PREEMPTION_POLICY_ANNOTATION,
                group.spec.preemption_policy,
                policy.preemption_policy or group.spec.preemption_policy,
            ),
            # A Job made without slices stays one PodGroup; its topology mode stays the one it was made with.
            (keys.TOPOLOGY_MODE_ANNOTATION, group.topology_mode, layout.topology_mode),
            (keys.SLICE_SIZE_ANNOTATION, None, None if layout.slice_size is None else str(layout.slice_size)),
            (keys.SLICE_TOPOLOGY_KEY_ANNOTATION, None, layout.slice_topology_key),
        )
        if before != after
    ]
    if not changes:
        return ""
    return (
        "; ".join(changes)
        + " (only min-count may change after creation; recreate the Job to change the rest)"
    )


def _let_go(state: JobState) -> list[Action]:
    """A Job not (or no longer) managed: ungate its pods, delete our objects and say so (once)."""
    job, group = state.job, state.pod_group
    actions: list[Action] = [UngatePod(p.ref) for p in state.pods if p.gated]
    if group is not None:
        actions.append(DeleteObject(group.ref))
    actions.extend(DeleteObject(g.ref) for g in state.slices)
    if state.composite is not None:
        actions.append(DeleteObject(state.composite.ref))
    if state.workload_name is not None:
        workload = ObjectRef(
            API_VERSION, WORKLOAD_KIND, job.namespace, state.workload_name, state.workload_uid
        )
        actions.append(DeleteObject(workload))
    if group is None and state.workload_name is None and state.composite is None:
        return actions  # let go before: only pods born since to ungate
    gated = sum(1 for p in state.pods if p.gated)
    actions.append(
        _event(
            job.ref,
            "Normal",
            "ReleasedFromPhalanx",
            f"the Job is not labelled {keys.MANAGED_LABEL}=true: Phalanx no longer holds its pods "
            f"({gated} ungated, placed by kube-scheduler alone) and deleted its PodGroup and Workload",
        )
    )
    return actions


def plan(state: ClusterState, now: dt.datetime) -> Plan:
    groups_by_job = {
        js.job.uid: GroupOfJob(js.job, group)
        for js in state.jobs
        if (group := js.pod_group if js.pod_group is not None else js.composite) is not None
    }
    victims = Victims(state.pods, groups_by_job, state.unevictable)
    ctx = _Pass(
        snapshot=state.snapshot,
        nodes=state.nodes,
        now=now,
        victims=victims,
        node_failure_grace=state.node_failure_grace,
        levels=state.levels,
        priority_classes=state.priority_classes,
    )
    prepared: list[tuple[JobState, list[Action], PodGroupRecord | None]] = []
    groups_first: list[GroupPlan] = []  # Jobs released from Phalanx
    sliced: list[JobState] = []  # placed as one tree of slices, after the other Jobs
    for job_state in state.jobs:
        job = job_state.job
        if job.key in state.backing_off:
            continue
        if not job.managed:
            letting_go = _let_go(job_state)
            if letting_go:
                groups_first.append(GroupPlan(job.key, tuple(letting_go), job.ref))
            continue
        if job.policy is not None and (
            job_state.composite is not None or (job.layout.sliced and job_state.pod_group is None)
        ):
            # Sliced at creation (or to be made so now); slices added later to a Job that has its one
            # PodGroup are not applied (_immutable_changes), nor removed from one that has its slices.
            sliced.append(job_state)
            continue
        actions: list[Action] = []
        if job.policy is None:
            # Only reachable if the webhook was bypassed; said once per change, where the user looks.
            actions.extend(_announce_once(state, job, "policy", "InvalidPolicy", job.policy_error))
        elif job_state.pod_group is not None:
            ignored = _immutable_changes(job.policy, job_state.pod_group, job.layout)
            if ignored:
                actions.extend(_announce_once(state, job, "immutable", "ImmutableChangeIgnored", ignored))
        group, created = _ensure_objects(job_state, state.priority_classes)
        actions.extend(created)
        if job.requeued and (not job.suspended or not any(not p.terminal for p in job_state.pods)):
            # Requeued by us and its pods are gone (or someone resumed it already): resume it, clear the note.
            actions.append(ResumeJob(job.ref))
        prepared.append((job_state, actions, group))

    views = {
        job_state.job.key: _view(job_state, group) for job_state, _, group in prepared if group is not None
    }
    ordered = sorted(
        prepared,
        key=lambda p: (
            views[p[0].job.key].order
            if p[0].job.key in views
            else (1, dt.datetime.max.replace(tzinfo=dt.UTC), p[0].job.key)
        ),
    )
    groups: list[GroupPlan] = groups_first
    for job_state, actions, _ in ordered:
        view = views.get(job_state.job.key)
        released = 0
        latency: float | None = None
        if view is not None:
            released, first = _schedule(view, ctx, actions)
            if released and first and job_state.job.created is not None:
                latency = max(0.0, (now - job_state.job.created).total_seconds())
        if actions:
            preempted = ctx.preempted[job_state.job.key]
            plan_of_group = GroupPlan(
                job_state.job.key, tuple(actions), job_state.job.ref, released, latency, preempted
            )
            groups.append(plan_of_group)
    for job_state in sliced:
        chosen = _priority_class(job_state.job, state.priority_classes)
        value = chosen.value if chosen is not None else None
        preemption = _preemption_policy(job_state.job, chosen)
        job_state, ignored = kept_slices(job_state)  # the slices it was made with
        notes: list[Action] = []
        if ignored:
            notes = _announce_once(state, job_state.job, "immutable", "ImmutableChangeIgnored", ignored)
        if not job_state.job.layout.sliced:  # made sliced, annotations gone, slices not known: wait
            if notes:
                groups.append(GroupPlan(job_state.job.key, tuple(notes), job_state.job.ref))
            continue
        sliced_plan = schedule_sliced_job(job_state, value, preemption, ctx, notes)
        if sliced_plan is not None:
            groups.append(sliced_plan)
    # Trees of groups after the Jobs (each tree still all or nothing; the snapshot carries what Jobs took).
    for tree in sorted(state.trees, key=lambda t: (-t.priority, t.key)):
        if tree.key in state.backing_off:
            continue
        tree_plan = schedule_tree(tree, ctx)
        if tree_plan is not None:
            groups.append(tree_plan)
    return Plan(tuple(groups), dict(ctx.waiting), tuple(ctx.decision_seconds))
