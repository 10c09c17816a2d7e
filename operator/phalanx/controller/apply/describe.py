"""What the applier says of an action: its words in a log line or a Warning event, and the labels its API
write is counted under (metrics.WRITES); and a failed request's error in words."""

from __future__ import annotations

from phalanx.controller.model.actions import (
    Action,
    ActivateKueueWorkload,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    DeactivateKueueWorkload,
    DeleteObject,
    DeletePod,
    EvictPod,
    LabelPod,
    PatchMinCount,
    PatchStatus,
    PatchTopologyStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    ResumeJob,
    SuspendJob,
    UngatePod,
)
from phalanx.kubeclient import ApiException


def describe(action: Action) -> str:
    """What an action does, in words for an event or a log line."""
    match action:
        case CreateWorkload(workload=w):
            return f"creating Workload {w.metadata.get('name')}"
        case CreatePodGroup(pod_group=g):
            return f"creating PodGroup {g.metadata.get('name')}"
        case CreateCompositePodGroup(group=g):
            return f"creating CompositePodGroup {g.metadata.get('name')}"
        case PatchMinCount(pod_group=g, min_count=n):
            return f"setting minCount {n} on PodGroup {g.name}"
        case RecordAdmission(group=g):
            return f"recording the admission on {g.kind} {g.name}"
        case ReleasePod(pod=p, node=n):
            return f"releasing pod {p.name} to node {n}"
        case LabelPod(pod=p):
            return f"labelling pod {p.name}"
        case UngatePod(pod=p):
            return f"removing the gate of pod {p.name}"
        case PatchStatus(group=g):
            return f"writing the status of {g.kind} {g.name}"
        case PatchTopologyStatus(topology=t):
            return f"writing the status of Topology {t.name}"
        case PostEvent(reason=r):
            return f"posting event {r}"
        case RememberAnnounced():
            return "noting an announced problem"
        case DeleteObject(target=t):
            return f"deleting {t.kind} {t.name}"
        case EvictPod(pod=p):
            return f"evicting pod {p.name}"
        case SuspendJob(job=j):
            return f"suspending {j.kind} {j.name} to requeue it"
        case DeletePod(pod=p):
            return f"deleting pod {p.name} to requeue its group"
        case ResumeJob(job=j):
            return f"resuming {j.kind} {j.name}"
        case DeactivateKueueWorkload(workload=w):
            return f"deactivating Kueue Workload {w.name} to requeue it through Kueue"
        case ActivateKueueWorkload(workload=w):
            return f"activating Kueue Workload {w.name} again"
    raise AssertionError(f"unknown action {action!r}")


def written_for(action: Action) -> tuple[str, str] | None:
    """The labels an action's API write is counted under (metrics.WRITES): its kind and why (a status
    write's phase). None: not counted here — noting an announced problem writes nothing, and an event is
    counted where every event is posted (Applier._post, under its reason), the FailedSync of a failure too."""
    match action:
        case RememberAnnounced() | PostEvent():
            return None
        case PatchStatus(status=status) | RecordAdmission(status=status):
            return type(action).__name__, (status.phase or "") if status is not None else ""
    return type(action).__name__, ""


def error_text(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.status_message()}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
