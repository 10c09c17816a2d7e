"""Kueue beside the state machine (pure; docs/kueue.md): which victims Phalanx's own preemption may take
for a unit, not racing Kueue's evictions, and saying early that a gang Kueue admitted can never fit.

- *Victims*: preemption across queues is Kueue's. For a unit Kueue does not manage, Phalanx takes only pods
  Kueue does not manage; for a Kueue-managed unit, also pods whose Kueue Workload uses the same
  ClusterQueue (Kueue already decided that both fit its quota; the victim keeps its quota and waits for
  room again).
- *Kueue's own evictions*: a Kueue-managed gang that would fit once the pods now terminating are gone (Kueue
  preempted for it, and its victims are on their way out) waits for them instead of preempting more.
- *Never fits*: Kueue admits by aggregate quota. A gang it admitted that no domain can hold even with every
  node empty is said so at once, in a message that stays the same while the nodes do (one event), so the
  user or Kueue's waitForPodsReady can give the quota back.
"""

from __future__ import annotations

import dataclasses

from phalanx.api import conditions as c
from phalanx.api.jobset import JOBSET_NAME_LABEL, JOBSET_UID_LABEL
from phalanx.api.lws import NAME_LABEL
from phalanx.controller.kinds.base import Owner
from phalanx.controller.model.kueue import KueueIndex, trainjob_key
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan import status as st
from phalanx.controller.plan.decide import explained, levels_of, request_of, tree_request
from phalanx.controller.plan.victims import Victims
from phalanx.controller.plan.work import Pass, UnitWork
from phalanx.placement import Admit, Candidate, CompositeAdmit, GroupRequest, decide, decide_composite


def pod_owner_keys(pod: PodRecord) -> tuple[str, ...]:
    """What a Kueue Workload's ownerReferences may name for this pod: the pod itself (Kueue's pod groups),
    its Job, its JobSet, its LeaderWorkerSet, the TrainJob that made its JobSet (of the JobSet's name)."""
    keys = [pod.uid, pod.job_uid, pod.label(JOBSET_UID_LABEL)]
    if pod.label(NAME_LABEL):
        keys.append(f"{pod.namespace}/{pod.label(NAME_LABEL)}")
    if pod.label(JOBSET_NAME_LABEL):
        keys.append(trainjob_key(pod.namespace, pod.label(JOBSET_NAME_LABEL)))
    return tuple(k for k in keys if k)


def queue_of_pod(victims: Victims, index: KueueIndex | None, pod_key: str) -> str | None:
    """The ClusterQueue whose quota a pod uses: None when Kueue does not manage it, "" when Kueue manages it
    with no quota reserved now."""
    unit = victims.units_by_pod.get(pod_key)
    if unit is not None and unit.owner.kueue_queue is not None:
        return unit.owner.kueue_queue
    pod = victims.pods.get(pod_key)
    if index is None or pod is None:
        return None
    return index.queue_of(pod_owner_keys(pod))


def allowed_candidates(owner: Owner | None, victims: Victims) -> tuple[Candidate, ...]:
    """The candidates Phalanx may take for `owner`'s gang: pods Kueue does not manage, and for a
    Kueue-managed owner also those in its ClusterQueue."""
    index = victims.kueue
    if index is None or not index.items:
        return victims.candidates  # Kueue manages nothing here
    mine = owner.kueue_queue if owner is not None else None
    return tuple(
        cand
        for cand in victims.candidates
        if (queue := queue_of_pod(victims, index, cand.id)) is None or (bool(mine) and queue == mine)
    )


def waits_for_evictions(work: UnitWork, request: GroupRequest, ctx: Pass) -> st.Outcome | None:
    """A Kueue-managed gang that fits once the pods now terminating are gone waits for them: Kueue's
    preemption is freeing room, and preempting more would take what Kueue left running."""
    owner = work.owner
    if owner is None or owner.kueue_queue is None:
        return None
    going = [p.key for p in ctx.victims.pods.values() if p.deleting and p.usage_node]
    if not going or not isinstance(decide(ctx.snapshot.without(going), request), Admit):
        return None
    return st.Outcome(
        c.REASON_UNSCHEDULABLE,
        f"waiting for {len(going)} terminating pod(s) to go: the gang fits once they are gone (Kueue's "
        "evictions free room), so Phalanx preempts nothing more for it",
    )


def never_fits(work: UnitWork, ctx: Pass) -> None:
    """A gang Kueue admitted that can never fit any domain of this cluster: its outcome says so, and why, in
    words that depend on the nodes only (so its condition, and the event, change only when they do)."""
    owner, tree = work.owner, work.unit.tree
    if owner is None or tree is None or owner.kueue_queue is None or owner.suspended or owner.finished:
        return
    outcome = work.outcome
    if outcome is None or outcome.reason != c.REASON_UNSCHEDULABLE or work.placed:
        return  # a gang partly running (a node failed under it) is requeued whole instead (requeue.py)
    empty = dataclasses.replace(ctx, snapshot=ctx.snapshot.empty())
    single = work.single
    if single is not None:
        key = single.group.topology_key
        request = request_of(single, levels_of([key], ctx.levels), tree.mode)
        decision = decide(empty.snapshot, request)
        if isinstance(decision, Admit):
            return
        why = explained(decision, request, empty)
    else:
        tree_decision = decide_composite(empty.snapshot, tree_request(work, ctx))
        if isinstance(tree_decision, CompositeAdmit):
            return
        why = tree_decision.message
    message = (
        f"never fits: {why}; even with every node empty no domain holds the gang, but Kueue admitted it "
        f"into ClusterQueue {owner.kueue_queue or '(none yet)'} by quota alone, so its quota stays reserved "
        f"until the {owner.kind} is deleted, its Kueue Workload is deactivated (spec.active: false), or "
        "Kueue's waitForPodsReady evicts it"
    )
    said = st.Outcome(c.REASON_UNSCHEDULABLE, message, upstream=outcome.upstream or outcome.message)
    work.outcome = said
    for leaf in work.leaves.values():
        if leaf.outcome is not None and leaf.outcome.reason == c.REASON_UNSCHEDULABLE:
            leaf.outcome = said
