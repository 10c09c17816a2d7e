"""Bounded waiting for large gangs (pure): the room a gang needs, held for it once it has waited too long.

Backfill without a reservation starves a large gang: every pair of nodes that frees goes to the next small
gang that fits, and a gang that needs eight nodes at once never sees them free together (Slurm's classic
failure; Kueue has StrictFIFO, KAI and Volcano reserve). Units are planned in one order (priority, then
age), so the gangs that take its room are those after it: younger gangs of its priority and every gang of
lower priority. Once a gang has waited longer than `--starvation-age` (counted from when its Admitted
condition turned False) and neither fits nor preempts, the engine chooses the nodes to hold for it
(`placement.reserve`: of the domains of the level it is decided at, the one where the fewest of its pods
are missing, and there the nodes it would take were the domain empty). They are recorded on its group's
status (`status.reservation`, cause BoundedWaiting) and every later unit of the pass is planned on
`snapshot.holding(nodes)`: nothing more is placed on them, so they drain as their pods end, and the gang
starts when they are free. The gangs after it still backfill every other node; the gangs before it (higher
priority, or older) are planned before the hold applies, so it never holds them back.

The recorded hold is kept while it stays valid (its nodes exist, and the gang fits on them alone once their
other pods are gone) and until it expires (then it is chosen again, usually the same); it moves earlier
only to a domain where fewer of the gang's pods are missing, so each move brings the gang closer and holds
never flap. A tree (a sliced Job, hand-made groups) is held for as the flat gang of the pods it must place
(in one domain of its root's key), and only when the tree itself fits the held nodes once they are free.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from phalanx.api import conditions as c
from phalanx.api.status import BOUNDED_WAITING, GroupStatus, Reservation
from phalanx.controller.plan import status as st
from phalanx.controller.plan.work import Pass
from phalanx.placement import (
    Admit,
    CompositeAdmit,
    CompositeRequest,
    GroupRequest,
    Snapshot,
    decide,
    decide_composite,
    leaves,
    reserve,
    resolve_mode,
)
from phalanx.placement.composite import tree_need

HOLD_SECONDS = 120.0  # a hold is chosen again this often while its gang waits


def waiting_since(status: GroupStatus) -> dt.datetime | None:
    """Since when the group has not been admitted (its Admitted condition turned False), or None."""
    cond = status.condition(c.ADMITTED)
    if cond is None or cond.status != c.FALSE:
        return None
    return cond.last_transition_time


def hold_room(
    status: GroupStatus,
    request: GroupRequest | CompositeRequest,
    outcome: st.Outcome,
    ctx: Pass,
) -> tuple[st.Outcome, Reservation | None]:
    """For a gang that neither fits nor preempts: after `--starvation-age`, the room held for it (every
    later unit of the pass sees those nodes full) and its outcome saying so; else `outcome` unchanged."""
    since = waiting_since(status)
    if since is None or not ctx.over(ctx.starvation_age, since):
        return outcome, None
    flat = _flat(ctx.snapshot, request)
    if flat is None:
        return outcome, None
    tree = request if isinstance(request, CompositeRequest) else None
    recorded = status.reservation
    kept = recorded if recorded is not None and recorded.cause == BOUNDED_WAITING else None
    held = _chosen(kept, flat, tree, since, ctx)
    if held is None:
        return outcome, None
    ctx.snapshot = ctx.snapshot.holding(held.nodes)
    return dataclasses.replace(outcome, message=f"{outcome.message}; {held_text(held, ctx)}"), held


def held_text(held: Reservation, ctx: Pass) -> str:
    """What the condition says of a hold (stable while it lasts: no running clock in it)."""
    where = f" in {held.domain}" if held.domain else ""
    since = (held.waiting_since or held.reserved_at).strftime("%H:%M:%SZ")
    return (
        f"a reservation holds {len(held.nodes)} node(s){where} for it ({', '.join(held.nodes)}): it has "
        f"waited since {since}, longer than --starvation-age ({ctx.starvation_age:g} s), while gangs after "
        "it took the room it needs; nothing more is placed on those nodes, the others backfill elsewhere"
    )


def _flat(snapshot: Snapshot, request: GroupRequest | CompositeRequest) -> GroupRequest | None:
    """The gang to hold for: the group itself, or a tree's pods as one gang of the pods it must place in
    one domain of its root's key (None when the tree is refused for another reason than room)."""
    if isinstance(request, GroupRequest):
        return request
    need = tree_need(snapshot, request)
    if need is None:
        return None
    tree = leaves(request)
    bound = tuple(node for leaf in tree for node in leaf.bound_nodes)
    return GroupRequest(
        request.name,
        tuple(pod for leaf in tree for pod in leaf.pending),
        need + len(bound),
        request.topology_key,
        bound,
        request.levels,
    )


def _required(snapshot: Snapshot, group: GroupRequest) -> GroupRequest:
    """The group as it is held for: at the level it is decided at (a preferred one as auto has it)."""
    return resolve_mode(
        snapshot, dataclasses.replace(group, mode="auto") if group.mode == "preferred" else group
    )


def _others(snapshot: Snapshot, nodes: list[str]) -> list[str]:
    held = set(nodes)
    return [name for name in snapshot.node_names if name not in held]


def _fits_when_free(
    snapshot: Snapshot, group: GroupRequest, tree: CompositeRequest | None, nodes: list[str]
) -> bool:
    """The hold's guarantee: on those nodes alone, emptied of other pods, the gang (or the tree) fits."""
    if any(snapshot.node_index(name) is None for name in nodes):
        return False
    required = _required(snapshot, group)
    empty = snapshot.empty(keep=required.bound_nodes).holding(_others(snapshot, nodes))
    if tree is not None:
        return isinstance(decide_composite(empty, tree, explain=False), CompositeAdmit)
    return isinstance(decide(empty, required), Admit)


def _missing(snapshot: Snapshot, group: GroupRequest, nodes: list[str]) -> int:
    """Pods of the gang that do not fit on the held nodes now."""
    required = _required(snapshot, group)
    decision = decide(snapshot.holding(_others(snapshot, nodes)), required)
    if isinstance(decision, Admit):
        return 0
    return max(0, max(1, required.min_count) - decision.scheduled)


def _chosen(
    kept: Reservation | None,
    group: GroupRequest,
    tree: CompositeRequest | None,
    since: dt.datetime,
    ctx: Pass,
) -> Reservation | None:
    """The recorded hold while it is valid, unexpired and no domain lacks fewer pods; else a new one."""
    snapshot = ctx.snapshot
    hold = reserve(snapshot, group)
    fresh = hold if hold is not None and _fits_when_free(snapshot, group, tree, list(hold.nodes)) else None
    if (
        kept is not None
        and kept.expires_at > ctx.now
        and _fits_when_free(snapshot, group, tree, kept.nodes)
        and (fresh is None or fresh.missing >= _missing(snapshot, group, kept.nodes))
    ):
        return kept
    if fresh is None or not fresh.nodes:
        return None
    hold = fresh
    return Reservation(
        domain=hold.domain,
        nodes=list(hold.nodes),
        victims=[],
        reserved_at=ctx.now,
        expires_at=ctx.now + dt.timedelta(seconds=HOLD_SECONDS),
        cause=BOUNDED_WAITING,
        waiting_since=since,
    )
