"""core/v1 Events that aggregate like client-go's EventRecorder (its correlator's aggregation key).

One Event per (involved object, type, reason), under a deterministic name: the first post creates it
with count 1; a repeat raises `count` and `lastTimestamp` and writes the latest message, with a PATCH.
The message is not part of the key, so a message that carries a changing number ("retrying in 4 s",
"3 of 4 pods fit") updates the one Event instead of making a new object each time (as client-go's
EventAggregator groups similar events by everything but the message). An LRU of what this process
posted saves the read; after a restart (or on another replica) the create answers 409 and the
recorder reads the Event and patches it. Losing an Event never fails the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.controller.apply.kube import MERGE_PATCH, now_rfc3339, retrying
from phalanx.controller.model.refs import ObjectRef
from phalanx.kubeclient import ApiClient, ApiException, namespace_terminating, resource_path

log = logging.getLogger("phalanx.events")

COMPONENT = "phalanx"
MAX_MESSAGE = 1024  # events.k8s.io's limit of a note; kept for core/v1 too
MAX_NAME = 253
HASH_CHARS = 16
LRU_SIZE = 4096  # client-go's maxLruCacheEntries
ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class EventKey:
    """What makes two Events the same one: the involved object, the type and the reason (client-go's
    aggregation key, less the source and reporting component Phalanx always shares, and less the
    reporting instance, so that a restarted or second replica keeps counting the same Event)."""

    uid: str
    api_version: str
    kind: str
    namespace: str
    name: str
    type: str
    reason: str

    @classmethod
    def of(cls, involved: ObjectRef, type_: str, reason: str) -> EventKey:
        return cls(
            uid=involved.uid,
            api_version=involved.api_version,
            kind=involved.kind,
            namespace=involved.namespace,
            name=involved.name,
            type=type_,
            reason=reason,
        )

    @property
    def event_namespace(self) -> str:
        """Events of cluster-scoped objects go to `default`, as client-go puts them."""
        return self.namespace or "default"

    def digest(self) -> str:
        text = "\x00".join(
            (
                self.uid,
                self.api_version,
                self.kind,
                self.namespace,
                self.name,
                self.type,
                self.reason,
            )
        )
        return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]

    @property
    def event_name(self) -> str:
        """`<involved name>.<hash>`: the same for every repeat, and a valid DNS subdomain."""
        prefix = self.name[: MAX_NAME - HASH_CHARS - 1].rstrip(".-") or "object"
        return f"{prefix}.{self.digest()}"


def truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


@dataclass(frozen=True, slots=True)
class Seen:
    """What this process knows of an Event it posted."""

    name: str
    count: int


@dataclass(frozen=True, slots=True)
class Create:
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Bump:
    """Raise an existing Event's count: a merge patch of `count`, `lastTimestamp` and the latest message."""

    name: str
    count: int
    patch: dict[str, Any]


def new_event(key: EventKey, involved: ObjectRef, message: str, instance: str, now: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": key.event_name, "namespace": key.event_namespace},
        "involvedObject": involved.as_involved_object(),
        "type": key.type,
        "reason": key.reason,
        "message": truncate(message),
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def bump(name: str, count: int, message: str, now: str) -> Bump:
    patch = {"count": count + 1, "lastTimestamp": now, "message": truncate(message)}
    return Bump(name=name, count=count + 1, patch=patch)


def decide(
    key: EventKey, seen: Seen | None, involved: ObjectRef, message: str, instance: str, now: str
) -> Create | Bump:
    """The aggregation decision: a new Event, or one more of an Event this process posted (with the
    latest message)."""
    if seen is None:
        return Create(new_event(key, involved, message, instance, now))
    return bump(seen.name, seen.count, message, now)


class SeenEvents:
    """A bounded LRU of the Events this process posted (client-go keeps 4096)."""

    def __init__(self, size: int = LRU_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[EventKey, Seen] = OrderedDict()

    def get(self, key: EventKey) -> Seen | None:
        seen = self._entries.get(key)
        if seen is not None:
            self._entries.move_to_end(key)
        return seen

    def put(self, key: EventKey, seen: Seen) -> None:
        self._entries[key] = seen
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def forget(self, key: EventKey) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class EventRecorder:
    def __init__(self, api: ApiClient, instance: str = COMPONENT, lru_size: int = LRU_SIZE) -> None:
        self.api = api
        self.instance = instance[:128]
        self.seen = SeenEvents(lru_size)
        # One post at a time per Event, so concurrent repeats do not lose counts to each other.
        self._locks: weakref.WeakValueDictionary[EventKey, asyncio.Lock] = weakref.WeakValueDictionary()

    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Create or bump the Event; any failure is logged, never raised (cancellation still is)."""
        key = EventKey.of(involved, type_, reason)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        try:
            async with lock:
                await self._post(key, involved, message)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.seen.forget(key)  # the next post re-reads what the server has
            if namespace_terminating(e):  # all in it goes: nothing lost
                log.debug("event %s on %s not posted: its namespace is being deleted", reason, involved)
                return
            log.warning("could not post event %s on %s: %s", reason, involved, _brief(e))

    async def _post(self, key: EventKey, involved: ObjectRef, message: str) -> None:
        now = now_rfc3339()
        action = decide(key, self.seen.get(key), involved, message, self.instance, now)
        if isinstance(action, Create):
            body = action.body
            try:
                await retrying(
                    lambda: self.api.json("POST", _events(key.event_namespace), body=body),
                    verb="create",
                    attempts=ATTEMPTS,
                )
                self.seen.put(key, Seen(key.event_name, 1))
                return
            except ApiException as e:
                if e.status != 409:
                    raise
            # Posted before this process knew it (a restart, another replica): read and bump.
            existing = await retrying(lambda: self._read(key), verb="get", attempts=ATTEMPTS)
            action = bump(key.event_name, int(existing.get("count") or 1), message, now)
        try:
            await self._patch(key, action)
        except ApiException as e:
            if e.status != 404:
                raise
            # Expired (the apiserver keeps Events for an hour) or deleted: start a new one.
            self.seen.forget(key)
            await retrying(
                lambda: self.api.json(
                    "POST",
                    _events(key.event_namespace),
                    body=new_event(key, involved, message, self.instance, now),
                ),
                verb="create",
                attempts=ATTEMPTS,
            )
            self.seen.put(key, Seen(key.event_name, 1))

    async def _read(self, key: EventKey) -> Mapping[str, Any]:
        """The Event as the server has it, its body read within the deadline."""
        existing: Mapping[str, Any] = await self.api.json("GET", _events(key.event_namespace, key.event_name))
        return existing

    async def _patch(self, key: EventKey, action: Bump) -> None:
        await retrying(
            lambda: self.api.json(
                "PATCH",
                _events(key.event_namespace, action.name),
                body=action.patch,
                content_type=MERGE_PATCH,
            ),
            verb="patch",
            attempts=ATTEMPTS,
        )
        self.seen.put(key, Seen(action.name, action.count))


def _events(namespace: str, name: str | None = None) -> str:
    return resource_path("", "v1", "events", namespace=namespace, name=name)


def _brief(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
