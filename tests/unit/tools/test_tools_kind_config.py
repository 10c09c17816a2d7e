"""kind-was.yaml: the article's kind cluster without feature gates, labelled like the dev cluster's seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from phalanx.devcluster.topology import seed_topology

KIND_CONFIG = Path(__file__).resolve().parents[3] / "kind-was.yaml"
# The fields of kind's v1alpha4 Cluster and Node (sigs.k8s.io/kind pkg/apis/config/v1alpha4/types.go);
# kind decodes its config strictly, so anything else fails `kind create cluster`.
CLUSTER_FIELDS = {
    "kind",
    "apiVersion",
    "name",
    "nodes",
    "networking",
    "featureGates",
    "runtimeConfig",
    "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
    "containerdConfigPatches",
    "containerdConfigPatchesJSON6902",
}
NODE_FIELDS = {
    "role",
    "image",
    "labels",
    "extraMounts",
    "extraPortMappings",
    "gpus",
    "kubeadmConfigPatches",
    "kubeadmConfigPatchesJSON6902",
}


def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(KIND_CONFIG.read_text())
    return loaded


def test_it_is_a_kind_cluster_config_with_one_control_plane_and_eight_workers() -> None:
    cluster = config()
    assert cluster["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert cluster["kind"] == "Cluster"
    assert cluster["name"] == "was"  # nodes are was-control-plane, was-worker, was-worker2, …
    assert set(cluster) <= CLUSTER_FIELDS
    roles = [node["role"] for node in cluster["nodes"]]
    assert roles == ["control-plane"] + ["worker"] * 8
    for node in cluster["nodes"]:
        assert set(node) <= NODE_FIELDS
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in (node.get("labels") or {}).items())


def test_no_feature_gate_and_no_alpha_api() -> None:
    cluster = config()
    for field in ("featureGates", "runtimeConfig", "kubeadmConfigPatches", "kubeadmConfigPatchesJSON6902"):
        assert field not in cluster
    assert "image" not in cluster["nodes"][0]  # kind's default node image: any Kubernetes >= 1.30 will do


def test_worker_labels_are_the_dev_clusters_seed_topology_node_by_node() -> None:
    workers = [node for node in config()["nodes"] if node["role"] == "worker"]
    seed = seed_topology()
    assert len(workers) == len(seed)
    names = ["was-worker" if i == 0 else f"was-worker{i + 1}" for i in range(len(workers))]  # kind's naming
    assert names == [spec.name for spec in seed]
    for worker, spec in zip(workers, seed, strict=True):
        assert worker["labels"] == spec.labels, spec.name
    assert "labels" not in config()["nodes"][0]
