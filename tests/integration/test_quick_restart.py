"""A restart right after a stop serves at once (issue 16, item 5): the second-instance check counts a live
listener only, not the connections the apiserver's webhook calls left in TIME-WAIT on the port."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.procs import free_port

from .kube import Namespace, delete_namespace, new_namespace, wait_for
from .test_phalanx_admission import managed_job

pytestmark = pytest.mark.integration


CONFIG = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/phalanx.dev"


def time_waits(port: int) -> int:
    """Sockets on 127.0.0.1:<port> in TIME-WAIT (state 06 in /proc/net/tcp)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(1 for row in rows if row[1] == f"0100007F:{port:04X}" and row[3] == "06")


def leave_time_wait(port: int) -> None:
    """What a stopped webhook server leaves when it closed the apiserver's connections first: a connection
    in TIME-WAIT on its port (made here when the stop left none, so the check is exercised every time)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Kopf's server binds
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()
        client.recv(1)
        client.close()


def ca_bundle(api: Any) -> str:
    return str(api.get(CONFIG)["webhooks"][0]["clientConfig"].get("caBundle", ""))


def gated(ns: Namespace, job: str) -> bool:
    body = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job}")
    gates = body["spec"]["template"]["spec"].get("schedulingGates") or []
    return any(g["name"] == "phalanx.dev/admission" for g in gates)


def _created(ns: Namespace, body: dict[str, Any]) -> bool:
    try:
        ns.create(body)
    except ApiError as e:
        if "x509" in str(e):
            return False
        raise
    return True


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
        before = ca_bundle(ns.api)
        operator.stop()
        print(f"{time_waits(operator.port)} connection(s) in TIME-WAIT on the port after the stop")
        if not time_waits(operator.port):
            leave_time_wait(operator.port)
        assert time_waits(operator.port)
        operator.start()  # raises if the process exits ("already in use") or never gets ready
        # Same port, so the configuration's URL is the same: ready once it carries the new CA.
        wait_for("the new instance's CA in the configuration", lambda: ca_bundle(ns.api) != before)
        # The apiserver's webhook clients follow the configuration a moment later: until then a call still
        # checks the old CA (x509 unknown authority), which is the apiserver catching up, not the restart.
        wait_for(
            "the Job created through the new instance's webhook",
            lambda: _created(ns, managed_job("after", 1)),
        )
        assert gated(ns, "after")
        wait_for("after's pod bound", lambda: any(p["spec"].get("nodeName") for p in ns.job_pods("after")))
    finally:
        operator.stop()
        print(f"log: {operator.log_path}")
        delete_namespace(ns)
        phalanx.start()
