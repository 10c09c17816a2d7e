"""Did-you-mean: the known name closest to a misspelt one (edit distance, pure).

Used for unknown ``phalanx.dev/`` keys on a Job and for a topology key no node carries.
"""

from __future__ import annotations

from collections.abc import Iterable


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours."""
    if a == b:
        return 0
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def _normal(word: str) -> str:
    # min_count, minCount and MIN-COUNT all mean min-count: compare without case and separator style.
    return word.lower().replace("_", "-")


def closest(word: str, known: Iterable[str], *, limit: int | None = None) -> str | None:
    """The known name nearest to ``word``, if near enough to be a slip: at most ``limit`` edits (by default
    a third of the longer name, at least 2). Ties go to the first in ``known``."""
    target = _normal(word)
    best: tuple[int, str] | None = None
    for name in known:
        distance = edit_distance(target, _normal(name))
        allowed = limit if limit is not None else max(2, max(len(word), len(name)) // 3)
        if distance <= allowed and (best is None or distance < best[0]):
            best = (distance, name)
    return best[1] if best is not None else None


def did_you_mean(word: str, known: Iterable[str], *, limit: int | None = None) -> str:
    """``"; did you mean X?"`` for the closest known name, or ``""`` when none is close."""
    match = closest(word, known, limit=limit)
    return f"; did you mean {match}?" if match is not None and match != word else ""
