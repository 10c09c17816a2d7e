"""The scale bench's short form (issue 19, `bench/scale.py`): correctness only, never a time.

Each system gets a fresh 20-node dev cluster (`1x2x10`: two local blocks of ten nodes) and three gang Jobs of
8 pods x 8 GPUs, required in one local block, created at once; their pods end a few seconds after they start,
so the third Job waits for a block to free. Every Job must end up fully bound in one block, the third in a
freed one, and the pod watch must never see a partial gang. The control (`plain`: the same Jobs without any
gang scheduling) shows the watch does see one when a system leaves it. Kueue is skipped, with the reason,
until the dev cluster has its `kueue` addon. The full form: `python3 bench/scale.py` (docs/performance.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale import Case, Options, run_case
from scale_systems import SYSTEMS
from scale_watch import Recorder

pytestmark = pytest.mark.integration

CASE = Case("contention", "1x2x10", jobs=3, run_seconds=6)
# A gang bound part-way this long after its first bind is partial; the control's stays so for >= run_seconds.
OPTIONS = Options(settle=3.0, idle=0.0, timeout=600.0, up_timeout=300.0)


@pytest.mark.parametrize("name", ["phalanx", "upstream", "kueue"])
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
    """The rule itself, on made-up events: partial after `settle`, or when the run ends so; whole is fine."""
    recorder = Recorder({"a": 2, "b": 2, "c": 2}, settle=5.0)

    def pod(job: str, index: int, node: str = "", phase: str = "Pending") -> dict[str, object]:
        return {
            "metadata": {"name": f"{job}-{index}", "uid": f"{job}-{index}", "labels": {"job-name": job}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase},
        }

    for job in "abc":
        recorder.on_pod("ADDED", pod(job, 0), 0.0)
        recorder.on_pod("ADDED", pod(job, 1), 0.0)
    recorder.on_pod("MODIFIED", pod("a", 0, "n1"), 1.0)
    recorder.on_pod("MODIFIED", pod("a", 1, "n2"), 2.0)  # a: whole
    recorder.on_pod("MODIFIED", pod("b", 0, "n3"), 1.0)  # b: half, for ever
    recorder.on_pod("MODIFIED", pod("c", 0, "n4"), 9.0)  # c: half when the run ends
    recorder.check_all(5.5)
    assert recorder.partial_gangs() == []  # b's first bind is only 4.5 s old
    recorder.on_pod("MODIFIED", pod("a", 0, "n1", "Running"), 6.5)  # an event checks every gang it touches
    recorder.check_all(6.5)
    assert [p.split(":")[0] for p in recorder.partial_gangs()] == ["b"]
    recorder.check_all(10.0, final=True)
    assert [p.split(":")[0] for p in recorder.partial_gangs()] == ["b", "c"]
    assert recorder.gangs["a"].all_bound() == 2.0
    assert recorder.counts() == (4, 0)
