"""A dev cluster with the real JobSet, LWS, Kubeflow Trainer and Kueue controllers, once per session.

Imported by conftest.py, so any integration test can ask for `addons_cluster` (the ClusterState; its
`addons` field says what runs, on which ports, with which log) or `addons_ns` (a fresh namespace there).
Phalanx is not started here: a test that needs it starts an OperatorProcess against this cluster.

PHALANX_TEST_ADDONS_K8S_VERSION=v1.30.14 (any version hack/build.sh built) runs the cluster on that version
with the addons it supports; a test marked `@pytest.mark.addons("jobset", ...)` whose addon does not run
there is skipped with the addon's reason (conftest.py). docs/versions.md has what ran where.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster import addons
from phalanx.devcluster.binaries import K8S_VERSION
from phalanx.devcluster.cluster import ClusterState, DevCluster

from .kube import Namespace, delete_namespace, new_namespace

ALL_ADDONS = ("jobset", "lws", "trainer", "kueue")
# The control plane's version for `addons_cluster` (default: the dev cluster's, v1.37.2), e.g.
# PHALANX_TEST_ADDONS_K8S_VERSION=v1.30.14: the addon tests then run on that version (docs/versions.md).
VERSION_ENV = "PHALANX_TEST_ADDONS_K8S_VERSION"


def addons_version() -> str:
    """The version PHALANX_TEST_ADDONS_K8S_VERSION asks for, or the dev cluster's default."""
    return os.environ.get(VERSION_ENV, "").strip() or K8S_VERSION


def addons_on(version: str) -> tuple[str, ...]:
    """The addons `addons_cluster` runs on `version`: every one the version supports (JobSet v0.11.1 and
    Trainer v2.2.0 need v1.32: devcluster/addons.py `unsupported`)."""
    return tuple(a for a in ALL_ADDONS if addons.unsupported(a, version) is None)


def why_not(needed: tuple[str, ...], version: str) -> str | None:
    """Why a test marked `@pytest.mark.addons(*needed)` cannot run on `version`, or None: it can."""
    reasons = [why for name in needed if (why := addons.unsupported(name, version))]
    if not reasons:
        return None
    return f"not on Kubernetes {version}: " + "; ".join(reasons) + " (docs/versions.md)"


@pytest.fixture(scope="session")
def addons_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    """Stock mode, the seed topology (8 nodes), every addon; builds them first if .cache/addons lacks them.
    On the version PHALANX_TEST_ADDONS_K8S_VERSION names, if set (its control plane built by hack/build.sh),
    with the addons that version supports; tests marked for another addon are skipped there, saying why.
    PHALANX_KEEP_CLUSTER=1 leaves it up after the session."""
    directory = Path(tmp_path_factory.mktemp("cluster-addons"))
    cluster = DevCluster(directory)
    state = cluster.up(
        mode="stock",
        topology="seed",
        addons=addons_on(addons_version()),
        kubernetes_version=addons_version(),
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
