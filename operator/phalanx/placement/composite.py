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

from dataclasses import replace
from typing import Final

import numpy as np

from .columns import IndexArray
from .composite_model import (
    COMPOSITE_PREFIX,
    MAX_DEPTH,
    CompositeAdmit,
    CompositeDecision,
    CompositeReject,
    CompositeRejectReason,
    CompositeRequest,
    GroupVerdict,
    Tree,
    composite_usage,
    leaves,
)
from .composite_search import OutOfStepsError, TreeSearch
from .composite_tree import InvalidTreeError, TreeNode, flatten_tree
from .constraints import GroupConstraints, Refusal
from .diagnosis import diagnose
from .levels import effective_levels, level_of, wider_levels
from .model import Admit, GroupRequest, PodRequest
from .packing import DecisionContext
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

_PREFIX: Final = COMPOSITE_PREFIX

DEFAULT_COMPOSITE_STEPS: Final = 2_000
"""Leaf packings the search may try before it gives up (it then says so)."""


def tree_need(snapshot: Snapshot, root: CompositeRequest) -> int | None:
    """The fewest pods the tree must place to meet every min count (its bound pods not counted), or None
    for a tree that is invalid or can never be placed (too few pods)."""
    try:
        tree, _ = flatten_tree(snapshot, root)
    except InvalidTreeError:
        return None
    return tree[0].need if tree[0].need >= 0 else None


def decide_composite(
    snapshot: Snapshot,
    root: CompositeRequest,
    *,
    max_steps: int = DEFAULT_COMPOSITE_STEPS,
    explain: bool = True,
) -> CompositeDecision:
    """Place a composite group's whole tree, all or nothing; pure and deterministic (module docstring).

    `explain=False`: a refusal for room carries no per-group verdicts (`groups` empty, the root's message
    short) — for callers that only ask whether the tree fits, such as the victim search.

    A root of `mode: preferred` whose tree no domain of its key can hold (for room: not an invalid tree) is
    placed in one domain of the next wider level, and so on up to all nodes, as `decide` does for a group;
    `CompositeAdmit.level` names the level used. If none holds it, the refusal is the one at its key."""
    first = _decide_tree(snapshot, root, max_steps, explain)
    if root.mode != "preferred" or root.topology_key is None:
        return first
    if isinstance(first, CompositeAdmit) or first.reason != "Unschedulable":
        return first
    rungs = wider_levels(root.topology_key, effective_levels(root.levels, root.topology_key))
    for key, _ in rungs[1:]:
        wider = replace(root, topology_key=key, preferred_domain=None, mode="required")
        decision = _decide_tree(snapshot, wider, max_steps, explain=False)
        if isinstance(decision, CompositeAdmit):
            return replace(decision, level=key or "")
    return first


def _decide_tree(
    snapshot: Snapshot, root: CompositeRequest, max_steps: int, explain: bool
) -> CompositeDecision:
    try:
        tree, pods = flatten_tree(snapshot, root)
    except InvalidTreeError as invalid:
        return _everyone(root, invalid.reason, invalid.message)

    def refused(note: str) -> CompositeReject:
        if explain:
            return _explain(snapshot, root, tree, pods, "Unschedulable", note)
        return CompositeReject(f"{_PREFIX}{f' ({note})' if note else ''}", "Unschedulable", ())

    if tree[0].need < 0:
        return refused(_too_few(tree))
    if not pods:
        return CompositeAdmit(domains=((root.name, None),), admits=())
    ctx = DecisionContext(snapshot, pods)
    cons = GroupConstraints.of(snapshot, pods, [sig.requirements for sig in ctx.signatures])
    if isinstance(cons, Refusal):
        return _everyone(root, cons.reason, cons.message)
    # Preferred leaves go wider only when the tree cannot be placed with every leaf at its key.
    relax = [False, True] if any(len(t.rungs) > 1 for t in tree) else [False]
    steps = max_steps
    try:
        for relaxed in relax:
            search = TreeSearch(snapshot, root, tree, pods, ctx, cons, steps, relaxed=relaxed)
            for _ in search.solve():
                search.extras()
                return _admit(snapshot, tree, search)
            steps -= search.steps
    except OutOfStepsError:
        return refused(f"gave up after {max_steps} packings")
    return refused("")


