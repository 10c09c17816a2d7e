"""The article's scenarios run twice: upstream v1.37.2 (Job `spec.scheduling`, gates on) and Phalanx on a
stock cluster (annotations), asserting both outcomes.

The scenarios live in `scenarios.py`; `bench/comparison.py` runs the same ones to write docs/comparison.md.
Where upstream is random (its choice between tied domains, and so its preemption victims), only what is
certain is asserted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .scenarios import (
    BEST_FIT_RUNS,
    CHEAPEST_RUNS,
    PHALANX,
    SCENARIOS,
    UPSTREAM,
    GangFate,
    Outcome,
    Scenario,
    run_in,
)

pytestmark = [pytest.mark.integration, pytest.mark.upstream]

GANG_4_WAITS = (
    "pod group is unschedulable, 0/1 placements are available, first placement status: "
    "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining"
)
LOCAL_4_WAITS = (
    "pod group is unschedulable, 0/4 placements are available, first placement status: "
    "minCount (4) cannot be satisfied: 2 scheduled, 1 remaining"
)
# Upstream appends the result of its preemption attempt to the same message.
UPSTREAM_NO_VICTIMS = ", pod group preemption: No preemption victims found for incoming preemptor"
LOCAL_BLOCKS = {"lb-a1", "lb-a2", "lb-b1", "lb-b2"}
NETWORK_BLOCKS = {"nb-a", "nb-b"}


def one_domain_each(outcome: Outcome, among: set[str], runs: int = 1) -> None:
    assert len(outcome.domains) == runs, outcome
    for domains in outcome.domains:
        assert len(domains) == 1 and domains <= among, outcome


def check_plain_4(upstream: Outcome, phalanx: Outcome) -> None:
    assert upstream.line == "3 Running, 1 Pending"
    assert phalanx.line == "3 Running, 1 Pending"


def check_gang_4(upstream: Outcome, phalanx: Outcome) -> None:
    before, after = "0 bound with 3 free nodes (False/Unschedulable: ", "); after freeing one: 4 bound"
    assert upstream.line == f"{before}{GANG_4_WAITS}{UPSTREAM_NO_VICTIMS}{after}"
    assert phalanx.line == f"{before}{GANG_4_WAITS}{after}"


def check_local_2(upstream: Outcome, phalanx: Outcome) -> None:
    # Upstream: the four local blocks tie on an empty cluster and the tie is broken at random.
    one_domain_each(upstream, LOCAL_BLOCKS)
    assert phalanx.line == "2 bound in lb-a1"


def check_local_4(upstream: Outcome, phalanx: Outcome) -> None:
    assert upstream.line == f"0 bound (False/Unschedulable: {LOCAL_4_WAITS}{UPSTREAM_NO_VICTIMS})"
    assert phalanx.line == f"0 bound (False/Unschedulable: {LOCAL_4_WAITS})"


def check_block_4(upstream: Outcome, phalanx: Outcome) -> None:
    # Upstream: both network blocks are empty, so which one is a tie; that it is one block is certain.
    one_domain_each(upstream, NETWORK_BLOCKS)
    assert upstream.line.startswith("4 bound in nb-")
    assert phalanx.line == "4 bound in nb-a"


def check_best_fit(expected: str) -> Callable[[Outcome, Outcome], None]:
    def check(upstream: Outcome, phalanx: Outcome) -> None:
        # Upstream: GPUs are not scored by default, so the two blocks tie; each run is still one block.
        one_domain_each(upstream, NETWORK_BLOCKS, runs=BEST_FIT_RUNS)
        one_domain_each(phalanx, NETWORK_BLOCKS, runs=BEST_FIT_RUNS)
        assert phalanx.line == f"{expected} {BEST_FIT_RUNS}/{BEST_FIT_RUNS}"

    return check


def check_suspend_resume(upstream: Outcome, phalanx: Outcome) -> None:
    assert upstream.line == (
        "0 bound; PodGroupInitiallyScheduled=True/Scheduled; no PodGroup condition says why it waits "
        "(only the pods' PodScheduled=False/Unschedulable)"
    )
    # Phalanx's Admitted adds, after upstream's sentence, what blocks each domain.
    assert phalanx.line == (
        f"0 bound; PodGroupInitiallyScheduled=True/Scheduled; Admitted=False/Unschedulable: {GANG_4_WAITS}"
        "; 3 of 4 pods fit (5 nodes: Insufficient nvidia.com/gpu)"
    )


def victim_and_survivor(outcome: Outcome) -> tuple[GangFate, GangFate]:
    """Exactly one of the two low gangs lost pods, and high-2 runs in the network block it had."""
    fates: list[GangFate] = outcome.facts["fates"]
    victims = [f for f in fates if f.deleted]
    assert len(victims) == 1, outcome.line
    (victim,) = victims
    (survivor,) = [f for f in fates if not f.deleted]
    assert survivor.running == 4, outcome.line
    assert outcome.facts["high_block"] == victim.domain, outcome.line
    one_domain_each(outcome, LOCAL_BLOCKS)
    return victim, survivor


def check_requeued_whole(phalanx: Outcome) -> GangFate:
    """Phalanx, either mode: one low gang requeued whole at once, its new pods gated, no failure counted.
    Which of the two is a tie broken by their start times, so either."""
    victim, _ = victim_and_survivor(phalanx)
    assert (victim.deleted, victim.running, victim.new_pending, victim.new_gated) == (4, 0, 4, 4), (
        phalanx.line
    )
    assert victim.new_after is not None and victim.failed == 0, phalanx.line
    return victim


def check_preempt_single(upstream: Outcome, phalanx: Outcome) -> None:
    # Upstream: every low pod is a victim, high-2's local block is chosen on a cluster without them (a tie,
    # broken at random) and the victims elsewhere are reprieved: the 2 pods in that block go, their gang
    # keeps 2 running, and the 2 pods the Job makes after its backoff (10 s, 20 s) wait for 2 more nodes.
    victim, _ = victim_and_survivor(upstream)
    assert (victim.deleted, victim.running, victim.failed) == (2, 2, 2), upstream.line
    assert victim.partial, upstream.line
    assert victim.new_after is not None and (victim.new_pending, victim.new_gated) == (2, 0), upstream.line
    check_requeued_whole(phalanx)


def check_preempt_all(upstream: Outcome, phalanx: Outcome) -> None:
    # Upstream: the gang goes whole and the Job counts 4 failures, so its new pods wait out the Job
    # controller's backoff for them (about 80 s), if they come within the bounded wait at all. Phalanx
    # requeues the gang whole without a failure counted (check_requeued_whole: failed 0), so no backoff
    # holds its new pods back: that is the difference, checked on the Jobs' state rather than a stopwatch.
    victim, _ = victim_and_survivor(upstream)
    assert (victim.deleted, victim.running, victim.failed) == (4, 0, 4), upstream.line
    assert victim.new_after is None or victim.new_pending == 4, upstream.line
    ours = check_requeued_whole(phalanx)
    assert ours.new_after is not None, phalanx.line


def check_preempt_free_block(upstream: Outcome, phalanx: Outcome) -> None:
    # Both: high-2 fits in a free local block, so neither preempts (`hold` watched low-a keep its pods).
    for outcome in (upstream, phalanx):
        one_domain_each(outcome, LOCAL_BLOCKS)
        low, high = outcome.facts["low_block"], outcome.facts["high_block"]
        assert len(low) == 1 and len(high) == 1 and low != high, outcome.line
    # Upstream: which network block low-a takes on an empty cluster is a tie.
    assert phalanx.line == "low-a in nb-a; high-2 in lb-b1 (nb-b); 0 pods evicted"


def check_preempt_cheapest(upstream: Outcome, phalanx: Outcome) -> None:
    # Upstream: the local block is chosen with every lower-priority pod removed, so which gang loses its
    # 2 pods there is a tie broken at random — middle as often as low (kubernetes/kubernetes#142718).
    for runs in (upstream.facts["runs"], phalanx.facts["runs"]):
        assert len(runs) == CHEAPEST_RUNS
    for run in upstream.facts["runs"]:
        assert sorted(run.values()) == [0, 2], upstream.line
    one_domain_each(upstream, LOCAL_BLOCKS, runs=CHEAPEST_RUNS)
    one_domain_each(phalanx, LOCAL_BLOCKS, runs=CHEAPEST_RUNS)
    assert phalanx.facts["runs"] == [{"middle": 0, "low": 4}] * CHEAPEST_RUNS
    assert phalanx.line == f"goes: low (4 of 4 pods) {CHEAPEST_RUNS}/{CHEAPEST_RUNS}"


CHECKS: dict[str, Callable[[Outcome, Outcome], None]] = {
    "plain-4": check_plain_4,
    "gang-4": check_gang_4,
    "local-2": check_local_2,
    "local-4": check_local_4,
    "block-4": check_block_4,
    "best-fit-lb-a1": check_best_fit("nb-a"),
    "best-fit-lb-b1": check_best_fit("nb-b"),
    "suspend-resume": check_suspend_resume,
    "preempt-single": check_preempt_single,
    "preempt-all": check_preempt_all,
    "preempt-free-block": check_preempt_free_block,
    "preempt-cheapest": check_preempt_cheapest,
}


def test_every_scenario_has_a_check() -> None:
    assert sorted(CHECKS) == sorted(s.id for s in SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_scenario_side_by_side(
    upstream_cluster: ClusterState,
    stock_cluster: ClusterState,
    phalanx: OperatorProcess,
    scenario: Scenario,
) -> None:
    if phalanx.proc is None or phalanx.proc.poll() is not None:
        phalanx.start()  # an earlier test of the session may have stopped it
    upstream = run_in(upstream_cluster, UPSTREAM, scenario)
    ours = run_in(stock_cluster, PHALANX, scenario)
    CHECKS[scenario.id](upstream, ours)
