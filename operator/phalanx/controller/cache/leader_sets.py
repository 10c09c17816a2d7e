"""LWS's leader StatefulSets, by `namespace/name` (their LWS's): of all the StatefulSets the watch sees, the
cache keeps only these, and of each only what kinds/lws.py reads (api/lws.LeaderSet: the groups the LWS wants,
a rollout's surge groups included). Kept apart from the store so that a StatefulSet that is no LWS's leader
costs one parse and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.api.lws import LeaderSet, leader_set


class LeaderSets:
    def __init__(self) -> None:
        self.items: dict[str, LeaderSet] = {}

    def event(self, key: str, body: Mapping[str, Any] | None) -> bool:
        """A StatefulSet at `key` seen (`body`) or deleted (None); whether what is kept changed."""
        record = leader_set(body) if body is not None else None
        old = self.items.get(key)
        if record is None:
            self.items.pop(key, None)
        else:
            self.items[key] = record
        return old != record

    def get(self, namespace: str, name: str) -> LeaderSet | None:
        return self.items.get(f"{namespace}/{name}")
