"""Composite pod groups (upstream CompositePodGroup): a tree of gangs placed all or nothing.

A leaf is a `GroupRequest` (a PodGroup: its pods, minCount, optional topology key); an inner node is a
`CompositeRequest` (its children, how many of them must be placed, optional topology key). The rules:

- every leaf's pods inside one domain of its key, every child of a composite inside one domain of the
  composite's key (so a whole subtree shares its ancestors' domains); with `levels` domains are paths;
- all or nothing at every level: a leaf is placed with at least minCount pods (bound ones count), a
  composite with at least `min_count` children placed, the root or nothing at all;
- the tree's own pods count against each other: resources, and the filters `constraints.py` models for
  one gang, checked for all the tree's pods as one gang;
- best fit at every level, deterministic: each group tries the domains of its key in the order (most pods
  of the subtree that fit, least free capacity, name) and takes the first that lets the whole tree be
  placed (depth-first search with backtracking over domains and over which optional children to leave
  out, bounded by `max_steps`); inside a leaf's domain the pods go where `decide` would put them
  (BestFit descent with levels). Children are placed finest level first, then biggest first.

`decide_composite` returns a `CompositeAdmit` (a placement per leaf) or a `CompositeReject` with a reason
for every group of the tree, so conditions on the PodGroups and on the CompositePodGroup say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

import numpy as np

from .columns import IndexArray, IntArray, LabelColumn
from .constraints import GroupConstraints, Refusal
from .diagnosis import diagnose
from .levels import FloatArray, Levels, fewest_domains_order, level_codes, level_of, path_column
from .model import Admit, AssumedPod, GroupRequest, PodRequest, RejectReason
from .packing import DecisionContext, Signature, pod_capacity
from .snapshot import Snapshot

__all__ = [
    "DEFAULT_COMPOSITE_STEPS",
    "MAX_DEPTH",
    "CompositeAdmit",
    "CompositeDecision",
    "CompositeReject",
    "CompositeRejectReason",
    "CompositeRequest",
    "GroupVerdict",
    "composite_usage",
    "decide_composite",
    "leaves",
    "tree_need",
]

MAX_DEPTH: Final = 4
"""Levels of groups in a tree, root and leaves included (upstream: a deeper hierarchy is Invalid)."""

DEFAULT_COMPOSITE_STEPS: Final = 2_000
"""Leaf packings the search may try before it gives up (it then says so)."""

CompositeRejectReason: TypeAlias = RejectReason | Literal["Invalid"]

_PREFIX: Final = "composite group is unschedulable"


@dataclass(frozen=True, slots=True)
class CompositeRequest:
    """A CompositePodGroup: `min_count` of its children must be placed, all inside one domain of its key.

    `levels` (read on the root only; the Topology whose levels list the keys) make every key of the tree
    a path domain; a leaf's own `levels` must be empty or the same.
    """

    name: str
    children: tuple[GroupRequest | CompositeRequest, ...]
    min_count: int
    topology_key: str | None = None
    levels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    """Why one group of the tree waits (for its PodGroup's or CompositePodGroup's condition)."""

    name: str
    message: str


@dataclass(frozen=True, slots=True)
class CompositeAdmit:
    domains: tuple[tuple[str, str | None], ...]
    """(group name, domain) of every group placed, composites and leaves, in tree order (None: no key)."""
    admits: tuple[tuple[str, Admit], ...]
    """(leaf name, its Admit) of every leaf placed, in tree order; leaves left out (above the composites'
    min counts, when they do not fit) are absent."""

    def admit(self, name: str) -> Admit | None:
        return next((a for n, a in self.admits if n == name), None)

    def domain(self, name: str) -> str | None:
        return next((d for n, d in self.domains if n == name), None)


@dataclass(frozen=True, slots=True)
class CompositeReject:
    message: str
    """For the root: what it needs, and per group that does not fit, why."""
    reason: CompositeRejectReason
    groups: tuple[GroupVerdict, ...]
    """One per group below the root, in tree order."""

    def why(self, name: str) -> str:
        return next((g.message for g in self.groups if g.name == name), self.message)


CompositeDecision: TypeAlias = CompositeAdmit | CompositeReject

_Tree: TypeAlias = GroupRequest | CompositeRequest


def leaves(root: _Tree) -> list[GroupRequest]:
    """The tree's PodGroups, in tree order."""
    if isinstance(root, GroupRequest):
        return [root]
    return [leaf for child in root.children for leaf in leaves(child)]


