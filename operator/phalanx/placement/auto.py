"""`auto` topology mode: required at the key when the gang can ever fit one domain of it, else wider.

NVLink domains need "one rack if the job can ever fit one, else the fewest racks": a 4-node job must wait
for a rack of its own, a 32-node job can never fit an 18-node rack and should take the fewest racks of one
block. `required` waits for ever on the second, `preferred` spreads the first as soon as its rack is busy.

`choose_auto` walks the rungs of `levels.wider_levels` (the key, each wider level, then all nodes) and
stops at the first where some domain can hold the gang on the cluster's nodes *empty* — their allocatable,
not today's free room: `decide` as `required` at that rung on `Snapshot.empty()` admits. The gang is then
decided as `required` there (it waits for such a domain to free), with the BestFit descent inside (the
fewest domains of the key and of every finer level). Because the probe ignores what runs, the choice
depends only on the nodes and the gang, so it is the same in every pass while the nodes stay the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .levels import Levels, effective_levels, wider_levels
from .model import Admit, Decision, GroupRequest, Reject
from .snapshot import Snapshot

__all__ = ["AutoChoice", "choose_auto"]

Probe = Callable[[Snapshot, GroupRequest, str | None, Levels], Decision]
"""`decide` as `required` for the group at (key, levels) on a snapshot."""


@dataclass(frozen=True, slots=True)
class AutoChoice:
    """The rung an `auto` group is decided at, as `required`."""

    key: str | None
    """The level applied: the group's key, a wider level, or None for all nodes."""
    levels: Levels
    """The levels that go with it (what `decide` uses at that rung; (key,) for all nodes without levels)."""
    level: str | None
    """None when the group's own key applies; else the wider level's label, "" for all nodes (Admit.level)."""
    note: str
    """Which level applied and why, for the condition (`Admit.mode_note`, `Reject.mode_note`)."""

    def group(self, group: GroupRequest) -> GroupRequest:
        """The same group as `required` at the chosen rung (`decide` gives the same placement)."""
        return GroupRequest(
            group.name,
            group.pending,
            group.min_count,
            self.key,
            group.bound_nodes,
            self.levels,
            "required",
        )


def choose_auto(snapshot: Snapshot, group: GroupRequest, probe: Probe) -> AutoChoice:
    """The narrowest rung where the gang can ever fit one domain (see the module docstring).

    A rung the probe refuses for a reason that does not depend on topology (too few pods, a field Phalanx
    does not model, a volume that waits) is not a question of size: the key applies, and `decide` then says
    why it waits. If no rung fits even on empty nodes, all nodes apply (the decision says it never fits).
    """
    key = group.topology_key
    assert key is not None, "auto mode needs a topology key"
    empty = snapshot.empty()
    need = max(1, group.min_count)
    misses: list[str] = []
    rungs = wider_levels(key, effective_levels(group.levels, key))
    for at, levels in rungs:
        decision = probe(empty, group, at, levels)
        if isinstance(decision, Admit) or not _about_size(decision):
            if at == key:
                return AutoChoice(key, levels, None, _required_note(need, key, decision))
            return AutoChoice(at, levels, at or "", _wider_note(need, key, at, levels, misses))
        misses.append(_miss(at, decision))
    last, levels = rungs[-1]
    return AutoChoice(last, levels, "", _wider_note(need, key, last, levels, misses))


def _about_size(decision: Reject) -> bool:
    """A refusal that a wider level can lift: too small domains, no node with the label, pods that run
    across domains of this level."""
    if decision.reason in ("NoDomain", "DomainConflict"):
        return True
    return decision.reason == "Unschedulable" and decision.placements_total > 0


def _miss(at: str | None, decision: Reject) -> str:
    where = "the cluster" if at is None else f"one domain of {at}"
    if decision.reason == "NoDomain":
        return f"{where} (no node has the label)"
    if decision.reason == "DomainConflict":
        return f"{where} (its running pods span several)"
    return f"{where} (at most {decision.scheduled} do)"


def _required_note(need: int, key: str, decision: Decision) -> str:
    if isinstance(decision, Reject):
        return f"auto: one domain of {key} applies (required)"
    return f"auto: {need} pods fit one domain of {key} when its nodes are free, so one is required"


def _wider_note(need: int, key: str, at: str | None, levels: Levels, misses: list[str]) -> str:
    never = " nor ".join(misses)
    finer = key if at is None or at not in levels else levels[min(levels.index(at) + 1, levels.index(key))]
    if at is None:
        top = levels[0] if levels else key
        rest = f"anywhere, with the fewest domains of {top}"
    else:
        rest = f"one domain of {at} with the fewest domains of {finer}"
    return f"auto: {need} pods can never fit {never}, so {rest}"
