"""SIGTERM ends `phalanx run` promptly, also when the apiserver is gone.

Before the bounded stop, Kopf's exit re-patched the webhook configurations with its full retry
schedule: 55 s with the apiserver refusing connections (measured), and 30 s more per attempt when it
does not answer at all. The operator bounds its stop itself (controller/process/main.py): once stopping,
each of Kopf's requests gets one short attempt, and a timer ends the process `HARD_EXIT_SECONDS` (9 s,
under the issue's 10 s) after the signal, exiting 1 with "exiting now". So the test checks the mechanism,
not a stopwatch: the clean stop must finish before that timer fires (exit code 0, no "exiting now"); a
stop that still retried its requests would be cut off by the timer (or not end at all) and fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import DevCluster, pid_alive
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import wait_for

pytestmark = pytest.mark.integration

WAIT_SECONDS = 20.0  # how long the test waits for the exit before it gives up and kills (a timeout only)


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0]


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_sigterm_with_the_apiserver_gone_stops_cleanly_before_the_hard_deadline(
    tmp_path: Path, how: str
) -> None:
    """killed: connections are refused. frozen (SIGSTOP): connections open but nothing answers."""
    cluster = DevCluster(tmp_path / "cluster")
    state = cluster.up(topology="1x1x2", log=lambda m: print(f"[dev-cluster] {m}"))
    operator = OperatorProcess(state, tmp_path)
    apiserver = state.pids["kube-apiserver"]
    try:
        operator.start()
        assert operator.proc is not None
        if how == "killed":
            os.kill(apiserver, signal.SIGKILL)
            wait_for("the apiserver gone", lambda: not pid_alive(apiserver), timeout=10)
        else:
            os.kill(apiserver, signal.SIGSTOP)
            wait_for("the apiserver stopped", lambda: process_state(apiserver) == "T", timeout=10)
        # The event loop still runs: the probes answer while the watches fail.
        wait_for("the operator's /healthz answering", lambda: operator.http_status("/healthz"), timeout=10)

        operator.proc.send_signal(signal.SIGTERM)
        try:
            code = operator.proc.wait(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            operator.proc.kill()
            operator.proc.wait()
            pytest.fail(f"still running {WAIT_SECONDS:.0f} s after SIGTERM; log:\n{operator.tail()}")
        print(f"phalanx run exited with {code} after SIGTERM (apiserver {how})")
        log = operator.current_log()
        assert "SIGTERM received: stopping (at most 9 s)" in log, operator.tail()
        # The hard-exit timer exits 1 after logging "exiting now": the clean stop must have ended first.
        assert "exiting now" not in log, (
            f"the clean stop did not finish before the hard deadline:\n{operator.tail()}"
        )
        assert code == 0, operator.tail()
    finally:
        operator.stop(signal.SIGKILL)
        if how == "frozen" and pid_alive(apiserver):
            os.kill(apiserver, signal.SIGCONT)
        cluster.down(log=lambda m: print(f"[dev-cluster] {m}"))
