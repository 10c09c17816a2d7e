"""Whether the watch has shown a write of ours yet, by what each kind of write changes and never changes back
(a pod's gate is only ever removed, its nodeSelector fixed once ungated; an owner is suspended or resumed
with a note; we are a group's only status writer). An object that shows our write is not older than it; and
when the answer to our write comes after the watch showed it (and maybe what followed it), the answer is
not newer than what the cache holds (store.ClusterCache._admitted). Also which of two pods under one name an
event or an answer belongs to (`stale_answer`, `superseded`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.controller.cache.expectations import Reflects
from phalanx.controller.cache.recent import RecentUids
from phalanx.controller.kinds.base import OwnerKind
from phalanx.controller.model.kueue import KueueWorkloadRecord
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, PodRecord


def status_shown(written: PodGroupRecord | CompositePodGroupRecord, held: Any) -> bool:
    """The group the cache holds (from the watch) carries the status we wrote: we are its only writer."""
    return (held.uid, held.status) == (written.uid, written.status) and held.generation >= written.generation


def owner_marks(owner: Any) -> tuple[str, bool, str]:
    """What our writes of an owner set (suspended or resumed, with a note), with its uid."""
    return owner.uid, owner.suspended, owner.requeued


def pod_marks(pod: PodRecord) -> tuple[str, bool, str, str]:
    """What our writes of a pod set (its gate removed, its pin, its group label), with its uid."""
    return pod.uid, pod.gated, pod.node_selector_host, pod.pod_group


def pod_reflects(written: PodRecord) -> Reflects:
    def reflects(body: Mapping[str, Any]) -> bool:
        return pod_marks(PodRecord.from_body(body)) == pod_marks(written)

    return reflects


def owner_reflects(kind: OwnerKind, written: Any) -> Reflects:
    """Our writes of an owner suspend or resume it with a note: an object with the same is not older."""

    def reflects(body: Mapping[str, Any]) -> bool:
        return owner_marks(kind.parse(body)) == owner_marks(written)

    return reflects


def kueue_marks(workload: KueueWorkloadRecord) -> tuple[str, bool, str]:
    """What our writes of a Kueue Workload set (deactivated with a note, or activated with it cleared)."""
    return workload.uid, workload.active, workload.requeued


def kueue_reflects(written: KueueWorkloadRecord) -> Reflects:
    """A Kueue Workload showing our write (the same activity and note) is not older than it."""

    def reflects(body: Mapping[str, Any]) -> bool:
        return kueue_marks(KueueWorkloadRecord.from_body(body)) == kueue_marks(written)

    return reflects


def stale_answer(written: PodRecord, held: PodRecord | None, gone: RecentUids) -> bool:
    """The API's answer to our write of a pod came after the pod was deleted (its DELETED event applied)
    or made anew under its name (a StatefulSet's pod): putting it back, and expecting its version, would
    hold back every event of its successor until the expectation lapsed."""
    if held is not None:
        return held.uid != written.uid
    return written.uid in gone


def superseded(seen: PodRecord, held: PodRecord | None, gone: RecentUids) -> bool:
    """A watch event of a pod older than the one the cache holds under its name, or of one deleted already.
    Events of one object come in order, not those of two objects under one name (a StatefulSet's pod made
    anew): a late event of the old pod must not replace its successor (its DELETED event would then drop the
    name, and a gated successor that changes no more would never be seen again)."""
    if seen.uid and seen.uid in gone:
        return True
    if held is None or held.uid == seen.uid:
        return False
    if seen.created is not None and held.created is not None and seen.created != held.created:
        return seen.created < held.created
    return seen.deleting and not held.deleting
