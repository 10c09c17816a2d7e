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
  (more recent: less run time lost) is cheaper; of sets equal in all that, how scattered the victims
  are below the domain (per lower level, then nodes: the fewest domains holding one, so victims that
  complete one rack beat holes in several); then the domain name and the sorted victim ids.
- Every domain of the group's topology key is searched (the pinned one if pods of the group run),
  counting what its candidates would free (a topology-required gang preempts inside a fully packed
  domain); with levels the domains are paths, as `decide` has them. The cheapest victim set over all
  domains wins. The admission returned is `decide` on the snapshot without the victims. An `auto`
  group searches at the level it is decided at; a `preferred` group for one domain of its key.
- `choose_composite_victims` does the same for a composite group's tree (its leaves each in one domain
  of their key, all in one domain of the root's), with `decide_composite` as the check.

How. A per-node capacity model mirrors `decide` (same free capacity, eligibility and request
clipping) and is updated in O(resources) per pod taken or given back. For each priority level,
lowest first, numpy finds the domains where removing every candidate up to that level would make
the group fit, with a lower bound of the cost there; domains are searched cheapest bound first, and
the search stops at the first domain whose bound is dearer than the best set found. In a domain, a
greedy add-then-reprieve gives a first set, then a branch and bound finds the cheapest one. It
prunes with (a) the capacity if every undecided candidate were removed, (b) lower bounds of the
groups still needed (a unit frees at most what all candidates on its nodes free) and of the pods
they bring, and an upper bound of their start times: for a set as many groups and pods as the best
one, the newest start total of exactly that many more units and pods (a table per domain, built once
with numpy: without it a search for 64 nodes among ~100 gangs of 2 or 3 in a block spends its whole
budget on sets that tie the best on groups and pods). The search is exact; `max_steps` bounds it,
and a search cut short returns the cheapest set found so far (`Preemption.exact` is False).

Modules, one job each: `victim_fit.py` (the preemptor's fit per node), `victim_pool.py` (candidates as
units and pods), `victim_domains.py` (candidate domains, per-priority bounds), `victim_search.py` (the
greedy and the branch and bound in one domain); this module is the entry point.

The model knows resources, pod slots and the static node filters, not the filters that depend on
other pods (inter-pod affinity, host ports, topology spread, volumes), so it never refuses what
`decide` admits. The chosen set is checked with `decide`; if `decide` refuses it, the search runs
again with `decide` as the check of every candidate set (the model then only prunes), which is also
how groups with several pod shapes are searched. Admitted, it is the cheapest of the domains where the
model lacks room, not of those where it has the group fitting with no victim (something it does not
see refuses it there, so it offers no set and bounds none): those are searched next with `decide` as
the check, the model's set the one to beat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from .columns import IntArray
from .composite import CompositeAdmit, CompositeRequest, decide_composite, leaves, tree_need
from .engine import decide, resolve_mode
from .model import Admit, GroupRequest
from .preemption_model import Candidate, CompositePreemption, Preemption, VictimCost, VictimGroup
from .snapshot import Snapshot
from .victim_domains import DomainBound, PriorityLevel, VictimDomains, domain_bounds, priority_levels
from .victim_fit import PreemptorFit
from .victim_pool import VictimPool
from .victim_search import BestSet, DomainSearch, SearchContext, SearchRun

__all__ = ["DEFAULT_MAX_STEPS", "DEFAULT_TREE_STEPS", "choose_composite_victims", "choose_victims"]

_R = TypeVar("_R")

DEFAULT_MAX_STEPS: Final = 20_000
"""Search steps (a candidate tried) before the search returns the cheapest set found so far."""

