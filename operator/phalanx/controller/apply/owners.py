"""Whether an owner still is, asked of the API before one of its objects is made again.

The garbage collector deletes an owner's Workload and groups once the owner is deleted (at once, or while a
foreground deletion or a finalizer holds it), and the watch of the owners may tell of that after the watch
of the Workloads tells of theirs: two watches keep no order between them. A pass in between sees a live
owner without its objects and would make them again — to be deleted again, with a second PodGroupCreated
(a TrainJob's foreground deletion did this in CI). So once one of an owner's objects went while the cache
held the owner alive (cache `bereft`), the applier asks the API before making one for it: gone or being
deleted, nothing is made (the cache learns what the API said; the next pass plans without the owner;
a 404 counts only if it names the owner);
alive (a user deleted the object by hand), it is made again and the owner is no longer asked about. One
read, only after such a deletion: a Workload's first creation asks nothing; and one at a time per owner
(`OwnerLookups`): the units of one owner applied at once (a LeaderWorkerSet's groups) share it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import CreateCompositePodGroup, CreatePodGroup, CreateWorkload
from phalanx.controller.model.refs import ObjectRef

Creation = CreateWorkload | CreatePodGroup | CreateCompositePodGroup


class OwnerGoneError(RuntimeError):
    """The owner an object of ours was about to be made for is gone, or being deleted: not a failure."""


class OwnerLookups:
    """The owners' reads in flight, by uid: a second unit asking about the same owner meanwhile waits for the
    first read's answer instead of sending its own."""

    def __init__(self) -> None:
        self._asking: dict[str, asyncio.Future[Any]] = {}

    async def get(self, kube: Kube, ref: ObjectRef) -> Any:
        asking = self._asking.get(ref.uid)
        if asking is None:
            asking = asyncio.ensure_future(kube.get_owner(ref))
            self._asking[ref.uid] = asking
            asking.add_done_callback(lambda done: self._done(ref.uid, done))
        # Shielded: a unit cancelled while it waits does not cancel the read the others wait for.
        return await asyncio.shield(asking)

    def _done(self, uid: str, done: asyncio.Future[Any]) -> None:
        if self._asking.get(uid) is done:
            del self._asking[uid]
        if not done.cancelled():
            done.exception()  # retrieved: every waiter was cancelled, or each raises it itself


async def owner_alive(
    cache: ClusterCache, kube: Kube, action: Creation, lookups: OwnerLookups | None = None
) -> None:
    """Return if the object may be made; raise OwnerGoneError if its owner is gone or going."""
    meta = _metadata(action)
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is None or str(owner.get("uid", "")) not in cache.bereft:
        return
    uid, kind = str(owner["uid"]), str(owner.get("kind", ""))
    if kind not in cache.kinds:  # marked only for owners the cache holds (cache/store.py `_alive`)
        return
    namespace, name = str(meta.get("namespace", "")), str(owner.get("name", ""))
    ref = ObjectRef(str(owner.get("apiVersion", "")), kind, namespace, name, uid)
    found = await (lookups or OwnerLookups()).get(kube, ref)
    found_meta = (found or {}).get("metadata") or {}
    if found is not None and found_meta.get("uid") == uid:
        if not found_meta.get("deletionTimestamp"):
            cache.bereft.discard(uid)
            return
        # Being deleted: no unit is made for it from now on. Newer than any write of ours: not held back
        # waiting for the watch to show one.
        cache.expectations.forget(kind, f"{namespace}/{name}")
        cache.upsert(kind, found)
    else:
        cache.delete(kind, {"metadata": {"namespace": namespace, "name": name, "uid": uid}})
    # Still asked about: an older watch event may bring it back until its deletion's event comes.
    cache.bereft.add(uid)
    raise OwnerGoneError(f"{kind} {namespace}/{name} is gone or being deleted")


def _metadata(action: Creation) -> dict[str, Any]:
    match action:
        case CreateWorkload(workload=made) | CreateCompositePodGroup(group=made):
            return made.metadata
        case CreatePodGroup(pod_group=made):
            return made.metadata
