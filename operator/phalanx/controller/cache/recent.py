"""A bounded set of uids, oldest forgotten first: what the cache remembers of objects by uid after they
went (a late answer to our write must not bring one back; an owner's objects went while it seemed alive).
Bounded, as the cache lives as long as the process: past the bound, the oldest uid is the least likely to
matter again."""

from __future__ import annotations

KEPT = 4096


class RecentUids:
    def __init__(self, size: int = KEPT) -> None:
        self.size = size
        self._uids: dict[str, None] = {}  # insertion-ordered: the oldest first

    def add(self, uid: str) -> None:
        if uid:
            self._uids[uid] = None
            while len(self._uids) > self.size:
                del self._uids[next(iter(self._uids))]

    def discard(self, uid: str) -> None:
        self._uids.pop(uid, None)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids

    def __len__(self) -> int:
        return len(self._uids)
