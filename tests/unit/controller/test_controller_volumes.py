"""Claims, volumes and classes resolved like kube-scheduler's volume filters, and fed to the engine."""

from __future__ import annotations

from typing import Any

from phalanx.api.cluster_objects import node_info
from phalanx.controller.cache import ClusterCache
from phalanx.controller.records import PodRecord
from phalanx.controller.volumes import UNBOUND_IMMEDIATE, VolumeCatalog
from phalanx.placement import ClaimInfo, NodeSelectorRequirement, NodeSelectorTerm

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
                )
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
    cache.upsert_storage_class(storage_class())
    assert not cache.changed.is_set(), "no claim of that class: nothing changed for the engine"
    cache.upsert_claim(claim())
    assert cache.changed.is_set()
    assert cache.snapshot().claims["ns/data"] == ClaimInfo()
    cache.changed.clear()
    status_only = claim()
    status_only["status"]["capacity"] = {"storage": "1Gi"}
    cache.upsert_claim(status_only)
    assert not cache.changed.is_set(), "a change the filters do not read does not wake the loop"
    cache.delete_claim("ns", "data")
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
