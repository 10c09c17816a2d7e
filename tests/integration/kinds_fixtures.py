"""Phalanx on the dev cluster with the real JobSet, LWS, Trainer and Kueue controllers, once per session.

Imported by conftest.py: `phalanx_addons` is one `phalanx run` against `addons_cluster` for the whole session
(the JobSet, TrainJob and LeaderWorkerSet tests share it, restarted if a test stopped it), `kinds_ns` a
fresh namespace there with it running. A short `--node-failure-grace`, so a gang left short by a failed
node is requeued without the 30 s default wait (no test waits for a grace period it does not measure).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace
from .operator_fixtures import namespace_with, running_operator

NODE_FAILURE_GRACE = "2"


@pytest.fixture(scope="session")
def phalanx_addons(
    addons_cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(
        addons_cluster,
        Path(tmp_path_factory.mktemp("operator-addons")),
        ["--node-failure-grace", NODE_FAILURE_GRACE],
        name="phalanx-addons",
    )
    yield from running_operator(operator)


@pytest.fixture
def kinds_ns(
    addons_cluster: ClusterState, phalanx_addons: OperatorProcess, request: pytest.FixtureRequest
) -> Iterator[Namespace]:
    yield from namespace_with(addons_cluster, phalanx_addons, request, delete_timeout=180)
