"""Issue 7's differential test, short form: generated gangs in generated cluster states, Phalanx on a stock
cluster against upstream's gang scheduler on a `--mode upstream` one (`differential.py`).

Each seed is played on both clusters at once, in the same state: every pod Phalanx releases must bind, and
gangs Phalanx says cannot fit must not be placed by upstream either. The long form is
`python3 bench/differential.py` (docs/differential.md).
"""

from __future__ import annotations

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .differential import (
    BOTH_PLACED,
    BOTH_UNSCHEDULABLE,
    BUG,
    DISAGREE,
    FAILURES,
    OTHER_GANG,
    PHALANX_ONLY,
    SAME_GANG,
    UNSUPPORTED,
    Observed,
    Run,
    generate,
    run_both,
    verdict,
)
from .kube import delete_namespace, new_namespace

pytestmark = [pytest.mark.integration, pytest.mark.differential]

CI_SEEDS = [0, 13, 14, 39, 40, 52, 89, 149, 183]
"""From the long form's 200 seeds: a greedy cover of FEATURES by seeds where Phalanx released a gang (13, 14,
39, 52, 89, 149, 183, so the released-pods-bind oracle is exercised), plus one that both systems refuse (0)
and one with a claim the engine refuses as not modelled (40)."""

KNOWN: dict[int, str] = {}
"""Seeds that fail for a known engine bug: seed -> the bug (run as strict xfail)."""

FEATURES = {
    "GPUs",
    "anywhere",
    "background pods",
    "cordoned node",
    "existing anti-affinity",
    "hostPort",
    "hostPort (UDP)",
    "hostPort in background",
    "hostPort in background (hostIP)",
    "init container",
    "limits only",
    "local block",
    "memory",
    "network block",
    "node affinity",
    "node affinity Gt/Lt",
    "nodeSelector",
    "one node",
    "pod affinity (background)",
    "pod affinity (own)",
    "pod anti-affinity (background)",
    "pod anti-affinity (other)",
    "pod anti-affinity (own)",
    "sidecar",
    "taint NoExecute",
    "taints",
    "tolerations",
    "topology spread (own)",
    "topology spread minDomains",
    "two gangs at once",
    "volume",
}


def test_the_generator_is_deterministic_and_the_ci_seeds_cover_every_feature() -> None:
    assert generate(9).describe() == generate(9).describe()
    assert generate(9) != generate(10)
    covered = set().union(*(generate(seed).features for seed in CI_SEEDS))
    assert covered >= FEATURES, sorted(FEATURES - covered)


def _run(*kinds: str) -> Run:
    return Run([Observed(kind, nodes=("n",) if kind == "placed" else ()) for kind in kinds])


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        (("placed",), ("placed",), BOTH_PLACED),
        (("unschedulable",), ("unschedulable",), BOTH_UNSCHEDULABLE),
        (("placed",), ("unschedulable",), PHALANX_ONLY),
        (("unschedulable",), ("placed",), DISAGREE),
        (("stuck",), ("placed",), BUG),
        (("unsupported",), ("placed",), UNSUPPORTED),
        (("placed", "unschedulable"), ("placed", "unschedulable"), SAME_GANG),
        (("placed", "placed"), ("placed", "unschedulable"), PHALANX_ONLY),
        (("placed", "unschedulable"), ("unschedulable", "placed"), OTHER_GANG),
        (("placed", "unschedulable"), ("placed", "placed"), OTHER_GANG),
        (("unschedulable", "unschedulable"), ("unschedulable", "placed"), DISAGREE),
        (("placed", "stuck"), ("placed", "placed"), BUG),
        (("placed", "undecided"), ("placed", "placed"), BUG),
        (("unsteady",), ("unschedulable",), BUG),
        (("placed", "unsteady"), ("placed", "unschedulable"), BUG),
    ],
)
def test_the_verdict(ours: tuple[str, ...], theirs: tuple[str, ...], expected: str) -> None:
    assert verdict(_run(*ours), _run(*theirs)) == expected


@pytest.mark.upstream
def test_every_generated_scenario_is_valid(upstream_cluster: ClusterState) -> None:
    """The API accepts the Jobs and background pods of the first 300 seeds (server-side dry run)."""
    ns = new_namespace(upstream_cluster, "differential-dry-run")
    invalid = []
    try:
        for seed in range(300):
            scenario = generate(seed)
            objects = [("batch/v1", "jobs", g.job("upstream")) for g in scenario.gangs]
            objects += [("v1", "pods", pod) for pod in scenario.background]
            for version, plural, body in objects:
                base = f"/api/{version}" if version == "v1" else f"/apis/{version}"
                try:
                    ns.api.request("POST", f"{base}/namespaces/{ns.name}/{plural}?dryRun=All", body)
                except ApiError as e:
                    invalid.append(f"seed {seed}: {e}")
    finally:
        delete_namespace(ns)
    assert not invalid, "\n".join(invalid)


@pytest.mark.upstream
@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(seed, marks=pytest.mark.xfail(reason=KNOWN[seed], strict=True))
        if seed in KNOWN
        else seed
        for seed in CI_SEEDS
    ],
)
def test_released_pods_bind_and_upstream_agrees_when_phalanx_refuses(
    stock_cluster: ClusterState, upstream_cluster: ClusterState, phalanx: OperatorProcess, seed: int
) -> None:
    if phalanx.proc is None or phalanx.proc.poll() is not None:
        phalanx.start()  # an earlier test of the session may have stopped it
    scenario = generate(seed)
    result = run_both(stock_cluster, upstream_cluster, scenario)
    print(result.report())
    assert result.verdict not in FAILURES, f"{result.report()}\n{scenario.describe()}"