def composite_usage(root: CompositeRequest, admit: CompositeAdmit) -> list[AssumedPod]:
    """The assigned pods on their nodes, ready for `Snapshot.assume` (like `admitted_usage`)."""
    pods = {pod.id: pod for leaf in leaves(root) for pod in leaf.pending}
    return [
        AssumedPod(node, pods[pod_id].requirements.request_map(), pods[pod_id])
        for _, a in admit.admits
        for pod_id, node in a.assignments
    ]


@dataclass(slots=True)
class _Node:
    index: int
    name: str
    parent: int | None
    key: str | None
    level: int  # effective level: the finest of its own key's and its ancestors' (-1: none)
    min_count: int  # composites: children; leaves: pods, bound ones included
    children: list[int] = field(default_factory=list)
    leaf: GroupRequest | None = None
    positions: list[int] = field(default_factory=list)  # pending positions of the subtree's pods
    bound: list[int] = field(default_factory=list)  # node indices of the subtree's bound pods
    need: int = 0  # pods the subtree needs at least (its cheapest way to meet every min count)
    finest: int = -1  # finest effective level among the subtree's leaves


class _InvalidError(Exception):
    def __init__(self, reason: CompositeRejectReason, message: str) -> None:
        super().__init__(message)
        self.reason: CompositeRejectReason = reason
        self.message = message


class _OutOfStepsError(Exception):
    pass


def _flatten(snapshot: Snapshot, root: CompositeRequest) -> tuple[list[_Node], list[PodRequest]]:
    levels = root.levels
    nodes: list[_Node] = []
    pods: list[PodRequest] = []
    names: set[str] = set()

    def visit(t: _Tree, parent: int | None, depth: int, parent_level: int) -> int:
        if depth > MAX_DEPTH:
            raise _InvalidError("Invalid", f"{_PREFIX}: the tree is deeper than {MAX_DEPTH} levels of groups")
        if t.name in names:
            raise _InvalidError("Invalid", f"{_PREFIX}: two groups of the tree are named {t.name}")
        names.add(t.name)
        own = level_of(levels, t.topology_key)
        level = parent_level if own is None else max(own, parent_level)
        node = _Node(len(nodes), t.name, parent, t.topology_key, level, max(1, t.min_count))
        nodes.append(node)
        if isinstance(t, GroupRequest):
            if t.levels and tuple(t.levels) != tuple(levels):
                raise _InvalidError(
                    "Invalid", f"{_PREFIX}: group {t.name} names other topology levels than the tree"
                )
            if t.mode != "required":
                raise _InvalidError(
                    "Unsupported", f"{_PREFIX}: group {t.name}: preferred topology inside a composite group"
                )
            node.leaf = t
            node.positions = list(range(len(pods), len(pods) + len(t.pending)))
            pods.extend(t.pending)
            for name in t.bound_nodes:
                i = snapshot.node_index(name)
                if i is None:
                    raise _InvalidError(
                        "DomainConflict", f"{_PREFIX}: node {name} of a scheduled pod of {t.name} is gone"
                    )
                node.bound.append(i)
            node.need = max(0, node.min_count - len(t.bound_nodes))
            node.finest = level
            if len(t.pending) + len(t.bound_nodes) < node.min_count:
                node.need = -1  # marks a leaf that can never be placed (too few pods)
            return node.index
        if not t.children:
            raise _InvalidError("Invalid", f"{_PREFIX}: composite group {t.name} has no child groups")
        for child in t.children:
            c = visit(child, node.index, depth + 1, level)
            node.children.append(c)
            node.positions.extend(nodes[c].positions)
            node.bound.extend(nodes[c].bound)
            node.finest = max(node.finest, nodes[c].finest)
        needs = sorted(nodes[c].need for c in node.children if nodes[c].need >= 0)
        node.need = sum(needs[: node.min_count]) if len(needs) >= node.min_count else -1
        return node.index

    visit(root, None, 1, -1)
    return nodes, pods


