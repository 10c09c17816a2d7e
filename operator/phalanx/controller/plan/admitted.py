"""Whether a unit's plan admits it, and since when it waited: what the admission metrics count. Pure.

A unit is *admitted* in the pass whose status write turns its Admitted condition True (on the root
CompositePodGroup, or the one PodGroup): a gang's decision recorded and its pods released, or a basic
group's first pod placed (by kube-scheduler; Phalanx holds no basic pod). That happens once at first,
and again after a requeue; a later wave, a replacement pod or the rest of a recorded decision joins a
unit already admitted and is no admission of its own.

Its wait began at its creation (its owner's, else its root group's), or when it was last requeued, as
Kueue's `admission_wait_time_seconds` counts from the creation or the Requeued condition's transition:
here, the moment the unit's Admitted condition turned False after it had been admitted once (a
requeue turns it False; the applier refines this with the time of a requeue it made itself).
"""

from __future__ import annotations

import datetime as dt

from phalanx.api import conditions as c
from phalanx.api.status import BASIC, GANG
from phalanx.controller.model.actions import status_write
from phalanx.controller.plan.decide import never_admitted
from phalanx.controller.plan.work import UnitWork


def admitted_policy(work: UnitWork) -> str | None:
    """The policy ("Gang" or "Basic") when this pass's status write admits the unit, else None."""
    tree = work.unit.tree
    if tree is None:
        return None
    holder = tree.holder
    before = holder.status.condition(c.ADMITTED)
    if before is not None and before.status == c.TRUE:
        return None  # admitted already
    target = (holder.ref.kind, holder.ref.key)
    for action in work.actions:
        written = status_write(action)
        if written is not None and (written[0].kind, written[0].key) == target:
            after = written[1].condition(c.ADMITTED)
            if after is None or after.status != c.TRUE:
                return None
            single = work.single
            if single is not None and not single.gang:
                return BASIC
            # Pods of it were placed before this pass: a replacement (or the rest of a decision) joins a gang
            # still running, no admission of its own (after a requeue none is placed).
            return None if work.placed else GANG
    return None


def waiting_since(work: UnitWork) -> dt.datetime | None:
    """When the unit's present wait began: its creation, or the last time it stopped being admitted."""
    owner = work.owner
    created = owner.created if owner is not None and owner.created is not None else work.unit.created
    tree = work.unit.tree
    if tree is None:
        return created
    status = tree.holder.status
    admitted = status.condition(c.ADMITTED)
    if never_admitted(status) or admitted is None or admitted.status != c.FALSE:
        return created
    since = admitted.last_transition_time
    return since if created is None else max(since, created)
