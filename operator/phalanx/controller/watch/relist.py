"""Drop from the cache what was deleted while a watch was away.

Kopf lists a kind again when its watch cannot resume (410 Gone: the resourceVersion expired during an
outage) and hands every listed object to the handlers as an event without a type. It says nothing of
objects deleted meanwhile: their DELETED events are lost, and the cache would keep them for ever — a deleted
pod holding its node's room, so a gang that fits waits; a deleted Job still planned for. Kopf's first
listing after the start has the same gap (deletions between the cache's priming and the watch).

So after a burst of such events for a kind, the Relister lists the kind itself and drops every record that
was in the cache before that list was asked for and is not in it (same uid): the object was deleted. A
record added meanwhile (by a watch event or a write of ours) is newer than the question and stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from phalanx.controller.cache.store import ClusterCache, key_of

log = logging.getLogger("phalanx.relist")

QUIET_SECONDS = 2.0  # a listing's events come in a burst: list once it has been quiet this long
Lister = Callable[[], Awaitable[list[dict[str, Any]]]]


class Relister:
    def __init__(self, cache: ClusterCache, listers: dict[str, Lister], quiet: float = QUIET_SECONDS) -> None:
        """`listers`: a LIST of each kind (named as in watched.py) that may be relisted: every watched one."""
        self.cache = cache
        self.listers = listers
        self.quiet = quiet
        self.dropped = 0
        self._due: dict[str, float] = {}  # kind -> when its last listed event came
        self._task: asyncio.Task[None] | None = None

    def listed(self, kind: str) -> None:
        """Kopf handed over an object of `kind` from a listing (an event without a type)."""
        if kind not in self.listers:
            return
        loop = asyncio.get_running_loop()
        self._due[kind] = loop.time()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="phalanx-relist")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._due:
            await asyncio.sleep(self.quiet)
            for kind, last in list(self._due.items()):
                if loop.time() - last < self.quiet:
                    continue
                del self._due[kind]
                try:
                    await self.reconcile(kind)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the list failed even after retries: try again later
                    log.warning("could not list %s to drop deleted objects: %r", kind, e)
                    self._due[kind] = loop.time()

    async def reconcile(self, kind: str) -> int:
        """List `kind` and drop the records of objects deleted before that list; how many were dropped."""
        before = self.cache.records(kind)
        items = await self.listers[kind]()
        gone = drop_deleted(self.cache, kind, before, {key_of(i) for i in items})
        self.dropped += gone
        return gone


Record = tuple[str, str]  # (key, uid), as ClusterCache.records gives them


def deleted_meanwhile(before: set[Record], listed: set[str], now: set[Record]) -> list[Record]:
    """The records to drop after a list: held before the list was asked for (`before`), absent from it
    (`listed`: its keys), and still the same record now (`now`: one added or replaced meanwhile, by a watch
    event or a write of ours, is newer than the question and stays)."""
    return sorted(record for record in before if record[0] not in listed and record in now)


def drop_deleted(cache: ClusterCache, kind: str, before: set[Record], listed: set[str]) -> int:
    """Drop from the cache what `deleted_meanwhile` finds (said in the log, once each); how many."""
    gone = deleted_meanwhile(before, listed, cache.records(kind))
    for key, uid in gone:
        log.info("%s %s was deleted while the watch was away: dropped from the cache", kind, key)
        namespace, _, name = key.rpartition("/")
        cache.delete(kind, {"metadata": {"namespace": namespace, "name": name, "uid": uid}})
    return len(gone)
