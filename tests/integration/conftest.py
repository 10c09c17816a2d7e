"""Integration fixtures: real control planes (stock and upstream mode), brought up once per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.controller.loop.incremental import DIFFERS
from phalanx.devcluster.cluster import ClusterState, DevCluster
from phalanx.devcluster.operator_process import OperatorProcess

from .addons_fixtures import (  # noqa: F401  (the real JobSet, LWS, Trainer, Kueue; on which version)
    addons_cluster,
    addons_ns,
    addons_version,
    why_not,
)
from .kinds_fixtures import kinds_ns, phalanx_addons  # noqa: F401  (Phalanx on that cluster)
from .kube import NB_KEY, Namespace, delete_namespace, new_namespace, node_labels, relabel
from .kueue_fixtures import (  # noqa: F401  (a Kueue ClusterQueue and LocalQueue there; Kueue's fair sharing)
    fair_kns,
    kns,
    kueue_fair_sharing,
    kueue_queue,
)
from .operator_fixtures import namespace_with, running_operator

pytestmark = pytest.mark.integration

# Every operator these tests start plans each pass whole as well and logs where its incremental plan differs
# (loop/incremental.py); a test after which any operator logged that fails (`_incremental_plans_agree`).
os.environ.setdefault("PHALANX_VERIFY_INCREMENTAL", "true")
_STARTED: dict[int, tuple[OperatorProcess, int]] = {}  # id -> (operator, log offset already checked)
_start = OperatorProcess.start


def _start_and_remember(self: OperatorProcess, timeout: float = 60.0) -> None:
    _STARTED.setdefault(id(self), (self, 0))
    _start(self, timeout)


OperatorProcess.start = _start_and_remember  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _incremental_plans_agree() -> Iterator[None]:
    """After each test: no operator it ran found its incremental plan differ from the whole one."""
    yield
    found = []
    for key, (operator, offset) in list(_STARTED.items()):
        try:
            with open(operator.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
                _STARTED[key] = (operator, f.tell())
        except OSError:
            continue
        found += [f"{operator.log_path}: {line}" for line in text.splitlines() if DIFFERS in line]
    if found:
        pytest.fail("incremental passes differed from whole ones:\n" + "\n".join(found[:5]), pytrace=False)


# Fixtures whose clusters need binaries hack/test.sh builds while the other tests run (needs_builds).
BUILT_LATER = {"addons_cluster", "addons_ns", "version_cluster"}
BUILT_LATER_FILES = {"test_addons.py", "test_dev_cluster_versions.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    version = addons_version()
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if BUILT_LATER & set(getattr(item, "fixturenames", ())) or item.path.name in BUILT_LATER_FILES:
                item.add_marker(pytest.mark.needs_builds)
            # @pytest.mark.addons(...): skipped on a version one of them does not run on (addons_fixtures.py).
            needed = tuple(name for mark in item.iter_markers("addons") for name in mark.args)
            why = why_not(needed, version) if needed else None
            if why:
                item.add_marker(pytest.mark.skip(reason=why))


def _cluster(tmp_path_factory: pytest.TempPathFactory, mode: str) -> Iterator[ClusterState]:
    # PHALANX_KEEP_CLUSTER=1 leaves the cluster up after the session, for debugging.
    directory = Path(tmp_path_factory.mktemp(f"cluster-{mode}"))
    cluster = DevCluster(directory)
    state = cluster.up(mode=mode, topology="seed", log=lambda m: print(f"[dev-cluster {mode}] {m}"))
    try:
        yield state
    finally:
        if not os.environ.get("PHALANX_KEEP_CLUSTER"):
            cluster.down(log=lambda m: print(f"[dev-cluster {mode}] {m}"))


@pytest.fixture(scope="session")
def stock_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    yield from _cluster(tmp_path_factory, "stock")


@pytest.fixture(scope="session")
def upstream_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    yield from _cluster(tmp_path_factory, "upstream")


@pytest.fixture
def upstream_ns(upstream_cluster: ClusterState, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    ns = new_namespace(upstream_cluster, request.node.name)
    yield ns
    delete_namespace(ns)


@pytest.fixture(scope="session")
def phalanx(
    stock_cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The Phalanx operator, running against the stock cluster for the whole session."""
    yield from running_operator(OperatorProcess(stock_cluster, Path(tmp_path_factory.mktemp("operator"))))


@pytest.fixture
def blocks(ns: Namespace) -> Iterator[dict[str, str]]:
    """Every node's network block as it was (node -> value), put back after the test, which may relabel."""
    before = {name: labels[NB_KEY] for name, labels in node_labels(ns.api).items() if NB_KEY in labels}
    yield before
    for name, value in before.items():
        relabel(ns.api, name, value)


@pytest.fixture
def ns(
    stock_cluster: ClusterState, phalanx: OperatorProcess, request: pytest.FixtureRequest
) -> Iterator[Namespace]:
    """A fresh namespace on the stock cluster, with the operator running (restarted if a test stopped it)."""
    yield from namespace_with(stock_cluster, phalanx, request)
