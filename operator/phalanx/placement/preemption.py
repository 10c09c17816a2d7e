"""Victim choice: which lower-priority pods to remove so that a pod group that does not fit can be admitted.

Pure, like the rest of the engine: `choose_victims(snapshot, group, priority, candidates, groups)`
returns the cheapest `Preemption`, or None. The rules (docs/design.md, "Preemption: victim choice"):

- Never preempt when `decide(snapshot, group)` admits, nor when removing pods cannot help (no
  domain, a domain conflict, too few pods).
- Victims have a priority strictly lower than the preemptor's. A Phalanx group is as important as
  its most important running pod; a pod Phalanx does not manage is a victim on its own.
- Victim units: a `disruption: all` group, all of its pods or none; a `single` group, pods one by
  one while it keeps minCount running pods, else all of them (a gang is never left below minCount
  holding nodes); an unmanaged pod.
- Cost, compared in order (`VictimCost`): the highest victim priority; the number of victim groups
  (an unmanaged pod is one); the number of victim pods; the sum of the victims' start times, larger
  (more recent: less run time lost) is cheaper; then the domain name and the sorted victim ids.
- Every domain of the group's topology key is searched (the pinned one if pods of the group run);
  the cheapest victim set over all domains wins. The admission returned is `decide` on the snapshot
  without the victims.

How. A per-node capacity model mirrors `decide` (same free capacity, eligibility and request
clipping) and is updated in O(resources) per pod taken or given back. For each priority level,
lowest first, numpy finds the domains where removing every candidate up to that level would make
the group fit, with a lower bound of the cost there; domains are searched cheapest bound first, and
the search stops at the first domain whose bound is dearer than the best set found. In a domain, a
greedy add-then-reprieve gives a first set, then a branch and bound finds the cheapest one. It
prunes with (a) the capacity if every undecided candidate were removed, (b) lower bounds of the
groups still needed (a unit frees at most what all candidates on its nodes free) and of the pods
they bring, and an upper bound of their start times. The search is exact; `max_steps` bounds it,
and a search cut short returns the cheapest set found so far (`Preemption.exact` is False).

Modules, one job each: `victim_fit.py` (the preemptor's fit per node), `victim_pool.py` (candidates as
units and pods), `victim_domains.py` (candidate domains, per-priority bounds), `victim_search.py` (the
greedy and the branch and bound in one domain); this module is the entry point.

The model knows resources, pod slots and the static node filters, not the filters that depend on
other pods (inter-pod affinity, host ports, topology spread, volumes), so it never refuses what
`decide` admits. The chosen set is checked with `decide`; if `decide` refuses it, the search runs
again with `decide` as the check of every candidate set (the model then only prunes), which is also
how groups with several pod shapes are searched.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from .engine import decide
from .model import Admit, GroupRequest
from .preemption_model import Candidate, Preemption, VictimCost, VictimGroup
from .snapshot import Snapshot
from .victim_domains import VictimDomains, domain_bounds, priority_levels
from .victim_fit import PreemptorFit
from .victim_pool import VictimPool
from .victim_search import BestSet, DomainSearch, SearchRun

__all__ = ["DEFAULT_MAX_STEPS", "choose_victims"]

DEFAULT_MAX_STEPS: Final = 20_000
"""Search steps (a candidate tried) before the search returns the cheapest set found so far."""


def choose_victims(
    snapshot: Snapshot,
    group: GroupRequest,
    priority: int,
    candidates: Iterable[Candidate],
    groups: Iterable[VictimGroup] = (),
    *,
    excluded_pods: Collection[str] = frozenset(),
    excluded_groups: Collection[str] = frozenset(),
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Preemption | None:
    """The cheapest victims whose removal lets `group` (of `priority`) be admitted, or None.

    `candidates`: running pods that might be victims (those with priority >= `priority` never are;
    every running pod of each group in `groups` must be among them). `excluded_pods` /
    `excluded_groups`: never victims (e.g. a PodDisruptionBudget forbids it: the caller searches
    again without them); an excluded pod keeps its whole group from being preempted at once.
    None when the group fits without preemption, or when no choice of victims makes it fit.
    """
    first = decide(snapshot, group)
    if isinstance(first, Admit) or first.reason != "Unschedulable" or first.placements_total == 0:
        return None
    fit = PreemptorFit(snapshot, group)
    if fit.need <= 0 or not fit.eligible_any.any():
        return None
    pool = VictimPool(snapshot, fit, priority, candidates, groups, excluded_pods, excluded_groups)
    if not pool.ids:
        return None
    domains = VictimDomains(snapshot, group)
    base_totals = [domains.sums(b) for b in fit.base]
    pods_by_domain = domains.of_node[pool.node]

    run = SearchRun(max_steps)
    for _, level in priority_levels(fit, domains, pool):
        bounds = domain_bounds(fit, domains, pool, level, base_totals)
        if not bounds:
            continue
        # Trust the per-node model when it is decide's own rule (one pod shape); should decide
        # refuse the set it found, search again with decide as the capacity check.
        for trusted in (True, False) if len(fit.signatures) == 1 else (False,):
            run.best = None
            for bound, d in bounds:
                if bound > run.key():
                    break  # this domain and all after it are dearer than the best set
                pods = level.pods[pods_by_domain[level.pods] == d]
                search = DomainSearch(
                    run,
                    snapshot,
                    group,
                    fit,
                    pool,
                    level,
                    d,
                    [int(t[d]) for t in base_totals],
                    [int(t[d]) for t in level.totals],
                    pods,
                    trusted,
                )
                search.greedy()
                if not run.exhausted:
                    search.search()
            if run.best is None:
                break  # no victims at this level: try the next one
            preemption = _result(snapshot, group, run.best, not (run.exhausted or run.truncated))
            if preemption is not None:
                return preemption
    return None


def _result(snapshot: Snapshot, group: GroupRequest, best: BestSet, exact: bool) -> Preemption | None:
    decision = decide(snapshot.without(best.ids), group)
    if not isinstance(decision, Admit):
        return None
    whole = sorted(c.unit.unit.key for c in best.chosen if c.whole and c.unit.unit.managed)
    partial = sorted(c.unit.unit.key for c in best.chosen if not c.whole)
    top = max(c.unit.unit.priority for c in best.chosen)
    groups, pods, newest, _ = best.key
    return Preemption(
        domain=decision.domain,
        victims=best.ids,
        whole_groups=tuple(whole),
        partial_groups=tuple(partial),
        admit=decision,
        cost=VictimCost(top, groups, pods, newest),
        exact=exact,
    )
