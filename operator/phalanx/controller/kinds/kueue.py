"""Kueue decides who may run, Phalanx decides where (docs/kueue.md): the rules for an owner Kueue manages.

An owner (a Job, JobSet or LeaderWorkerSet group) is Kueue-managed when it carries Kueue's queue-name label
or a Kueue Workload owns it. Then, for the state machine:

- it is *held* (`Owner.suspended`, with `Owner.held_by` saying why) until Kueue admits its Workload, and
  again the moment Kueue evicts or deactivates it (and, once Kueue has released its quota, while it waits
  in its LocalQueue again): nothing is placed and nothing is reserved or recorded for it meanwhile (the
  usual path of a suspended owner);
- it is never suspended or resumed by Phalanx: Kueue unsuspends an admitted Job and suspends one without
  an admitted Workload, so a suspension of Phalanx's would be undone and fought over. It is requeued whole
  by deleting its pods (`Owner.requeue = "delete-pods"`) when that costs it nothing: its Jobs'
  podFailurePolicy ignores disrupted pods (`Owner.requeue_free`), or it has no suspend (a LeaderWorkerSet
  group); Kueue's admission and quota stay. Otherwise each deleted pod would be a failure of its Job, and
  a few requeues would fail it; so it is requeued through Kueue (`Owner.requeue = "kueue"`): Phalanx
  deactivates its Kueue Workload with a note (`spec.active: false`), Kueue evicts it and suspends the
  owner (pods deleted by a suspension count no failure) and releases its quota, and once it has, Phalanx
  activates the Workload again and clears the note (`kueue_setup`): Kueue queues it again, and once it
  admits it the new pods wait for a whole placement;
- its ClusterQueue (`Owner.kueue_queue`) decides which victims Phalanx's own preemption may take for it.

A Phalanx-managed owner that Kueue's own Topology-Aware Scheduling places (or, queued where a ResourceFlavor
has a topologyName, would place) is warned of once: one placement engine per owner.

At creation (the webhooks) a Phalanx-managed owner may not carry Kueue's Topology-Aware Scheduling
annotations (one placement engine per Job), and a Job's partial admission must not go below its gang: those
checks are pure functions of the body, in api/admission_checks.py (`phalanx convert` runs them too).
Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys as names
from phalanx.api.kueue_workload import KueueState, kueue_state
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import ClusterView, Owner
from phalanx.controller.kinds.common import announce_once
from phalanx.controller.model.actions import Action, ActivateKueueWorkload
from phalanx.controller.model.kueue import (
    ADMITTED,
    EVICTED,
    QUEUE_NAME_LABEL,
    QUOTA_RESERVED,
    REQUEUED,
    KueueWorkloadRecord,
    TopologyFlavors,
)
from phalanx.controller.model.refs import ObjectRef

KUEUE_GATES = ("kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")  # Kueue's scheduling gates
TAS_EVENT_REASON = "KueueTopologyConflict"


@dataclass(frozen=True)
class KueueView:
    """Kueue's view of one owner (or of one LeaderWorkerSet group)."""

    queue: str  # the LocalQueue (its label, else its Workload's spec.queueName)
    workload: KueueWorkloadRecord | None  # None: Kueue has made none (yet)
    # The ResourceFlavors with a topologyName of the ClusterQueue its LocalQueue feeds (Kueue's TAS).
    topology: TopologyFlavors | None = None

    @property
    def cluster_queue(self) -> str:
        """The ClusterQueue whose quota it uses now ("" while it has none)."""
        return self.workload.cluster_queue if self.workload is not None else ""

    @property
    def admitted(self) -> bool:
        return self.workload is not None and self.workload.admitted

    @property
    def holds(self) -> str:
        """Why Kueue's Workload says the owner may not run now ("" when it may, or has no Workload), by the
        rule of api/kueue_workload.py."""
        w = self.workload
        if w is None:
            return ""
        state = kueue_state(w.conditions, w.active)
        queue = self.queue or w.queue_name
        evicted = w.condition(EVICTED)
        reason = evicted.reason if evicted is not None else ""
        if state is KueueState.DEACTIVATED and w.requeued:
            return (
                f"Phalanx deactivated its Workload {w.name} (spec.active: false) to requeue it through "
                "Kueue, which stops it (its pods go, counting no failure) and releases its quota; then "
                "Phalanx activates it again and Kueue queues it again"
            )
        if state is KueueState.DEACTIVATED:
            return f"Kueue deactivated its Workload {w.name} (spec.active: false)"
        if state is KueueState.EVICTING:
            return f"Kueue is evicting it ({_said(w, EVICTED)})"
        if state is KueueState.NOT_REQUEUED:
            return f"Kueue evicted it ({reason}) and has not requeued it yet ({_said(w, REQUEUED)})"
        if state is KueueState.WAITING_AFTER_EVICTION:
            return (
                f"waiting in Kueue's LocalQueue {queue} since Kueue evicted it ({reason}) "
                f"({_said(w, QUOTA_RESERVED)})"
            )
        if state is KueueState.RESERVED:
            return (
                f"Kueue reserved quota in ClusterQueue {w.cluster_queue} and waits for its admission checks "
                f"({_said(w, ADMITTED)})"
            )
        if state is KueueState.WAITING:
            return f"waiting in Kueue's LocalQueue {queue} ({_said(w, QUOTA_RESERVED)})"
        return ""  # admitted or finished

    def held_message(self, suspended: bool) -> str:
        """What a held owner's groups say (`Owner.held_by`); "" when Kueue does not hold it."""
        why = self.holds
        if not why and suspended:
            if self.admitted:
                why = f"admitted into ClusterQueue {self.cluster_queue}; waiting for Kueue to start it"
            elif self.workload is None:
                why = f"queued in Kueue's LocalQueue {self.queue}; Kueue has not made its Workload yet"
            else:
                why = f"waiting in Kueue's LocalQueue {self.queue or self.workload.queue_name}"
        if not why:
            return ""
        return (
            f"held by Kueue: {why}; Phalanx places the gang once Kueue admits it and holds nothing for it "
            "until then"
        )


