"""CSI volumes on the dev cluster: Phalanx keeps a gang off nodes whose CSINode's attach limit its volumes
would pass (NodeVolumeLimits) and off nodes no CSIStorageCapacity gives room for its claims (VolumeBinding),
and kube-scheduler's own filters then bind every released pod.

No driver runs: kube-scheduler only reads the objects. Volumes are PersistentVolumes with spec.csi bound
to claims by the PV controller; for dynamic provisioning the test plays the external provisioner (a volume
on the node kube-scheduler selected, once it says which).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kube import NB_KEY, Namespace, bound, domains_of, hold, wait_for
from .test_phalanx_admission import condition, group_of
from .test_scheduler_fidelity import HOST, assert_admitted_and_all_bound, gang_job, nodes_of

pytestmark = pytest.mark.integration

NB_A = ("was-worker", "was-worker2", "was-worker3", "was-worker4")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
SELECTED_NODE = "volume.kubernetes.io/selected-node"
CAPACITIES = "/apis/storage.k8s.io/v1/namespaces/{ns}/csistoragecapacities"


def _delete(ns: Namespace, path: str) -> None:
    try:
        ns.api.request("DELETE", path)
    except ApiError as e:
        if e.status != 404:
            raise


# ---------------------------------------------------------------------- shared


def _csinodes(ns: Namespace, driver: str, limits: dict[str, int]) -> list[str]:
    """A CSINode per node giving `driver` that attach limit, owned by the node; the names made."""
    made = []
    try:
        for node, count in limits.items():
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
                    "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": count}}]},
                },
            )
            made.append(node)
    except BaseException:
        _delete_csinodes(ns, made)
        raise
    return made


def _delete_csinodes(ns: Namespace, names: list[str]) -> None:
    """Delete and wait until gone: a kwok node's CSINode left behind would limit the next test's volumes."""
    for node in names:
        _delete(ns, f"/apis/storage.k8s.io/v1/csinodes/{node}")
    wait_for(
        "the test's CSINodes gone",
        lambda: (
            not {c["metadata"]["name"] for c in ns.api.get("/apis/storage.k8s.io/v1/csinodes")["items"]}
            & set(names)
        ),
        timeout=30,
    )


def _ephemeral(storage_class: str, size: str) -> dict[str, Any]:
    """Pod spec fields: a generic ephemeral volume "data", so each pod has its own claim <pod>-data."""
    template = {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        }
    }
    return {"volumes": [{"name": "data", "ephemeral": {"volumeClaimTemplate": template}}]}


def _refused(ns: Namespace, job: str, reason: str) -> str:
    """The PodGroup's Admitted=False Unschedulable message once it names `reason` (before, it may still
    say that a claim is missing or unbound)."""

    def probe() -> str | None:
        cond = condition(group_of(ns, job), "Admitted")
        if (
            cond
            and cond["status"] == "False"
            and cond["reason"] == "Unschedulable"
            and reason in cond["message"]
        ):
            return str(cond["message"])
        return None

    message = wait_for(f"{job}: Admitted=False Unschedulable naming {reason!r}", probe, timeout=60)
    print(message)
    return message


def _claims(ns: Namespace) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get("/api/v1/namespaces/{ns}/persistentvolumeclaims")["items"]
    return items


class Volumes:
    """PersistentVolumes with spec.csi made for the test's claims (the test plays provisioner), deleted at
    the end; `node_of` records the node each was made for."""

    def __init__(self, ns: Namespace, driver: str, storage_class: str) -> None:
        self.ns = ns
        self.driver = driver
        self.storage_class = storage_class
        self.made: dict[str, str] = {}  # claim name -> PV name
        self.node_of: dict[str, str] = {}  # claim name -> node the volume was made on

    def create(self, claim: dict[str, Any], node: str | None) -> None:
        meta = claim["metadata"]
        pv_name = f"pv-{meta['uid']}"
        spec: dict[str, Any] = {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": self.storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": self.driver, "volumeHandle": f"handle-{meta['uid']}"},
            "claimRef": {"namespace": self.ns.name, "name": meta["name"], "uid": meta["uid"]},
        }
        if node is not None:
            spec["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}
                    ]
                }
            }
            self.node_of[meta["name"]] = node
        body = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name}, "spec": spec}
        self.ns.api.request("POST", "/api/v1/persistentvolumes", body)
        self.made[meta["name"]] = pv_name

    def provision(self) -> None:
        """The external provisioner's step: a volume on the node kube-scheduler selected for each claim."""
        for claim in _claims(self.ns):
            node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
            if node and not claim["spec"].get("volumeName") and claim["metadata"]["name"] not in self.made:
                self.create(claim, node)

    def prebind(self) -> None:
        """A volume pre-bound to each claim (no node affinity): the PV controller binds them at once."""
        for claim in _claims(self.ns):
            if not claim["spec"].get("volumeName") and claim["metadata"]["name"] not in self.made:
                self.create(claim, None)

    def delete(self) -> None:
        for pv_name in self.made.values():
            _delete(self.ns, f"/api/v1/persistentvolumes/{pv_name}")