@dataclass(slots=True)
class _Move:
    position: int
    node: int


class _Search:
    """The depth-first search; `free` and `moves` change as leaves are packed, undone on backtrack."""

    def __init__(
        self,
        snapshot: Snapshot,
        root: CompositeRequest,
        tree: list[_Node],
        pods: list[PodRequest],
        ctx: DecisionContext,
        cons: GroupConstraints | None,
        max_steps: int,
    ) -> None:
        self.snapshot = snapshot
        self.levels: Levels = root.levels
        self.tree = tree
        self.pods = pods
        self.ctx = ctx
        self.cons = cons
        self.state = cons.start() if cons is not None else None
        self.free: IntArray = ctx.free.copy()
        self.moves: list[_Move] = []
        self.domains: dict[int, tuple[str | None, IndexArray]] = {}
        self.steps = 0
        self.max_steps = max_steps
        self.n = len(snapshot.node_names)
        self.sig_of: list[Signature] = [ctx.signatures[0]] * len(pods)
        for sig in ctx.signatures:
            for p in sig.positions:
                self.sig_of[p] = sig
        self.columns: dict[int, LabelColumn | None] = {}
        self.lower: dict[int, list[IndexArray]] = {}
        self.everywhere = np.arange(self.n, dtype=np.intp)
        self.sizes = {id(sig): ctx.size(sig) for sig in ctx.signatures}
        self.order: list[int] = []
        self.decided: list[int] = []
        self.placed: list[int] = []

    # --- domains ----------------------------------------------------------------------------

    def column(self, t: _Node) -> LabelColumn | None:
        if t.index not in self.columns:
            col: LabelColumn | None = None
            if t.key is not None:
                depth = level_of(self.levels, t.key)
                col = (
                    self.snapshot.column(t.key)
                    if depth is None
                    else path_column(self.snapshot, self.levels, depth)
                )
            self.columns[t.index] = col
        return self.columns[t.index]

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
        self, t: _Node, allowed: IndexArray, *, prune: bool
    ) -> list[tuple[str | None, IndexArray]]:
        """Domains of t's key inside `allowed`, holding the subtree's bound pods, best first: most of the
        subtree's pods that fit (an upper bound), least free capacity, name. `prune`: only those where
        that bound reaches what the subtree needs."""
        col = self.column(t)
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
        return [(labels[d], inside[starts[d] : ends[d]]) for d in ranked]

    def children_bound(self, t: _Node, inside: IndexArray, starts: IndexArray, ends: IndexArray) -> IntArray:
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
            classes.setdefault((child.key, child.need, sigs), []).append(c)
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
            col = self.column(child)
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

    def lower_of(self, t: _Node) -> list[IndexArray]:
        """Path codes of the levels below t's (none without levels: the nodes are the only lower level)."""
        if t.index not in self.lower:
            self.lower[t.index] = level_codes(self.snapshot, self.levels, t.level) if self.levels else []
        return self.lower[t.index]

    def fill_order(self, t: _Node, nodes: IndexArray, positions: list[int], need: int) -> IndexArray:
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

    def pack(self, t: _Node, nodes: IndexArray, want: int, *, counted: bool = True) -> int:
        """Place up to `want` of the leaf's unplaced pods on `nodes`; returns how many were placed.
        `counted`: a step of the search (the extras after a placement is found are not)."""
        if counted:
            self.steps += 1
            if self.steps > self.max_steps:
                raise _OutOfStepsError
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
        self.moves.append(_Move(position, node))
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
    # Leaves are decided one at a time, finest effective level first (then most pods needed, then tree
    # order): placed (include) before left out. A composite's domain is chosen when its first leaf is
    # placed, among its candidates inside its parent's domain. So which nodes a leaf takes inside its
    # domain only matters to leaves decided later, at coarser levels, which see totals only: with pods
    # alike and nested levels the search over domains is exhaustive (property-tested).

    def solve(self) -> Iterator[None]:
        """Yields once per placement of the whole tree (its state applied while suspended)."""
        tree = self.tree
        self.order = sorted(
            (t.index for t in tree if t.leaf is not None), key=lambda i: (-tree[i].level, -tree[i].need, i)
        )
        self.decided = [0] * len(tree)  # children decided, per composite
        self.placed = [0] * len(tree)  # children placed, per composite
        yield from self.step(0)

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
        for name, nodes in self.candidates(t, allowed, prune=True):
            self.domains[g] = (name, nodes)
            if g != i:
                yield from self.include(chain, j + 1, i)
            else:
                mark = self.mark()
                if t.need == 0 or self.pack(t, nodes, t.need) >= t.need:
                    yield
                self.undo(mark)
            del self.domains[g]

    def child_order(self, t: _Node) -> list[int]:
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
            for name, nodes in self.candidates(t, self.domains[t.parent][1], prune=True):
                mark = self.mark()
                if t.need == 0 or self.pack(t, nodes, t.need, counted=False) >= t.need:
                    self.domains[t.index] = (name, nodes)
                    self.pack(t, nodes, len(t.positions), counted=False)
                    break
                self.undo(mark)


