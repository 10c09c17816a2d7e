"""The walk-through's steps for JobSet, TrainJob and LeaderWorkerSet (`phalanx demo --steps ...`, as a user
runs it) on the dev cluster with their real controllers and Phalanx: each plays the article's gang case and
ends OK. (On the stock dev cluster they are skipped, saying what to start: test_walkthrough.py.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

pytestmark = pytest.mark.integration

# Each kind step and the addon whose controller it needs (JobSet v0.11.1 and Trainer v2.2.0 run from v1.32).
STEPS = {"jobset": "jobset", "trainjob": "trainer", "lws": "lws"}
OWNERS = {"jobset": "JobSet/train", "trainjob": "TrainJob/llm", "lws": "LeaderWorkerSet/serve"}


def test_the_kind_steps_play_ok_with_the_real_controllers(
    addons_cluster: ClusterState, phalanx_addons: OperatorProcess
) -> None:
    """The steps whose addon runs on the cluster's version (all three on the default one) each end OK."""
    steps = [step for step, addon in STEPS.items() if addon in addons_cluster.addons]
    assert steps, f"no kind step's addon runs on {addons_cluster.kubernetes_version}"
    if phalanx_addons.proc is None or phalanx_addons.proc.poll() is not None:
        phalanx_addons.start()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "phalanx.cli",
            "demo",
            "--dir",
            addons_cluster.dir,
            "--steps",
            ",".join(steps),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    print(result.stdout)
    print(result.stderr, file=sys.stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    for step in steps:
        assert re.search(rf"^OK {step} \(", result.stdout, re.M), f"no OK line for {step}"
    assert re.search(rf"^walk-through: {len(steps)} OK, 0 skipped, 0 failed in ", result.stdout, re.M)
    assert result.stdout.count("\nnotice: ") == len(steps)
    # kubectl get podgroups names whose gang each row is.
    for owner in (OWNERS[step] for step in steps):
        assert re.search(rf"^\S+\s+{re.escape(owner)}\s+Gang\s", result.stdout, re.M), owner
