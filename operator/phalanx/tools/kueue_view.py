"""Kueue's view beside Phalanx's in `phalanx explain` (docs/kueue.md): for an owner Kueue manages, its Kueue
Workload's conditions (QuotaReserved, Admitted, Evicted, ...), its LocalQueue and ClusterQueue, and which
of the two holds it now: Kueue (queued, not admitted, evicted or deactivated: Phalanx holds nothing for it)
or Phalanx (Kueue admitted it; where it runs is Phalanx's). Pure; `read_workloads` does the reading (GETs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api.keys import REQUEUED_ANNOTATION
from phalanx.api.kueue_workload import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PODS_READY,
    PREEMPTED,
    QUOTA_RESERVED,
    REQUEUED,
    KueueCondition,
    KueueState,
    condition,
    conditions_of,
    is_true,
    kueue_state,
)
from phalanx.bodies import mapping
from phalanx.tools.kube import KubeError, NotFoundError, Reader

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"
SHOWN = (QUOTA_RESERVED, ADMITTED, EVICTED, PREEMPTED, PODS_READY, REQUEUED, FINISHED)
KUEUE, PHALANX, NOBODY = "Kueue", "Phalanx", "nobody"

Body = Mapping[str, Any]


@dataclass(frozen=True)
class KueueView:
    queue: str
    """The LocalQueue (the owner's label, else its Workload's spec.queueName)."""
    workload: str | None
    """Its Kueue Workload's name; None while Kueue has made none."""
    cluster_queue: str | None
    """Where Kueue reserved its quota (status.admission.clusterQueue)."""
    active: bool
    conditions: tuple[KueueCondition, ...]
    holder: str
    """Kueue, Phalanx, or nobody (finished)."""
    summary: str
    topology: bool = False
    """Kueue's Topology-Aware Scheduling assigned nodes too (a ResourceFlavor with a topologyName)."""
    error: str = ""
    """Why Kueue's Workloads could not be read ("" when they were)."""


async def read_workloads(reader: Reader, namespace: str) -> tuple[tuple[Body, ...], str]:
    """The namespace's Kueue Workloads (none when Kueue is not installed), and an error text when they could
    not be read (a role without access to them)."""
    try:
        return tuple(await reader.list(WORKLOADS.replace("{ns}", namespace))), ""
    except NotFoundError:
        return (), ""
    except KubeError as e:
        return (), str(e)


def owned_by(workloads: Sequence[Body], uid: str) -> list[Body]:
    return [
        w
        for w in workloads
        if any(mapping(o).get("uid") == uid for o in mapping(w.get("metadata")).get("ownerReferences") or [])
    ]


def _conditions(workload: Body | None) -> tuple[KueueCondition, ...]:
    """The conditions explain shows, in SHOWN's order."""
    found = {
        c.type: c for c in conditions_of(mapping(mapping(workload).get("status")).get("conditions") or [])
    }
    return tuple(found[kind] for kind in SHOWN if kind in found)


def kueue_view(owner: Body | None, workloads: Sequence[Body], error: str = "") -> KueueView | None:
    """Kueue's view of `owner`, or None when Kueue does not manage it (no queue label, no Workload)."""
    if owner is None:
        return None
    meta = mapping(owner.get("metadata"))
    queue = str(mapping(meta.get("labels")).get(QUEUE_NAME_LABEL) or "")
    mine = owned_by(workloads, str(meta.get("uid") or ""))
    if not queue and not mine:
        return None
    workload = next((w for w in mine if is_true(_conditions(w), ADMITTED)), mine[0] if mine else None)
    spec, status = mapping(mapping(workload).get("spec")), mapping(mapping(workload).get("status"))
    admission = mapping(status.get("admission"))
    conditions = _conditions(workload)
    name = str(mapping(mapping(workload).get("metadata")).get("name") or "") or None
    active = spec.get("active") is not False
    cluster_queue = str(admission.get("clusterQueue") or "") or None
    queue = queue or str(spec.get("queueName") or "")
    note = str(
        mapping(mapping(mapping(workload).get("metadata")).get("annotations")).get(REQUEUED_ANNOTATION) or ""
    )
    holder, summary = _holder(name, queue, cluster_queue, active, conditions, error, note)
    topology = any(
        mapping(a).get("topologyAssignment") is not None for a in admission.get("podSetAssignments") or []
    )
    return KueueView(queue, name, cluster_queue, active, conditions, holder, summary, topology, error)


