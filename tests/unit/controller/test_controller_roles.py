"""`--role`: one process doing everything, or the webhooks and the loop in processes of their own. What each
role registers and watches, and that a webhook process's cache (only the kinds WEBHOOK_READS names) answers
every review as a whole cache does."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_controller_review import job, request
from test_controller_settings import settings
from testkit import StaticContext, node_body, pod_body

from phalanx.controller.cache import store as names
from phalanx.controller.process.runtime import Runtime
from phalanx.controller.process.settings import Settings
from phalanx.controller.watch.registry import build_registry, reviewers
from phalanx.controller.watch.review import answer
from phalanx.controller.watch.watched import WATCHED, WEBHOOK_READS, rows_for


@pytest.mark.parametrize(
    ("argv", "env", "role", "serves_webhooks", "runs_loop"),
    [
        ((), {}, "all", True, True),
        (("--role", "controller"), {}, "controller", False, True),
        (("--role", "webhooks"), {}, "webhooks", True, False),
        ((), {"PHALANX_ROLE": "webhooks"}, "webhooks", True, False),
    ],
)
def test_the_role_says_what_the_process_does(
    argv: tuple[str, ...], env: dict[str, str], role: str, serves_webhooks: bool, runs_loop: bool
) -> None:
    s = settings(list(argv), env)
    assert (s.role, s.serves_webhooks, s.runs_loop) == (role, serves_webhooks, runs_loop)


def test_an_unknown_role_is_refused_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        settings(["--role", "scheduler"])
    assert "argument --role: 'scheduler': choose from all, controller, webhooks" in capsys.readouterr().err


def test_a_webhook_process_watches_what_the_reviews_read_and_no_pods() -> None:
    kinds = {row.kind for row in rows_for(webhooks_only=True)}
    assert names.POD not in kinds and names.NODE in kinds and names.POD_GROUP in kinds and "Job" in kinds
    assert kinds == WEBHOOK_READS & {row.kind for row in WATCHED}
    assert rows_for(webhooks_only=False) == WATCHED


@pytest.mark.parametrize(
    ("role", "webhooks", "watches_pods"),
    [("all", True, True), ("controller", False, True), ("webhooks", True, False)],
)
def test_each_role_registers_its_share(role: str, webhooks: bool, watches_pods: bool) -> None:
    runtime = Runtime()
    runtime.configure(settings(["--role", role, "--no-informers"]))  # every row on Kopf: all of them visible
    registry = runtime.registry()
    assert bool(registry._webhooks.get_all_handlers()) is webhooks
    watched = {h.id for h in registry._watching.get_all_handlers()}
    assert ("watch-pods" in watched) is watches_pods
    assert "watch-nodes" in watched and "watch-jobs" in watched
    # A controller has no webhook server to wait for: it is ready without one.
    assert runtime.health.webhook_started is not webhooks


def test_build_registry_without_webhooks_registers_none() -> None:
    assert not build_registry(StaticContext(), serve_webhooks=False)._webhooks.get_all_handlers()


# ---------------------------------------------------------------------- a webhook process's cache suffices
GPU = "nvidia.com/gpu"
NETWORK_BLOCK = "oci.oraclecloud.com/rdma.network_block_id"
GROUP = "scheduling.phalanx.dev"


def objects() -> list[tuple[str, dict[str, Any]]]:
    """One or more objects of every kind the reviews might read, and some they must not need (pods,
    Workloads)."""
    gpus = {f"requests.{GPU}": "24"}
    return [
        *((names.NODE, node_body(i)) for i in range(1, 9)),
        (names.POD, pod_body("busy", 0, node="n1", gated=False, phase="Running")),
        (names.POD, pod_body("waiting", 0, group="team-a")),
        (
            "ResourceQuota",
            {
                "metadata": {"name": "gpus", "namespace": "ml"},
                "spec": {"hard": gpus},
                "status": {"hard": gpus, "used": {f"requests.{GPU}": "0"}},
            },
        ),
        ("PriorityClass", {"metadata": {"name": "high"}, "value": 100}),
        (
            "Topology",
            {
                "apiVersion": f"{GROUP}/v1beta1",
                "kind": "Topology",
                "metadata": {
                    "name": "rdma",
                    "uid": "t",
                    "generation": 1,
                    "resourceVersion": "1",
                    "creationTimestamp": "2026-11-30T10:00:00Z",
                },
                "spec": {"levels": [{"nodeLabel": NETWORK_BLOCK}]},
            },
        ),
        (
            "PodGroup",
            {
                "apiVersion": f"{GROUP}/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": "team-a",
                    "namespace": "other",
                    "uid": "g",
                    "resourceVersion": "1",
                    "generation": 1,
                },
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        ),
    ]


JOBS = ("batch", "v1", "jobs")
REVIEWS = [
    ("gate-job", request(JOBS, "CREATE", job(spec__parallelism=3))),  # 24 GPUs: fits the quota
    ("gate-job", request(JOBS, "CREATE", job())),  # 4 x 8 = 32 GPUs: over it
    (
        "gate-job",
        request(
            JOBS,
            "CREATE",
            job(spec__parallelism=2, metadata__annotations={"phalanx.dev/topology-key": NETWORK_BLOCK}),
        ),
    ),
    (
        "gate-pod",
        request(
            ("", "v1", "pods"),
            "CREATE",
            pod_body("loose", 0, group="team-a", gated=False) | {"apiVersion": "v1", "kind": "Pod"},
        ),
    ),
    (
        "validate-topology",
        request(
            (GROUP, "v1beta1", "topologies"), "CREATE", objects()[-2][1] | {"metadata": {"name": "rdma-2"}}
        ),
    ),
]


@pytest.mark.parametrize(
    ("webhook", "request_"), REVIEWS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(REVIEWS)]
)
async def test_a_cache_of_only_what_the_reviews_read_answers_as_a_whole_one(
    webhook: str, request_: dict[str, Any]
) -> None:
    whole, reads = StaticContext(cache_primed=True), StaticContext(cache_primed=True)
    for kind, body in objects():
        whole.cache.upsert(kind, copy.deepcopy(body))
        if kind in WEBHOOK_READS:
            reads.cache.upsert(kind, copy.deepcopy(body))
    assert not reads.cache.pods and whole.cache.pods
    answers = [await answer(copy.deepcopy(request_), reviewers(ctx)[webhook]) for ctx in (whole, reads)]
    assert answers[0] == answers[1]


async def test_the_cache_matters_to_those_reviews() -> None:
    """What the test above compares is not blind to the cache: an empty one answers otherwise."""
    whole, empty = StaticContext(cache_primed=True), StaticContext(cache_primed=True)
    for kind, body in objects():
        whole.cache.upsert(kind, copy.deepcopy(body))
    webhook, request_ = REVIEWS[1]
    refused, allowed = [
        await answer(copy.deepcopy(request_), reviewers(ctx)[webhook]) for ctx in (whole, empty)
    ]
    assert refused is not None and allowed is not None
    assert (
        not refused["response"]["allowed"]
        and "ResourceQuota ml/gpus" in refused["response"]["status"]["message"]
    )
    assert allowed["response"]["allowed"]


def test_a_controller_needs_no_webhook_certificate_settings() -> None:
    """--webhook-config external asks for a certificate source only of a process that serves webhooks."""
    assert settings(["--role", "controller", "--webhook-config", "external"]).problems() == []
    assert any(
        "--webhook-config external needs" in p
        for p in Settings(lease_namespace="default", role="webhooks", webhook_config="external").problems()
    )
