"""Topology levels: domains as paths of label values, and Kueue's BestFit order inside a domain.

Levels are node labels ordered coarse -> fine (a `Topology`'s `spec.levels[].nodeLabel`). Real clusters
reuse values under different parents (`rack=r1` in block b1 and in b2), so the domain of a node at a
level is the path of its values from the top level down ("b1/r1" != "b2/r1"); a node lacking any of
those labels has no domain at that level. Label values cannot contain "/", so paths are unambiguous.

`fewest_domains_order` orders a domain's nodes so that a prefix fill uses the fewest domains of each
lower level, then the fewest nodes, then the tightest fit (see docs/design.md, "Levels, slices and
preferred topology").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from .columns import IndexArray, IntArray, LabelColumn
from .snapshot import Snapshot

__all__ = [
    "SEPARATOR",
    "Levels",
    "effective_levels",
    "fewest_domains_order",
    "level_of",
    "path_column",
    "wider_levels",
]

Levels = tuple[str, ...]
SEPARATOR: Final = "/"

FloatArray = npt.NDArray[np.float64]


def level_of(levels: Sequence[str], key: str | None) -> int | None:
    """Index of `key` among the levels; None when the key is not a level (or no levels are known)."""
    if key is None:
        return None
    try:
        return list(levels).index(key)
    except ValueError:
        return None


def effective_levels(levels: Sequence[str], key: str | None) -> Levels:
    """The levels that apply to a group with `key`: all of them when the key is one of them (or the key is
    None and levels are known), else none (today's single-key behaviour)."""
    if not levels or (key is not None and key not in levels):
        return ()
    return tuple(levels)


def wider_levels(key: str, levels: Levels) -> list[tuple[str | None, Levels]]:
    """The rungs a `preferred` or `auto` group can be placed at, narrowest first: (key, levels) of its key,
    of each wider level, then of all nodes (None). Without levels the key alone is a level: the key, then
    all nodes with the fewest domains of the key."""
    depth = level_of(levels, key)
    if depth is None:
        return [(key, ()), (None, (key,))]
    return [*((levels[d], levels) for d in range(depth, -1, -1)), (None, levels)]


def path_column(snapshot: Snapshot, levels: Sequence[str], depth: int) -> LabelColumn:
    """Per node, its domain at level `depth` as a path "v0/v1/.../v_depth"; cached on the node table.

    At depth 0 this is the top level's own column. Codes follow the paths level by level (by the top
    value, then the next, ...), so "smallest domain name" means the smallest path in that order. Built
    from the parent level's column with integer codes: O(nodes) numpy plus one string per domain.
    """
    key = tuple(levels[: depth + 1])
    table = snapshot.table
    if depth == 0:
        return table.column(key[0])
    cached = table.path_columns.get(key)
    if cached is not None:
        return cached
    parent = path_column(snapshot, levels, depth - 1)
    own = table.column(key[-1])
    present = (parent.codes >= 0) & (own.codes >= 0)
    width = max(len(own.values), 1)
    combined = parent.codes[present].astype(np.int64) * width + own.codes[present]
    unique, inverse = np.unique(combined, return_inverse=True)
    codes = np.full(len(table.names), -1, dtype=np.intp)
    codes[present] = inverse.reshape(-1)
    values = tuple(
        f"{parent.values[p]}{SEPARATOR}{own.values[c]}"
        for p, c in zip((unique // width).tolist(), (unique % width).tolist(), strict=True)
    )
    column = LabelColumn.of_codes(values, {v: i for i, v in enumerate(values)}, codes)
    table.path_columns[key] = column
    return column


def level_codes(snapshot: Snapshot, levels: Sequence[str], below: int) -> list[IndexArray]:
    """Path codes per node of every level finer than level `below` (-1: above the top level)."""
    return [path_column(snapshot, levels, d).codes for d in range(below + 1, len(levels))]


def _choose(cap: IntArray, free: FloatArray, names: IntArray, need: int) -> IndexArray:
    """Positions in the order to fill them so that `need` pods take the fewest of them, the last one the
    tightest: by capacity descending (then least free, then name) until `need` is covered, the last of
    those swapped for the one with the smallest capacity that still covers what is left."""
    base = np.lexsort((names, free, -cap)).astype(np.intp)
    if need <= 0 or base.size == 0:
        return base
    cumulative = np.cumsum(cap[base])
    if cumulative[-1] < need:
        return base  # cannot all fit: fill the biggest first
    k = int(np.searchsorted(cumulative, need))  # base[:k] full, base[k] the last one used
    left = need - (int(cumulative[k - 1]) if k else 0)
    rest = base[k:]
    covering = rest[cap[rest] >= left]
    # Tightest: smallest capacity that covers, then least free, then name.
    last = int(covering[np.lexsort((names[covering], free[covering], cap[covering]))[0]])
    return np.concatenate((base[:k], [last], rest[rest != last])).astype(np.intp)


def fewest_domains_order(
    nodes: IndexArray,
    capacity: IntArray,
    need: int,
    lower: Sequence[IndexArray],
    free: FloatArray,
    rank: IntArray | None = None,
) -> IndexArray:
    """`nodes` in the order a prefix fill of `need` pods should use them (Kueue's BestFit descent).

    `capacity[i]`: pods node i takes; `lower`: path codes per node of each level below the domain,
    coarse -> fine; `free[i]`: node i's normalised free capacity (less is fuller); `rank[i]`: node i's
    place in the exact order of (free, name) when known, which then breaks ties between nodes instead of
    the floats of `free` (a domain's free capacity is the float sum of its nodes'). At each lower level the
    fewest domains are chosen (`_choose`), each filled recursively with what it takes; at the node level
    the fewest nodes, the last the tightest; ties go to the fullest, then the smallest name (index).
    Nodes and domains not needed follow, biggest first, so a fill that needs more (mixed pods) spills
    over in the same spirit.
    """
    if nodes.size == 0:
        return nodes
    if not lower:
        if rank is not None:  # exact: rank orders by free capacity, then name
            return nodes[_choose(capacity[nodes], rank[nodes].astype(np.float64), rank[nodes], need)]
        picked = _choose(capacity[nodes], free[nodes], nodes.astype(np.int64), need)
        return nodes[picked]
    codes = lower[0][nodes]
    groups, inverse = np.unique(codes, return_inverse=True)
    if groups.size == nodes.size and groups[0] >= 0:
        return fewest_domains_order(nodes, capacity, need, lower[1:], free, rank)  # one node per domain
    inverse = inverse.reshape(-1)
    cap = np.bincount(inverse, weights=capacity[nodes], minlength=groups.size).astype(np.int64)
    group_free: FloatArray = np.bincount(inverse, weights=free[nodes], minlength=groups.size).astype(
        np.float64
    )
    # Nodes without this level's label form one group after all named ones (code -1 sorts first: move it).
    names = np.where(groups < 0, np.iinfo(np.int64).max, groups).astype(np.int64)
    parts: list[IndexArray] = []
    left = need
    chosen = _choose(cap, group_free, names, need)
    for used, g in enumerate(chosen.tolist()):
        take = min(int(cap[g]), left)
        if take <= 0:
            # The groups not needed, in their order, each one's nodes biggest first (one sort for all).
            position = np.empty(groups.size, dtype=np.intp)
            position[chosen] = np.arange(groups.size, dtype=np.intp)
            rest = nodes[position[inverse] >= used]
            ties = (rank[rest],) if rank is not None else (rest, free[rest])
            keys = (*ties, -capacity[rest], position[inverse][position[inverse] >= used])
            parts.append(rest[np.lexsort(keys)])
            break
        members = nodes[inverse == g]
        parts.append(fewest_domains_order(members, capacity, take, lower[1:], free, rank))
        left -= take
    return np.concatenate(parts).astype(np.intp)
