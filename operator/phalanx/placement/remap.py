"""How node indices move when a sorted node set gains or loses nodes.

Nodes stay sorted by name, so the surviving nodes keep their relative order: per-node arrays
move to the new index space with a few slice copies, and only new nodes need filling.
"""

from __future__ import annotations

from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["NodeRemap"]

IndexArray = npt.NDArray[np.intp]
_G = TypeVar("_G", bound=np.generic)


MAX_RUNS: Final = 64
"""Above this many runs of nodes that move together, one fancy-index gather beats slice copies."""


class NodeRemap:
    """Surviving node keep_old[k] (old index) is keep_new[k] (new index); other new nodes are fresh."""

    __slots__ = ("_runs", "keep_new", "keep_old", "new_size", "old_size")

    def __init__(self, old_size: int, new_size: int, keep_old: IndexArray, keep_new: IndexArray) -> None:
        self.old_size, self.new_size = old_size, new_size
        self.keep_old, self.keep_new = keep_old, keep_new
        # A few added or removed nodes split the survivors into a few runs that move as one block.
        breaks = np.flatnonzero((np.diff(keep_old) != 1) | (np.diff(keep_new) != 1)) + 1
        starts = [0, *breaks.tolist()]
        ends = [*breaks.tolist(), len(keep_old)]
        self._runs: list[tuple[int, int, int]] | None = None
        if len(starts) <= MAX_RUNS and len(keep_old):
            self._runs = [
                (int(keep_old[a]), int(keep_new[a]), b - a) for a, b in zip(starts, ends, strict=True)
            ]

    @classmethod
    def between(cls, old_size: int, removed: list[int], new_size: int, added: list[int]) -> NodeRemap:
        """From the old indices of removed nodes and the new indices of added ones."""
        return cls(
            old_size,
            new_size,
            np.delete(np.arange(old_size, dtype=np.intp), removed),
            np.delete(np.arange(new_size, dtype=np.intp), added),
        )

    @property
    def is_identity(self) -> bool:
        return self.old_size == self.new_size == len(self.keep_old)

    def carry(self, old: npt.NDArray[_G], fill: int | bool) -> npt.NDArray[_G]:
        """A writable copy of `old` (nodes on the last axis) in the new index space; new nodes get `fill`."""
        if self.is_identity:
            return old.copy()
        out = np.full((*old.shape[:-1], self.new_size), fill, dtype=old.dtype)
        if self._runs is None:
            out[..., self.keep_new] = old[..., self.keep_old]
        else:
            for start_old, start_new, length in self._runs:
                out[..., start_new : start_new + length] = old[..., start_old : start_old + length]
        return out

    def old_to_new(self) -> IndexArray:
        """New index per old index, -1 for removed nodes."""
        out = np.full(self.old_size, -1, dtype=np.intp)
        out[self.keep_old] = self.keep_new
        return out
