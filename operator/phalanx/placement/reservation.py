"""Bounded waiting for large gangs: which nodes to hold for a gang that has waited too long.

Without a reservation, backfill starves a large gang: every pair of nodes that frees goes to the next small
gang of the same priority (Slurm's classic failure; Kueue has StrictFIFO, KAI and Volcano reserve). The
controller decides when a gang has waited long enough; this module says where its room is to be kept.

`reserve(snapshot, group)` chooses, among the domains of the level the gang is decided at, the one where
the fewest of its pods are missing now (counting what runs there), and in it the nodes to hold: those the
gang would take were that domain empty (the node rule of `decide`: the fewest domains of each lower level,
the fewest nodes, the tightest last), of equal ones those with the most room now. `Snapshot.holding(nodes)`
is the snapshot the caller decides the other gangs on: the held nodes take no more pods, every other node
is as it is, so smaller gangs backfill elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .columns import IndexArray, IntArray
from .engine import auto_choice, decide, resolve_mode
from .levels import effective_levels, fewest_domains_order, level_codes, level_of, path_column
from .model import Admit, GroupRequest
from .packing import DecisionContext
from .snapshot import Snapshot

__all__ = ["Hold", "reserve"]


@dataclass(frozen=True, slots=True)
class Hold:
    """Where a waiting gang's room is kept (`reserve`)."""

    domain: str | None
    """The domain (a path with levels; None for all nodes)."""
    nodes: tuple[str, ...]
    """The nodes to hold, sorted: keep every other pod off them (`Snapshot.holding`)."""
    need: int
    """Pods of the gang that must fit (its minCount less its running pods)."""
    fits_now: int
    """Of them, how many fit on the held nodes now (for pods of several shapes, at most this many)."""
    level: str | None = None
    """As `Admit.level`: set when the gang is decided at a wider level than its key (auto, preferred)."""

    @property
    def missing(self) -> int:
        """Pods of the gang that wait for room on the held nodes."""
        return self.need - self.fits_now


def reserve(snapshot: Snapshot, group: GroupRequest) -> Hold | None:
    """The domain and the nodes to hold for `group` while they free, or None.

    Guarantee: if no other pod is placed on the held nodes from now on, the gang fits on them alone once
    the pods running there (other than its own) are gone — `decide` on those nodes so emptied, every other
    node full, admits it in one domain of the level it is decided at, which is checked before answering.
    Its running pods' domain is the only one tried; on their nodes only the room free now counts.

    Choice: of every domain that could hold the gang, the one where the fewest of its pods are missing on
    the nodes held, then the fewest nodes held, then the smallest name; in it the nodes the gang would
    take were it empty (the node rule of `decide`), of equal ones those with the most room now. The level:
    the key for `required`; for `auto` the one it is decided at, and for `preferred` the same (the
    narrowest level where it can ever fit: room held at a level it can never fit would never end a wait).

    None when there is nothing to hold for: the gang fits now (`decide` admits), no domain could ever hold
    it (even with every node empty), or it is refused for another reason than room (too few pods, a field
    Phalanx does not model, pods that already run across domains).
    """
    if isinstance(decide(snapshot, group), Admit):
        return None
    required = resolve_mode(snapshot, replace(group, mode="auto") if group.mode == "preferred" else group)
    level = None
    if group.mode in ("auto", "preferred") and group.topology_key is not None:
        level = auto_choice(snapshot, replace(group, mode="auto")).level
    need = max(1, required.min_count) - len(required.bound_nodes)
    if need <= 0 or len(required.pending) < need:
        return None
    # Every node empty but those where the gang runs (its own pods stay: only their room now counts).
    empty = snapshot.empty(keep=required.bound_nodes)
    probe = decide(empty, required)
    if not isinstance(probe, Admit):
        return None  # never fits, or refused for another reason than room
    now = _capacity(DecisionContext(snapshot, required.pending))
    ever = _capacity(DecisionContext(empty, required.pending))
    best: Hold | None = None
    for name, members in _domains(snapshot, required, probe):
        if int(ever[members].sum()) < need:
            continue
        # The best this domain can do: everything that fits in it now is on the nodes held.
        if best is not None and (need - min(need, int(now[members].sum())), 1) > (
            best.missing,
            len(best.nodes),
        ):
            continue
        held = _held(empty, required, members, now, ever, need)
        if held is None:
            continue
        fits_now = min(need, int(now[held].sum()))
        nodes = tuple(sorted(snapshot.node_names[i] for i in held.tolist()))
        hold = Hold(name, nodes, need, fits_now, level)
        if best is None or (hold.missing, len(hold.nodes)) < (best.missing, len(best.nodes)):
            best = hold
    return best


def _capacity(ctx: DecisionContext) -> IntArray:
    """Pods of the group each node takes (summed over its pod shapes: exact for pods alike)."""
    total = ctx.capacity(ctx.signatures[0])
    for sig in ctx.signatures[1:]:
        total = total + ctx.capacity(sig)
    return total


def _domains(snapshot: Snapshot, group: GroupRequest, probe: Admit) -> list[tuple[str | None, IndexArray]]:
    """The domains of the group's level in name order (the pinned one when pods of the group run)."""
    key = group.topology_key
    if key is None:
        return [(None, np.arange(len(snapshot.node_names), dtype=np.intp))]
    levels = effective_levels(group.levels, key)
    depth = level_of(levels, key)
    groups = (snapshot.column(key) if depth is None else path_column(snapshot, levels, depth)).groups()
    out: list[tuple[str | None, IndexArray]] = [
        (name, groups.order[groups.starts[d] : groups.ends[d]]) for d, name in enumerate(groups.names)
    ]
    if group.bound_nodes:
        out = [(name, nodes) for name, nodes in out if name == probe.domain]
    return out


def _held(
    empty: Snapshot, group: GroupRequest, members: IndexArray, now: IntArray, ever: IntArray, need: int
) -> IndexArray | None:
    """The nodes of one domain to hold: the prefix of the domain's fill order (nodes empty, the most room
    now first among equals) that holds the gang, checked with `decide` on those nodes alone, emptied."""
    snapshot = empty
    members = members[ever[members] > 0]
    levels = effective_levels(group.levels, group.topology_key)
    lower: list[IndexArray] = []
    if levels:
        depth = level_of(levels, group.topology_key)
        lower = level_codes(snapshot, levels, -1 if depth is None else depth)
    n = len(snapshot.node_names)
    # Ties go to the least "free" first: here minus the room now, so the nodes with the most room now.
    key = np.zeros(n, dtype=np.float64)
    key[members] = -now[members].astype(np.float64)
    rank = np.zeros(n, dtype=np.int64)
    rank[members[np.lexsort((members, key[members]))]] = np.arange(members.size)
    order = fewest_domains_order(members, ever, need, lower, key, rank)
    covered = int(np.searchsorted(np.cumsum(ever[order]), need)) + 1
    names = snapshot.node_names
    for size in range(covered, order.size + 1):
        held = order[:size]
        others = np.ones(n, dtype=np.bool_)
        others[held] = False
        elsewhere = snapshot.holding(names[i] for i in np.flatnonzero(others).tolist())
        if isinstance(decide(elsewhere, group), Admit):
            return held
    return None
