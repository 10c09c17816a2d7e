"""The informer (watch/informer.py: Phalanx's own list-then-watch of nodes and pods) against the real
apiserver, through faultproxy.py: every watch stream is cut after a couple of seconds (the informer resumes
from the last resourceVersion it saw), then the pod and node watches are blacked out while a Job's pods and
a node are deleted, and their resumption answered 410 Gone (the informer lists again and drops what the
list lacks). After each, the cache holds as many nodes and pods as a fresh list of the cluster
(phalanx_cache_objects), and a gang that needs the room the deleted pods held binds there."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .faultproxy import FaultProxy, Rates
from .kube import NB_KEY, Namespace, bound, domains_of, wait_for
from .soak import GangSpec

pytestmark = pytest.mark.integration
SEED = 20261202
CUT_EVERY_WATCH = Rates(0, 0, 0, 0, 0, cut_watch=1.0, cut_mean_seconds=2.0, gone=0.0)
EXTRA_NODE = "informer-extra-node"


def sample(operator: OperatorProcess, name: str, **labels: str) -> float:
    """A sample's value on the operator's /metrics (0 when absent)."""
    for family in text_string_to_metric_families(operator.scrape()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def fresh_counts(ns: Namespace) -> dict[str, int]:
    return {
        "Node": len(ns.api.get("/api/v1/nodes")["items"]),
        "Pod": len(ns.api.get("/api/v1/pods")["items"]),
    }


def cache_counts(operator: OperatorProcess) -> dict[str, int]:
    return {kind: int(sample(operator, "phalanx_cache_objects", kind=kind)) for kind in ("Node", "Pod")}


def wait_cache_equals_a_fresh_list(ns: Namespace, operator: OperatorProcess, what: str) -> None:
    last: list[Any] = []

    def equal() -> bool:
        last[:] = [cache_counts(operator), fresh_counts(ns)]
        return bool(last[0] == last[1])

    wait_for(
        f"the cache's nodes and pods equal to a fresh list ({what}); cache, list: {last}", equal, timeout=90
    )


def blackout(proxy: FaultProxy, prefix: str) -> None:
    """Black the watches of `prefix` out, and wait until the informer's resumption is held: a deletion made
    before that would reach it as an event of the resumed watch, with no 410 to relist after."""
    held = proxy.counts().get("watches held by a blackout", 0)
    proxy.blackout(prefix)
    wait_for(f"a watch of {prefix} held", lambda: proxy.counts().get("watches held by a blackout", 0) > held)


def loner(name: str) -> dict[str, Any]:
    """A pod no scheduler takes (another project's gate): only the cache sees it come and go."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulingGates": [{"name": "example.com/hold"}],
            "containers": [{"name": "c", "image": "registry.example.com/none:1"}],
        },
    }


def test_the_cache_equals_a_fresh_list_through_cut_watches_and_410(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, tmp_path: Path
) -> None:
    proxy = FaultProxy(stock_cluster, tmp_path, seed=SEED, rates=CUT_EVERY_WATCH)
    proxy.start()
    phalanx.stop()
    operator = OperatorProcess(
        stock_cluster, tmp_path, name="informer-faults", args=["--kubeconfig", str(proxy.kubeconfig)]
    )
    try:
        operator.start()
        assert sample(operator, "phalanx_watch_lists_total", kind="Pod") == 1  # the priming's list
        # Cut watches: every change still reaches the cache through the resumed watches.
        for name in ("first", "second"):  # the whole cluster
            ns.create(GangSpec(name, 4, 8, NB_KEY).job(suspend=False))
        ns.create(loner("loner-a"))
        ns.create(loner("loner-b"))
        ns.api.request(
            "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": EXTRA_NODE}}
        )
        for name in ("first", "second"):
            wait_for(f"{name} bound", lambda name=name: len(bound(ns.job_pods(name))) == 4, timeout=120)
        ns.delete_pod("loner-a")
        wait_for(
            "pod and node watches resumed after cuts",
            lambda: all(
                sample(operator, "phalanx_watch_restarts_total", kind=kind, reason="ended") >= 2
                for kind in ("Pod", "Node")
            ),
            timeout=90,
        )
        wait_cache_equals_a_fresh_list(ns, operator, "after cut watches")
        assert sample(operator, "phalanx_watch_lists_total", kind="Pod") == 1  # resumed, never listed again

        # 410: deletions while a watch is away are never seen as events (one blackout at a time).
        blackout(proxy, "/api/v1/pods")
        ns.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/first", {"propagationPolicy": "Background"}
        )
        ns.delete_pod("loner-b")
        wait_for("the first gang's pods gone", lambda: not ns.pods("job-name=first"), timeout=90)
        wait_for("loner-b gone", lambda: not [p for p in ns.pods() if p["metadata"]["name"] == "loner-b"])
        proxy.end_blackout()
        wait_for(
            "pods listed again after 410",
            lambda: sample(operator, "phalanx_watch_lists_total", kind="Pod") >= 2,
            timeout=90,
        )
        blackout(proxy, "/api/v1/nodes")
        ns.api.request("DELETE", f"/api/v1/nodes/{EXTRA_NODE}")
        wait_for("the extra node gone", lambda: EXTRA_NODE not in str(ns.api.get("/api/v1/nodes")))
        proxy.end_blackout()
        wait_for(
            "nodes listed again after 410",
            lambda: sample(operator, "phalanx_watch_lists_total", kind="Node") >= 2,
            timeout=90,
        )
        wait_cache_equals_a_fresh_list(ns, operator, "after 410 Gone")
        assert sample(operator, "phalanx_watch_restarts_total", kind="Pod", reason="gone") >= 1
        assert sample(operator, "phalanx_watch_dropped_total", kind="Pod") >= 5  # 4 of first's, loner-b
        assert sample(operator, "phalanx_watch_dropped_total", kind="Node") >= 1  # the extra node
        ns.create(GangSpec("third", 4, 8, NB_KEY).job(suspend=False))
        pods = wait_for(
            "the third gang bound where the first was",
            lambda: ps if len(bound(ps := ns.job_pods("third"))) == 4 else None,
            timeout=120,
        )
        assert len(domains_of(ns.api, pods, NB_KEY)) == 1
        log = operator.current_log()
        assert "was deleted while the watch was away" in log
        assert "expired (410 Gone): listing again" in log
        print(proxy.counts())
    finally:
        operator.stop()
        proxy.stop()
        print(f"operator log: {operator.log_path}")
        with contextlib.suppress(ApiError):  # deleted by the test already
            ns.api.request("DELETE", f"/api/v1/nodes/{EXTRA_NODE}")
        phalanx.start()
