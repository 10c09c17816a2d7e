"""Kinds of which the cache keeps a digest only: of each object, the little one reader needs, and of the
objects that reader does not need, nothing. Kept apart from the store so that such an object costs one parse.

- `StatefulSet`: LWS's leader StatefulSets only (api/lws.LeaderSet, by the LWS's `namespace/name`): the
  groups each LWS wants, a rollout's surge groups included (kinds/lws.py keeps a group's PodGroup while LWS
  makes it again). Units read them: a change makes every unit again (the store's view generation).
- `ClusterTrainingRuntime`, `TrainingRuntime`: Kubeflow Trainer's runtimes, by name (`namespace/name` for
  the namespaced kind): the Kueue Topology-Aware Scheduling problems of their pod templates
  (api/admission_checks.runtime_tas_problems), which the TrainJob webhook refuses at a TrainJob's creation
  (watch/trainjob_gate.py) without a GET on its review's path. No unit reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

from phalanx.api.admission_checks import runtime_tas_problems
from phalanx.api.lws import LeaderSet, leader_set
from phalanx.api.trainjob import RUNTIME_PLURALS

T = TypeVar("T")
STATEFUL_SET: Final = "StatefulSet"


class Digests(Generic[T]):
    """The digests of one kind's objects, by key (`digest` answers None for an object not to keep)."""

    def __init__(self, digest: Callable[[Mapping[str, Any]], T | None], read_by_units: bool) -> None:
        self.digest = digest
        self.read_by_units = read_by_units
        self.items: dict[str, T] = {}

    def event(self, key: str, body: Mapping[str, Any] | None) -> bool:
        """The object at `key` seen (`body`) or deleted (None); whether what is kept changed."""
        record = self.digest(body) if body is not None else None
        old = self.items.get(key)
        if record is None:
            self.items.pop(key, None)
        else:
            self.items[key] = record
        return old != record


def _runtime_problems(body: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(runtime_tas_problems(body))


class DigestIndex:
    """Every digested kind (module docstring), as the store's one entry for them."""

    def __init__(self) -> None:
        self.leader_sets: Digests[LeaderSet] = Digests(leader_set, read_by_units=True)
        self.runtimes: dict[str, Digests[tuple[str, ...]]] = {
            kind: Digests(_runtime_problems, read_by_units=False) for kind in RUNTIME_PLURALS
        }
        self._by_kind: dict[str, Digests[Any]] = {STATEFUL_SET: self.leader_sets, **self.runtimes}

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def event(self, kind: str, key: str, body: Mapping[str, Any] | None) -> bool:
        """An event of a digested kind; whether a digest units read changed (every unit is made again)."""
        digests = self._by_kind[kind]
        return digests.event(key, body) and digests.read_by_units

    def keys(self, kind: str) -> set[str]:
        return set(self._by_kind[kind].items)

    def leader_set(self, namespace: str, name: str) -> LeaderSet | None:
        return self.leader_sets.items.get(f"{namespace}/{name}")

    def runtime_problems(self, kind: str, namespace: str, name: str) -> tuple[str, ...] | None:
        """The Kueue TAS problems of the runtime a TrainJob of `namespace` refers to; None: not seen."""
        runtimes = self.runtimes.get(kind)
        key = f"{namespace}/{name}" if kind == "TrainingRuntime" else name
        return runtimes.items.get(key) if runtimes is not None else None
