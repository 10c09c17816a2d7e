"""Crash safety with preemption, short form (soak_preempt.py): low-priority gangs of every kind (Jobs,
JobSets, LeaderWorkerSets, TrainJobs, run by the real JobSet v0.11.1, LWS v0.8.0 and Trainer v2.2.0
controllers) run, then higher-priority gangs that fit only by preempting them come while the operator is
SIGKILLed at a random point — a random delay, right after a recorded decision, after the Nth pod release,
before the Nth status write, right after the Nth victim action of a preemption (controller/apply/faults.py)
— sometimes again during the recovery, sometimes with an owner deleted while it is down, and restarted.
Checked at every poll and once settled (invariants.py): no partial gang for longer than a bounded window
(a victim is taken back whole), no node over capacity, one domain per gang and where its group says, every
high gang runs whole, the victims run whole again or wait whole, no reservation left behind, no requeue but
the preemptions'. The full form: `python3 bench/soak.py crash-preempt --rounds 20`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import PRIORITY_CLASSES, Namespace
from .operator_fixtures import instead_of
from .soak_preempt import PRIORITIES, PreemptSoak

pytestmark = pytest.mark.integration
ROUNDS = 6  # every kill point once, the victim one twice (they cycle in sixes)
SEED = 20261207
STARVATION_AGE = 20  # seconds, as the other crash soaks


@pytest.fixture
def own_operator(
    addons_cluster: ClusterState, phalanx_addons: OperatorProcess, addons_ns: Namespace, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator this test may kill and restart with switches armed, instead of the session's."""
    yield from instead_of(
        phalanx_addons,
        OperatorProcess(
            addons_cluster, tmp_path, ("--starvation-age", str(STARVATION_AGE)), name="crash-soak-preempt"
        ),
    )


@pytest.fixture
def soak_priorities(addons_cluster: ClusterState) -> Iterator[None]:
    yield
    api = addons_cluster.client()
    for name in PRIORITIES:
        api.request("DELETE", f"{PRIORITY_CLASSES}/{name}")


def test_kill_9_in_the_middle_of_preemptions_leaves_no_partial_gang_of_any_kind(
    addons_ns: Namespace, own_operator: OperatorProcess, soak_priorities: None
) -> None:
    ns = addons_ns
    soak = PreemptSoak(ns, own_operator, SEED)
    try:
        for _ in range(ROUNDS):
            soak.preempt_round()
        # The victim kill point is not reached in a round where nothing had to be preempted: one more
        # round for it then.
        if soak.stats.kills["after-victims"] == 0:
            soak.preempt_round("after-victims")
        soak.drain()
    except BaseException:
        print(ns.where())
        raise
    lines = soak.lines()
    print("\n".join(lines))
    stats, pstats = soak.stats, soak.pstats
    # The soak did what it claims: preemptions decided, victims of several kinds, kills inside them.
    assert pstats.preempting > 0 and sum(pstats.victims.values()) >= 3, lines
    assert len(pstats.victims) >= 2, lines
    assert stats.kills["after-victims"] > 0 and stats.kills["delay"] > 0, stats.kills
    assert pstats.high_admitted > 0, lines
    assert "SIGKILL at PHALANX_FAULT_ABORT_AFTER_VICTIMS" in own_operator.log_path.read_text()
