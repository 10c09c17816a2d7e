"""Crash safety for every kind, short form: seeded rounds of a random mix of gang Jobs, JobSets (child Jobs in
one network block, some each in one local block), LeaderWorkerSets (each group a gang) and TrainJobs, run by
the real JobSet v0.11.1, LWS v0.8.0 and Trainer v2.2.0 controllers, released at once while the operator is
SIGKILLed at random points of their admissions — a random delay, right after a recorded decision, after the
Nth pod release, before the Nth status write (controller/apply/faults.py), sometimes again during the
recovery, sometimes with one of them deleted while it is down — and restarted. Some are staged (JobSet
InOrder, LWS LeaderReady: decided whole with their first pods, the later ones released into held slots). After
every round (soak.py, invariants.py, gangs.py): no node over capacity, no gang in two domains of its key (no
child Job in two of its slice key) at any poll; once the kinds' controllers made every pod, every gang fully
admitted where its recorded decision says or fully gated, none waiting that fits the room left, none requeued
and no bound pod taken away (no node fails). At the end every gang that can ever fit was admitted. The full
form: `python3 bench/soak.py crash-kinds --rounds 30`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace
from .operator_fixtures import instead_of
from .soak import SWITCHES, Soak

pytestmark = pytest.mark.integration
ROUNDS = 10  # every kill point twice (they cycle in fives)
SEED = 20261206
STARVATION_AGE = 20  # seconds, as test_crash_soak.py: gangs left waiting get room held within the short form


@pytest.fixture
def own_operator(
    addons_cluster: ClusterState, phalanx_addons: OperatorProcess, addons_ns: Namespace, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator this test may kill and restart with switches armed, instead of the session's."""
    yield from instead_of(
        phalanx_addons,
        OperatorProcess(
            addons_cluster, tmp_path, ("--starvation-age", str(STARVATION_AGE)), name="crash-soak-kinds"
        ),
    )


def test_kill_9_at_random_points_leaves_no_partial_gang_of_any_kind(
    addons_ns: Namespace, own_operator: OperatorProcess
) -> None:
    ns = addons_ns
    soak = Soak(ns, own_operator, SEED, kinds=True)
    try:
        for _ in range(ROUNDS):
            soak.crash_round()
        # A switch is not reached in a round where too little is admitted (the room held by gangs left
        # waiting): one more round on an emptied cluster for each kill point not reached yet.
        for mode in [mode for mode in SWITCHES if soak.stats.kills[mode] == 0]:
            soak.clear()
            soak.crash_round(mode)
        soak.drain()
    except BaseException:
        print(ns.where())
        raise
    print("\n".join(soak.stats.lines()))
    stats = soak.stats
    # The soak did what it claims: gangs of every kind admitted, kills at the armed switches and at delays.
    assert all(
        stats.admitted_by_kind[kind] > 0 for kind in ("Job", "JobSet", "LeaderWorkerSet", "TrainJob")
    ), stats.lines()
    assert all(stats.kills[mode] > 0 for mode in ("delay", *SWITCHES)), stats.kills
    assert stats.never_fit > 0
    assert "fault injection: SIGKILL at" in own_operator.log_path.read_text()
