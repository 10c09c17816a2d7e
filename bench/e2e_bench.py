"""End to end on the dev cluster: time from Job creation to all 4 pods of gang-4 bound.

Runs the same Job on a stock cluster with Phalanx (annotations) and on an upstream-mode cluster
(Job spec.scheduling), 10 times each, and prints the median. Polling every 20 ms bounds the error.

    python bench/e2e_bench.py [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from phalanx.devcluster.cluster import ClusterState, DevCluster
from phalanx.devcluster.http import RestClient
from phalanx.devcluster.operator_process import OperatorProcess


def job(name: str, flavor: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": 4,
        "parallelism": 4,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
            }
        },
    }
    meta: dict[str, Any] = {"name": name}
    if flavor == "phalanx":
        meta["labels"] = {"phalanx.dev/managed": "true"}
    else:
        spec["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def time_to_bound(api: RestClient, flavor: str, run: int) -> float:
    name = f"gang-4-{run}"
    jobs = "/apis/batch/v1/namespaces/default/jobs"
    started = time.monotonic()
    api.request("POST", jobs, job(name, flavor))
    while True:
        pods = api.get(f"/api/v1/namespaces/default/pods?labelSelector=job-name={name}")["items"]
        if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods):
            elapsed = time.monotonic() - started
            break
        if time.monotonic() - started > 120:
            raise RuntimeError(f"{flavor}: {name} not bound after 120 s")
        time.sleep(0.02)
    api.request("DELETE", f"{jobs}/{name}", {"propagationPolicy": "Foreground"})
    while api.get(f"/api/v1/namespaces/default/pods?labelSelector=job-name={name}")["items"]:
        time.sleep(0.2)
    return elapsed


def measure(state: ClusterState, flavor: str, runs: int) -> list[float]:
    api = state.client()
    time_to_bound(api, flavor, 999)  # warm-up: caches, first webhook call, CRD discovery
    return [time_to_bound(api, flavor, run) for run in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for mode, flavor in (("stock", "phalanx"), ("upstream", "upstream")):
        with tempfile.TemporaryDirectory(prefix="phalanx-e2e-") as folder:
            cluster = DevCluster(Path(folder))
            state = cluster.up(mode=mode, log=lambda _m: None)
            operator = None
            try:
                if flavor == "phalanx":
                    operator = OperatorProcess(state, Path(folder))
                    operator.start()
                results[flavor] = measure(state, flavor, args.runs)
            finally:
                if operator is not None:
                    operator.stop()
                cluster.down(log=lambda _m: None)
    print("| system | median s | min s | max s | runs |")
    print("|---|---:|---:|---:|---:|")
    for flavor, times in results.items():
        median, low, high = statistics.median(times), min(times), max(times)
        print(f"| {flavor} | {median:.3f} | {low:.3f} | {high:.3f} | {len(times)} |")


if __name__ == "__main__":
    main()