DEFAULT_TREE_STEPS: Final = 2_000
"""The same for a tree, whose every candidate set is checked with `decide_composite` (25 steps each): about
80 tree decisions, a few hundred ms at 5,000 nodes (docs/performance.md)."""


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The victim candidates of one call, as the caller passed them."""

    priority: int
    candidates: Iterable[Candidate]
    groups: Iterable[VictimGroup]
    excluded_pods: Collection[str]
    excluded_groups: Collection[str]


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
    required = resolve_mode(snapshot, group)
    if required.mode == "preferred":
        # Preempted for one domain of its key only: what would spread it wider fits without victims or not
        # at all, and is not worth a running pod (a set that lets it spread is no answer).
        required = dataclasses.replace(required, mode="required")

    def admits(_: int, ids: frozenset[str]) -> bool:
        return isinstance(decide(snapshot.without(ids), required), Admit)

    def result(best: BestSet, exact: bool) -> Preemption | None:
        decision = decide(snapshot.without(best.ids), group)
        if not isinstance(decision, Admit):
            return None
        cost, whole, partial = _priced(best)
        return Preemption(decision.domain, best.ids, whole, partial, decision, cost, exact)

    fit = PreemptorFit(snapshot, required)
    domains = VictimDomains(snapshot, required.topology_key, required.levels, required.bound_nodes)
    cands = _Candidates(priority, candidates, groups, excluded_pods, excluded_groups)
    return _search(snapshot, fit, domains, cands, admits, result, max_steps, trust=len(fit.signatures) == 1)


def choose_composite_victims(
    snapshot: Snapshot,
    root: CompositeRequest,
    priority: int,
    candidates: Iterable[Candidate],
    groups: Iterable[VictimGroup] = (),
    *,
    excluded_pods: Collection[str] = frozenset(),
    excluded_groups: Collection[str] = frozenset(),
    max_steps: int = DEFAULT_TREE_STEPS,
) -> CompositePreemption | None:
    """The cheapest victims whose removal lets the whole tree of `root` (of `priority`) be admitted, or None.

    The same victim model, rules and cost as `choose_victims` (arguments alike), for a tree's need: every
    leaf in one domain of its key, all of the tree in one domain of the root's key (the domains searched;
    paths with the root's levels), the min counts of every composite met. The per-node model counts the
    tree's pods together against the pods it must place at least (a bound, never refusing what fits), and
    the cheapest set under that model is tried first (if `decide_composite` admits it in its domain, it is
    the cheapest of the domains where the model lacks room; those where the model has the tree fitting
    with no victim, blind to the leaves' own keys, are then searched with `decide_composite` as the check,
    that set the one to beat); else every candidate set is checked with `decide_composite` inside its
    domain, within `max_steps` (lower by default than for a group: each check is a tree decision). None
    when the tree fits without preemption, when it is refused for another reason than room (invalid,
    unsupported, too few pods), or when no choice of victims makes it fit.
    """
    first = decide_composite(snapshot, root)
    need = tree_need(snapshot, root)
    if isinstance(first, CompositeAdmit) or first.reason != "Unschedulable" or need is None:
        return None
    if root.mode == "preferred":
        # Preempted for in one domain of its key only, as a group (choose_victims): a set that lets the tree
        # spread wider is no answer.
        root = dataclasses.replace(root, mode="required")
    tree = leaves(root)
    flat = GroupRequest(
        root.name,
        tuple(pod for leaf in tree for pod in leaf.pending),
        need + sum(len(leaf.bound_nodes) for leaf in tree),
        root.topology_key,
        tuple(node for leaf in tree for node in leaf.bound_nodes),
        root.levels,
    )

    fit = PreemptorFit(snapshot, flat)
    domains = VictimDomains(snapshot, flat.topology_key, flat.levels, flat.bound_nodes)
    # A candidate set is checked inside its domain alone: the tree's search at the domain's size.
    inside: dict[int, Snapshot] = {}
    checked: dict[tuple[int, frozenset[str]], bool] = {}

    def admits(d: int, ids: frozenset[str]) -> bool:
        if d not in inside:
            names = snapshot.node_names
            inside[d] = snapshot.only(names[i] for i in (domains.of_node == d).nonzero()[0].tolist())
        if (d, ids) not in checked:
            decision = decide_composite(inside[d].without(ids), root, explain=False)
            checked[d, ids] = isinstance(decision, CompositeAdmit)
        return checked[d, ids]

    def result(best: BestSet, exact: bool) -> CompositePreemption | None:
        # In the domain it was found for, as every set the check searches: the model's set, blind to the
        # leaves' keys, may not fit there, and the whole snapshot without it may still admit the tree in
        # another domain a whole victim group spans, where its spread and domain rank are not its cost.
        if not admits(best.key[-1], frozenset(best.ids)):
            return None
        decision = decide_composite(snapshot.without(best.ids), root, explain=False)
        if not isinstance(decision, CompositeAdmit):
            return None
        cost, whole, partial = _priced(best)
        return CompositePreemption(
            decision.domain(root.name), best.ids, whole, partial, decision, cost, exact
        )

    cands = _Candidates(priority, candidates, groups, excluded_pods, excluded_groups)
    return _search(snapshot, fit, domains, cands, admits, result, max_steps, trust=True)


def _search(
    snapshot: Snapshot,
    fit: PreemptorFit,
    domains: VictimDomains,
    cands: _Candidates,
    admits: Callable[[int, frozenset[str]], bool],
    result: Callable[[BestSet, bool], _R | None],
    max_steps: int,
    *,
    trust: bool,
) -> _R | None:
    """Priority levels lowest first; in each, the domains cheapest bound first (module docstring)."""
    if fit.need <= 0 or not fit.eligible_any.any():
        return None
    pool = VictimPool(
        snapshot,
        fit,
        cands.priority,
        cands.candidates,
        cands.groups,
        cands.excluded_pods,
        cands.excluded_groups,
    )
    if not pool.ids:
        return None
    base_totals = [domains.sums(b) for b in fit.base]
    run = SearchRun(max_steps)
    ctx = SearchContext(run, fit, pool, domains.lower, admits)
    for _, level in priority_levels(fit, domains, pool):
        bounds = domain_bounds(fit, domains, pool, level, base_totals)
        if not bounds:
            continue
        run.best = None
        unproven = bounds
        if trust:
            # Trust the per-node model when it is decide's own rule (one pod shape) or a bound of it (a tree):
            # its cheapest set, if the check admits it, is the cheapest of every domain the model saw short
            # of room. A domain where it has the preemptor fitting with no victim is one it cannot bound
            # (DomainSearch.fits_as_is): those are searched next with the check, that set the one to beat.
            # Should the check refuse the set, every domain is searched again with the check.
            blind = _search_domains(ctx, level, domains, base_totals, bounds, trusted=True)
            if run.best is not None:
                found = result(run.best, not (run.exhausted or run.truncated))
                if found is None:
                    run.best = None
                elif not blind:
                    return found
                else:
                    unproven = blind
        _search_domains(ctx, level, domains, base_totals, unproven, trusted=False)
        if run.best is None:
            continue  # no victims of this level help: the next level
        found = result(run.best, not (run.exhausted or run.truncated))
        if found is not None:
            return found
    return None


def _search_domains(
    ctx: SearchContext,
    level: PriorityLevel,
    domains: VictimDomains,
    base_totals: list[IntArray],
    bounds: list[DomainBound],
    *,
    trusted: bool,
) -> list[DomainBound]:
    """Search the domains of `bounds` cheapest bound first into `ctx.run.best`, each with the per-node model
    as the capacity check (`trusted`) or the oracle; the domains the trusted model has fitting with no victim,
    where it offers no set (their search is the oracle's)."""
    run = ctx.run
    pods_by_domain = domains.of_node[ctx.pool.node]
    blind: list[DomainBound] = []
    for bound, d in bounds:
        if bound > run.key():
            break  # this domain and all after it are dearer than the best set
        if run.exhausted and run.best is not None and not trusted:
            break  # out of steps: a greedy checked through the oracle costs many checks
        pods = level.pods[pods_by_domain[level.pods] == d]
        totals = ([int(t[d]) for t in base_totals], [int(t[d]) for t in level.totals])
        search = DomainSearch(ctx, level, d, *totals, pods, trusted)
        if trusted and search.fits_as_is():
            blind.append((bound, d))
            continue
        search.greedy()
        if not run.exhausted:
            search.search()
    return blind


def _priced(best: BestSet) -> tuple[VictimCost, tuple[str, ...], tuple[str, ...]]:
    """The cost of the best set, and its whole and partial victim groups (sorted keys)."""
    whole = tuple(sorted(c.unit.unit.key for c in best.chosen if c.whole and c.unit.unit.managed))
    partial = tuple(sorted(c.unit.unit.key for c in best.chosen if not c.whole))
    top = max(c.unit.unit.priority for c in best.chosen)
    groups, pods, newest, *spread, _ = best.key
    return VictimCost(top, groups, pods, newest, tuple(spread)), whole, partial
