"""`phalanx dev-cluster`: up returns a Ready cluster; down leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.cluster import (
    COMPONENTS,
    ClusterError,
    ClusterState,
    DevCluster,
    free_ports,
    pid_alive,
)
from phalanx.devcluster.http import RestClient
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import delete_namespace, hold, new_namespace, wait_for

pytestmark = pytest.mark.integration


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_up_status_down_through_the_cli_leaves_no_process(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    cli = [sys.executable, "-m", "phalanx.cli", "dev-cluster"]
    up = subprocess.run(
        [*cli, "up", "--dir", str(folder), "--topology", "1x2x2"], capture_output=True, text=True
    )
    assert up.returncode == 0, up.stderr + up.stdout
    assert f"export KUBECONFIG={folder / 'kubeconfig'}" in up.stdout
    status = subprocess.run([*cli, "status", "--dir", str(folder)], capture_output=True, text=True)
    assert status.returncode == 0
    assert '"nodes_ready": 4' in status.stdout
    running = processes_mentioning(str(folder))
    assert len(running) == len(COMPONENTS), running

    with pytest.raises(ClusterError, match="already running"):
        DevCluster(folder).up()

    down = subprocess.run([*cli, "down", "--dir", str(folder)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert processes_mentioning(str(folder)) == []
    assert all(not pid_alive(pid) for pid in running)
    status = subprocess.run([*cli, "status", "--dir", str(folder)], capture_output=True, text=True)
    assert status.returncode == 3 and '"state": "stopped"' in status.stdout
    where = subprocess.run([*cli, "where", "--dir", str(folder)], capture_output=True, text=True)
    assert where.returncode == 1
    assert f"the cluster in {folder} is stopped" in where.stderr and "Traceback" not in where.stderr


def node_ready(api: RestClient, node: str) -> str:
    conditions = api.get(f"/api/v1/nodes/{node}")["status"]["conditions"]
    return next(c["status"] for c in conditions if c["type"] == "Ready")


def test_failure_injection_stops_heartbeats_and_heals(tmp_path: Path) -> None:
    cluster = DevCluster(tmp_path / "cluster")
    state = cluster.up(topology="1x1x2", log=lambda _m: None)
    try:
        api = state.client()
        node = "node-b0-r0-n0"
        fail_node(api, node, "heartbeat")
        # node-lifecycle's grace period is 50 s: the Lease stops, the node turns Unknown and gets tainted.
        wait_for(f"{node} not Ready", lambda: node_ready(api, node) == "Unknown", timeout=120, interval=2)
        assert node_ready(api, "node-b0-r0-n1") == "True"
        heal_node(api, node)
        wait_for(f"{node} Ready again", lambda: node_ready(api, node) == "True", timeout=60, interval=1)

        fail_node(api, node, "taint")
        taints = api.get(f"/api/v1/nodes/{node}")["spec"]["taints"]
        assert {"key": "sim.phalanx.dev/failed", "value": "true", "effect": "NoExecute"} in taints
        heal_node(api, node)
        assert all(
            t["key"] != "sim.phalanx.dev/failed"
            for t in api.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
        )
    finally:
        cluster.down(log=lambda _m: None)


def test_simulated_kubelet_runs_completes_and_terminates_pods(stock_cluster: ClusterState) -> None:
    ns = new_namespace(stock_cluster, "kubelet")
    try:

        def pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            }

        ns.create(pod("done", {"sim.phalanx.dev/complete-after": "1s"}))
        ns.create(pod("crash", {"sim.phalanx.dev/complete-after": "1s", "sim.phalanx.dev/exit-code": "3"}))
        ns.create(pod("runs", {}))
        phase = lambda name: ns.get(f"/api/v1/namespaces/{{ns}}/pods/{name}")["status"].get("phase")  # noqa: E731
        wait_for("done Succeeded", lambda: phase("done") == "Succeeded", timeout=30)
        wait_for("crash Failed", lambda: phase("crash") == "Failed", timeout=30)
        crash = ns.get("/api/v1/namespaces/{ns}/pods/crash")
        assert crash["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
        wait_for("runs Running", lambda: phase("runs") == "Running", timeout=30)
        hold("runs keeps running", lambda: phase("runs") == "Running", seconds=3)
        ns.delete_pod("runs")
        wait_for("runs removed", lambda: "runs" not in {p["metadata"]["name"] for p in ns.pods()}, timeout=30)
    finally:
        delete_namespace(ns)


def test_an_up_killed_halfway_stops_what_it_started(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    up = subprocess.Popen(
        [sys.executable, "-m", "phalanx.cli", "dev-cluster", "up", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            "kube-apiserver started",
            lambda: (
                "kube-apiserver"
                in (
                    json.loads((folder / "state.json").read_text()).get("pids", {})
                    if (folder / "state.json").exists()
                    else {}
                )
            ),
            timeout=60,
            interval=0.05,
        )
        assert processes_mentioning(str(folder)), "components are running"
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    assert up.returncode != 0
    assert processes_mentioning(str(folder)) == []


def test_free_ports_are_distinct() -> None:
    ports = free_ports(50)
    assert len(set(ports)) == 50
