"""Which objects of our owner kinds another owner of ours controls, by name: a JobSet's child Jobs.

A staged JobSet (InOrder, dependsOn) makes a later stage's child Job only once the stage before it is Ready,
and the Job controller makes that Job's pods. When every pod of a later stage is lost with its nodes, no pod
says the stage came; the child Job does. Without it, a stage lost whole was not told from one not made yet,
and the unit was judged only when the Job controller made its pods again, after its backoff (10 s, 20 s,
...; plan/lost.py). The Job kind keeps no record of such Jobs (they are the JobSet's: kinds/job.py), so the
cache keeps only this: each controller's live children's names, one frozenset per controller, replaced when
it changes (the loop compares OwnerState members by identity: loop/incremental.py). A child being deleted
is no longer one of them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from phalanx.controller.model.records import controller_of, meta_of

NONE: Final[frozenset[str]] = frozenset()


class Children:
    """Live children by their controller's uid (module docstring)."""

    def __init__(self, kinds: Collection[str]) -> None:
        self._kinds = kinds  # our owner kinds: a child of another controller is none of ours
        # (kind, child key) -> (child uid, controller uid, child name)
        self._child: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._of: dict[str, frozenset[str]] = {}

    def of(self, controller: str) -> frozenset[str]:
        return self._of.get(controller, NONE)

    def seen(self, kind: str, key: str, uid: str, body: Mapping[str, Any], alive: bool) -> bool:
        """An object of `kind` at `key` (`namespace/name`) seen (`body`), `alive` (not being deleted);
        whether a controller's children changed."""
        controller_kind, controller = controller_of(meta_of(body))
        old = self._child.get((kind, key))
        if controller_kind not in self._kinds or not controller or not alive:
            return self.gone(kind, key) if old is not None else False
        name = key.rpartition("/")[2]
        self._child[(kind, key)] = (uid, controller, name)
        if old is not None and old[1] == controller:
            return False  # its name was there already (made again under it: the names did not change)
        if old is not None:
            self._drop(old)
        self._of[controller] = self.of(controller) | {name}
        return True

    def gone(self, kind: str, key: str, uid: str = "") -> bool:
        """The object at `key` deleted (`uid`: that one only; "": whichever it is); whether a controller's
        children changed."""
        old = self._child.get((kind, key))
        if old is None or (uid and old[0] != uid):
            return False
        del self._child[(kind, key)]
        self._drop(old)
        return True

    def _drop(self, child: tuple[str, str, str]) -> None:
        """Take (uid, controller, name) out of its controller's names."""
        left = self.of(child[1]) - {child[2]}
        if left:
            self._of[child[1]] = left
        else:
            self._of.pop(child[1], None)

    def records(self, kind: str) -> set[tuple[str, str]]:
        """(key, uid) of the children of `kind` held: what a relist may find deleted meanwhile."""
        return {(key, entry[0]) for (k, key), entry in self._child.items() if k == kind}
