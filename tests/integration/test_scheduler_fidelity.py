"""Released means bindable (issue 7): gangs whose pods carry the filters kube-scheduler applies besides
resources are placed where kube-scheduler then binds every pod, and the PodGroup says so only then.

The article's cluster: 8 nodes × 8 GPUs, network blocks nb-a (was-worker..was-worker4) and nb-b. Each gang
has 4 pods × 4 GPUs in one network block: without the constraints they pack two per node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kube import NB_KEY, Namespace, bound, domains_of, gpu_job, hold, wait_for
from .test_phalanx_admission import MANAGED, condition, group_of, wait_bound, wait_condition

pytestmark = pytest.mark.integration

HOST = "kubernetes.io/hostname"


def gang_job(name: str, count: int = 4, gpus: int = 4, **pod_spec: Any) -> dict[str, Any]:
    """`count` pods of `gpus` GPUs in one network block, labelled app=<name>, with extra pod spec fields."""
    body = gpu_job(name, count, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY})
    template = body["spec"]["template"]
    template["metadata"]["labels"] = {"app": name}
    spec = template["spec"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    for key, value in pod_spec.items():
        if key == "ports":
            spec["containers"][0]["ports"] = value
        else:
            spec[key] = value
    return body


def assert_admitted_and_all_bound(ns: Namespace, name: str, count: int = 4) -> list[dict[str, Any]]:
    """Every pod binds, and the PodGroup says the gang is admitted (and only says so with every pod bound)."""
    pods = wait_bound(ns, name, count, timeout=90)
    admitted = wait_condition(ns, name, "Admitted", "True", "Admitted")
    print(f"{name}: {admitted['message']}")
    print(ns.where(f"job-name={name}"))
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    return pods


def nodes_of(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in bound(pods))


def test_required_anti_affinity_puts_one_worker_per_node(ns: Namespace) -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": HOST}
            ]
        }
    }
    ns.create(gang_job("anti", affinity=anti))
    pods = assert_admitted_and_all_bound(ns, "anti")
    assert len(set(nodes_of(pods))) == 4, nodes_of(pods)
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1


def test_host_port_puts_one_worker_per_node(ns: Namespace) -> None:
    ns.create(gang_job("port", ports=[{"containerPort": 29500, "hostPort": 29500}]))
    pods = assert_admitted_and_all_bound(ns, "port")
    assert len(set(nodes_of(pods))) == 4, nodes_of(pods)
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1


def test_topology_spread_on_hostname_is_honoured(ns: Namespace) -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": HOST,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    ns.create(gang_job("spread", topologySpreadConstraints=spread))
    pods = assert_admitted_and_all_bound(ns, "spread")
    assert len(set(nodes_of(pods))) == 4, nodes_of(pods)
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1


@pytest.fixture
def volume_on_worker3(ns: Namespace) -> Iterator[str]:
    """A PersistentVolume reachable only from was-worker3, and a claim in `ns` bound to it."""
    cls = f"manual-{uuid.uuid4().hex[:6]}"  # no such StorageClass: the claim binds at once (Immediate)
    pv_name = f"pv-{ns.name}"
    ns.api.request(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": cls,
                "persistentVolumeReclaimPolicy": "Retain",
                "local": {"path": "/mnt/data"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["was-worker3"]}]}
                        ]
                    }
                },
            },
        },
    )
    try:
        ns.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": cls,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        )
        yield "data"
    finally:
        try:
            ns.api.request("DELETE", f"/api/v1/persistentvolumes/{pv_name}")
        except ApiError as e:
            if e.status != 404:
                raise


DATA = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


def test_a_volume_bound_to_one_node_takes_the_gang_there(ns: Namespace, volume_on_worker3: str) -> None:
    ns.create(gang_job("data-2", count=2, **DATA))
    pods = assert_admitted_and_all_bound(ns, "data-2", 2)
    assert nodes_of(pods) == ["was-worker3", "was-worker3"]
    claim = ns.get("/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
    assert claim["status"]["phase"] == "Bound"


def test_a_gang_that_cannot_fit_beside_its_volume_waits_whole(ns: Namespace, volume_on_worker3: str) -> None:
    """4 pods × 4 GPUs cannot all go to was-worker3: the gang waits, none released, the condition says why."""
    wait_for(
        "the claim bound",
        lambda: (
            ns.get("/api/v1/namespaces/{ns}/persistentvolumeclaims/data")["status"].get("phase") == "Bound"
        ),
        timeout=60,
    )
    ns.create(gang_job("data-4", count=4, **DATA))
    cond = wait_condition(ns, "data-4", "Admitted", "False", "Unschedulable")
    print(cond["message"])
    assert "minCount (4) cannot be satisfied: 2 scheduled" in cond["message"]
    assert "volumes" in cond["message"]
    hold(
        "no data-4 pod released or bound",
        lambda: (
            len(ps := ns.job_pods("data-4")) == 4
            and all(p["spec"].get("schedulingGates") for p in ps)
            and not bound(ps)
        ),
        seconds=3,
    )
    admitted = condition(group_of(ns, "data-4"), "Admitted")
    assert admitted and admitted["status"] == "False"
