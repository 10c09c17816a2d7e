"""The depth-first search over a composite group's tree (composite.py): domains and packings, backtracking.

`TreeSearch` keeps the free capacity and the moves (pod -> node) of the placement being built and undoes
them on backtrack; `solve` yields once per placement of the whole tree. See composite.py for the rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .columns import IndexArray, IntArray, LabelColumn
from .composite_model import CompositeRequest
from .composite_tree import Rung, TreeNode
from .constraints import GroupConstraints
from .levels import FloatArray, Levels, fewest_domains_order, level_codes, level_of, path_column
from .model import PodRequest
from .packing import DecisionContext, Signature, pod_capacity
from .snapshot import Snapshot

__all__ = ["Move", "OutOfStepsError", "TreeSearch"]


class OutOfStepsError(Exception):
    pass


@dataclass(slots=True)
class Move:
    position: int
    node: int


class TreeSearch:
    """The depth-first search; `free` and `moves` change as leaves are packed, undone on backtrack."""

    def __init__(
        self,
        snapshot: Snapshot,
        root: CompositeRequest,
        tree: list[TreeNode],
        pods: list[PodRequest],
        ctx: DecisionContext,
        cons: GroupConstraints | None,
        max_steps: int,
        *,
        relaxed: bool = False,
    ) -> None:
        self.snapshot = snapshot
        self.relaxed = relaxed
        """Preferred leaves may take their wider rungs (else only their key, like required ones)."""
        self.rung_of: dict[int, Rung] = {}
        """The rung each placed leaf took."""
        self.levels: Levels = root.levels
        self.tree = tree
        self.pods = pods
        self.ctx = ctx
        self.cons = cons
        self.state = cons.start() if cons is not None else None
        self.free: IntArray = ctx.free.copy()
        self.moves: list[Move] = []
        self.domains: dict[int, tuple[str | None, IndexArray]] = {}
        self.steps = 0
        self.max_steps = max_steps
        self.n = len(snapshot.node_names)
        self.sig_of: list[Signature] = [ctx.signatures[0]] * len(pods)
        for sig in ctx.signatures:
            for p in sig.positions:
                self.sig_of[p] = sig
        self.columns: dict[str | None, LabelColumn | None] = {}
        self.lower: dict[tuple[int, Rung | None], list[IndexArray]] = {}
        self.everywhere = np.arange(self.n, dtype=np.intp)
        self.sizes = {id(sig): ctx.size(sig) for sig in ctx.signatures}
        self.order: list[int] = []
        self.decided: list[int] = []
        self.placed: list[int] = []

    # --- domains ----------------------------------------------------------------------------

    def column(self, t: TreeNode) -> LabelColumn | None:
        return self.column_of(t.key)

    def column_of(self, key: str | None) -> LabelColumn | None:
        """The domains of `key` (paths when it is one of the levels); None for no key."""
        if key not in self.columns:
            col: LabelColumn | None = None
            if key is not None:
                depth = level_of(self.levels, key)
                col = (
                    self.snapshot.column(key)
                    if depth is None
                    else path_column(self.snapshot, self.levels, depth)
                )
            self.columns[key] = col
        return self.columns[key]

    def rungs(self, t: TreeNode) -> list[Rung]:
        """Where leaf t may go, in order (only its first rung unless the search is relaxed)."""
        return t.rungs if self.relaxed else t.rungs[:1]

    def node_free(self, nodes: IndexArray) -> FloatArray:
        """Normalised free capacity per node now, of the nodes some pod of the tree may use."""
        rows = np.maximum(self.free[:, nodes][self.ctx.score_pos], 0) * self.ctx.eligible[nodes]
        return self.ctx.scorer.floats(rows.T)

    def capacity(self, sig: Signature, nodes: IndexArray, cap: int) -> IntArray:
        if sig.fits_nowhere:
            return np.zeros(nodes.size, dtype=np.int64)
        count = pod_capacity(self.free[:, nodes], sig.request, cap)
        count *= sig.eligible[nodes]
        return count

    def candidates(
        self, t: TreeNode, allowed: IndexArray, *, prune: bool, rung: Rung | None = None
    ) -> list[tuple[str | None, IndexArray]]:
        """Domains of t's key (or of the rung's) inside `allowed`, holding the subtree's bound pods, best
        first: most of the subtree's pods that fit (an upper bound), least free capacity, name. `prune`:
        only those where that bound reaches what the subtree needs."""
        col = self.column(t) if rung is None else self.column_of(rung.key)
        if col is None:
            labels: list[str | None] = [None]
            inside, starts = allowed, np.zeros(1, dtype=np.intp)
        else:
            codes = col.codes[allowed]
            keep = codes >= 0
            order = np.argsort(codes[keep], kind="stable")
            inside, codes = allowed[keep][order], codes[keep][order]
            if not inside.size:
                return []
            starts = np.concatenate(([0], np.flatnonzero(np.diff(codes)) + 1)).astype(np.intp)
            labels = [col.values[int(c)] for c in codes[starts]]
        if not inside.size:
            return []
        ends = np.append(starts[1:], inside.size)
        counts: dict[int, int] = {}
        for p in t.positions:
            counts[id(self.sig_of[p])] = counts.get(id(self.sig_of[p]), 0) + 1
        fit = np.zeros(starts.size, dtype=np.int64)
        for sig in self.ctx.signatures:
            count = counts.get(id(sig), 0)
            if count:
                fit += np.minimum(np.add.reduceat(self.capacity(sig, inside, count), starts), count)
        free = np.add.reduceat(self.node_free(inside), starts)
        found = list(range(starts.size))
        if t.bound:
            found = [d for d in found if np.isin(t.bound, inside[starts[d] : ends[d]]).all()]
        if prune:
            found = [d for d in found if fit[d] >= t.need]
            if t.leaf is None and found:
                children = self.children_bound(t, inside, starts, ends)
                found = [d for d in found if children[d] >= t.min_count]
        ranked = sorted(found, key=lambda d: (-int(fit[d]), float(free[d]), labels[d] or ""))
        if t.preferred is not None and (rung is None or rung.key == t.key):
            # The domain it had before goes first; the search backtracks to the others if it fails there.
            ranked.sort(key=lambda d: labels[d] != t.preferred)
        return [(labels[d], inside[starts[d] : ends[d]]) for d in ranked]

    def children_bound(
        self, t: TreeNode, inside: IndexArray, starts: IndexArray, ends: IndexArray
    ) -> IntArray:
        """Per domain of composite t: at most how many of its children can be placed there now. A child
        needs `need` pods in one domain of its own key, so a domain of that key holds at most
        floor(capacity / need) of such children; children alike (same key, pods and need) share those
        slots, children unlike are counted as if they did not compete (an upper bound)."""
        bound = np.zeros(starts.size, dtype=np.int64)
        classes: dict[tuple[object, ...], list[int]] = {}
        for c in t.children:
            child = self.tree[c]
            if child.need < 0:
                continue
            sigs = tuple(sorted(id(self.sig_of[p]) for p in child.positions))
            # A leaf that may go wider than its key is bounded at its widest rung.
            key = child.rungs[-1].key if child.leaf is not None else child.key
            classes.setdefault((key, child.need, sigs), []).append(c)
        domain_of = np.repeat(np.arange(starts.size, dtype=np.intp), ends - starts)
        for members in classes.values():
            child = self.tree[members[0]]
            if child.need == 0:
                bound += len(members)
                continue
            capacity = np.zeros(inside.size, dtype=np.int64)
            counts: dict[int, int] = {}
            for p in child.positions:
                counts[id(self.sig_of[p])] = counts.get(id(self.sig_of[p]), 0) + 1
            for sig in self.ctx.signatures:
                if id(sig) in counts:
                    capacity += self.capacity(sig, inside, counts[id(sig)] * len(members))
            col = self.column_of(child.rungs[-1].key if child.leaf is not None else child.key)
            codes = np.zeros(inside.size, dtype=np.intp) if col is None else col.codes[inside]
            keep = codes >= 0
            pairs = domain_of[keep].astype(np.int64) * (int(codes.max(initial=0)) + 1) + codes[keep]
            unique, inverse = np.unique(pairs, return_inverse=True)
            per = np.bincount(inverse.reshape(-1), weights=capacity[keep], minlength=unique.size)
            slots = np.bincount(
                (unique // (int(codes.max(initial=0)) + 1)).astype(np.intp),
                weights=np.floor(per / child.need),
                minlength=starts.size,
            ).astype(np.int64)
            bound += np.minimum(slots, len(members))
        return bound

    # --- packing a leaf ---------------------------------------------------------------------

    def lower_of(self, t: TreeNode) -> list[IndexArray]:
        """Path codes of the levels below t's, or below the rung it took (none without levels: the nodes are
        the only lower level; the parent's whole domain without levels: the domains of the leaf's key)."""
        rung = self.rung_of.get(t.index)
        cached = self.lower.get((t.index, rung))
        if cached is None:
            depth = t.level if rung is None else rung.depth
            cached = level_codes(self.snapshot, self.levels, depth) if self.levels else []
            if rung is not None and rung.fewest_of is not None:
                col = self.column_of(rung.fewest_of)
                assert col is not None
                cached = [col.codes, *cached]
            self.lower[(t.index, rung)] = cached
        return cached

    def fill_order(self, t: TreeNode, nodes: IndexArray, positions: list[int], need: int) -> IndexArray:
        """decide's order (by what the tree left free): the fewest lower domains, the fewest nodes."""
        nodes = nodes[self.ctx.eligible[nodes]]
        lower = self.lower_of(t)
        capacity = np.zeros(self.n, dtype=np.int64)
        sigs = {id(self.sig_of[p]): self.sig_of[p] for p in positions}
        for sig in sigs.values():
            capacity[nodes] += self.capacity(sig, nodes, len(positions))
        free = np.zeros(self.n, dtype=np.float64)
        free[nodes] = self.node_free(nodes)
        return fewest_domains_order(nodes, capacity, need, lower, free)

    def pack(self, t: TreeNode, nodes: IndexArray, want: int, *, counted: bool = True) -> int:
        """Place up to `want` of the leaf's unplaced pods on `nodes`; returns how many were placed.
        `counted`: a step of the search (the extras after a placement is found are not)."""
        if counted:
            self.steps += 1
            if self.steps > self.max_steps:
                raise OutOfStepsError
        placed_now = {m.position for m in self.moves}
        positions = [p for p in t.positions if p not in placed_now]
        positions.sort(key=lambda p: (-self.sizes[id(self.sig_of[p])], p))
        if want <= 0 or not positions:
            return 0
        order = self.fill_order(t, nodes, positions, want)
        if self.cons is not None:
            return self._pack_constrained(order, positions, want)
        placed = 0
        by_sig: dict[int, list[int]] = {}
        for p in positions:
            by_sig.setdefault(id(self.sig_of[p]), []).append(p)
        for group in by_sig.values():
            sig = self.sig_of[group[0]]
            left = min(len(group), want - placed)
            if left <= 0:
                break
            count = self.capacity(sig, order, left)
            before = np.cumsum(count) - count
            take = np.clip(left - before, 0, count)
            queue = iter(group)  # pods of one signature in pending order
            for node in np.repeat(order, take).tolist():
                self._move(next(queue), int(node))
                placed += 1
        return placed

    def _move(self, position: int, node: int) -> None:
        self.free[:, node] -= self.sig_of[position].request
        self.moves.append(Move(position, node))
        if self.state is not None:
            self.state.place(position, node)

    def _pack_constrained(self, order: IndexArray, positions: list[int], want: int) -> int:
        assert self.cons is not None and self.state is not None
        placed = 0
        for p in positions:
            if placed >= want:
                break
            sig = self.sig_of[p]
            if sig.fits_nowhere:
                continue
            mask = sig.eligible[order].copy()
            for j in np.flatnonzero(sig.request > 0).tolist():
                mask &= self.free[j, order] >= sig.request[j]
            static = self.cons.static(p)
            if static is not None:
                mask &= static[order]
            if mask.any():
                mask, _ = self.state.allowed(p, order, mask)
            hits = np.flatnonzero(mask)
            if hits.size:
                self._move(p, int(order[int(hits[0])]))
                placed += 1
        return placed

    def mark(self) -> int:
        return len(self.moves)

    def undo(self, mark: int) -> None:
        if len(self.moves) == mark:
            return
        for m in self.moves[mark:]:
            self.free[:, m.node] += self.sig_of[m.position].request
        del self.moves[mark:]
        if self.cons is not None:
            self.state = self.cons.start()
            for m in self.moves:
                self.state.place(m.position, m.node)

    # --- the search -------------------------------------------------------------------------
    #
    # Leaves are decided one at a time, finest effective level first (a relaxed preferred leaf: its widest
    # rung's; then most pods needed, then tree order): placed (include) before left out. A composite's
    # domain is chosen when its first leaf is placed, among its candidates inside its parent's domain. So
    # which nodes a leaf takes inside its domain only matters to leaves decided later, at coarser levels,
    # which see totals only: with pods alike and nested levels the search over domains is exhaustive
    # (property-tested, preferred leaves too).

    def solve(self) -> Iterator[None]:
        """Yields once per placement of the whole tree (its state applied while suspended)."""
        tree = self.tree
        self.order = sorted(
            (t.index for t in tree if t.leaf is not None),
            key=lambda i: (-self.sort_level(tree[i]), -tree[i].need, i),
        )
        self.decided = [0] * len(tree)  # children decided, per composite
        self.placed = [0] * len(tree)  # children placed, per composite
        yield from self.step(0)

    def sort_level(self, t: TreeNode) -> int:
        """The level a leaf is decided at: its own, or in a relaxed search its widest rung's (a leaf that may
        spread over a wide domain goes after the finer ones, whose nodes it could otherwise take)."""
        return self.rungs(t)[-1].depth if self.relaxed else t.level

    def step(self, k: int) -> Iterator[None]:
        if k == len(self.order):
            yield
            return
        i = self.order[k]
        t = self.tree[i]
        if t.need >= 0:
            for _ in self.include(self.ancestors(i), 0, i):
                yield from self.decided_then(i, True, k)
        if not t.bound:  # a group whose pods already run is never left out
            yield from self.decided_then(i, False, k)

    def ancestors(self, i: int) -> list[int]:
        chain = []
        parent = self.tree[i].parent
        while parent is not None:
            chain.append(parent)
            parent = self.tree[parent].parent
        return chain[::-1]

    def decided_then(self, i: int, placed: bool, k: int) -> Iterator[None]:
        """Record that group i is decided (placed or not), completing its ancestors in turn; go on with the
        next leaf unless some composite can no longer meet its min count."""
        decided, counted = self.decided[:], self.placed[:]
        ok = True
        parent = self.tree[i].parent
        while parent is not None:
            t = self.tree[parent]
            self.decided[parent] += 1
            self.placed[parent] += placed
            left = len(t.children) - self.decided[parent]
            if self.placed[parent] and self.placed[parent] + left < t.min_count:
                ok = False  # partly placed, cannot reach its min count: never admitted
                break
            if left:
                break
            placed = self.placed[parent] >= t.min_count
            if parent == 0 and not placed:
                ok = False  # the root or nothing
            parent = t.parent
        if ok:
            yield from self.step(k + 1)
        self.decided, self.placed = decided, counted

    def include(self, chain: list[int], j: int, i: int) -> Iterator[None]:
        """Choose domains for the ancestors that have none yet (top down), then place leaf i."""
        if j < len(chain) and chain[j] in self.domains:
            yield from self.include(chain, j + 1, i)
            return
        g = chain[j] if j < len(chain) else i
        t = self.tree[g]
        parent = t.parent
        allowed = self.domains[parent][1] if parent is not None else self.everywhere
        if g == i:
            yield from self.place_leaf(t, allowed)
            return
        for name, nodes in self.candidates(t, allowed, prune=True):
            self.domains[g] = (name, nodes)
            yield from self.include(chain, j + 1, i)
            del self.domains[g]

    def place_leaf(self, t: TreeNode, allowed: IndexArray) -> Iterator[None]:
        """Leaf t in each domain of each of its rungs inside `allowed` in turn, with what it needs."""
        for rung in self.rungs(t):
            self.rung_of[t.index] = rung
            for name, nodes in self.candidates(t, allowed, prune=True, rung=rung):
                self.domains[t.index] = (self.named(t, rung, name), nodes)
                mark = self.mark()
                if t.need == 0 or self.pack(t, nodes, t.need) >= t.need:
                    yield
                self.undo(mark)
                del self.domains[t.index]
            del self.rung_of[t.index]

    def child_order(self, t: TreeNode) -> list[int]:
        return sorted(t.children, key=lambda c: (-self.tree[c].finest, -self.tree[c].need, c))

    def extras(self) -> None:
        """After the min counts are met, in tree order: more pods of placed leaves, and leaves left out whose
        parent is placed, where they fit (a composite left out stays out)."""
        for t in self.tree:
            if t.leaf is None or t.parent is None or t.parent not in self.domains:
                continue
            if t.index in self.domains:
                self.pack(t, self.domains[t.index][1], len(t.positions), counted=False)
                continue
            if t.need < 0:
                continue
            self.extra_leaf(t)

    def named(self, t: TreeNode, rung: Rung, name: str | None) -> str | None:
        """A leaf's domain name: its rung's domain, or its parent's when the rung is the parent's domain."""
        if rung.key is None and t.parent is not None:
            return self.domains[t.parent][0]
        return name

    def extra_leaf(self, t: TreeNode) -> None:
        """A leaf left out, placed after all in the first domain (of its first rung) that holds it."""
        assert t.parent is not None
        for rung in self.rungs(t):
            self.rung_of[t.index] = rung
            for name, nodes in self.candidates(t, self.domains[t.parent][1], prune=True, rung=rung):
                mark = self.mark()
                if t.need == 0 or self.pack(t, nodes, t.need, counted=False) >= t.need:
                    self.domains[t.index] = (self.named(t, rung, name), nodes)
                    self.pack(t, nodes, len(t.positions), counted=False)
                    return
                self.undo(mark)
            del self.rung_of[t.index]
