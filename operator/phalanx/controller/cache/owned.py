"""Records of Phalanx's own kinds (PodGroups, CompositePodGroups, Workloads), by key and by owner uid: how
the cache finds what Phalanx made for an owner without walking every group (store.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, WorkloadRecord

GroupRecord = PodGroupRecord | CompositePodGroupRecord | WorkloadRecord


class Owned:
    """Records of one of our kinds (PodGroups, CompositePodGroups, Workloads) by key, and by owner uid."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}
        self.by_owner: dict[str, set[str]] = defaultdict(set)

    def get(self, key: str) -> Any:
        return self.items.get(key)

    def of_owner(self, uid: str) -> list[Any]:
        return [self.items[k] for k in sorted(self.by_owner.get(uid, ())) if k in self.items]

    def put(self, record: GroupRecord) -> bool:
        old = self.items.get(record.key)
        if old is not None and old.owner_uid != record.owner_uid:
            self._unindex(old)
        self.items[record.key] = record
        if record.owner_uid:
            self.by_owner[record.owner_uid].add(record.key)
        return old != record

    def pop(self, key: str) -> Any:
        old = self.items.pop(key, None)
        if old is not None:
            self._unindex(old)
        return old

    def _unindex(self, old: GroupRecord) -> None:
        keys = self.by_owner.get(old.owner_uid)
        if keys is not None:
            keys.discard(old.key)
            if not keys:
                del self.by_owner[old.owner_uid]
