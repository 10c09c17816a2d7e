"""What one placement decision works on: the group's pod shapes and the free capacity they look at.

`DecisionContext` holds, for one `decide` (or one `decide_composite`) call, the free capacity of the
resources the group asks for (resources x nodes), one `Signature` per distinct `PodRequirements` with its
static eligibility, the best-fit scorer, and the order in which a domain's nodes are filled (the fewest
nodes, the tightest last; with levels the fewest domains of each lower level first: levels.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .levels import fewest_domains_order
from .model import PODS, PodRequest, PodRequirements
from .scoring import Scorer
from .snapshot import Snapshot

__all__ = ["DecisionContext", "Signature", "pod_capacity"]


@dataclass(slots=True)
class Signature:
    """Pods of the group sharing one PodRequirements."""

    requirements: PodRequirements
    positions: list[int]
    request: IntArray  # per row of the decision's free matrix; pods = 1
    eligible: BoolArray
    fits_nowhere: bool  # asks for a resource no node offers


def pod_capacity(free: IntArray, request: IntArray, cap: int) -> IntArray:
    """How many pods with `request` fit on each node (nodes are independent), at most `cap`.

    `free` is resources x nodes; only resources the pod asks for (request > 0) limit it.
    """
    count = np.full(free.shape[1], cap, dtype=np.int64)
    for j in np.flatnonzero(request > 0):
        # Integer division is the slow part; pod slots (request 1) need none.
        np.minimum(count, free[j] if request[j] == 1 else free[j] // request[j], out=count)
    np.maximum(count, 0, out=count)
    return count


class DecisionContext:
    """State of one decide() call: the columns it needs and the per-signature data."""

    def __init__(
        self, snapshot: Snapshot, pending: Sequence[PodRequest], lower: Sequence[IndexArray] = ()
    ) -> None:
        self.snapshot = snapshot
        self.lower = lower
        """Path codes of the levels below the placements' level (empty without levels: the nodes alone)."""
        by_requirements: dict[PodRequirements, list[int]] = {}
        for i, pod in enumerate(pending):
            by_requirements.setdefault(pod.requirements, []).append(i)

        totals = snapshot.totals
        requested: set[str] = set()
        unknown: set[PodRequirements] = set()
        for req in by_requirements:
            for resource, amount in req.requests:
                if amount > 0 and resource != PODS:
                    requested.add(resource)
                    if snapshot.resource_index(resource) is None:
                        unknown.add(req)
        # Best fit is measured on what the group asks for; a group asking for nothing packs by pod slots.
        scored = sorted(requested) or [PODS]
        score_cols = [c for r in scored if (c := snapshot.resource_index(r)) is not None and totals[c] > 0]
        check_cols = {c for r in requested if (c := snapshot.resource_index(r)) is not None}
        pods_col = snapshot.resource_index(PODS)
        assert pods_col is not None, "every snapshot has a pods column"
        columns = sorted(check_cols | set(score_cols) | {pods_col})
        position = {c: j for j, c in enumerate(columns)}

        # Free capacity, resources x nodes, only for the resources this decision looks at.
        alloc, used = snapshot.allocatable_by_resource, snapshot.used_by_resource
        n = alloc.shape[1]
        free = np.empty((len(columns), n), dtype=np.int64)
        for j, c in enumerate(columns):
            np.subtract(alloc[c], used[c], out=free[j])
        self.free: IntArray = free
        self.score_pos = [position[c] for c in score_cols]
        self.scorer = Scorer([totals[c] for c in score_cols])
        cap = snapshot.max_amount

        self.signatures: list[Signature] = []
        for req, positions in by_requirements.items():
            request = np.zeros(len(columns), dtype=np.int64)
            request[position[pods_col]] = 1
            for resource, amount in req.requests:
                c = snapshot.resource_index(resource)
                if c is not None and resource != PODS and amount > 0:
                    # Above the per-node cap nothing can hold it; cap + 1 keeps that true without overflow.
                    request[position[c]] = min(amount, cap + 1)
            self.signatures.append(Signature(req, positions, request, snapshot.eligible(req), req in unknown))

        eligible = self.signatures[0].eligible
        for sig in self.signatures[1:]:
            eligible = eligible | sig.eligible
        # Free capacity that counts for best fit: only nodes some pod of the group may use.
        score_free = np.empty((len(self.score_pos), n), dtype=np.int64)
        for j, p in enumerate(self.score_pos):
            np.maximum(free[p], 0, out=score_free[j])
            score_free[j] *= eligible
        self.eligible: BoolArray = eligible
        self.score_free: IntArray = score_free

    def capacity(self, sig: Signature) -> IntArray:
        if sig.fits_nowhere:
            return np.zeros(self.free.shape[1], dtype=np.int64)
        count = pod_capacity(self.free, sig.request, len(sig.positions))
        count *= sig.eligible
        return count

    def size(self, sig: Signature) -> Fraction:
        return self.scorer.fraction(sig.request[self.score_pos])

    def fill_order(self, nodes: IndexArray, capacity: IntArray | None, need: int) -> IndexArray:
        """The order to fill a domain's nodes for `need` pods of per-node `capacity` (None: the sum over
        signatures, an upper bound for mixed pods): the BestFit descent of levels.py, the node being the
        lowest level always — the fewest domains of each lower level (with levels), then the fewest nodes,
        the last one the tightest; ties by least normalised free capacity (exact), then name."""
        if capacity is None:
            capacity = self.capacity(self.signatures[0])
            for sig in self.signatures[1:]:
                capacity = capacity + self.capacity(sig)
        n = self.free.shape[1]
        free = np.zeros(n, dtype=np.float64)
        free[nodes] = self.scorer.floats(self.score_free[:, nodes].T)
        rank = np.zeros(n, dtype=np.int64)
        rank[nodes[self.scorer.order(self.score_free[:, nodes].T, nodes)]] = np.arange(nodes.size)
        return fewest_domains_order(nodes, capacity, need, self.lower, free, rank)
