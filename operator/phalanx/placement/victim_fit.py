"""The preemptor's fit per node, as victim choice models it (see preemption.py).

How many pods of each pod shape of the group fit on each node, computed like `decide` (free capacity,
static eligibility, request clipping, the pod slot), so the victim search can update it in O(resources)
per pod taken or given back instead of calling `decide` for every candidate set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .columns import BoolArray, IntArray
from .model import PODS, GroupRequest, PodRequirements
from .snapshot import Snapshot

__all__ = ["FitSignature", "PreemptorFit"]


@dataclass(slots=True)
class FitSignature:
    """Pods of the preemptor sharing one PodRequirements: how many, what each takes, where they may go."""

    size: int
    pairs: tuple[tuple[int, int], ...]  # (fit column, amount > 0); the pod slot included
    eligible: BoolArray


class PreemptorFit:
    """How many pods of each signature of the group fit per node, computed like `decide`."""

    def __init__(self, snapshot: Snapshot, group: GroupRequest) -> None:
        self.need = max(1, group.min_count) - len(group.bound_nodes)
        sizes: dict[PodRequirements, int] = {}
        for pod in group.pending:
            sizes[pod.requirements] = sizes.get(pod.requirements, 0) + 1
        pods_row = snapshot.resource_index(PODS)
        assert pods_row is not None, "every snapshot has a pods column"
        rows = {pods_row}
        for req in sizes:
            for resource, amount in req.requests:
                row = snapshot.resource_index(resource)
                if amount > 0 and resource != PODS and row is not None:
                    rows.add(row)
        self.rows = sorted(rows)
        self.resources = [snapshot.resources[r] for r in self.rows]
        column = {r: j for j, r in enumerate(self.rows)}
        alloc, used = snapshot.allocatable_by_resource, snapshot.used_by_resource
        self.free: IntArray = alloc[self.rows] - used[self.rows]
        self.cap = snapshot.max_amount
        n = len(snapshot.node_names)
        self.signatures: list[FitSignature] = []
        for req, size in sizes.items():
            amounts = {column[pods_row]: 1}
            fits_nowhere = False
            for resource, amount in req.requests:
                if amount <= 0 or resource == PODS:
                    continue
                row = snapshot.resource_index(resource)
                if row is None:
                    fits_nowhere = True  # no node offers it
                else:
                    amounts[column[row]] = min(amount, self.cap + 1)
            eligible = np.zeros(n, dtype=np.bool_) if fits_nowhere else snapshot.eligible(req)
            self.signatures.append(FitSignature(size, tuple(sorted(amounts.items())), eligible))
        self.eligible_any: BoolArray = np.zeros(n, dtype=np.bool_)
        for sig in self.signatures:
            self.eligible_any |= sig.eligible
        self.base: list[IntArray] = [self.counts(sig, self.free) for sig in self.signatures]
        """Pods of each signature that fit per node as things are."""

    def counts(self, sig: FitSignature, free: IntArray) -> IntArray:
        """Pods of `sig` that fit per node given free capacity (columns x nodes)."""
        count: IntArray | None = None
        for j, amount in sig.pairs:
            q = free[j] // amount
            count = q if count is None else np.minimum(count, q)
        assert count is not None
        np.maximum(count, 0, out=count)
        count *= sig.eligible
        return count

    def placed(self, totals: Iterable[int]) -> int:
        """Pods placed with these per-signature totals (decide: at most the signature's size)."""
        return sum(min(t, s.size) for t, s in zip(totals, self.signatures, strict=True))