def _all_bound(ns: Namespace, job: str, count: int, step: Any) -> list[dict[str, Any]]:
    """Run `step` (the provisioner's work) until the job's `count` pods are all bound."""

    def probe() -> list[dict[str, Any]] | None:
        step()
        pods = ns.job_pods(job)
        return pods if len(bound(pods)) == count else None

    return wait_for(f"{count} {job} pods bound", probe, timeout=120, interval=0.5)


# ---------------------------------------------------------------------- attach limits, one shared volume


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
        made = _csinodes(ns, driver, dict.fromkeys(NB_A, 0))
        yield driver
    finally:
        _delete_csinodes(ns, made)
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


# ---------------------------------------------------------------------- CSIStorageCapacity


@pytest.fixture
def capacity_class(ns: Namespace) -> Iterator[tuple[str, str]]:
    """(driver, StorageClass): a CSIDriver tracking storage capacity (no attach, so no VolumeAttachments
    wait on an attacher) and a WaitForFirstConsumer class it provisions; deleted at the end."""
    driver = f"cap-{uuid.uuid4().hex[:6]}.phalanx.test"
    cls = f"cap-{uuid.uuid4().hex[:6]}"
    ns.api.request(
        "POST",
        "/apis/storage.k8s.io/v1/csidrivers",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": driver},
            "spec": {"attachRequired": False, "storageCapacity": True},
        },
    )
    try:
        ns.api.request(
            "POST",
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": cls},
                "provisioner": driver,
                "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Retain",
            },
        )
        try:
            yield driver, cls
        finally:
            _delete(ns, f"/apis/storage.k8s.io/v1/storageclasses/{cls}")
    finally:
        _delete(ns, f"/apis/storage.k8s.io/v1/csidrivers/{driver}")


@pytest.fixture
def volumes(ns: Namespace, capacity_class: tuple[str, str]) -> Iterator[Volumes]:
    made = Volumes(ns, *capacity_class)
    try:
        yield made
    finally:
        made.delete()


def _capacity(
    ns: Namespace,
    name: str,
    storage_class: str,
    topology: dict[str, Any],
    capacity: str,
    maximum: str | None = None,
) -> None:
    body: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name},
        "storageClassName": storage_class,
        "nodeTopology": topology,
        "capacity": capacity,
    }
    if maximum is not None:
        body["maximumVolumeSize"] = maximum
    ns.create(body, CAPACITIES.replace("{ns}", ns.name))


def _in_block(block: str) -> dict[str, Any]:
    return {"matchLabels": {NB_KEY: block}}


def test_a_gang_goes_where_storage_capacity_has_room_for_its_claims(
    ns: Namespace, capacity_class: tuple[str, str], volumes: Volumes
) -> None:
    """Each pod's 10Gi claim fits only nb-b's capacity: nb-a's is large but its maximumVolumeSize is 5Gi,
    and a huge capacity everywhere is of another class. Packed, the gang would take nb-a; Phalanx places
    it in nb-b, kube-scheduler selects nb-b nodes, the test provisions there, and every pod binds."""
    _, cls = capacity_class
    _capacity(ns, "nb-a", cls, _in_block("nb-a"), "1Ti", maximum="5Gi")
    _capacity(ns, "nb-b", cls, _in_block("nb-b"), "100Gi", maximum="50Gi")
    _capacity(ns, "other-class", f"{cls}-other", {}, "1Pi")
    ns.create(gang_job("cap", **_ephemeral(cls, "10Gi")))
    pods = _all_bound(ns, "cap", 4, volumes.provision)
    assert_admitted_and_all_bound(ns, "cap")
    print(volumes.node_of)
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}
    assert set(nodes_of(pods)) <= set(NB_B)
    assert len(volumes.node_of) == 4, "one claim provisioned per pod"
    assert set(volumes.node_of.values()) <= set(NB_B)
    by_claim = {f"{p['metadata']['name']}-data": p["spec"]["nodeName"] for p in pods}
    assert by_claim == volumes.node_of, "each pod runs where its volume was provisioned"
    claims = _claims(ns)
    assert len(claims) == 4 and all(c["status"].get("phase") == "Bound" for c in claims)


