"""ResourceQuotas (issue 16, item 1) on the dev cluster: gated pods count against quotas, so two gangs the
Job controller fills at once can deadlock on one; Phalanx names the quota, breaks the deadlock by requeuing
the younger gang, and refuses at creation a gang its namespace's quota could never hold."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError

from .kube import GPU_KEY, Namespace, bound, wait_for
from .test_phalanx_admission import managed_job, wait_bound

pytestmark = pytest.mark.integration

ZONE = "quota.phalanx.dev/zone"  # no node has it until the test labels them: the gangs wait gated


def quota(ns: Namespace, gpus: str) -> None:
    ns.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpus"},
            "spec": {"hard": {f"requests.{GPU_KEY}": gpus}},
        }
    )
    wait_for(
        "the quota to be counted",
        lambda: "used" in ns.get("/api/v1/namespaces/{ns}/resourcequotas/gpus").get("status", {}),
        timeout=60,
    )


def job(ns: Namespace, name: str) -> dict[str, Any]:
    result: dict[str, Any] = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}")
    return result


def live_pods(ns: Namespace, name: str) -> list[dict[str, Any]]:
    return [p for p in ns.job_pods(name) if p["status"].get("phase") not in ("Succeeded", "Failed")]


@pytest.fixture
def zone(stock_cluster: ClusterState) -> Iterator[Callable[[str | None], None]]:
    """Labels every node with ZONE when called (None removes it); removed after the test."""
    api = stock_cluster.client()

    def label(value: str | None) -> None:
        for node in api.get("/api/v1/nodes")["items"]:
            api.request(
                "PATCH",
                f"/api/v1/nodes/{node['metadata']['name']}",
                {"metadata": {"labels": {ZONE: value}}},
                "application/merge-patch+json",
            )

    yield label
    label(None)


def test_two_gangs_deadlocked_on_one_quota_the_younger_is_requeued_and_both_run_in_turn(
    ns: Namespace, zone: Callable[[str | None], None]
) -> None:
    """The issue's deadlock, made deterministic: quota 32 GPUs; gang a (older) gets 3 pods of 8 GPUs, gang
    b 1, both then scaled to 4 — the Job controller gets `exceeded quota` for the rest. Neither can ever
    reach 4 pods: b, the younger, is requeued (suspended, its pod gone), a gets its 4th pod and runs once
    nodes carry its key; b resumes only when a is gone and then runs whole."""
    quota(ns, "32")
    for name, first in (("quota-a", 3), ("quota-b", 1)):
        body = managed_job(name, 4, key=ZONE)
        body["spec"]["parallelism"] = first
        ns.create(body)
        wait_for(f"{first} pod(s) of {name}", lambda n=name, k=first: len(live_pods(ns, n)) == k, timeout=60)
    for name in ("quota-a", "quota-b"):
        ns.patch_job(name, {"spec": {"parallelism": 4}})

    requeued = wait_for(
        "quota-b requeued",
        lambda: job(ns, "quota-b")["metadata"].get("annotations", {}).get("phalanx.dev/requeued"),
        timeout=90,
    )
    print(f"quota-b: {requeued}")
    assert requeued.startswith("quota deadlock: ResourceQuota ") and "/gpus has no room" in requeued
    assert job(ns, "quota-b")["spec"]["suspend"] is True
    assert "phalanx.dev/requeued" not in job(ns, "quota-a")["metadata"].get("annotations", {})
    said = [
        e["message"]
        for e in ns.events()
        if e["reason"] == "QuotaExceeded" and e["involvedObject"]["kind"] == "Job"
    ]
    print("\n".join(said))
    assert any(f"ResourceQuota {ns.name}/gpus (requests.{GPU_KEY}: 32 of 32 used" in m for m in said)

    wait_for("quota-a's 4th pod", lambda: len(live_pods(ns, "quota-a")) == 4, timeout=90)
    zone("z1")
    wait_bound(ns, "quota-a", 4, timeout=90)
    assert not live_pods(ns, "quota-b") and job(ns, "quota-b")["spec"]["suspend"] is True

    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/quota-a", {"propagationPolicy": "Foreground"}
    )
    wait_bound(ns, "quota-b", 4, timeout=120)
    assert not job(ns, "quota-b")["metadata"].get("annotations", {}).get("phalanx.dev/requeued")


def creation_refusal(ns: Namespace, body: dict[str, Any]) -> str | None:
    """The message a create of Job `body` was refused with; None (and the Job deleted again) if it was
    accepted: the webhook had not seen the quota yet (its watch lags the quota's creation). For wait_for."""
    name = body["metadata"]["name"]
    try:
        ns.create(body)
    except ApiError as e:
        return str(json.loads(e.body)["message"])
    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/{name}", {"propagationPolicy": "Background"}
    )
    wait_for(f"{name} gone", lambda: not ns.get("/apis/batch/v1/namespaces/{ns}/jobs")["items"])
    return None


def test_a_gang_its_namespaces_quota_could_never_hold_is_refused_at_creation(ns: Namespace) -> None:
    quota(ns, "24")
    message = wait_for(
        "the Job refused", lambda: creation_refusal(ns, managed_job("too-big", 4)), timeout=60, interval=1.0
    )
    print(message)
    assert "spec.template.spec: the gang of 4 pods can never be created whole" in message
    assert (
        f"ResourceQuota {ns.name}/gpus allows requests.{GPU_KEY} 24 in all, and the 4 pods ask 32 together"
        in message
    )
    # A gang the quota holds is accepted and runs.
    ns.create(managed_job("fits", 3))
    assert len(bound(wait_bound(ns, "fits", 3))) == 3