def _admit(snapshot: Snapshot, tree: list[TreeNode], search: TreeSearch) -> CompositeAdmit:
    names = snapshot.node_names
    domains = search.domains
    node_of = {m.position: names[m.node] for m in search.moves}
    placed = [t for t in tree if t.index in domains]
    admits = []
    for t in placed:
        if t.leaf is not None:
            ids = [(t.leaf.pending[k].id, node_of[p]) for k, p in enumerate(t.positions) if p in node_of]
            rung = search.rung_of.get(t.index)
            level, note = (None, "") if rung is None else (rung.level, rung.note)
            admits.append((t.name, Admit(domains[t.index][0], tuple(ids), level, note)))
    return CompositeAdmit(domains=tuple((t.name, domains[t.index][0]) for t in placed), admits=tuple(admits))


def _everyone(root: CompositeRequest, reason: CompositeRejectReason, message: str) -> CompositeReject:
    verdicts = tuple(GroupVerdict(g.name, message) for g in _below(root))
    return CompositeReject(message, reason, verdicts)


def _below(root: Tree) -> list[Tree]:
    if isinstance(root, GroupRequest):
        return []
    return [g for child in root.children for g in (child, *_below(child))]


def _too_few(tree: list[TreeNode]) -> str:
    short = [t.name for t in tree if t.leaf is not None and t.need < 0]
    return f"too few pods in {', '.join(short)}" if short else "too few child groups can be placed"


def _explain(
    snapshot: Snapshot,
    root: CompositeRequest,
    tree: list[TreeNode],
    pods: list[PodRequest],
    reason: CompositeRejectReason,
    note: str,
) -> CompositeReject:
    """Why the tree does not fit: each group placed greedily in the closest domain (most of its pods fit),
    in the search's order; a leaf that does not fit there says per domain how many pods fit and why."""
    verdicts: dict[int, str] = {}
    if pods:
        ctx = DecisionContext(snapshot, pods)
        search = TreeSearch(snapshot, root, tree, pods, ctx, None, 10**9)
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


# Candidate domains a leaf is packed into, closest first, when the reject path tells why a tree waits.
_LEAF_TRIES = 8


def _greedy(search: TreeSearch, i: int, allowed: IndexArray, verdicts: dict[int, str]) -> bool:
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
    if t.leaf is not None:
        # The first of the closest candidate domains that holds the leaf: their order bounds the room of each
        # pod shape apart, so with a leader and its workers' slots the closest may not hold them all where
        # the next does. One that none holds is diagnosed in the closest, packed as far as it goes there
        # (what its siblings then see as taken).
        for name, nodes in found[:_LEAF_TRIES]:
            search.domains[i] = (name, nodes)
            mark = search.mark()
            if t.need == 0 or search.pack(t, nodes, t.need) >= t.need:
                verdicts[i] = (
                    f"fits in {name}, waits for the rest of the tree"
                    if name
                    else "fits, waits for the rest of the tree"
                )
                return True
            search.undo(mark)
    name, nodes = found[0]
    search.domains[i] = (name, nodes)
    if t.leaf is not None:
        search.pack(t, nodes, t.need)  # as far as it goes in the closest: what its siblings are told
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


def _as_group(search: TreeSearch, t: TreeNode) -> GroupRequest:
    assert t.leaf is not None
    return GroupRequest(
        name=t.leaf.name,
        pending=t.leaf.pending,
        min_count=t.leaf.min_count,
        topology_key=t.key,
        bound_nodes=t.leaf.bound_nodes,
        levels=search.levels if level_of(search.levels, t.key) is not None else (),
    )
