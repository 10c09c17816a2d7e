"""The article's scenarios run twice: upstream v1.37.2 (Job `spec.scheduling`, gates on) and Phalanx on a
stock cluster (annotations), asserting both outcomes.

The scenarios live in `scenarios.py`; `bench/comparison.py` runs the same ones to write docs/comparison.md.
Where upstream is random (its choice between tied domains), only what is certain is asserted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .scenarios import BEST_FIT_RUNS, PHALANX, SCENARIOS, UPSTREAM, Outcome, Scenario, run_in

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
    assert phalanx.line == (
        f"0 bound; PodGroupInitiallyScheduled=True/Scheduled; Admitted=False/Unschedulable: {GANG_4_WAITS}"
    )


CHECKS: dict[str, Callable[[Outcome, Outcome], None]] = {
    "plain-4": check_plain_4,
    "gang-4": check_gang_4,
    "local-2": check_local_2,
    "local-4": check_local_4,
    "block-4": check_block_4,
    "best-fit-lb-a1": check_best_fit("nb-a"),
    "best-fit-lb-b1": check_best_fit("nb-b"),
    "suspend-resume": check_suspend_resume,
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
