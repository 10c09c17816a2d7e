"""A composite group's tree, flattened for the search (composite.py): one `TreeNode` per group, in tree order.

Each node knows its effective level (the finest of its own key's and its ancestors'), its min count, the
pending positions and bound nodes of its subtree, and the fewest pods the subtree needs (`need`, -1 when it
can never be placed). Invalid trees raise `InvalidTreeError` with the reason the conditions give.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from .composite_model import COMPOSITE_PREFIX, MAX_DEPTH, CompositeRejectReason, CompositeRequest, Tree
from .engine import auto_choice
from .levels import Levels, level_of
from .model import GroupRequest, PodRequest
from .snapshot import Snapshot

__all__ = ["InvalidTreeError", "Rung", "TreeNode", "flatten_tree", "leaf_rungs"]

_PREFIX: Final = COMPOSITE_PREFIX


@dataclass(slots=True)
class TreeNode:
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
    rungs: list[Rung] = field(default_factory=list)  # leaves: where its pods may go, in order of preference
    preferred: str | None = None  # a domain of its key tried first (the request's preferred_domain)


@dataclass(frozen=True, slots=True)
class Rung:
    """Where a leaf's pods may go: inside one domain of `key` (None: anywhere in its parent's domain).

    A `required` leaf has one rung, its key. A `preferred` leaf has its key, then each wider level down to
    its parent's, then its parent's whole domain. An `auto` leaf has one, the narrowest where it can ever
    fit (auto.py), no wider than its parent's domain.
    """

    key: str | None
    depth: int
    """The level of the rung for the fill order below it (the levels below it, then the nodes; -1: none)."""
    level: str | None = None
    """For `Admit.level`: None at the leaf's own key, else the rung's label, "" for the parent's domain."""
    fewest_of: str | None = None
    """Without levels, the parent's whole domain is filled with the fewest domains of this key."""
    note: str = ""
    """`auto` leaves: `Admit.mode_note`."""


def leaf_rungs(snapshot: Snapshot, leaf: GroupRequest, levels: Levels, parent_level: int) -> list[Rung]:
    """The rungs of a leaf whose parent's effective level is `parent_level` (see `Rung`)."""
    key = leaf.topology_key
    own = level_of(levels, key)
    level = parent_level if own is None else max(own, parent_level)
    if leaf.mode == "required" or key is None or (own is not None and own <= parent_level):
        return [Rung(key, level)]
    if own is None:  # the key is not a level: the key, then the parent's domain with fewest of the key
        wider = [Rung(key, level), Rung(None, parent_level, "", fewest_of=key)]
    else:
        wider = [Rung(levels[d], d, None if d == own else levels[d]) for d in range(own, parent_level, -1)]
        wider.append(Rung(None, parent_level, ""))
    if leaf.mode == "preferred":
        return wider
    alone = GroupRequest(leaf.name, leaf.pending, leaf.min_count, key, leaf.bound_nodes, levels, "auto")
    choice = auto_choice(snapshot, alone)
    rung = next((r for r in wider if r.key == choice.key and r.key is not None), wider[-1])
    return [Rung(rung.key, rung.depth, rung.level, rung.fewest_of, choice.note)]


class InvalidTreeError(Exception):
    def __init__(self, reason: CompositeRejectReason, message: str) -> None:
        super().__init__(message)
        self.reason: CompositeRejectReason = reason
        self.message = message


def flatten_tree(snapshot: Snapshot, root: CompositeRequest) -> tuple[list[TreeNode], list[PodRequest]]:
    levels = root.levels
    nodes: list[TreeNode] = []
    pods: list[PodRequest] = []
    names: set[str] = set()

    def visit(t: Tree, parent: int | None, depth: int, parent_level: int) -> int:
        if depth > MAX_DEPTH:
            raise InvalidTreeError(
                "Invalid", f"{_PREFIX}: the tree is deeper than {MAX_DEPTH} levels of groups"
            )
        if t.name in names:
            raise InvalidTreeError("Invalid", f"{_PREFIX}: two groups of the tree are named {t.name}")
        names.add(t.name)
        own = level_of(levels, t.topology_key)
        level = parent_level if own is None else max(own, parent_level)
        node = TreeNode(len(nodes), t.name, parent, t.topology_key, level, max(1, t.min_count))
        node.preferred = t.preferred_domain
        nodes.append(node)
        if isinstance(t, GroupRequest):
            if t.levels and tuple(t.levels) != tuple(levels):
                raise InvalidTreeError(
                    "Invalid", f"{_PREFIX}: group {t.name} names other topology levels than the tree"
                )
            node.leaf = t
            node.rungs = leaf_rungs(snapshot, t, levels, parent_level)
            node.positions = list(range(len(pods), len(pods) + len(t.pending)))
            pods.extend(t.pending)
            for name in t.bound_nodes:
                i = snapshot.node_index(name)
                if i is None:
                    raise InvalidTreeError(
                        "DomainConflict",
                        f"{_PREFIX}: node {name} of a scheduled pod of {t.name} is gone",
                    )
                node.bound.append(i)
            node.need = max(0, node.min_count - len(t.bound_nodes))
            node.finest = level
            if len(t.pending) + len(t.bound_nodes) < node.min_count:
                node.need = -1  # marks a leaf that can never be placed (too few pods)
            return node.index
        if not t.children:
            raise InvalidTreeError("Invalid", f"{_PREFIX}: composite group {t.name} has no child groups")
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
