"""Normalised free capacity, Σ_r x_r / total_r, compared exactly.

Floats rank quickly; wherever two floats are close enough that rounding could flip them,
the decision is redone on exact integers (Σ_r x_r * lcm/total_r), so ties are real ties and
the result never depends on float noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

import numpy as np
import numpy.typing as npt

from .columns import IndexArray, IntArray

__all__ = ["Scorer"]

# Scores are sums of at most a few terms in [0, 1]; float error is ~1e-15, far below this.
_TOLERANCE: Final = 1e-9

FloatArray = npt.NDArray[np.float64]


class Scorer:
    """Scores rows of non-negative amounts, one column per scored resource (each total > 0)."""

    __slots__ = ("_inverse", "_multipliers", "totals")

    def __init__(self, totals: Sequence[int]) -> None:
        self.totals = tuple(totals)
        lcm = math.lcm(*self.totals) if self.totals else 1
        self._multipliers = tuple(lcm // t for t in self.totals)
        self._inverse = tuple(1.0 / t for t in self.totals)

    def floats(self, rows: IntArray) -> FloatArray:
        # Column by column (not a matrix product) so equal rows give bit-identical floats.
        out = np.zeros(rows.shape[0], dtype=np.float64)
        for j, inv in enumerate(self._inverse):
            out += rows[:, j].astype(np.float64) * inv
        return out

    def exact(self, row: Sequence[int] | IntArray) -> int:
        """Score times lcm(totals): an integer with the same order as the score."""
        return sum(int(x) * m for x, m in zip(row, self._multipliers, strict=True))

    def fraction(self, row: Sequence[int] | IntArray) -> Fraction:
        return sum((Fraction(int(x), t) for x, t in zip(row, self.totals, strict=True)), Fraction(0))

    def argmin(self, rows: IntArray) -> int:
        """Position of the smallest score; ties go to the first position."""
        if rows.shape[0] == 1 or not self.totals:
            return 0
        f = self.floats(rows)
        candidates = np.flatnonzero(f <= f.min() + _TOLERANCE)
        if candidates.size == 1:
            return int(candidates[0])
        near = rows[candidates]
        if (near == near[0]).all():
            return int(candidates[0])  # equal rows: a real tie, the first wins
        unique, inverse = np.unique(rows[candidates], axis=0, return_inverse=True)
        keys = [self.exact(u) for u in unique]
        best = min(keys)
        winners = [i for i, k in enumerate(keys) if k == best]
        return int(candidates[np.flatnonzero(np.isin(inverse.reshape(-1), winners))[0]])

    def order(self, rows: IntArray, tiebreak: IndexArray) -> IndexArray:
        """Positions sorted by score ascending, then by `tiebreak` ascending."""
        m = rows.shape[0]
        if m <= 1 or not self.totals:
            return np.argsort(tiebreak, kind="stable").astype(np.intp)
        f = self.floats(rows)
        perm = np.lexsort((tiebreak, f)).astype(np.intp)
        fs = f[perm]
        near = np.diff(fs) <= _TOLERANCE
        if not near.any():
            return perm
        sorted_rows = rows[perm]
        differ = (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)
        if not (near & differ).any():
            return perm  # near-equal floats only between equal rows: already exact
        # Re-sort exactly each run of near-equal neighbours that mixes different rows.
        breaks = np.flatnonzero(~near)
        run_starts = np.concatenate(([0], breaks + 1))
        run_ends = np.concatenate((breaks + 1, [m]))
        bad = near & differ
        for a, b in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
            if b - a > 1 and bad[a : b - 1].any():
                segment = perm[a:b].tolist()
                segment.sort(key=lambda p: (self.exact(rows[p]), int(tiebreak[p])))
                perm[a:b] = segment
        return perm
