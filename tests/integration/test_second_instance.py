"""A second `phalanx run` on the webhook port of a running one fails fast and leaves its caBundle alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

pytestmark = pytest.mark.integration
CONFIG = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/phalanx.dev"


def ca_bundles(cluster: ClusterState) -> list[str]:
    config = cluster.client().get(CONFIG)
    return [w["clientConfig"].get("caBundle", "") for w in config["webhooks"]]


def test_a_second_instance_on_the_same_port_fails_fast(
    stock_cluster: ClusterState, phalanx: OperatorProcess
) -> None:
    if phalanx.proc is None or phalanx.proc.poll() is not None:
        phalanx.start()
    before = ca_bundles(stock_cluster)
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "phalanx.cli",
            "run",
            "--kubeconfig",
            str(stock_cluster.kubeconfig),
            "--webhook-port",
            str(phalanx.port),
            "--metrics-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(second.stderr.strip().splitlines()[-1])
    assert second.returncode == 1
    assert f":{phalanx.port} is already in use" in second.stderr
    assert ca_bundles(stock_cluster) == before
    assert phalanx.proc is not None and phalanx.proc.poll() is None
