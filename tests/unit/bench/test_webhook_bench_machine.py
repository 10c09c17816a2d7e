"""bench/webhook_bench.py's hold on the machine: the busy processes it starts and stops, the CPUs it pins a
process tree to, and the context switches it reads. Real processes, no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from tests.integration.kube import wait_for

from webhook_bench import busy, descendants, involuntary_switches, pin, threads


def children(pid: int) -> list[int]:
    return [c for c in descendants(pid) if c != pid]


def test_descendants_are_the_whole_tree_and_pin_reaches_every_thread() -> None:
    # A shell whose child is another shell with a sleeping child: three levels.
    tree = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30 & wait' & wait"])
    try:
        wait_for("a grandchild", lambda: len(children(tree.pid)) >= 2, timeout=10)
        found = descendants(tree.pid)
        assert found[0] == tree.pid and len(found) == 3, found
        cpus = sorted(os.sched_getaffinity(0))
        pin(found, {cpus[0]})
        for pid in found:
            for tid in threads(pid):
                assert os.sched_getaffinity(tid) == {cpus[0]}
    finally:
        tree.kill()
        tree.wait()
    assert threads(tree.pid) == [], "a reaped process has no threads"


def test_busy_starts_the_spinners_pinned_and_stops_them() -> None:
    me = os.getpid()
    cpus = sorted(os.sched_getaffinity(0))
    others = set(children(me))  # a test session may run processes of its own (a dev cluster)
    with busy(2, {cpus[-1]}):
        spinners = set(children(me)) - others
        assert len(spinners) == 2
        for pid in spinners:
            assert os.sched_getaffinity(pid) == {cpus[-1]}
    assert not set(children(me)) & spinners, "stopped and reaped"
    with busy(0, None):
        assert set(children(me)) - others == set()


def test_involuntary_switches_count_a_process_sharing_its_cpu() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        before = involuntary_switches(spinner.pid)
        with busy(1, {cpus[0]}):  # another spinner on the same CPU takes turns with it
            pin([spinner.pid], {cpus[0]})
            wait_for("it preempted", lambda: involuntary_switches(spinner.pid) > before + 5, timeout=10)
    finally:
        spinner.kill()
        spinner.wait()
    assert involuntary_switches(spinner.pid) == 0, "a process gone counts nothing"
