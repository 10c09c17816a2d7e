"""The article's slice cases with hand-made objects, on upstream v1.37.2 (`--mode upstream`: Workload and
PodGroups scheduling.k8s.io/v1beta1, CompositePodGroup v1alpha3, pods with spec.schedulingGroup) and on
Phalanx (stock cluster), asserting each system's outcome. The scenarios are in slice_scenarios.py;
bench/comparison.py runs the same ones for the slice rows of docs/comparison.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .scenarios import Outcome
from .slice_scenarios import (
    PHALANX_SLICES,
    SLICE_SCENARIOS,
    SLICES,
    UPSTREAM_SLICES,
    SliceScenario,
    run_slices_in,
)

pytestmark = [pytest.mark.integration, pytest.mark.upstream]

LOCAL_BLOCKS = {"lb-a1", "lb-a2", "lb-b1", "lb-b2"}


def each_slice_in_its_own_local_block_of_one_network_block(outcome: Outcome) -> str:
    blocks: dict[str, set[str]] = outcome.facts["blocks"]
    networks: set[str] = outcome.facts["networks"]
    assert sorted(blocks) == sorted(SLICES), outcome.line
    assert all(len(b) == 1 and b <= LOCAL_BLOCKS for b in blocks.values()), outcome.line
    assert blocks[SLICES[0]] != blocks[SLICES[1]], outcome.line
    assert len(networks) == 1, outcome.line
    (network,) = networks
    # The local blocks of a network block are named after it (lb-b1 in nb-b).
    assert all(b.removeprefix("lb-")[0] == network.removeprefix("nb-") for s in blocks.values() for b in s)
    return network


def check_empty(upstream: Outcome, phalanx: Outcome) -> None:
    # The article: slices-0 in lb-b1, slices-1 in lb-b2, both in nb-b (upstream's tie between the two
    # empty network blocks; asserted only as one network block, see the note in check_busy).
    each_slice_in_its_own_local_block_of_one_network_block(upstream)
    assert upstream.facts["composite"] == [], upstream.line  # upstream writes no condition on it
    # Phalanx: the first network block by name, a condition on the CompositePodGroup saying it is placed.
    assert each_slice_in_its_own_local_block_of_one_network_block(phalanx) == "nb-a"
    types = {c["type"]: (c["status"], c.get("reason")) for c in phalanx.facts["composite"]}
    assert types.get("Admitted") == ("True", "Admitted"), phalanx.line
    assert types.get("CompositePodGroupInitiallyScheduled", ("",))[0] == "True", phalanx.line


def check_busy(upstream: Outcome, phalanx: Outcome) -> None:
    # Both: nothing bound while only lb-b2 has room for a whole slice (hold watched it), the reason on
    # each PodGroup.
    for outcome in (upstream, phalanx):
        for g in SLICES:
            cond = outcome.facts["pod_groups"][g]
            assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), outcome.line
            assert cond["message"].startswith("pod group is unschedulable"), outcome.line
    # Upstream: the reason only on the PodGroups, in its placement sentence; none on the CompositePodGroup.
    assert "placements are available" in upstream.facts["pod_groups"][SLICES[0]]["message"], upstream.line
    assert upstream.facts["composite"] == [], upstream.line
    # Phalanx: the CompositePodGroup says why the whole tree waits, per slice.
    admitted = phalanx.facts["composite_admitted"]
    assert admitted is not None and (admitted["status"], admitted["reason"]) == ("False", "Unschedulable")
    assert all(f"{g}:" in admitted["message"] for g in SLICES), phalanx.line
    # Once lb-b1 is free, Phalanx places the whole tree in nb-b.
    assert phalanx.facts["seconds"] is not None and phalanx.facts["networks"] == {"nb-b"}, phalanx.line


CHECKS: dict[str, Callable[[Outcome, Outcome], None]] = {
    "slices-empty": check_empty,
    "slices-busy": check_busy,
}


def test_every_slice_scenario_has_a_check() -> None:
    assert sorted(CHECKS) == sorted(s.id for s in SLICE_SCENARIOS)


@pytest.mark.parametrize("scenario", SLICE_SCENARIOS, ids=[s.id for s in SLICE_SCENARIOS])
def test_slices_side_by_side(
    upstream_cluster: ClusterState,
    stock_cluster: ClusterState,
    phalanx: OperatorProcess,
    scenario: SliceScenario,
) -> None:
    if phalanx.proc is None or phalanx.proc.poll() is not None:
        phalanx.start()
    upstream = run_slices_in(upstream_cluster, UPSTREAM_SLICES, scenario)
    ours = run_slices_in(stock_cluster, PHALANX_SLICES, scenario)
    CHECKS[scenario.id](upstream, ours)
