"""The scale bench's short form (issue 19, `bench/scale.py`): correctness only, never a time.

Each system gets a fresh 20-node dev cluster (`1x2x10`: two local blocks of ten nodes) and three gang Jobs of
8 pods x 8 GPUs, required in one local block, created at once; their pods end a few seconds after they start,
so the third Job waits for a block to free. Every Job must end up fully bound in one block, the third in a
freed one, and the pod watch must never see a partial gang. The control (`plain`: the same Jobs without any
gang scheduling) shows the watch does see one when a system leaves it. Kueue's case needs the `kueue` addon
(marked needs_builds: hack/test.sh builds it meanwhile). The full form: `python3 bench/scale.py`
(docs/performance.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale import Case, Options, refill_gaps, run_case
from scale_systems import SYSTEMS
from scale_watch import Recorder

pytestmark = pytest.mark.integration

CASE = Case("contention", "1x2x10", jobs=3, run_seconds=6)
# A gang bound part-way this long after its first bind is partial; the control's stays so for >= run_seconds.
OPTIONS = Options(settle=3.0, idle=0.0, timeout=600.0, up_timeout=300.0)


# Kueue's cluster is `DevCluster.up(addons=("kueue",))`, which builds the addon when .cache/addons lacks it:
# needs_builds, so that hack/test.sh runs it after its background build, never beside it.
@pytest.mark.parametrize(
    "name", ["phalanx", "upstream", pytest.param("kueue", marks=pytest.mark.needs_builds)]
)
def test_every_gang_bound_whole_and_refilled(name: str, tmp_path: Path) -> None:
    system = SYSTEMS[name]()
    reason = system.unavailable()
    if reason:
        pytest.skip(reason)
    result = run_case(system, CASE, tmp_path / name, OPTIONS)
    assert result["status"] == "ok", result.get("error") or result
    assert result["bound_pods"] == CASE.jobs * CASE.pods
    assert result["gangs_bound"] == CASE.jobs
    assert result["partial_gangs"] == []
    assert result["split_gangs"] == []
    domains = [job["domains"] for job in result["per_job"].values()]
    assert all(len(d) == 1 for d in domains), domains
    assert result["refills"] >= 1, "the third gang should have gone into a block a finished gang freed"
    assert result["makespan_s"] is not None


def test_the_watch_sees_a_partial_gang(tmp_path: Path) -> None:
    """Without gangs, 24 pods on 20 nodes: some Job has some, not all, of its pods bound until others end."""
    result = run_case(SYSTEMS["plain"](), CASE, tmp_path / "plain", OPTIONS)
    assert result["status"] == "ok", result.get("error") or result
    assert result["partial_gangs"], result["per_job"]


def test_recorder_flags_a_gang_bound_part_way() -> None:
    """The rules themselves, on made-up events: partial after `settle` or when the run ends so; two domains
    at once is split; a gang whose pods were replaced (a requeue) and ran whole elsewhere is neither."""
    domain = {"n1": "A", "n2": "A", "n3": "A", "n4": "A", "n5": "A", "y1": "B", "y2": "B", "y3": "B"}
    recorder = Recorder(dict.fromkeys("abcde", 2), settle=5.0, domain=domain)

    def pod(job: str, index: int, node: str = "", phase: str = "Pending") -> dict[str, object]:
        return {
            "metadata": {"name": f"{job}-{index}", "uid": f"{job}-{index}", "labels": {"job-name": job}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase},
        }

    for job in "abcde":
        recorder.on_pod("ADDED", pod(job, 0), 0.0)
        recorder.on_pod("ADDED", pod(job, 1), 0.0)
    recorder.on_pod("MODIFIED", pod("a", 0, "n1"), 1.0)
    recorder.on_pod("MODIFIED", pod("a", 1, "n2"), 2.0)  # a: whole
    recorder.on_pod("MODIFIED", pod("b", 0, "n3"), 1.0)  # b: half, for ever
    recorder.on_pod("MODIFIED", pod("c", 0, "n4"), 9.0)  # c: half when the run ends
    recorder.on_pod("MODIFIED", pod("d", 0, "n5"), 1.0)  # d: whole in A, killed, then whole in B
    recorder.on_pod("MODIFIED", pod("d", 1, "n5"), 1.1)
    recorder.on_pod("MODIFIED", pod("d", 0, "n5", "Failed"), 1.5)
    recorder.on_pod("MODIFIED", pod("d", 1, "n5", "Failed"), 1.6)
    recorder.on_pod("ADDED", pod("d", 2, "y1"), 2.0)
    recorder.on_pod("ADDED", pod("d", 3, "y2"), 2.1)
    recorder.on_pod("MODIFIED", pod("e", 0, "n5"), 1.0)  # e: one pod in A, one in B, both alive
    recorder.on_pod("MODIFIED", pod("e", 1, "y3"), 1.0)
    recorder.check_all(5.5)
    assert recorder.partial_gangs() == []  # b has been half bound only 4.5 s
    recorder.on_pod("MODIFIED", pod("a", 0, "n1", "Running"), 6.5)
    recorder.check_all(6.5)
    assert [p.split(":")[0] for p in recorder.partial_gangs()] == ["b"]
    recorder.check_all(10.0, final=True)
    assert [p.split(":")[0] for p in recorder.partial_gangs()] == ["b", "c"]
    assert [p.split(":")[0] for p in recorder.split_gangs()] == ["e"]
    assert recorder.gangs["a"].ran == 2.0
    assert recorder.gangs["d"].ran == 1.1 and recorder.gangs["d"].replaced() == 2
    assert recorder.gangs["d"].nodes() == {"y1", "y2"}
    assert recorder.counts() == (3, 0)  # a, d, e ran; none done


def test_refill_gap_counts_from_when_the_domain_had_room() -> None:
    """Three nodes, gangs of two: g2 has room once one pod of g1 has ended (not all of them)."""
    domain = {"n1": "A", "n2": "A", "n3": "A"}
    recorder = Recorder({"g1": 2, "g2": 2}, settle=5.0, domain=domain)

    def event(job: str, index: int, node: str, phase: str, now: float) -> None:
        meta = {"name": f"{job}-{index}", "uid": f"{job}-{index}", "labels": {"job-name": job}}
        recorder.on_pod(
            "MODIFIED", {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}, now
        )

    event("g1", 0, "n1", "Running", 0.0)
    event("g1", 1, "n2", "Running", 0.0)
    event("g1", 0, "n1", "Succeeded", 10.0)
    event("g1", 1, "n2", "Succeeded", 11.0)
    event("g2", 0, "n1", "Running", 12.0)
    event("g2", 1, "n3", "Running", 12.5)
    gaps = refill_gaps(list(recorder.gangs.values()), domain, 2)
    assert gaps == [2.5]  # g1 alone is the first wave: no refill