def tree_need(snapshot: Snapshot, root: CompositeRequest) -> int | None:
    """The fewest pods the tree must place to meet every min count (its bound pods not counted), or None
    for a tree that is invalid or can never be placed (too few pods)."""
    try:
        tree, _ = _flatten(snapshot, root)
    except _InvalidError:
        return None
    return tree[0].need if tree[0].need >= 0 else None


def decide_composite(
    snapshot: Snapshot, root: CompositeRequest, *, max_steps: int = DEFAULT_COMPOSITE_STEPS
) -> CompositeDecision:
    """Place a composite group's whole tree, all or nothing; pure and deterministic (module docstring)."""
    try:
        tree, pods = _flatten(snapshot, root)
    except _InvalidError as invalid:
        return _everyone(root, invalid.reason, invalid.message)
    top = tree[0]
    if top.need < 0:
        return _explain(snapshot, root, tree, pods, "Unschedulable", _too_few(tree))
    if not pods:
        return _admit(snapshot, root, tree, {0: (None, np.arange(0, dtype=np.intp))}, [])
    ctx = DecisionContext(snapshot, pods)
    cons = GroupConstraints.of(snapshot, pods, [sig.requirements for sig in ctx.signatures])
    if isinstance(cons, Refusal):
        return _everyone(root, cons.reason, cons.message)
    search = _Search(snapshot, root, tree, pods, ctx, cons, max_steps)
    try:
        for _ in search.solve():
            search.extras()
            return _admit(snapshot, root, tree, dict(search.domains), list(search.moves))
    except _OutOfStepsError:
        return _explain(snapshot, root, tree, pods, "Unschedulable", f"gave up after {max_steps} packings")
    return _explain(snapshot, root, tree, pods, "Unschedulable", "")


def _admit(
    snapshot: Snapshot,
    root: CompositeRequest,
    tree: list[_Node],
    domains: dict[int, tuple[str | None, IndexArray]],
    moves: list[_Move],
) -> CompositeAdmit:
    names = snapshot.node_names
    node_of = {m.position: names[m.node] for m in moves}
    placed = [t for t in tree if t.index in domains]
    admits = []
    for t in placed:
        if t.leaf is not None:
            ids = [(t.leaf.pending[k].id, node_of[p]) for k, p in enumerate(t.positions) if p in node_of]
            admits.append((t.name, Admit(domain=domains[t.index][0], assignments=tuple(ids))))
    return CompositeAdmit(domains=tuple((t.name, domains[t.index][0]) for t in placed), admits=tuple(admits))


