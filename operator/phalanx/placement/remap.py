"""How node indices move when a sorted node set gains or loses nodes.

Nodes stay sorted by name, so the surviving nodes keep their relative order: per-node arrays
move to the new index space with one vectorised gather, and only new nodes need filling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["NodeRemap"]

IndexArray = npt.NDArray[np.intp]
_G = TypeVar("_G", bound=np.generic)


@dataclass(frozen=True, slots=True)
class NodeRemap:
    """Surviving node keep_old[k] (old index) is keep_new[k] (new index); other new nodes are fresh."""

    old_size: int
    new_size: int
    keep_old: IndexArray
    keep_new: IndexArray

    @classmethod
    def identity(cls, size: int) -> NodeRemap:
        every = np.arange(size, dtype=np.intp)
        return cls(size, size, every, every)

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
        out[..., self.keep_new] = old[..., self.keep_old]
        return out

    def old_to_new(self) -> IndexArray:
        """New index per old index, -1 for removed nodes."""
        out = np.full(self.old_size, -1, dtype=np.intp)
        out[self.keep_old] = self.keep_new
        return out
