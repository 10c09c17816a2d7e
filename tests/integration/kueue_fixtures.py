"""Kueue's queue set-up for the tests of Kueue and Phalanx together (tests/integration/test_kueue.py,
test_kueue_lws.py) on the dev cluster with the real Kueue v0.17.0 (`addons_cluster`), with Phalanx running
(`phalanx_addons`).

Imported by conftest.py: `kueue_queue` is one ResourceFlavor and ClusterQueue of 48 GPUs (and the
PriorityClasses low and high) per test module, `kns` a fresh namespace with a LocalQueue `lq` of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.operator_process import OperatorProcess

from .kinds import KUEUE, LWSS, kueue_workloads
from .kube import GPU_KEY, Namespace, delete_namespace, new_namespace, wait_for


def cq_active(api: RestClient, name: str) -> bool:
    conditions = api.get(f"{KUEUE}/clusterqueues/{name}").get("status", {}).get("conditions", [])
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def kueue_queue(addons_cluster: ClusterState) -> Iterator[str]:
    """A ResourceFlavor (the seed nodes' instance type), a ClusterQueue of 48 GPUs for every namespace
    (preempting lower priorities inside it) and the PriorityClasses low and high; the ClusterQueue's name."""
    api = addons_cluster.client()
    suffix = uuid.uuid4().hex[:6]
    flavor, cq = f"gpu-{suffix}", f"cq-{suffix}"
    made = [
        (
            f"{KUEUE}/resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"}},
            },
        ),
        (
            f"{KUEUE}/clusterqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU_KEY],
                            "flavors": [
                                {"name": flavor, "resources": [{"name": GPU_KEY, "nominalQuota": "48"}]}
                            ],
                        }
                    ],
                },
            },
        ),
        *(
            (
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": f"{name}-{suffix}"},
                    "value": value,
                },
            )
            for name, value in (("low", 10), ("high", 1000))
        ),
    ]
    for path, obj in made:
        api.request("POST", path, obj)
    wait_for("the ClusterQueue Active", lambda: cq_active(api, cq), timeout=60)
    try:
        yield cq
    finally:
        for path, obj in reversed(made):
            try:
                api.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise


@pytest.fixture
def kns(
    addons_cluster: ClusterState,
    kueue_queue: str,
    phalanx_addons: OperatorProcess,
    request: pytest.FixtureRequest,
) -> Iterator[Namespace]:
    """A fresh namespace with a LocalQueue `lq` of the module's ClusterQueue; at the end its Jobs and
    LeaderWorkerSets and their Kueue Workloads are gone before the next test (their quota released).
    Phalanx is the session's one operator on this cluster (`phalanx_addons`, restarted if a test stopped
    it): a second one beside it would be a second scheduling loop on the same cluster (neither elects a
    leader)."""
    if phalanx_addons.proc is None or phalanx_addons.proc.poll() is not None:
        phalanx_addons.start()
    ns = new_namespace(addons_cluster, request.node.name)
    ns.api.request(
        "POST",
        f"{KUEUE}/namespaces/{ns.name}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": kueue_queue},
        },
    )
    try:
        yield ns
    finally:
        for collection in (f"/apis/batch/v1/namespaces/{ns.name}/jobs", LWSS.replace("{ns}", ns.name)):
            ns.api.request(
                "DELETE",
                collection,
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        wait_for("the namespace's Kueue Workloads gone", lambda: not kueue_workloads(ns), timeout=120)
        delete_namespace(ns, timeout=180)
