"""The Kubernetes versions the README promises: Phalanx's core cases on another control-plane version.

`dev-cluster up --kubernetes-version` runs that version's kube-apiserver, kube-controller-manager and
kube-scheduler (built from hack/k8s-<version>); the article's core cases then run with the Phalanx operator:
a gang of 4 on 3 free nodes waits and starts whole once a fourth frees, a gang in one network block, a
lower-priority gang preempted for a higher one, and a node failure under a running gang. CI runs them on the
oldest promised version (v1.30.14; the default v1.37.2 runs them everywhere else in this suite);
bench/version_matrix.py runs them on every version and writes docs/versions.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterError, ClusterState, DevCluster
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import NB_KEY, Namespace, bound, delete_namespace, domains_of, new_namespace, wait_for
from .scenarios import PHALANX, article_preemption, block_4, gang_4
from .test_phalanx_admission import managed_job, wait_bound

pytestmark = pytest.mark.integration

OLDEST = "v1.30.14"
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


@pytest.fixture(scope="module")
def oldest_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    directory = Path(tmp_path_factory.mktemp(f"cluster-{OLDEST}"))
    cluster = DevCluster(directory)
    state = cluster.up(
        kubernetes_version=OLDEST, ready_timeout=300, log=lambda m: print(f"[dev-cluster {OLDEST}] {m}")
    )
    yield state
    cluster.down(log=lambda m: print(f"[dev-cluster {OLDEST}] {m}"))


@pytest.fixture(scope="module")
def oldest_phalanx(
    oldest_cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(oldest_cluster, Path(tmp_path_factory.mktemp("operator-oldest")))
    operator.start(timeout=120)
    yield operator
    operator.stop()
    print(f"operator log: {operator.log_path}")


def test_the_oldest_version_serves_its_own_control_plane(oldest_cluster: ClusterState) -> None:
    assert served_version(oldest_cluster) == OLDEST
    assert oldest_cluster.kubernetes_version == OLDEST
    assert Path(oldest_cluster.control_plane_bin_dir).name == "bin"
    assert OLDEST in oldest_cluster.control_plane_bin_dir


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_phalanx_core_cases_on_the_oldest_version(
    oldest_cluster: ClusterState, oldest_phalanx: OperatorProcess, case: Case
) -> None:
    if oldest_phalanx.proc is None or oldest_phalanx.proc.poll() is not None:
        oldest_phalanx.start(timeout=120)
    print(f"[{OLDEST}] {case.title}: {run_case(oldest_cluster, case)}")


def test_upstream_mode_is_refused_on_a_version_without_its_gates(tmp_path: Path) -> None:
    with pytest.raises(
        ClusterError, match=r"--mode upstream needs Kubernetes v1\.37 or newer: v1\.30\.14 lacks"
    ):
        DevCluster(tmp_path / "cluster").up(mode="upstream", kubernetes_version=OLDEST, log=lambda _m: None)
    assert not (tmp_path / "cluster" / "state.json").exists()
