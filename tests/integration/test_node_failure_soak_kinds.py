"""Node failures under gangs of every kind, short form: seeded rounds of a random mix of gang Jobs, JobSets,
LeaderWorkerSets and TrainJobs on the real JobSet v0.11.1, LWS v0.8.0 and Trainer v2.2.0 controllers, with
nodes failing (a NoExecute taint, NotReady, the Node deleted, GPUs gone unhealthy) under running gangs — one
node, several at once, a whole network block — and under admitting ones: in the pause between a recorded
decision and its release, and while the operator is down (kill -9, then a restart). The operator runs with
`--node-failure-grace 5`. Checked at every poll and once settled (soak_nodes.py, invariants.py): no gang runs
in part with no room for the rest in its domain longer than the grace plus a slack, nor in part at all for
long; no pod bound to a node after it failed; one domain per gang; only a gang a failure touched is requeued;
once settled (nodes failed, then healed) every gang whole or wholly gated, none waiting that fits. At the end
every gang that can ever fit was admitted. The full form: `python3 bench/soak.py nodes-kinds --rounds 25`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace
from .operator_fixtures import instead_of
from .soak_nodes import SCENARIOS, NodeSoak

pytestmark = pytest.mark.integration
SEED = 20261207
GRACE = 5.0  # --node-failure-grace, seconds
STARVATION_AGE = 20


@pytest.fixture
def own_operator(
    addons_cluster: ClusterState, phalanx_addons: OperatorProcess, addons_ns: Namespace, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator this test may kill and restart, with a short grace, instead of the session's."""
    yield from instead_of(
        phalanx_addons,
        OperatorProcess(
            addons_cluster,
            tmp_path,
            ("--node-failure-grace", str(GRACE), "--starvation-age", str(STARVATION_AGE)),
            name="node-soak-kinds",
        ),
    )


def test_nodes_failing_under_gangs_of_every_kind_leave_no_partial_gang(
    addons_ns: Namespace, own_operator: OperatorProcess
) -> None:
    ns = addons_ns
    soak = NodeSoak(ns, own_operator, SEED, GRACE)
    try:
        for _ in SCENARIOS:  # each once, in the order of the seeded draw
            soak.node_round()
        soak.drain()
    except BaseException:
        print(ns.where())
        raise
    finally:
        soak.heal_all()  # the cluster is the session's
    print("\n".join(soak.stats.lines() + soak.nstats.lines()))
    stats, nstats = soak.stats, soak.nstats
    assert set(nstats.scenarios) == set(SCENARIOS), nstats.scenarios
    assert sum(nstats.hit.values()) > 0 and nstats.requeued, nstats.lines()
    assert all(stats.admitted_by_kind[kind] > 0 for kind in ("Job", "JobSet", "LeaderWorkerSet", "TrainJob"))
