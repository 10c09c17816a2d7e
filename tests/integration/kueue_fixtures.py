"""Kueue's queue set-up for the tests of Kueue and Phalanx together (tests/integration/test_kueue.py,
test_kueue_lws.py) on the dev cluster with the real Kueue v0.17.0 (`addons_cluster`), with Phalanx running
(`phalanx_addons`).

Imported by conftest.py: `kueue_queue` is one ResourceFlavor and ClusterQueue of 48 GPUs (and the
PriorityClasses low and high) per test module, `kns` a fresh namespace with a LocalQueue `lq` of it, and
`fair_kns` the same with Kueue restarted with fair sharing on for the test (and back after it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from phalanx.devcluster import addons
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


# Kueue v0.17's fair sharing (config.kueue.x-k8s.io/v1beta2): on when `fairSharing` is set (its
# preemptionStrategies required; these two are Kueue's default order, rules S2-a then S2-b).
FAIR_SHARING = {
    "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
}


@pytest.fixture
def kueue_fair_sharing(addons_cluster: ClusterState, kueue_queue: str) -> Iterator[None]:
    """Kueue restarted with fair sharing on for the test (`addons.restart`: same ports, certificates and
    webhooks), and restarted as `up` started it after, whatever happened: the session's other tests see
    Kueue without it. Its ClusterQueues and Workloads stay (Kueue reads them again at its start)."""
    api = addons_cluster.client()
    addons.restart(addons_cluster, "kueue", _log, FAIR_SHARING)
    try:
        # Kueue reports each ClusterQueue's share (status.fairSharing) only with fair sharing on.
        wait_for("Kueue's fair sharing on", lambda: fair_share(api, kueue_queue) is not None, timeout=60)
        yield
    finally:
        addons.restart(addons_cluster, "kueue", _log)
        wait_for("Kueue's fair sharing off again", lambda: fair_share(api, kueue_queue) is None, timeout=60)


def fair_share(api: RestClient, cq: str) -> int | None:
    """ClusterQueue `cq`'s weighted share as Kueue reports it (status.fairSharing.weightedShare: how far
    beyond its nominal quota it borrows), or None: Kueue's fair sharing is off."""
    status = api.get(f"{KUEUE}/clusterqueues/{cq}").get("status") or {}
    fair = status.get("fairSharing")
    return None if fair is None else int(fair.get("weightedShare") or 0)


def _log(message: str) -> None:
    print(f"[dev-cluster addons] {message}")


@pytest.fixture
def fair_kns(kueue_fair_sharing: None, kns: Namespace) -> Namespace:
    """`kns` with Kueue's fair sharing on: Kueue is restarted before the namespace is made, and again
    after it and its Workloads are gone (Kueue removes their finalizers)."""
    return kns
