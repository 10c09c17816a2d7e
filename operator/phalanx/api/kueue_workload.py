"""What a Kueue Workload's conditions say of its owner (kueue.x-k8s.io/v1beta2), read one way for both the
operator (a held group's HeldByKueue condition, controller/kinds/kueue.py) and `phalanx explain`
(tools/kueue_view.py): two readings of the same conditions drifted apart once (one said "Kueue is evicting
it" for as long as a preempted job waited in its queue), so the rule lives here and each side only words it.

Kueue leaves `Evicted=True` on a Workload until it reserves quota for it again, so Evicted alone does not
say whether Kueue is still stopping the owner (its quota still reserved) or the owner waits in its
LocalQueue like any other (quota released). Pure.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

QUOTA_RESERVED, ADMITTED, EVICTED = "QuotaReserved", "Admitted", "Evicted"
PODS_READY, FINISHED, PREEMPTED, REQUEUED = "PodsReady", "Finished", "Preempted", "Requeued"


@dataclass(frozen=True, slots=True)
class KueueCondition:
    type: str
    status: str
    reason: str
    message: str


def conditions_of(raw: Iterable[Any]) -> tuple[KueueCondition, ...]:
    """A Workload's `status.conditions` as typed conditions, in their order (entries not objects skipped)."""
    return tuple(
        KueueCondition(
            str(c.get("type") or ""),
            str(c.get("status") or ""),
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
        for c in raw
        if isinstance(c, Mapping)
    )


def condition(conditions: Sequence[KueueCondition], kind: str) -> KueueCondition | None:
    return next((c for c in conditions if c.type == kind), None)


def is_true(conditions: Sequence[KueueCondition], kind: str) -> bool:
    cond = condition(conditions, kind)
    return cond is not None and cond.status == "True"


class KueueState(enum.Enum):
    """Where a Kueue Workload's owner stands, in the order `kueue_state` tests for it."""

    FINISHED = "finished"  # nobody holds it: it ran
    DEACTIVATED = "deactivated"  # spec.active: false; it stays queued
    EVICTING = "evicting"  # Evicted with its quota still reserved: Kueue is stopping the owner
    NOT_REQUEUED = "not-requeued"  # evicted, quota released, Requeued=False (e.g. a backoff or a limit)
    WAITING_AFTER_EVICTION = "waiting-after-eviction"  # evicted, quota released, back in its LocalQueue
    ADMITTED = "admitted"  # the owner may run; where is Phalanx's
    RESERVED = "reserved"  # quota reserved, waiting for its admission checks
    WAITING = "waiting"  # in its LocalQueue, no quota yet


def kueue_state(conditions: Sequence[KueueCondition], active: bool) -> KueueState:
    """The rule:

    1. Finished=True: finished, whatever else it says.
    2. spec.active false: deactivated (Kueue evicts a deactivated Workload and never readmits it).
    3. Evicted=True: with QuotaReserved=True Kueue is still evicting it; else with Requeued=False it is not
       requeued yet; else it waits in its LocalQueue again.
    4. Admitted=True: admitted.
    5. QuotaReserved=True: its admission checks are pending.
    6. Otherwise it waits in its LocalQueue.
    """
    if is_true(conditions, FINISHED):
        return KueueState.FINISHED
    if not active:
        return KueueState.DEACTIVATED
    if is_true(conditions, EVICTED):
        if is_true(conditions, QUOTA_RESERVED):
            return KueueState.EVICTING
        requeued = condition(conditions, REQUEUED)
        if requeued is not None and requeued.status == "False":
            return KueueState.NOT_REQUEUED
        return KueueState.WAITING_AFTER_EVICTION
    if is_true(conditions, ADMITTED):
        return KueueState.ADMITTED
    if is_true(conditions, QUOTA_RESERVED):
        return KueueState.RESERVED
    return KueueState.WAITING