def _holder(
    name: str | None,
    queue: str,
    cluster_queue: str | None,
    active: bool,
    conditions: Sequence[KueueCondition],
    error: str,
    note: str = "",
) -> tuple[str, str]:
    """Who holds the owner and why, by the rule of api/kueue_workload.py (`note`: why Phalanx deactivated
    the Workload to requeue the owner through Kueue, "" when it did not)."""
    if error:
        return KUEUE, f"queued in LocalQueue {queue}; its Kueue Workload could not be read ({error})"
    if name is None:
        return KUEUE, f"queued in LocalQueue {queue}; Kueue has made no Workload for it yet"
    state = kueue_state(conditions, active)
    evicted, requeued = condition(conditions, EVICTED), condition(conditions, REQUEUED)
    if state is KueueState.FINISHED:
        return NOBODY, f"Kueue's Workload {name} is finished"
    if state is KueueState.DEACTIVATED and note:
        return KUEUE, (
            f"Phalanx deactivated Kueue's Workload {name} (spec.active: false) to requeue it through Kueue "
            f"({note}): Kueue stops it and releases its quota, then Phalanx activates it again"
        )
    if state is KueueState.DEACTIVATED:
        return KUEUE, f"Kueue's Workload {name} is deactivated (spec.active: false): it stays queued"
    if state is KueueState.ADMITTED:
        return (
            PHALANX,
            f"Kueue admitted it into ClusterQueue {cluster_queue}; where its pods run is Phalanx's",
        )
    if state is KueueState.EVICTING and evicted is not None:
        why = f"Kueue is evicting it ({evicted.reason}: {evicted.message})"
    elif state is KueueState.NOT_REQUEUED and evicted is not None and requeued is not None:
        why = (
            f"Kueue evicted it ({evicted.reason}) and has not requeued it yet ({requeued.reason}: "
            f"{requeued.message})"
        )
    elif state is KueueState.RESERVED:
        admitted = condition(conditions, ADMITTED)
        said = (
            f" ({admitted.reason}: {admitted.message})" if admitted is not None and admitted.message else ""
        )
        why = f"Kueue reserved quota in ClusterQueue {cluster_queue} and waits for its admission checks{said}"
    else:
        since = f" since Kueue evicted it ({evicted.reason})" if evicted is not None else ""
        reserved = condition(conditions, QUOTA_RESERVED)
        said = (
            f" ({reserved.reason}: {reserved.message})" if reserved is not None and reserved.message else ""
        )
        return (
            KUEUE,
            f"waiting in Kueue's LocalQueue {queue}{since}{said}; Phalanx holds nothing for it until Kueue "
            "admits it",
        )
    return KUEUE, f"{why}; Phalanx holds nothing for it"


def _said(cond: KueueCondition | None) -> str:
    return f" ({cond.reason}: {cond.message})" if cond is not None and cond.message else ""


def lines(view: KueueView) -> list[str]:
    """The text block explain prints under the groups."""
    out = [f"  Kueue: {view.holder} holds it: {view.summary}"]
    where = f", ClusterQueue {view.cluster_queue}" if view.cluster_queue else ""
    out.append(f"    Workload: {view.workload or 'none yet'} (LocalQueue {view.queue}{where})")
    for cond in view.conditions:
        text = f"    {cond.type}: {cond.status} ({cond.reason})"
        out.append(f"{text}: {cond.message}" if cond.message else text)
    if view.topology:
        out.append(
            "    Kueue's Topology-Aware Scheduling assigned nodes too (a ResourceFlavor with a "
            "topologyName): one placement engine per Job"
        )
    return out


def to_json(view: KueueView | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return {
        "holder": view.holder,
        "summary": view.summary,
        "localQueue": view.queue,
        "workload": view.workload,
        "clusterQueue": view.cluster_queue,
        "active": view.active,
        "conditions": [
            {"type": x.type, "status": x.status, "reason": x.reason, "message": x.message}
            for x in view.conditions
        ],
        "topologyAssigned": view.topology,
        "error": view.error or None,
    }
