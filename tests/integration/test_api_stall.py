"""Bounded API calls (issue 20 item 3), on the dev cluster through the fault proxy (faultproxy.py).

- A connection that never answers: the proxy holds the release of one of a gang's two pods without a
  word (the other's lands). Each attempt ends at `--api-timeout-seconds`, the request is tried once more,
  then that unit backs off with a Warning saying why, and the scheduling pass goes on: gangs created
  *after* the stall began are admitted (run with DEADLINE = 3600, in effect none, the test's earlier form,
  which held every release, failed: `first` was not bound after 180 s, the pass waited on the silent
  request), and once the apiserver answers again the gang is admitted whole. Meanwhile the released pod
  binds (no release of several pods is atomic: each pod's gate is its own), so the gang runs split; Phalanx
  bounds how long: once the other release has failed past `--bind-timeout`, the gang is requeued whole and
  the pod that ran alone is taken back while the stall still lasts.
- A 429 with `Retry-After: 3` is retried once those 3 s have passed (not after the 0.1 s backoff): the proxy
  refuses every retry that comes sooner, so the release is refused exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .faultproxy import FaultProxy, Rates, operator_behind
from .kube import Namespace, bound, gpu_job, wait_for

pytestmark = pytest.mark.integration
MANAGED = {"phalanx.dev/managed": "true"}
DEADLINE = 2  # --api-timeout-seconds, short so the test is quick; the default is 5
BIND_TIMEOUT = 20  # --bind-timeout, short so the test is quick; the default is 120


@pytest.fixture
def proxy(stock_cluster: ClusterState, tmp_path: Path) -> Iterator[FaultProxy]:
    made = FaultProxy(stock_cluster, tmp_path, seed=1, rates=Rates.none())
    made.start()
    try:
        yield made
    finally:
        made.unstall()
        made.stop()


@pytest.fixture
def behind_proxy(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, proxy: FaultProxy, tmp_path: Path
) -> Iterator[OperatorProcess]:
    args = ("--api-timeout-seconds", str(DEADLINE), "--bind-timeout", str(BIND_TIMEOUT))
    with operator_behind(proxy, phalanx, tmp_path, "behind-stalling-proxy", args) as operator:
        yield operator


def gated(pod: dict[str, Any]) -> bool:
    gates = pod["spec"].get("schedulingGates") or []
    return any(g.get("name") == "phalanx.dev/admission" for g in gates)


def api_errors_without_answer(operator: OperatorProcess) -> float:
    for family in text_string_to_metric_families(operator.scrape()):
        for sample in family.samples:
            if sample.name == "phalanx_api_errors_total" and sample.labels == {"verb": "patch", "code": "0"}:
                return sample.value
    return 0.0


def job_warnings(ns: Namespace, job: str, reason: str) -> list[dict[str, Any]]:
    events = ns.events(f"involvedObject.kind=Job,involvedObject.name={job}")
    return [e for e in events if e.get("reason") == reason]


def test_a_request_that_never_answers_stalls_one_unit_and_the_pass_goes_on(
    ns: Namespace, behind_proxy: OperatorProcess, proxy: FaultProxy
) -> None:
    # Only the release of the gang's second pod (index 1) is held: the first one's lands, so the gang is
    # released in part while the other release gets no answer.
    prefix = f"/api/v1/namespaces/{ns.name}/pods/stuck-1-"
    proxy.stall("PATCH", prefix)
    ns.create(gpu_job("stuck", 2, labels=MANAGED))
    seen: list[int] = []  # how many of stuck's pods were bound, at every look during the stall
    ran: set[str] = set()  # the names of stuck's pods seen bound during the stall

    def stuck_bound() -> int:
        running = bound(ns.job_pods("stuck"))
        seen.append(len(running))
        ran.update(p["metadata"]["name"] for p in running)
        return len(running)

    def during_stall(probe: Callable[[], Any]) -> Callable[[], Any]:
        def both() -> Any:
            stuck_bound()
            return probe()

        return both

    wait_for(
        "a release of stuck held by the proxy",
        during_stall(lambda: proxy.counts().get("stalled PATCH", 0) >= 1),
        90,
    )
    for name in ("first", "second"):  # created while a pass waits on the silent connection
        ns.create(gpu_job(name, 2, labels=MANAGED))
    for name in ("first", "second"):
        wait_for(
            f"{name} bound", during_stall(lambda name=name: len(bound(ns.job_pods(name))) == 2), timeout=180
        )

    (warning,) = wait_for(
        "a FailedSync warning on stuck", during_stall(lambda: job_warnings(ns, "stuck", "FailedSync")), 90
    )
    print(warning["count"], warning["message"])
    assert f"no answer within {DEADLINE} s" in warning["message"]
    assert "retrying in" in warning["message"]
    wait_for(
        "the held release tried once more after its deadline",
        during_stall(lambda: len(proxy.requests("PATCH", prefix)) >= 2),
        90,
    )
    assert api_errors_without_answer(behind_proxy) >= 2
    log = behind_proxy.current_log()
    assert "scheduling pass failed" not in log
    assert f"no answer within {DEADLINE} s" in log
    # The gang ran split (its released pod bound, the other's release unanswered): once that lasted the bind
    # timeout, it is requeued whole, and the pod that ran alone is taken back while the stall still lasts.
    wait_for("stuck seen running split", during_stall(lambda: 1 in seen), 90)
    alone = set(ran)  # its pod that ran while the other's release got no answer
    requeued = wait_for(
        "stuck requeued whole",
        during_stall(lambda: job_warnings(ns, "stuck", "Requeued")),
        BIND_TIMEOUT + 120,
    )[0]
    print(requeued["message"])
    assert requeued["message"].startswith("released in part: 1 pod(s) of the recorded decision could not be ")
    assert "still gated, the unit's writes failing" in requeued["message"]
    wait_for(
        "the pods that ran alone taken back",
        during_stall(lambda: not alone & {p["metadata"]["name"] for p in ns.job_pods("stuck")}),
        120,
    )
    print(f"stuck's bound pods during the stall: {sorted(set(seen))}; pods {ns.where('job-name=stuck')}")

    proxy.unstall()
    wait_for("stuck admitted once the apiserver answers", lambda: len(bound(ns.job_pods("stuck"))) == 2, 180)
    failed = job_warnings(ns, "stuck", "FailedSync")
    assert all(f"no answer within {DEADLINE} s" in w["message"] for w in failed), failed


def test_a_429_is_retried_after_its_retry_after(
    ns: Namespace, behind_proxy: OperatorProcess, proxy: FaultProxy
) -> None:
    """The proxy refuses the release (429, Retry-After: 3) and every retry that comes before those 3 s, as
    a server shedding load would: honouring Retry-After, the operator is refused once and its retry goes
    through (retrying on its 0.1 s backoff instead, it is refused again)."""
    prefix = f"/api/v1/namespaces/{ns.name}/pods/polite-"
    proxy.rate_limit("PATCH", prefix, seconds=3)
    ns.create(gpu_job("polite", 1, labels=MANAGED))
    wait_for("polite bound", lambda: len(bound(ns.job_pods("polite"))) == 1, timeout=120)
    seen = proxy.requests("PATCH", prefix)
    print(seen)
    assert [code for _, code in seen] == [429, 0], "refused again: retried before its Retry-After"
    assert not job_warnings(ns, "polite", "FailedSync"), "retried within the request, not after a failure"