def _everyone(root: CompositeRequest, reason: CompositeRejectReason, message: str) -> CompositeReject:
    verdicts = tuple(GroupVerdict(g.name, message) for g in _below(root))
    return CompositeReject(message, reason, verdicts)


def _below(root: _Tree) -> list[_Tree]:
    if isinstance(root, GroupRequest):
        return []
    return [g for child in root.children for g in (child, *_below(child))]


def _too_few(tree: list[_Node]) -> str:
    short = [t.name for t in tree if t.leaf is not None and t.need < 0]
    return f"too few pods in {', '.join(short)}" if short else "too few child groups can be placed"


def _explain(
    snapshot: Snapshot,
    root: CompositeRequest,
    tree: list[_Node],
    pods: list[PodRequest],
    reason: CompositeRejectReason,
    note: str,
) -> CompositeReject:
    """Why the tree does not fit: each group placed greedily in the closest domain (most of its pods fit),
    in the search's order; a leaf that does not fit there says per domain how many pods fit and why."""
    verdicts: dict[int, str] = {}
    if pods:
        ctx = DecisionContext(snapshot, pods)
        search = _Search(snapshot, root, tree, pods, ctx, None, 10**9)
        everywhere = np.arange(len(snapshot.node_names), dtype=np.intp)
        _greedy(search, 0, everywhere, verdicts)
    else:
        for t in tree:
            verdicts[t.index] = "no pods"
    top = tree[0]
    where = f" in one domain of {top.key}" if top.key else ""
    details = [f"{tree[i].name}: {m}" for i, m in sorted(verdicts.items()) if i and tree[i].leaf is not None]
    message = f"{_PREFIX}: {top.min_count} of {len(top.children)} child groups must fit{where}"
    if note:
        message += f" ({note})"
    if 0 in verdicts:
        message += f"; {verdicts[0]}"
    if details:
        message += "; " + "; ".join(details)
    groups = tuple(GroupVerdict(t.name, f"{t.name}: {verdicts.get(t.index, 'not tried')}") for t in tree[1:])
    return CompositeReject(message, reason, groups)


def _greedy(search: _Search, i: int, allowed: IndexArray, verdicts: dict[int, str]) -> bool:
    t = search.tree[i]
    if t.need < 0:
        verdicts[i] = "too few pods" if t.leaf is not None else "too few of its child groups can be placed"
        return False
    found = search.candidates(t, allowed, prune=False)
    if not found:
        verdicts[i] = f"no node has the label {t.key}" + (
            " inside its parent's domain" if t.parent is not None else ""
        )
        return False
    name, nodes = found[0]
    search.domains[i] = (name, nodes)
    if t.leaf is not None:
        if t.need == 0 or search.pack(t, nodes, t.need) >= t.need:
            verdicts[i] = (
                f"fits in {name}, waits for the rest of the tree"
                if name
                else "fits, waits for the rest of the tree"
            )
            return True
        within = np.zeros(search.n, dtype=np.bool_)
        within[allowed] = True
        names = search.snapshot.node_names
        partial = [
            (names[m.node], search.pods[m.position].requirements.request_map())
            for m in search.moves
            if m.position not in t.positions
        ]
        here = search.snapshot.assume(partial) if partial else search.snapshot
        verdicts[i] = diagnose(here, _as_group(search, t), within=within).summary()
        return False
    placed = sum(_greedy(search, c, nodes, verdicts) for c in search.child_order(t))
    where = f" in {name}" if name else ""
    verdicts[i] = f"{placed} of {t.min_count} child groups fit{where}"
    return placed >= t.min_count


def _as_group(search: _Search, t: _Node) -> GroupRequest:
    assert t.leaf is not None
    return GroupRequest(
        name=t.leaf.name,
        pending=t.leaf.pending,
        min_count=t.leaf.min_count,
        topology_key=t.key,
        bound_nodes=t.leaf.bound_nodes,
        levels=search.levels if level_of(search.levels, t.key) is not None else (),
    )
