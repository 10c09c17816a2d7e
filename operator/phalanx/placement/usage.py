"""Per-node usage that pods add and remove one at a time: the mutable working copy behind LiveSnapshot.

Sums are exact, so adding then removing a pod always gives back the same array, also where
`Snapshot.build` saturates: a cell holds min(exact sum, SATURATED) and any cell above that keeps
its exact sum aside (only with absurd amounts, 2^62 per node).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence

import numpy as np

from .columns import IntArray
from .model import PODS
from .remap import NodeRemap
from .snapshot import SATURATED, cap_for

__all__ = ["UsageMatrix"]


class UsageMatrix:
    """Rows: "pods" then every resource a counted pod asks for (first seen first); columns: nodes.

    Like `NodeTable.entries`, each pod counts one pod slot plus its positive requests, each clipped
    to the per-node cap of the current node count.
    """

    __slots__ = ("_cap", "_max_request", "_overflow", "_rows", "_used")

    def __init__(self, node_count: int) -> None:
        self._reset(node_count)

    def _reset(self, node_count: int) -> None:
        self._rows: dict[str, int] = {PODS: 0}
        self._used: IntArray = np.zeros((1, node_count), dtype=np.int64)
        self._overflow: dict[tuple[int, int], int] = {}
        self._cap = cap_for(node_count)
        self._max_request = 0
        """At least the largest request of any counted pod, before clipping."""

    @property
    def node_count(self) -> int:
        return int(self._used.shape[1])

    def add(self, node: int, requests: Mapping[str, int], sign: int = 1) -> None:
        """Count one pod on node index `node` (sign 1) or stop counting it (sign -1)."""
        self._add_cell(0, node, sign)
        for resource, value in requests.items():
            if resource == PODS or value <= 0:
                continue
            amount = int(value)
            self._max_request = max(self._max_request, amount)
            row = self._rows.get(resource)
            if row is None:
                row = self._add_row(resource)
            self._add_cell(row, node, sign * min(amount, self._cap))

    def _add_row(self, resource: str) -> int:
        row = len(self._rows)
        self._rows[resource] = row
        self._used = np.vstack((self._used, np.zeros((1, self.node_count), dtype=np.int64)))
        return row

    def _add_cell(self, row: int, node: int, delta: int) -> None:
        exact = self._overflow.pop((row, node), None)
        if exact is None:
            exact = int(self._used[row, node])
        exact += delta
        if exact > SATURATED:
            self._overflow[(row, node)] = exact
        self._used[row, node] = min(exact, SATURATED)

    def needs_recount(self, node_count: int) -> bool:
        """Whether some counted amount is clipped differently at the cap of `node_count` nodes."""
        cap = cap_for(node_count)
        return cap != self._cap and self._max_request > min(cap, self._cap)

    def moved(self, remap: NodeRemap, requested: Container[str]) -> None:
        """Nodes move by `remap`; new nodes start empty. Rows of resources that no pod asks for any
        more (all zero) are dropped. The caller checks `needs_recount` first."""
        kept = [r for r in self._rows if r == PODS or r in requested]
        rows = [self._rows[r] for r in kept]
        used = self._used if len(rows) == len(self._rows) else self._used[rows]
        self._used = remap.carry(used, 0)
        if self._overflow:
            new_row = {old: new for new, old in enumerate(rows)}
            old_to_new = remap.old_to_new()
            self._overflow = {
                (new_row[row], int(old_to_new[node])): exact
                for (row, node), exact in self._overflow.items()
                if old_to_new[node] >= 0
            }
        self._rows = dict(zip(kept, range(len(kept)), strict=True))
        self._cap = cap_for(remap.new_size)

    def recount(self, node_count: int, pods: Iterable[tuple[int, Mapping[str, int]]]) -> None:
        """Start over from (node index, requests) of every counted pod."""
        self._reset(node_count)
        cap, rows = self._cap, self._rows
        cell_rows: list[int] = []
        cell_nodes: list[int] = []
        amounts: list[int] = []
        for node, requests in pods:
            cell_rows.append(0)
            cell_nodes.append(node)
            amounts.append(1)
            for resource, value in requests.items():
                if resource != PODS and value > 0:
                    amount = int(value)
                    self._max_request = max(self._max_request, amount)
                    cell_rows.append(rows.setdefault(resource, len(rows)))
                    cell_nodes.append(node)
                    amounts.append(min(amount, cap))
        flat = np.array(cell_rows, dtype=np.intp) * node_count + np.array(cell_nodes, dtype=np.intp)
        used = np.zeros(len(rows) * node_count, dtype=np.int64)
        if amounts and max(amounts) * int(np.bincount(flat).max()) <= SATURATED:
            np.add.at(used, flat, np.array(amounts, dtype=np.int64))
        elif amounts:
            # Some cell may pass SATURATED: sum exactly in Python (absurd amounts only).
            exact: dict[int, int] = {}
            for cell, amount in zip(flat.tolist(), amounts, strict=True):
                exact[cell] = exact.get(cell, 0) + amount
            for cell, total in exact.items():
                used[cell] = min(total, SATURATED)
                if total > SATURATED:
                    self._overflow[divmod(cell, node_count)] = total
        self._used = used.reshape(len(rows), node_count)

    def select(self, resources: Sequence[str]) -> IntArray:
        """A new resources x nodes array of the given rows (zeros for resources no pod asks for)."""
        pairs = [(i, row) for i, r in enumerate(resources) if (row := self._rows.get(r)) is not None]
        if len(pairs) == len(resources):
            picked: IntArray = np.take(self._used, [row for _, row in pairs], axis=0)
            return picked
        out = np.zeros((len(resources), self.node_count), dtype=np.int64)
        for i, row in pairs:
            out[i] = self._used[row]
        return out
