"""Pods whose eviction a PodDisruptionBudget refused lately: the victim search leaves them out for a while
and tries others first, rather than choosing the same protected pod pass after pass. Not a watch's record:
what the applier learnt from the API's 429, kept with the cache because every pass reads it from there."""

from __future__ import annotations

from collections.abc import Callable

BLOCK_SECONDS = 30.0  # how long a pod a budget protected is left out of victim choices


class BlockedEvictions:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}  # pod key -> until when it is left out

    def block(self, pod_key: str, seconds: float = BLOCK_SECONDS) -> None:
        self._until[pod_key] = self._clock() + seconds

    def unevictable(self) -> frozenset[str]:
        """The pods still left out (the others are forgotten)."""
        now = self._clock()
        for key in [k for k, until in self._until.items() if until <= now]:
            del self._until[key]
        return frozenset(self._until)