def _said(w: KueueWorkloadRecord, kind: str) -> str:
    cond = w.condition(kind)
    if cond is None:
        return f"Workload {w.name}: no {kind} condition yet"
    text = f"Workload {w.name}: {kind}={cond.status}"
    if cond.reason:
        text += f" {cond.reason}"
    return f"{text}: {cond.message}" if cond.message else text


def kueue_view(
    labels: Mapping[str, str] | None, workloads: Sequence[KueueWorkloadRecord], index: str | None = None
) -> KueueView | None:
    """Kueue's view of an owner with these labels and the Kueue Workloads that own it (`index`: only the
    Workload of that LeaderWorkerSet group); None when Kueue does not manage it."""
    queue = str((labels or {}).get(QUEUE_NAME_LABEL) or "")
    mine = [w for w in workloads if index is None or w.component_index in ("", index)]
    if index is not None and any(w.component_index == index for w in mine):
        mine = [w for w in mine if w.component_index == index]
    if not queue and not mine:
        return None
    live = [w for w in mine if not w.finished] or mine
    chosen = next((w for w in live if w.admitted), live[0] if live else None)
    return KueueView(queue or (chosen.queue_name if chosen is not None else ""), chosen)


def kueue_owner(owner: Owner, view: KueueView | None) -> Owner:
    """The owner as the state machine sees it when Kueue manages it (unchanged otherwise)."""
    if view is None:
        return owner
    suspended = owner.suspended or bool(view.holds)
    w = view.workload
    through_kueue = owner.requeue == "suspend" and not owner.requeue_free and w is not None
    return dataclasses.replace(
        owner,
        suspended=suspended,
        held_by=view.held_message(suspended) if suspended else "",
        requeued=owner.requeued or (w.requeued if w is not None else ""),
        requeue="kueue" if through_kueue else "delete-pods",
        kueue_workload=w.ref if w is not None else None,
        kueue_queue=view.cluster_queue,
    )


