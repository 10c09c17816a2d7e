"""Gangs whose pods a ResourceQuota refuses (pure): say so, naming the quota, and break deadlocks.

Gated pods count against quotas. Two gangs whose owners create their pods at once can each get part of
them made before the quota is used up: neither reaches its minCount, their gated pods hold the quota, and
nothing ever frees it. Such a deadlock is broken deterministically: of the gangs refused by one quota that
hold gated pods and run none, the last in the plan's order (lowest priority, then youngest, then key) is
requeued whole, so its pods go and release the quota for the others; its owner is resumed only once its
quotas have room for its whole gang (kinds/job_quota.py). One gang per quota per pass, and only once it has
said `QuotaExceeded` in an earlier pass (the quotas' counts were seen twice).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from phalanx.api import conditions as c
from phalanx.controller.kinds.base import Unit
from phalanx.controller.model.quota import QUOTA_DEADLOCK
from phalanx.controller.plan import status as st
from phalanx.controller.plan.requeue import requeue
from phalanx.controller.plan.work import Pass, UnitWork


def _holds_gated_only(unit: Unit) -> bool:
    """Pods of it exist and wait behind gates; none holds a node (a running gang is not deadlocked)."""
    assert unit.tree is not None
    live = [p for leaf in unit.tree.leaves for p in leaf.pods if not p.terminal and not p.deleting]
    return bool(live) and not any(p.usage_node for p in live)


def deadlocked(units: Iterable[Unit]) -> dict[str, str]:
    """Unit key -> why, for the gang to requeue on each quota that deadlocks two or more gangs."""
    by_quota: dict[str, list[Unit]] = defaultdict(list)
    for unit in sorted(units, key=lambda u: u.order):
        owner = unit.owner
        if owner is None or unit.tree is None or owner.pods_refused is None:
            continue
        if owner.suspended or owner.finished or owner.requeued or not _holds_gated_only(unit):
            continue
        for quota in owner.pods_refused.quotas:
            by_quota[quota].append(unit)
    out: dict[str, str] = {}
    for quota, members in sorted(by_quota.items()):
        # Given back only through a suspend of Phalanx's, which holds it until the quota has room for the
        # whole gang: a gang requeued by deleting its pods holds only gated pods, which its controller would
        # make again at once; one requeued through Kueue is queued again as soon as Kueue has stopped it.
        suspendable = [u for u in members if u.owner is not None and u.owner.requeue == "suspend"]
        if len(members) < 2 or not suspendable:
            continue
        last = suspendable[-1]
        others = ", ".join(f"{u.owner.kind}/{u.owner.ref.name}" for u in members if u.owner and u is not last)
        out.setdefault(
            last.key,
            f"{QUOTA_DEADLOCK}: ResourceQuota {quota} has no room for the pods that {others} and this gang "
            "still lack; this one comes last (priority, then age) and gives its quota back; it resumes "
            "once the quota has room for its whole gang",
        )
    return out


def quota_refused(work: UnitWork, ctx: Pass) -> bool:
    """The unit lacks pods a quota refuses: it says so (or is requeued to break a deadlock); True then."""
    owner = work.owner
    if owner is None or owner.pods_refused is None or work.placed:
        return False  # a gang with pods on nodes goes the usual way (replacements, requeue when broken)
    short = [leaf for leaf in work.leaves.values() if not leaf.enough]
    root = work.root
    if not short or (root is not None and work.countable(root)):
        return False
    why = ctx.quota_deadlocks.get(work.unit.key)
    assert work.unit.tree is not None
    said = work.unit.tree.holder.status.condition(c.ADMITTED)
    if why is not None and said is not None and said.reason == c.REASON_QUOTA_EXCEEDED:
        requeue(work, why, "quota")
        return True
    refused = owner.pods_refused.message
    for leaf in short:
        leaf.outcome = st.Outcome(
            c.REASON_QUOTA_EXCEEDED,
            f"minCount ({leaf.min_count}) is not yet satisfied: {len(leaf.placed)} scheduled, "
            f"{len(leaf.waiting)} waiting; {refused}",
        )
    if root is not None:
        work.outcome = st.Outcome(c.REASON_QUOTA_EXCEEDED, f"waiting for pods: {refused}")
    else:
        work.outcome = short[0].outcome
    return True
