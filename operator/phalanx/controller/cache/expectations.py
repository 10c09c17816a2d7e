"""Writes of ours the watch has not shown yet (Kueue's `expectations`): a `resourceVersion` is opaque, so
the cache remembers the version each of our writes got and holds back watch events of that object until
the event with that version arrives (a watch delivers an object's versions in order). Kopf hands handlers
the newest state of an object, not each version, so an event that already carries what we wrote (by
content, `reflects`) is not older either. An expectation that is never met (the watch was re-listed past
it) lapses after a while, and the newest event held back meanwhile is applied then."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

EXPECTATION_TTL_SECONDS = 30.0  # how long a write of ours masks watch events older than it
Reflects = Callable[[Mapping[str, Any]], bool]


@dataclass
class _Expectation:
    resource_version: str
    deadline: float
    reflects: Reflects | None = None  # does an object already carry our write?
    held_back: Mapping[str, Any] | None = None  # the newest event masked meanwhile


@dataclass
class Expectations:
    """Writes of ours the watch has not shown yet, by (kind, key)."""

    clock: Callable[[], float] = time.monotonic
    ttl: float = EXPECTATION_TTL_SECONDS
    pending: dict[tuple[str, str], _Expectation] = field(default_factory=dict)

    def wrote(self, kind: str, key: str, resource_version: str, reflects: Reflects | None = None) -> None:
        if resource_version:
            self.pending[(kind, key)] = _Expectation(resource_version, self.clock() + self.ttl, reflects)

    def admit(self, kind: str, key: str, body: Mapping[str, Any]) -> bool:
        """Whether a watch event's object may replace what the cache holds."""
        expected = self.pending.get((kind, key))
        if expected is None:
            return True
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if version == expected.resource_version or (
            expected.reflects is not None and expected.reflects(body)
        ):
            del self.pending[(kind, key)]
            return True
        expected.held_back = body  # older than our write, or a re-list past it: decided on expiry
        return False

    def waits(self, kind: str, key: str) -> bool:
        """Whether a write of ours to the object is not shown by the watch yet."""
        return (kind, key) in self.pending

    def forget(self, kind: str, key: str) -> None:
        self.pending.pop((kind, key), None)

    def take(self, kind: str, key: str) -> Mapping[str, Any] | None:
        """Drop the expectation; the event it held back, if any (a 409 showed that one is newer)."""
        expected = self.pending.pop((kind, key), None)
        return expected.held_back if expected is not None else None

    def expired(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Lapsed expectations' held-back events, to apply now (the newest one seen wins)."""
        now = self.clock()
        out: list[tuple[str, Mapping[str, Any]]] = []
        for (kind, key), expected in list(self.pending.items()):
            if expected.deadline <= now:
                del self.pending[(kind, key)]
                if expected.held_back is not None:
                    out.append((kind, expected.held_back))
        return out


def uid_of(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def status_reflects(written: Mapping[str, Any]) -> Reflects:
    """Phalanx is the only writer of its groups' and Topologies' status: a different status is an older
    one (and, for a group, an older generation too)."""
    uid, status = uid_of(written), written.get("status")
    generation = int((written.get("metadata") or {}).get("generation") or 0)

    def reflects(body: Mapping[str, Any]) -> bool:
        seen_generation = int((body.get("metadata") or {}).get("generation") or 0)
        return uid_of(body) == uid and body.get("status") == status and seen_generation >= generation

    return reflects


def same_uid(written: Mapping[str, Any]) -> Reflects:
    uid = uid_of(written)
    return lambda body: uid_of(body) == uid