def test_a_gang_whose_claims_no_capacity_can_hold_waits_whole(
    ns: Namespace, capacity_class: tuple[str, str], volumes: Volumes
) -> None:
    """No capacity object of the class is big enough for a 10Gi claim: the gang stays gated, nothing is
    selected or released, and the condition says why. A capacity with room in nb-b then admits it there."""
    _, cls = capacity_class
    _capacity(ns, "nb-a", cls, _in_block("nb-a"), "1Ti", maximum="5Gi")
    _capacity(ns, "nb-b", cls, _in_block("nb-b"), "8Gi")
    ns.create(gang_job("nocap", **_ephemeral(cls, "10Gi")))
    _refused(ns, "nocap", "node(s) did not have enough free storage")

    def still_waiting() -> bool:
        pods = ns.job_pods("nocap")
        claims = _claims(ns)
        return (
            len(pods) == 4
            and all(p["spec"].get("schedulingGates") for p in pods)
            and not bound(pods)
            and len(claims) == 4
            and not any(SELECTED_NODE in (c["metadata"].get("annotations") or {}) for c in claims)
        )

    wait_for("the gang's 4 pods gated with their 4 claims", still_waiting, timeout=30)
    hold("no nocap pod released, no claim given a node", still_waiting, seconds=3)

    _capacity(ns, "nb-b-grown", cls, _in_block("nb-b"), "100Gi")
    pods = _all_bound(ns, "nocap", 4, volumes.provision)
    assert_admitted_and_all_bound(ns, "nocap")
    assert set(nodes_of(pods)) <= set(NB_B)
    assert set(volumes.node_of.values()) <= set(NB_B)


# ---------------------------------------------------------------------- attach limits, one volume per pod


@pytest.fixture
def own_volumes(ns: Namespace) -> Iterator[tuple[str, Volumes]]:
    """(class, Volumes) for claims of a class no StorageClass names (Immediate binding: their pods wait
    until bound) that the test pre-binds to CSI volumes of a driver named for this test."""
    driver = f"att-{uuid.uuid4().hex[:6]}.phalanx.test"
    cls = f"att-{uuid.uuid4().hex[:6]}"
    made = Volumes(ns, driver, cls)
    try:
        yield cls, made
    finally:
        made.delete()


def _per_node(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(p["spec"]["nodeName"] for p in bound(pods))


def test_a_gang_of_one_volume_per_pod_is_spread_by_the_attach_limit(
    ns: Namespace, own_volumes: tuple[str, Volumes]
) -> None:
    """Every node may attach 1 volume of the driver: the 4 pods (4 GPUs each, which would pack two per
    node), each with its own volume, go one per node in one block, and kube-scheduler binds them all."""
    cls, made = own_volumes
    nodes = _csinodes(ns, made.driver, dict.fromkeys(NB_A + NB_B, 1))
    try:
        ns.create(gang_job("att", **_ephemeral(cls, "1Gi")))
        pods = _all_bound(ns, "att", 4, made.prebind)
        assert_admitted_and_all_bound(ns, "att")
        assert len(made.made) == 4, "one volume per pod"
        assert max(_per_node(pods).values()) == 1, _per_node(pods)
        assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    finally:
        _delete_csinodes(ns, nodes)


def test_a_gang_the_attach_limit_cannot_hold_waits_until_a_node_can_take_more(
    ns: Namespace, own_volumes: tuple[str, Volumes]
) -> None:
    """5 pods with a volume each, every node limited to 1: no block has 5 nodes, so the gang waits whole with
    the scheduler's reason. Then was-worker8's CSINode goes (no limit there): nb-b holds it, two pods on
    was-worker8 and one on each other nb-b node."""
    cls, made = own_volumes
    nodes = _csinodes(ns, made.driver, dict.fromkeys(NB_A + NB_B, 1))
    try:
        ns.create(gang_job("att5", count=5, **_ephemeral(cls, "1Gi")))

        def claims_bound() -> bool:
            made.prebind()
            claims = _claims(ns)
            return len(claims) == 5 and all(c["status"].get("phase") == "Bound" for c in claims)

        wait_for("5 claims bound to their volumes", claims_bound, timeout=60, interval=0.5)
        _refused(ns, "att5", "node(s) exceed max volume count")
        hold(
            "no att5 pod released or bound",
            lambda: (
                len(ps := ns.job_pods("att5")) == 5
                and all(p["spec"].get("schedulingGates") for p in ps)
                and not bound(ps)
            ),
            seconds=3,
        )

        _delete_csinodes(ns, ["was-worker8"])
        nodes.remove("was-worker8")
        pods = assert_admitted_and_all_bound(ns, "att5", 5)
        assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}
        per_node = _per_node(pods)
        assert per_node == Counter({"was-worker8": 2, "was-worker5": 1, "was-worker6": 1, "was-worker7": 1})
    finally:
        _delete_csinodes(ns, nodes)
