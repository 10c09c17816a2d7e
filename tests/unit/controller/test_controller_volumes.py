"""Claims, volumes and classes resolved like kube-scheduler's volume filters, and fed to the engine."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api.cluster_objects import node_info
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.cache.volumes import UNBOUND_IMMEDIATE, VolumeCatalog
from phalanx.controller.model.records import PodRecord
from phalanx.placement import ClaimInfo, NodeSelectorRequirement, NodeSelectorTerm
from phalanx.placement.model import CSINodeInfo, CSIVolume

HOST = "kubernetes.io/hostname"


def claim(
    name: str = "data",
    *,
    cls: str | None = "fast",
    volume: str = "",
    bound: bool = False,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    phase: str = "Pending",
    storage: str | None = None,
) -> dict[str, Any]:
    notes = dict(annotations or {})
    if bound:
        notes["pv.kubernetes.io/bind-completed"] = "yes"
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "annotations": notes}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
    spec: dict[str, Any] = {"accessModes": list(modes), "volumeName": volume}
    if cls is not None:
        spec["storageClassName"] = cls
    if storage is not None:
        spec["resources"] = {"requests": {"storage": storage}}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pv(name: str = "pv-1", node: str | None = "n1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}
                ]
            }
        }
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}


def storage_class(
    name: str = "fast",
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "csi.example.com",
    zones: tuple[str, ...] = (),
) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}
    if zones:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": list(zones)}]}
        ]
    return body


def on_host(node: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(HOST, "In", (node,)),)),)


def test_a_bound_claim_takes_its_volume_node_affinity_and_zone() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_volume(pv(labels={"topology.kubernetes.io/zone": "z1__z2", "other": "x"}))
    changes = catalog.upsert_claim(claim(volume="pv-1", bound=True))
    assert changes == [
        (
            "ns/data",
            ClaimInfo(node_terms=(on_host("n1"),), zones=(("topology.kubernetes.io/zone", ("z1", "z2")),)),
        )
    ]
    # The volume changes: the claim's resolution follows.
    assert catalog.upsert_volume(pv(node="n2")) == [("ns/data", ClaimInfo(node_terms=(on_host("n2"),)))]
    assert catalog.upsert_volume(pv(node="n2")) == [], "unchanged: nothing to tell"
    assert catalog.delete_volume("pv-1")[0][1].waiting.startswith('persistentvolume "pv-1"')  # type: ignore[union-attr]
    assert catalog.delete_claim("ns", "data") == [("ns/data", None)]


def test_claims_kube_scheduler_would_not_bind_now_wait_with_its_words() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_class(storage_class("slow", mode="Immediate"))
    cases = {
        "none": claim("none", cls=""),
        "unknown": claim("unknown", cls="nope"),
        "immediate": claim("immediate", cls="slow"),
        "prebound": claim("prebound", cls="slow", volume="pv-x"),
    }
    for body in cases.values():
        catalog.upsert_claim(body)
    for key in cases:
        assert catalog.resolved[f"ns/{key}"].waiting.startswith(UNBOUND_IMMEDIATE)
    catalog.upsert_claim(claim("going", deleting=True))
    assert catalog.resolved["ns/going"].waiting == 'persistentvolumeclaim "going" is being deleted'
    catalog.upsert_claim(claim("lost", volume="pv-9", bound=True, phase="Lost"))
    assert "non-existent" in catalog.resolved["ns/lost"].waiting


def test_wait_for_first_consumer_claims_go_where_the_class_allows() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_claim(claim("later"))
    assert catalog.resolved["ns/later"].waiting.startswith(UNBOUND_IMMEDIATE), "no class yet"
    changes = catalog.upsert_class(storage_class(zones=("z1",)))
    assert changes == [
        (
            "ns/later",
            ClaimInfo(
                node_terms=(
                    (
                        NodeSelectorTerm(
                            match_expressions=(
                                NodeSelectorRequirement("topology.kubernetes.io/zone", "In", ("z1",)),
                            )
                        ),
                    ),
                ),
                csi=CSIVolume("csi.example.com", "csi.example.com/claim:ns/later"),
            ),
        )
    ]
    catalog.upsert_claim(claim("picked", annotations={"volume.kubernetes.io/selected-node": "n3"}))
    assert catalog.resolved["ns/picked"].selected_node == "n3"
    catalog.upsert_class(storage_class("local", provisioner="kubernetes.io/no-provisioner"))
    catalog.upsert_claim(claim("static", cls="local"))
    assert "no provisioner" in catalog.resolved["ns/static"].unsupported


def test_read_write_once_pod_is_marked() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_class(storage_class())
    catalog.upsert_claim(claim(modes=("ReadWriteOncePod",)))
    assert catalog.resolved["ns/data"].read_write_once_pod


def test_the_cache_feeds_resolved_claims_to_the_snapshot_and_wakes_the_loop() -> None:
    cache = ClusterCache()
    cache.upsert("StorageClass", storage_class())
    assert not cache.changed.is_set(), "no claim of that class: nothing changed for the engine"
    cache.upsert("PersistentVolumeClaim", claim())
    assert cache.changed.is_set()
    assert cache.snapshot().claims["ns/data"] == ClaimInfo(
        csi=CSIVolume("csi.example.com", "csi.example.com/claim:ns/data")
    )
    cache.changed.clear()
    status_only = claim()
    status_only["status"]["capacity"] = {"storage": "1Gi"}
    cache.upsert("PersistentVolumeClaim", status_only)
    assert not cache.changed.is_set(), "a change the filters do not read does not wake the loop"
    cache.delete("PersistentVolumeClaim", {"metadata": {"namespace": "ns", "name": "data"}})
    assert "ns/data" not in cache.snapshot().claims


def test_pod_records_carry_what_other_pods_filters_see() -> None:
    body = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": HOST}
                    ]
                }
            },
        },
        "status": {"phase": "Running"},
    }
    pod = PodRecord.from_body(body).bound_pod()
    assert pod is not None
    assert pod.traits.namespace == "ns" and pod.traits.label_map() == {"app": "a"}
    assert pod.traits.claims == ("data",)
    assert pod.host_ports and pod.anti_affinity and pod.assigned
    node = node_info({"metadata": {"name": "n1"}, "status": {"declaredFeatures": ["VolumeBindMountOptions"]}})
    assert node.declared_features == frozenset({"VolumeBindMountOptions"})


# --- NodeVolumeLimits and CSIStorageCapacity -------------------------------------------------------


def csi_pv(name: str, driver: str = "csi.example.com", handle: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": driver, "volumeHandle": handle or name}}}


@pytest.mark.parametrize(
    ("case", "objects", "body", "expected"),
    [
        (
            "bound CSI volume",
            [csi_pv("pv-1", handle="h-1")],
            claim(volume="pv-1", bound=True),
            CSIVolume("csi.example.com", "csi.example.com/h-1"),
        ),
        (
            "pre-bound, volume not completed: still the volume's handle",
            [csi_pv("pv-1", handle="h-1")],
            claim(volume="pv-1"),
            CSIVolume("csi.example.com", "csi.example.com/h-1"),
        ),
        (
            "unbound: one new volume of the provisioner, unique to the claim",
            [],
            claim(),
            CSIVolume("csi.example.com", "csi.example.com/claim:ns/data"),
        ),
        (
            "volume missing: counted through the class",
            [],
            claim(volume="gone", bound=True),
            CSIVolume("csi.example.com", "csi.example.com/claim:ns/data"),
        ),
        ("no class", [], claim(cls=None), None),
        ("class missing", [], claim(cls="other"), None),
        ("volume without a CSI source (local)", [pv("pv-1")], claim(volume="pv-1", bound=True), None),
        (
            "in-tree volume migrated to CSI",
            [{"metadata": {"name": "pv-1"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}}}],
            claim(volume="pv-1", bound=True),
            CSIVolume("ebs.csi.aws.com", "ebs.csi.aws.com/awsElasticBlockStore:vol-1", migrated=True),
        ),
        (
            "in-tree provisioner",
            [storage_class("gp2", provisioner="kubernetes.io/aws-ebs")],
            claim(cls="gp2"),
            CSIVolume("ebs.csi.aws.com", "ebs.csi.aws.com/claim:ns/data", migrated=True),
        ),
        (
            "in-tree provisioner the scheduler does not count",
            [storage_class("af", provisioner="kubernetes.io/azure-file")],
            claim(cls="af"),
            None,
        ),
    ],
)
def test_how_node_volume_limits_counts_a_claim(
    case: str, objects: list[dict[str, Any]], body: dict[str, Any], expected: CSIVolume | None
) -> None:
    catalog = VolumeCatalog()
    catalog.upsert_class(storage_class())
    for obj in objects:
        if "provisioner" in obj:
            catalog.upsert_class(obj)
        else:
            catalog.upsert_volume(obj)
    catalog.upsert_claim(body)
    assert catalog.resolved[f"ns/{body['metadata']['name']}"].csi == expected, case


def capacity(
    name: str,
    cls: str = "fast",
    *,
    topology: Any = None,
    maximum: str | None = None,
    total: str | None = None,
    namespace: str = "kube-system",
) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "storageClassName": cls}
    if topology is not None:
        body["nodeTopology"] = topology
    if maximum is not None:
        body["maximumVolumeSize"] = maximum
    if total is not None:
        body["capacity"] = total
    return body


ZONE_A = {"matchLabels": {"zone": "a"}}
ZONE_A_TERM = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("zone", "In", ("a",)),))


@pytest.mark.parametrize(
    ("case", "tracks", "capacities", "body", "expected"),
    [
        ("driver does not track capacity", False, [], claim(storage="1Gi"), None),
        ("no storage request: nothing to check", True, [], claim(), None),
        ("no capacity object: no node", True, [], claim(storage="1Gi"), ()),
        (
            "maximumVolumeSize large enough",
            True,
            [capacity("c1", topology=ZONE_A, maximum="2Gi")],
            claim(storage="1Gi"),
            (ZONE_A_TERM,),
        ),
        (
            "maximumVolumeSize wins over capacity",
            True,
            [capacity("c1", topology=ZONE_A, maximum="512Mi", total="10Gi")],
            claim(storage="1Gi"),
            (),
        ),
        (
            "capacity when no maximum",
            True,
            [capacity("c1", topology=ZONE_A, total="1Gi")],
            claim(storage="1Gi"),
            (ZONE_A_TERM,),
        ),
        ("neither size: no volume fits", True, [capacity("c1", topology=ZONE_A)], claim(storage="1"), ()),
        (
            "another class's capacity",
            True,
            [capacity("c1", "slow", topology=ZONE_A, total="5Gi")],
            claim(storage="1Gi"),
            (),
        ),
        ("nil topology: no node", True, [capacity("c1", total="5Gi")], claim(storage="1Gi"), ()),
        (
            "empty topology: every node",
            True,
            [capacity("c1", topology={}, total="5Gi")],
            claim(storage="1Gi"),
            None,
        ),
        (
            "expressions map onto node selector requirements",
            True,
            [
                capacity(
                    "c1",
                    topology={"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]},
                    total="5Gi",
                    namespace="other",
                )
            ],
            claim(storage="1Gi"),
            (NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("zone", "NotIn", ("b",)),)),),
        ),
        (
            "an invalid selector selects nothing",
            True,
            [capacity("c1", topology={"matchExpressions": [{"key": "zone", "operator": "In"}]}, total="5Gi")],
            claim(storage="1Gi"),
            (),
        ),
        ("bound claims are not checked", True, [], claim(volume="pv-1", bound=True, storage="1Gi"), None),
    ],
)
def test_storage_capacity_limits_where_a_claim_can_be_provisioned(
    case: str,
    tracks: bool,
    capacities: list[dict[str, Any]],
    body: dict[str, Any],
    expected: tuple[NodeSelectorTerm, ...] | None,
) -> None:
    catalog = VolumeCatalog()
    catalog.upsert_class(storage_class())
    catalog.upsert_volume(csi_pv("pv-1"))
    catalog.upsert_claim(body)
    catalog.upsert_driver({"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": tracks}})
    for c in capacities:
        catalog.upsert_capacity(c)
    assert catalog.resolved["ns/data"].capacity_terms == expected, case


def test_capacity_changes_reach_the_claims_of_their_class() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_class(storage_class())
    catalog.upsert_claim(claim(storage="1Gi"))
    assert catalog.upsert_driver({"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}})
    assert catalog.resolved["ns/data"].capacity_terms == ()
    changes = catalog.upsert_capacity(capacity("c1", topology=ZONE_A, total="5Gi"))
    assert [(key, info and info.capacity_terms) for key, info in changes] == [("ns/data", (ZONE_A_TERM,))]
    assert catalog.upsert_capacity(capacity("c1", topology=ZONE_A, total="5Gi")) == [], "no change"
    changes = catalog.delete_capacity("kube-system", "c1")
    assert [(key, info and info.capacity_terms) for key, info in changes] == [("ns/data", ())]
    changes = catalog.delete_driver("csi.example.com")
    assert [(key, info and info.capacity_terms) for key, info in changes] == [("ns/data", None)]


def csi_node(name: str, drivers: dict[str, int | None]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "drivers": [
                {"name": d, "nodeID": name, **({"allocatable": {"count": c}} if c is not None else {})}
                for d, c in drivers.items()
            ]
        },
    }


def attachment(name: str, node: str, volume: str, attacher: str = "csi.example.com") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": volume}},
    }


def test_csi_nodes_join_their_volume_attachments() -> None:
    catalog = VolumeCatalog()
    catalog.upsert_attachment(attachment("va-1", "n1", "pv-1"))
    assert catalog.take_node_changes() == [], "no CSINode: no limits to count against"
    catalog.upsert_csi_node(csi_node("n1", {"csi.example.com": 2, "other.example.com": None}))
    assert catalog.take_node_changes() == [
        (
            "n1",
            CSINodeInfo(frozenset({"csi.example.com", "other.example.com"}), (("csi.example.com", 2),), ()),
        )
    ], "the attachment's volume is unknown: not counted"
    catalog.upsert_volume(csi_pv("pv-1", handle="h-1"))
    [(name, info)] = catalog.take_node_changes()
    assert (
        name == "n1" and info is not None and info.attached == (("csi.example.com/h-1", "csi.example.com"),)
    )
    catalog.upsert_volume(pv("pv-1"))
    [(_, info)] = catalog.take_node_changes()
    assert info is not None and info.attached == (), "not a CSI volume: not counted"
    catalog.upsert_volume(csi_pv("pv-1", handle="h-1"))
    catalog.delete_attachment("va-1")
    [(_, info)] = catalog.take_node_changes()
    assert info is not None and info.attached == ()
    catalog.delete_csi_node("n1")
    assert catalog.take_node_changes() == [("n1", None)]


def test_the_cache_feeds_csi_nodes_and_strict_drivers_to_the_snapshot() -> None:
    cache = ClusterCache()
    cache.upsert("CSINode", csi_node("n1", {"csi.example.com": 3}))
    assert cache.changed.is_set()
    assert cache.snapshot().csi.nodes["n1"].limits == (("csi.example.com", 3),)
    cache.changed.clear()
    cache.upsert(
        "CSIDriver",
        {"metadata": {"name": "csi.example.com"}, "spec": {"preventPodSchedulingIfMissing": True}},
    )
    assert cache.changed.is_set()
    assert cache.snapshot().csi.strict_drivers == frozenset({"csi.example.com"})
    cache.changed.clear()
    cache.upsert(
        "CSIDriver",
        {"metadata": {"name": "csi.example.com"}, "spec": {"preventPodSchedulingIfMissing": True}},
    )
    assert not cache.changed.is_set(), "nothing changed"
    cache.delete("CSINode", {"metadata": {"name": "n1"}})
    assert "n1" not in cache.snapshot().csi.nodes


def test_inline_in_tree_volumes_are_counted_and_inline_csi_volumes_are_not() -> None:
    body = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c"}],
            "volumes": [
                {"name": "a", "azureDisk": {"diskName": "d", "diskURI": "uri-1"}},
                {"name": "b", "csi": {"driver": "inline.example.com"}},
            ],
        },
        "status": {"phase": "Running"},
    }
    pod = PodRecord.from_body(body).bound_pod()
    assert pod is not None
    assert pod.traits.inline_csi == (
        CSIVolume("disk.csi.azure.com", "disk.csi.azure.com/azureDisk:uri-1", migrated=True),
    )