def kueue_setup(
    view: KueueView | None, announced: Mapping[str, str], ref: ObjectRef, group: str = ""
) -> list[Action]:
    """What comes first for a Kueue-managed owner: its notes (`kueue_notes`), and its Kueue Workload
    activated again once Kueue has stopped the owner Phalanx requeued through it (`Owner.requeue = "kueue"`:
    the Workload deactivated with a note). Kueue releases the quota of an evicted Workload once its owner
    runs no pod, so a Workload without quota has been stopped; one active again (activated by someone
    else) only has its note cleared."""
    actions = kueue_notes(view, announced, ref, group)
    w = view.workload if view is not None else None
    if w is not None and w.requeued and (w.active or not w.is_true(QUOTA_RESERVED)):
        actions.append(ActivateKueueWorkload(w.ref))
    return actions


def kueue_notes(
    view: KueueView | None, announced: Mapping[str, str], ref: ObjectRef, group: str = ""
) -> list[Action]:
    """A Warning, once, when Kueue's Topology-Aware Scheduling placed a Phalanx-managed owner too, or,
    before Kueue admits it, when its LocalQueue feeds a ClusterQueue with ResourceFlavors that have a
    topologyName (Kueue would). `group`: a LeaderWorkerSet's group index, each group its own Workload (one
    note a group, so the groups' notes do not take turns at the owner's one)."""
    w = view.workload if view is not None else None
    fix = (
        f"give the ClusterQueue a ResourceFlavor without topologyName for Phalanx-managed {ref.kind}s "
        f"({names.MANAGED_LABEL}=true): one placement engine per {ref.kind}"
    )
    if w is not None and w.topology_assigned:
        flavors = ", ".join(w.flavors) or "its ResourceFlavor"
        message = (
            f"Kueue's Topology-Aware Scheduling also places this {ref.kind}: its Workload {w.name} was "
            f"admitted into ClusterQueue {w.cluster_queue} with {flavors}, which has a topologyName "
            "(status.admission.podSetAssignments[].topologyAssignment), so Kueue pins each pod to a node "
            f"before Phalanx places the gang; {fix}"
        )
    elif view is not None and view.topology is not None and not view.admitted:
        t = view.topology
        flavors = ", ".join(f"{name} (topologyName {topology})" for name, topology in t.flavors)
        message = (
            f"Kueue's Topology-Aware Scheduling would also place this {ref.kind}: its LocalQueue "
            f"{t.local_queue} feeds ClusterQueue {t.cluster_queue}, whose ResourceFlavor(s) {flavors} have "
            "a topologyName, so if Kueue admits it with one of them it pins each pod to a node before "
            f"Phalanx places the gang; {fix}"
        )
    else:
        return []
    what = f"kueue-tas/{group}" if group else "kueue-tas"
    return announce_once(announced, ref, what, TAS_EVENT_REASON, message)


def owner_view(
    record: Any, view: ClusterView, *, index: str | None = None, also: str = ""
) -> KueueView | None:
    """Kueue's view of an owner record (its slim body's labels; the Workloads owned by its uid, by its
    `<namespace>/<name>` or by `also`: a TrainJob's JobSet is queued through its TrainJob)."""
    labels = mapping(mapping(mapping(record.body).get("metadata")).get("labels"))
    keys = (record.uid, f"{record.namespace}/{record.name}", also)
    found = kueue_view(labels, view.kueue_workloads(*keys), index)
    if found is None or not found.queue:
        return found
    return dataclasses.replace(found, topology=view.kueue_topology_flavors(record.namespace, found.queue))
