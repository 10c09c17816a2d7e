"""CSI attach limits (NodeVolumeLimits) on the dev cluster: Phalanx keeps a gang off nodes whose CSINode's
limit its volume would pass, and kube-scheduler's own CSILimits then binds every released pod.

The volume is a PersistentVolume with spec.csi pre-bound to a claim (the PV controller completes the
binding); no driver runs: kube-scheduler only reads the objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from phalanx.devcluster.http import ApiError

from .kube import NB_KEY, Namespace, domains_of, wait_for
from .test_scheduler_fidelity import assert_admitted_and_all_bound, gang_job, nodes_of

pytestmark = pytest.mark.integration

NB_A = ("was-worker", "was-worker2", "was-worker3", "was-worker4")


def _delete(ns: Namespace, path: str) -> None:
    try:
        ns.api.request("DELETE", path)
    except ApiError as e:
        if e.status != 404:
            raise


@pytest.fixture
def csi_volume(ns: Namespace) -> Iterator[str]:
    """A claim "data" in `ns` bound to a CSI PersistentVolume of a driver named for this test, and CSINodes
    for nb-a's nodes giving that driver an attach limit of 0 (nb-b's nodes have no CSINode: unlimited)."""
    driver = f"csi-{uuid.uuid4().hex[:6]}.phalanx.test"
    cls = f"csi-{uuid.uuid4().hex[:6]}"
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
                "csi": {"driver": driver, "volumeHandle": f"handle-{ns.name}"},
                "claimRef": {"namespace": ns.name, "name": "data"},
            },
        },
    )
    made: list[str] = []
    try:
        ns.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": cls,
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        )
        wait_for(
            "the claim bound",
            lambda: (
                ns.get("/api/v1/namespaces/{ns}/persistentvolumeclaims/data")["status"].get("phase")
                == "Bound"
            ),
            timeout=60,
        )
        for node in NB_A:
            node_uid = ns.api.request("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
            ns.api.request(
                "POST",
                "/apis/storage.k8s.io/v1/csinodes",
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    "metadata": {
                        "name": node,
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
                        ],
                    },
                    "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": 0}}]},
                },
            )
            made.append(node)
        yield driver
    finally:
        for node in made:
            _delete(ns, f"/apis/storage.k8s.io/v1/csinodes/{node}")
        _delete(ns, f"/api/v1/persistentvolumes/{pv_name}")


DATA = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


def test_a_gang_stays_off_nodes_whose_attach_limit_its_volume_would_pass(
    ns: Namespace, csi_volume: str
) -> None:
    """Packed, the gang would take nb-a (first by name); its CSI volume is over nb-a's limit of 0, so Phalanx
    places it in nb-b, sharing the one volume two pods a node, and kube-scheduler binds every pod."""
    ns.create(gang_job("csi", **DATA))
    pods = assert_admitted_and_all_bound(ns, "csi")
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}
    assert not set(nodes_of(pods)) & set(NB_A)
    assert len(set(nodes_of(pods))) == 2, "one volume used by every pod counts once per node"
