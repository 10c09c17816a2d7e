"""Phalanx as two processes on the stock cluster (`--role webhooks` and `--role controller`): the webhook
process alone gates a gang's pods and refuses what its cache says can never run (a quota), runs no loop
and watches no pods; the controller process alone serves no webhook and admits the gang whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.api.keys import ADMISSION_GATE
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import GPU_KEY, Namespace, bound, wait_for
from .test_phalanx_admission import managed_job, pod_groups, wait_bound
from .test_quota import creation_refusal, quota

pytestmark = pytest.mark.integration

CONFIG = "/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/phalanx.dev"


def samples_of(metrics: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of `name` in a /metrics text, by its labels."""
    return {
        tuple(sorted(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == name
    }


def samples(process: OperatorProcess, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of `name` on the process's /metrics, by its labels."""
    return samples_of(process.scrape(), name)


def reviews_in(metrics: str) -> float:
    """The admission reviews a process answered, from its /metrics text."""
    return sum(samples_of(metrics, "phalanx_webhook_review_duration_seconds_count").values())


def reviews(process: OperatorProcess) -> float:
    return reviews_in(process.scrape())


def cached(process: OperatorProcess, kind: str) -> float:
    return samples(process, "phalanx_cache_objects").get((("kind", kind),), 0.0)


def webhook_urls(ns: Namespace) -> list[str]:
    return [
        str(hook["clientConfig"].get("url", ""))
        for kind in ("mutating", "validating")
        for hook in ns.api.get(CONFIG.format(kind=kind)).get("webhooks", [])
    ]


@pytest.fixture
def split(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, tmp_path: Path
) -> Iterator[dict[str, OperatorProcess]]:
    """The two roles, not started; the session's operator is stopped meanwhile and started afterwards."""
    phalanx.stop()
    made = {
        "webhooks": OperatorProcess(stock_cluster, tmp_path, ["--role", "webhooks"], name="phalanx-webhooks"),
        "controller": OperatorProcess(
            stock_cluster,
            tmp_path,
            ["--role", "controller"],
            name="phalanx-controller",
            serves_webhooks=False,
        ),
    }
    try:
        yield made
    finally:
        for process in made.values():
            process.stop()
            print(f"{process.name} log: {process.log_path}")
        phalanx.start()


def test_the_webhook_process_gates_and_refuses_and_the_controller_process_admits(
    split: dict[str, OperatorProcess], ns: Namespace
) -> None:
    hooks, controller = split["webhooks"], split["controller"]
    hooks.start()
    assert "does not run in this replica" in (hooks.http_get("/healthz") or "")
    assert cached(hooks, "Node") > 0 and cached(hooks, "Pod") == 0  # it watches no pods
    assert all(f":{hooks.port}/" in url for url in webhook_urls(ns)), webhook_urls(ns)

    # Refused from the webhook process's cache: it watches quotas.
    quota(ns, "24")

    message = wait_for(
        "the Job refused by the webhook process",
        lambda: creation_refusal(ns, managed_job("too-big", 4)),
        timeout=60,
        interval=1.0,
    )
    assert f"ResourceQuota {ns.name}/gpus allows requests.{GPU_KEY} 24 in all" in message, message

    # Gated through its template by the webhook process; with no loop anywhere, nothing decides it.
    ns.create(managed_job("gang", 3))
    pods = wait_for("3 gang pods created", lambda: ps if len(ps := ns.job_pods("gang")) == 3 else None)
    gated = [p for p in pods if {"name": ADMISSION_GATE} in (p["spec"].get("schedulingGates") or [])]
    assert len(gated) == 3 and not bound(pods) and not pod_groups(ns)
    assert reviews(hooks) > 0

    # The controller process starts: the gang is admitted whole; it answered no review.
    controller.start()
    assert len(bound(wait_bound(ns, "gang", 3))) == 3
    assert [g["metadata"]["labels"].get("phalanx.dev/job-name") for g in pod_groups(ns)] == ["gang"]
    assert reviews(controller) == 0
    assert all(f":{hooks.port}/" in url for url in webhook_urls(ns)), webhook_urls(ns)
    assert "last scheduling pass" in (controller.http_get("/healthz") or "")
