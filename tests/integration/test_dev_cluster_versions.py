"""The Kubernetes versions the README promises: Phalanx's core cases on another control-plane version.

`dev-cluster up --kubernetes-version` runs that version's kube-apiserver, kube-controller-manager and
kube-scheduler (built from hack/k8s-<version>); the article's core cases then run with the Phalanx operator:
a gang of 4 on 3 free nodes waits and starts whole once a fourth frees, a gang in one network block, a
lower-priority gang preempted for a higher one, and a node failure under a running gang. CI runs them on the
oldest promised version (v1.30.14; the default v1.37.2 runs them everywhere else in this suite), and on
v1.38.0-beta.0 where its control plane is already built (about 10 to 20 minutes cold on 2 cores, more than
CI's budget has room for) or PHALANX_TEST_K8S_VERSIONS names it (then built if missing);
bench/version_matrix.py runs them on every version and writes docs/versions.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.devcluster.binaries import CONTROL_PLANE, control_plane_dir
from phalanx.devcluster.cluster import ClusterError, ClusterState, DevCluster
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import NB_KEY, Namespace, bound, delete_namespace, domains_of, new_namespace, wait_for
from .scenarios import PHALANX, article_preemption, block_4, gang_4
from .test_phalanx_admission import managed_job, wait_bound

pytestmark = pytest.mark.integration

OLDEST = "v1.30.14"
# Run only when built (or asked for by PHALANX_TEST_K8S_VERSIONS=v1.38.0-beta.0): CI's clone has none.
WHEN_BUILT = ("v1.38.0-beta.0",)


def wanted(version: str) -> bool:
    asked = {v.strip() for v in os.environ.get("PHALANX_TEST_K8S_VERSIONS", "").split(",") if v.strip()}
    built = all(os.access(control_plane_dir(version) / b, os.X_OK) for b in CONTROL_PLANE)
    return version in asked or built


VERSIONS = [OLDEST, *(v for v in WHEN_BUILT if wanted(v))]
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")


def node_failure(ns: Namespace) -> str:
    """train-3 runs in nb-a (nb-b busy), which keeps one free node; one of its nodes fails (NoExecute taint):
    the lost pod comes back in nb-a, on the free node."""
    ns.fill(*NB_B)
    ns.create(managed_job("train-3", 3, key=NB_KEY))
    pods = wait_bound(ns, "train-3", 3)
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-a"}
    failed = sorted(p["spec"]["nodeName"] for p in bound(pods))[0]
    fail_node(ns.api, failed, how="taint")
    try:
        again = wait_for(
            f"3 train-3 pods bound again in nb-a, off {failed}",
            lambda: (
                ps
                if len(bound(ps := ns.job_pods("train-3"))) == 3
                and failed not in {p["spec"]["nodeName"] for p in ps}
                and domains_of(ns.api, ps, NB_KEY) == {"nb-a"}
                else None
            ),
            timeout=120,
        )
    finally:
        heal_node(ns.api, failed)
    return f"3 bound in nb-a; {failed} failed: 3 bound again in nb-a ({len(bound(again))} pods, one replaced)"


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    run: Callable[[Namespace], str]


CASES: list[Case] = [
    Case("gang-4", "gang of 4, 3 nodes free, then 4", lambda ns: gang_4(PHALANX, ns).line),
    Case("block-4", "gang of 4 in one network block", lambda ns: block_4(PHALANX, ns).line),
    Case(
        "preemption",
        "low-a, low-b fill both blocks; high-2 (local block) preempts",
        lambda ns: article_preemption("single")(PHALANX, ns).line,
    ),
    Case("node-failure", "node failure under a running gang", node_failure),
]


def run_case(cluster: ClusterState, case: Case) -> str:
    ns = new_namespace(cluster, f"v-{case.id}")
    try:
        return case.run(ns)
    finally:
        delete_namespace(ns)


def served_version(cluster: ClusterState) -> str:
    version: str = cluster.client().get("/version")["gitVersion"]
    return version


@pytest.fixture(scope="module", params=VERSIONS)
def version_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterState]:
    version: str = request.param
    directory = Path(tmp_path_factory.mktemp(f"cluster-{version}"))
    cluster = DevCluster(directory)
    state = cluster.up(
        kubernetes_version=version, ready_timeout=300, log=lambda m: print(f"[dev-cluster {version}] {m}")
    )
    yield state
    cluster.down(log=lambda m: print(f"[dev-cluster {version}] {m}"))


@pytest.fixture(scope="module")
def version_phalanx(
    version_cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(version_cluster, Path(tmp_path_factory.mktemp("operator-version")))
    operator.start(timeout=120)
    yield operator
    operator.stop()
    print(f"operator log: {operator.log_path}")


def test_the_version_serves_its_own_control_plane(version_cluster: ClusterState) -> None:
    version = version_cluster.kubernetes_version
    assert version in VERSIONS
    assert served_version(version_cluster) == version
    assert Path(version_cluster.control_plane_bin_dir).name == "bin"
    assert version in version_cluster.control_plane_bin_dir


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_phalanx_core_cases_on_the_version(
    version_cluster: ClusterState, version_phalanx: OperatorProcess, case: Case
) -> None:
    if version_phalanx.proc is None or version_phalanx.proc.poll() is not None:
        version_phalanx.start(timeout=120)
    print(f"[{version_cluster.kubernetes_version}] {case.title}: {run_case(version_cluster, case)}")


def test_upstream_mode_is_refused_on_a_version_without_its_gates(tmp_path: Path) -> None:
    with pytest.raises(
        ClusterError, match=r"--mode upstream needs Kubernetes v1\.37 or newer: v1\.30\.14 lacks"
    ):
        DevCluster(tmp_path / "cluster").up(mode="upstream", kubernetes_version=OLDEST, log=lambda _m: None)
    assert not (tmp_path / "cluster" / "state.json").exists()
