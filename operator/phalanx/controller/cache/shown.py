"""Whether the watch has shown a write of ours yet, by what each kind of write changes and never changes back
(a pod's gate is only ever removed, its nodeSelector fixed once ungated; an owner is suspended or resumed
with a note; we are a group's only status writer). An object that shows our write is not older than it; and
when the answer to our write comes after the watch showed it (and maybe what followed it), the answer is
not newer than what the cache holds (store.ClusterCache._admitted)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.controller.cache.expectations import Reflects
from phalanx.controller.kinds.base import OwnerKind
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
