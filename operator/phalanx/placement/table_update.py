"""The next NodeTable from the previous one and the nodes that changed.

Per-node arrays and the cached label columns move to the new node order with numpy gathers;
Python only touches the nodes that changed. The filter caches (eligibility, tolerations) are
left to refill lazily: each is one O(nodes) numpy pass over columns that are carried over.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import numpy as np

from .columns import IntArray
from .filters import scheduling_taints
from .model import PODS, NodeInfo, Taint
from .remap import IndexArray, NodeRemap
from .snapshot import NodeTable, cap_for, clipped

__all__ = ["MASS_CHANGE", "TableUpdate", "updated_table"]

MASS_CHANGE: Final = 64
"""With more changed nodes than this plus 1/8 of all, a fresh build beats patching node by node."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class TableUpdate:
    table: NodeTable
    remap: NodeRemap
    """Old table index -> new table index of every node in both."""
    added: tuple[str, ...]
    removed: tuple[str, ...]


def updated_table(
    old: NodeTable, nodes: Mapping[str, NodeInfo], touched: Collection[str]
) -> TableUpdate | None:
    """The table of `nodes`, given that only the nodes named in `touched` may differ from `old`;
    None when none of them does."""
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []
    for name in sorted(touched):
        i, node = old.name_index.get(name), nodes.get(name)
        if node is None:
            if i is not None:
                removed.append(name)
        elif i is None:
            added.append(name)
        elif node != old.nodes[i]:
            changed.append(name)
    if not (added or removed or changed):
        return None
    new_size = len(old.names) - len(removed) + len(added)
    bound = max(
        [old.alloc_bound, *(int(v) for name in (*added, *changed) for v in nodes[name].allocatable.values())]
    )
    cap = cap_for(new_size)
    if cap != old.max_amount and bound > min(cap, old.max_amount):
        # Amounts clipped by one cap but not the other: the old clipped values cannot be reused.
        return _rebuilt(old, nodes, added, removed)
    if len(added) + len(removed) + len(changed) > MASS_CHANGE + len(old.names) // 8:
        # Many nodes at once (the cache filling at startup): building from scratch is cheaper.
        return _rebuilt(old, nodes, added, removed)
    return _patched(old, nodes, added, removed, changed, bound)


def _rebuilt(
    old: NodeTable, nodes: Mapping[str, NodeInfo], added: list[str], removed: list[str]
) -> TableUpdate:
    table = NodeTable.of(nodes.values())
    old_to_new = np.fromiter(
        (table.name_index.get(name, -1) for name in old.names), dtype=np.intp, count=len(old.names)
    )
    keep_old = np.flatnonzero(old_to_new >= 0).astype(np.intp)
    remap = NodeRemap(len(old.names), len(table.names), keep_old, old_to_new[keep_old])
    return TableUpdate(table, remap, tuple(added), tuple(removed))


def _spliced(old: Sequence[_T], removed: list[int], inserts: list[tuple[int, _T]]) -> list[_T]:
    """`old` without the items at the (sorted) indices `removed`, with each (p, item) of `inserts`
    (sorted by p) placed before old item p: O(len(old)) list copying, no per-item Python."""
    events = sorted([(p, 0, k) for k, (p, _) in enumerate(inserts)] + [(i, 1, -1) for i in removed])
    out: list[_T] = []
    start = 0
    for position, kind, k in events:
        out.extend(old[start:position])
        if kind == 0:
            out.append(inserts[k][1])
            start = position
        else:
            start = position + 1
    out.extend(old[start:])
    return out


def _patched(
    old: NodeTable,
    nodes: Mapping[str, NodeInfo],
    added: list[str],
    removed: list[str],
    changed: list[str],
    alloc_bound: int,
) -> TableUpdate:
    removed_at = sorted(old.name_index[name] for name in removed)
    if added or removed:
        inserts = [(bisect_left(old.names, name), name) for name in added]
        names = tuple(_spliced(old.names, removed_at, inserts))
        node_list = _spliced(old.nodes, removed_at, [(p, nodes[name]) for p, name in inserts])
        name_index = dict(zip(names, range(len(names)), strict=True))
    else:
        names, name_index, node_list = old.names, old.name_index, list(old.nodes)
    remap = NodeRemap.between(len(old.names), removed_at, len(names), [name_index[name] for name in added])
    fresh = {name_index[name]: nodes[name] for name in (*added, *changed)}
    for j, node in fresh.items():
        node_list[j] = node

    offered = dict(old.offered)
    for name in (*removed, *changed):
        for r in old.nodes[old.name_index[name]].allocatable:
            offered[r] -= 1
            if not offered[r]:
                del offered[r]
    for node in fresh.values():
        for r in node.allocatable:
            offered[r] = offered.get(r, 0) + 1

    taint_codes, taint_sets = _taints(old, remap, fresh)
    base_mask = remap.carry(old.base_mask, False)
    for j, node in fresh.items():
        base_mask[j] = node.ready and not node.unschedulable
    columns = {
        key: column.remapped(remap, {j: node.labels.get(key) for j, node in fresh.items()})
        for key, column in old.columns.items()
    }
    table = NodeTable(
        nodes=tuple(node_list),
        names=names,
        name_index=name_index,
        offered=offered,
        alloc_bound=alloc_bound,
        alloc=_alloc(old, remap, fresh, sorted(set(offered) | {PODS})),
        base_mask=base_mask,
        taint_codes=taint_codes,
        taint_sets=taint_sets,
        columns=columns,
    )
    return TableUpdate(table, remap, tuple(added), tuple(removed))


def _alloc(old: NodeTable, remap: NodeRemap, fresh: Mapping[int, NodeInfo], resources: list[str]) -> IntArray:
    if tuple(resources) == old.resources:
        alloc = remap.carry(old.alloc, 0)
    else:
        alloc = np.zeros((len(resources), remap.new_size), dtype=np.int64)
        rows = [(i, old.resource_index[r]) for i, r in enumerate(resources) if r in old.resource_index]
        alloc[[i for i, _ in rows]] = remap.carry(old.alloc[[o for _, o in rows]], 0)
    row_of = {r: i for i, r in enumerate(resources)}
    cap = cap_for(remap.new_size)
    for j, node in fresh.items():
        alloc[:, j] = 0
        for r, v in node.allocatable.items():
            alloc[row_of[r], j] = clipped(v, cap)
    return alloc


def _taints(
    old: NodeTable, remap: NodeRemap, fresh: Mapping[int, NodeInfo]
) -> tuple[IndexArray, tuple[tuple[Taint, ...], ...]]:
    """Taint-set codes per node, with sets no node has any more dropped so they cannot pile up."""
    index = {taints: i for i, taints in enumerate(old.taint_sets)}
    codes = remap.carry(old.taint_codes, 0)
    for j, node in fresh.items():
        codes[j] = index.setdefault(scheduling_taints(node.taints), len(index))
    sets = tuple(index)
    in_use = np.bincount(codes, minlength=len(sets)) > 0
    if in_use.all():
        return codes, sets
    recode = (np.cumsum(in_use) - 1).astype(np.intp)
    return recode[codes], tuple(s for s, keep in zip(sets, in_use.tolist(), strict=True) if keep)
