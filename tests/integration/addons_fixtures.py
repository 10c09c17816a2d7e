"""A dev cluster with the real JobSet, LWS, Kubeflow Trainer and Kueue controllers, once per session.

Imported by conftest.py, so any integration test can ask for `addons_cluster` (the ClusterState; its
`addons` field says what runs, on which ports, with which log) or `addons_ns` (a fresh namespace there).
Phalanx is not started here: a test that needs it starts an OperatorProcess against this cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState, DevCluster

from .kube import Namespace, delete_namespace, new_namespace

ALL_ADDONS = ("jobset", "lws", "trainer", "kueue")


@pytest.fixture(scope="session")
def addons_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    """Stock mode, the seed topology (8 nodes), every addon; builds them first if .cache/addons lacks them.
    PHALANX_KEEP_CLUSTER=1 leaves it up after the session."""
    directory = Path(tmp_path_factory.mktemp("cluster-addons"))
    cluster = DevCluster(directory)
    state = cluster.up(
        mode="stock",
        topology="seed",
        addons=ALL_ADDONS,
        ready_timeout=300,
        log=lambda m: print(f"[dev-cluster addons] {m}"),
    )
    try:
        yield state
    finally:
        if not os.environ.get("PHALANX_KEEP_CLUSTER"):
            cluster.down(log=lambda m: print(f"[dev-cluster addons] {m}"))


@pytest.fixture
def addons_ns(addons_cluster: ClusterState, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    namespace = new_namespace(addons_cluster, request.node.name)
    yield namespace
    delete_namespace(namespace, timeout=180)
