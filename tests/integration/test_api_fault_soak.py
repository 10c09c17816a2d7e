"""API faults (issue 10 item 5), short form: the operator talks to the apiserver through faultproxy.py, which
answers a seeded share of requests with 429 (Retry-After), 500, 503 or 409, loses the answer of some writes,
cuts watch streams and answers resumed watches with 410 Gone. Gang Jobs are submitted in rounds; after each
the same invariants as the crash soak hold (invariants.py): no partial gang, no node over capacity, one domain
per gang, nothing that fits left waiting, and at the end every gang that can ever fit was admitted.
The full form: `python3 bench/soak.py faults --rounds 40`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .faultproxy import FaultProxy, Rates, operator_behind
from .kube import NB_KEY, Namespace, bound, domains_of, wait_for
from .soak import GangSpec, Soak

pytestmark = pytest.mark.integration
ROUNDS = 10
SEED = 20261130


@pytest.fixture
def proxy(stock_cluster: ClusterState, tmp_path: Path) -> Iterator[FaultProxy]:
    made = FaultProxy(stock_cluster, tmp_path, seed=SEED)
    made.start()
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def behind_proxy(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, proxy: FaultProxy, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator with a kubeconfig pointing at the proxy, instead of the session's."""
    with operator_behind(proxy, phalanx, tmp_path, "behind-fault-proxy") as operator:
        yield operator


def test_gangs_end_admitted_whole_through_429_5xx_409_cut_watches_and_410(
    ns: Namespace, behind_proxy: OperatorProcess, proxy: FaultProxy
) -> None:
    soak = Soak(ns, behind_proxy, SEED, proxy=proxy)
    for _ in range(ROUNDS):
        soak.fault_round()
    soak.drain()
    print("\n".join(soak.stats.lines()))
    counts = proxy.counts()
    assert soak.stats.admissions >= 25, soak.stats.lines()
    for fault in (
        "429 Too Many Requests",
        "500 Internal Server Error",
        "503 Service Unavailable",
        "409 Conflict",
        "500 after the write was applied",
        "watch streams cut",
        "410 Gone on a resumed watch",
        "410 Gone after a blackout",
    ):
        assert counts.get(fault, 0) > 0, f"the soak never injected {fault}: {counts}"
    log = behind_proxy.log_path.read_text()
    assert "scheduling pass failed" not in log
    assert "was deleted while the watch was away" in log  # pods deleted during the blackouts


def test_the_operator_starts_through_failing_reads_of_its_crds(
    stock_cluster: ClusterState, phalanx: OperatorProcess, tmp_path: Path
) -> None:
    """Waiting for its CRDs to be served, a 503 or 429 is retried at once: before, the startup failed and
    Kopf tried it again a minute later."""
    proxy = FaultProxy(stock_cluster, tmp_path, seed=SEED, rates=Rates.none())
    proxy.script("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/", 503, times=3)
    proxy.start()
    phalanx.stop()
    operator = OperatorProcess(
        stock_cluster, tmp_path, name="crd-reads-fail", args=["--kubeconfig", str(proxy.kubeconfig)]
    )
    try:
        operator.start()
        log = operator.log_path.read_text()
    finally:
        operator.stop()
        proxy.stop()
        phalanx.start()
    assert proxy.counts().get("scripted 503", 0) == 3
    assert "Activity 'startup' failed" not in log, log[-3000:]


def test_pods_deleted_while_the_watch_was_expired_do_not_keep_their_room(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, tmp_path: Path
) -> None:
    """The pod watch is cut and its resumption answered 410 Gone only after a Job's pods were deleted: Kopf
    lists pods again and never sees those deletions. Phalanx must notice them (relist.py), or the deleted
    pods keep holding their nodes and a gang that fits waits for ever."""
    proxy = FaultProxy(stock_cluster, tmp_path, seed=SEED, rates=Rates.none())
    proxy.start()
    phalanx.stop()
    operator = OperatorProcess(
        stock_cluster, tmp_path, name="expired-watch", args=["--kubeconfig", str(proxy.kubeconfig)]
    )
    try:
        operator.start()
        for name in ("first", "second"):  # the whole cluster
            ns.create(GangSpec(name, 4, 8, NB_KEY).job(suspend=False))
        for name in ("first", "second"):
            wait_for(f"{name} bound", lambda name=name: len(bound(ns.job_pods(name))) == 4, timeout=60)
        proxy.blackout("/api/v1/pods")
        ns.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/first", {"propagationPolicy": "Background"}
        )
        wait_for("the first gang's pods gone", lambda: not ns.pods("job-name=first"), timeout=60)
        proxy.end_blackout()
        ns.create(GangSpec("third", 4, 8, NB_KEY).job(suspend=False))
        pods = wait_for(
            "the third gang bound where the first was",
            lambda: ps if len(bound(ps := ns.job_pods("third"))) == 4 else None,
            timeout=60,
        )
        print(ns.where())
        assert len(domains_of(ns.api, pods, NB_KEY)) == 1
        assert proxy.counts().get("410 Gone after a blackout") == 1
        assert "was deleted while the watch was away" in operator.current_log()
    finally:
        operator.stop()
        proxy.stop()
        print(f"operator log: {operator.log_path}")
        phalanx.start()
