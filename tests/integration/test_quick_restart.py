"""A restart right after a stop serves at once (issue 16, item 5): the second-instance check counts a live
listener only, not the connections the apiserver's webhook calls left in TIME-WAIT on the port."""

from __future__ import annotations

from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.procs import free_port

from .kube import Namespace, delete_namespace, new_namespace, wait_for
from .test_phalanx_admission import managed_job

pytestmark = pytest.mark.integration


def gated(ns: Namespace, job: str) -> bool:
    body = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job}")
    gates = body["spec"]["template"]["spec"].get("schedulingGates") or []
    return any(g["name"] == "phalanx.dev/admission" for g in gates)


def test_a_restart_right_after_a_stop_serves_at_once(
    stock_cluster: ClusterState, phalanx: OperatorProcess, tmp_path: Path
) -> None:
    phalanx.stop()
    operator = OperatorProcess(stock_cluster, tmp_path, name="restarted", webhook_port=free_port())
    ns = new_namespace(stock_cluster, "quick-restart")
    try:
        operator.start()
        for i in range(3):  # webhook calls: connections the stop leaves in TIME-WAIT on the port
            ns.create(managed_job(f"before-{i}", 1))
        operator.stop()
        operator.start()  # raises if the process exits ("already in use") or never gets ready
        ns.create(managed_job("after", 1))
        assert gated(ns, "after")
        wait_for("after's pod bound", lambda: any(p["spec"].get("nodeName") for p in ns.job_pods("after")))
    finally:
        operator.stop()
        print(f"log: {operator.log_path}")
        delete_namespace(ns)
        phalanx.start()
