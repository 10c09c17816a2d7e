"""Reviews answered directly (watch/review.py) against Kopf's own path (`serve_admission_request` over the
same handlers, registered by build_registry) as the reference: for every webhook and a table of requests,
the same allowed, status, warnings, and a patch that does the same to the object."""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Mapping
from typing import Any

import jsonpatch
import kopf
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from kopf._cogs.structs import ephemera, references
from kopf._core.engines.admission import serve_admission_request
from kopf._core.reactor.inventory import ResourceMemories
from testkit import StaticContext, lws_body

from phalanx.api import keys
from phalanx.controller.watch.registry import build_registry, reviewers
from phalanx.controller.watch.review import Reviewer, answer, json_patch, labels_match

RESOURCES = {
    ("batch", "v1", "jobs"): "Job",
    ("", "v1", "pods"): "Pod",
    ("scheduling.phalanx.dev", "v1beta1", "podgroups"): "PodGroup",
    ("scheduling.phalanx.dev", "v1beta1", "workloads"): "Workload",
    ("scheduling.phalanx.dev", "v1beta1", "topologies"): "Topology",
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"): "LeaderWorkerSet",
}


def request(
    webhook_resource: tuple[str, str, str],
    operation: str,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    group, version, plural = webhook_resource
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "resource": {"group": group, "version": version, "resource": plural},
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": copy.deepcopy(obj),
            "oldObject": copy.deepcopy(old),
            "dryRun": False,
        },
    }


async def kopfs_answer(review: dict[str, Any], webhook: str) -> dict[str, Any]:
    registry = build_registry(StaticContext(cache_primed=False))
    insights = references.Insights()
    for (group, version, plural), kind in RESOURCES.items():
        insights.webhook_resources.add(
            references.Resource(group, version, plural, kind=kind, namespaced=True)
        )
    answered: dict[str, Any] = await serve_admission_request(
        review,  # type: ignore[arg-type]
        webhook=webhook,  # type: ignore[arg-type]
        settings=kopf.OperatorSettings(),
        memories=ResourceMemories(),
        memobase=ephemera.Memo(),
        registry=registry,
        insights=insights,
        indices={},  # type: ignore[arg-type]
    )
    return answered


def applied(obj: Mapping[str, Any] | None, answer_: Mapping[str, Any]) -> Any:
    encoded = answer_["response"].get("patch")
    if not encoded:
        return obj
    return jsonpatch.apply_patch(copy.deepcopy(obj), json.loads(base64.b64decode(encoded)))


def job(**changes: Any) -> dict[str, Any]:
    """A gang Job as a user creates it; `a__b=v` sets body["a"]["b"] = v."""
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {keys.MANAGED_LABEL: "true"},
            "annotations": {},
        },
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
                    ],
                    "schedulingGates": [{"name": "other.io/gate"}],
                },
            },
        },
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = body
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return body


def pod_group(min_count: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "serve-0", "namespace": "ml", "labels": labels},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


JOBS = ("batch", "v1", "jobs")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
POD_GROUPS = ("scheduling.phalanx.dev", "v1beta1", "podgroups")
OWNED = {"phalanx.dev/owner-uid": "uid-lws", "phalanx.dev/owner-kind": "LeaderWorkerSet"}
CASES = [
    ("gate-job", request(JOBS, "CREATE", job())),
    ("gate-job", request(JOBS, "CREATE", job(metadata__annotations={keys.POLICY_ANNOTATION: "nonsense"}))),
    ("gate-job", request(JOBS, "CREATE", job(spec__template={"spec": {"containers": []}}))),
    ("gate-job", request(JOBS, "CREATE", job(metadata__labels={keys.MANAGED_LABEL: "false"}))),
    ("gate-job", request(JOBS, "UPDATE", job(), job())),  # an operation it is not registered for
    ("validate-job", request(JOBS, "UPDATE", job(spec__parallelism=2), job())),
    ("validate-job", request(JOBS, "UPDATE", job(), job())),
    ("validate-job", request(JOBS, "UPDATE", job(metadata__labels={}), job())),  # the label filter
    ("validate-job", request(JOBS, "UPDATE", job(metadata__labels={keys.MANAGED_LABEL: "True"}), job())),
    ("validate-podgroup", request(POD_GROUPS, "UPDATE", pod_group(1, OWNED), pod_group(4, OWNED))),
    ("validate-podgroup", request(POD_GROUPS, "UPDATE", pod_group(1, {}), pod_group(4, {}))),  # hand-made
    ("regate-leaderworkerset", request(LWS, "UPDATE", lws_body(gated=False), lws_body())),  # put back
    ("regate-leaderworkerset", request(LWS, "UPDATE", lws_body(), lws_body())),
]


@pytest.mark.parametrize(("webhook", "review"), CASES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(CASES)])
async def test_the_answer_is_kopfs(webhook: str, review: dict[str, Any]) -> None:
    reviewer = reviewers(StaticContext(cache_primed=False))[webhook]
    mine = await answer(copy.deepcopy(review), reviewer)
    theirs = await kopfs_answer(copy.deepcopy(review), webhook)
    assert mine is not None
    assert mine["response"]["allowed"] == theirs["response"]["allowed"]
    assert mine["response"].get("status") == theirs["response"].get("status")
    assert mine["response"].get("warnings") == theirs["response"].get("warnings")
    assert mine["response"]["uid"] == theirs["response"]["uid"] == "u-1"
    obj = review["request"]["object"]
    assert applied(obj, mine) == applied(obj, theirs)
    assert bool(mine["response"].get("patch")) == bool(theirs["response"].get("patch"))


async def test_a_request_without_its_user_or_object_is_left_to_kopf() -> None:
    reviewer = reviewers(StaticContext())["gate-job"]
    review = request(JOBS, "CREATE", job())
    del review["request"]["userInfo"]
    assert await answer(review, reviewer) is None
    assert await answer(request(JOBS, "CREATE", None), reviewer) is None


async def test_a_handler_that_fails_denies_with_500_as_kopf_does() -> None:
    def broken(**_: Any) -> None:
        raise ValueError("boom")

    answered = await answer(request(JOBS, "CREATE", job()), Reviewer(broken, ("CREATE",), None))
    assert answered is not None
    assert answered["response"]["allowed"] is False
    assert answered["response"]["status"] == {"message": "boom", "code": 500}


async def test_an_async_handler_is_awaited() -> None:
    async def refuse(**_: Any) -> None:
        raise kopf.AdmissionError("no", code=422)

    answered = await answer(request(JOBS, "CREATE", job()), Reviewer(refuse, ("CREATE",), None))
    assert answered is not None and answered["response"]["status"] == {"message": "no", "code": 422}


@pytest.mark.parametrize(
    ("labels", "spec", "matches"),
    [
        ({"a": "1"}, {"a": kopf.PRESENT}, True),
        ({}, {"a": kopf.PRESENT}, False),
        ({"a": "1"}, {"a": kopf.ABSENT}, False),
        ({}, {"a": kopf.ABSENT}, True),
        ({"a": "1"}, {"a": "1"}, True),
        ({"a": "2"}, {"a": "1"}, False),
        ({"a": "1", "b": "x"}, {"a": "1", "b": kopf.ABSENT}, False),
        ({}, None, True),
    ],
)
def test_labels_match_as_kopfs_filter(labels: dict[str, str], spec: Any, matches: bool) -> None:
    assert labels_match(labels, spec) is matches


keys_ = st.sampled_from(["a", "b", "c/d", "e~f", "spec", "labels"])
leaves = st.none() | st.integers(0, 3) | st.text(max_size=2) | st.lists(st.integers(0, 2), max_size=2)
documents = st.recursive(leaves, lambda inner: st.dictionaries(keys_, inner, max_size=3), max_leaves=10)
objects = st.dictionaries(keys_, documents.filter(lambda v: v is not None), max_size=4)
merges = st.dictionaries(keys_, documents, max_size=4)


@given(objects, merges)
def test_the_json_patch_does_what_the_merge_patch_does(obj: dict[str, Any], merge: dict[str, Any]) -> None:
    """Kopf's Patch.as_json_patch (deep copy, merge, diff) is the reference: the same object after."""
    try:
        theirs = kopf.Patch(copy.deepcopy(merge), body=kopf.Body(copy.deepcopy(obj))).as_json_patch()  # type: ignore[arg-type]
    except TypeError:
        assume(False)  # Kopf cannot merge a dict into a scalar; no handler of ours asks it to
    expected = jsonpatch.apply_patch(copy.deepcopy(obj), theirs)
    assert jsonpatch.apply_patch(copy.deepcopy(obj), json_patch(obj, merge)) == expected


async def test_a_denial_is_logged_at_info_naming_the_webhook_and_the_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As process/logs.py DenialsAtInfo turns Kopf's "failed permanently" into: a refusal is not a failure."""
    caplog.set_level(logging.INFO, logger="phalanx.webhooks")
    reviewer = reviewers(StaticContext())["gate-job"]
    review = request(JOBS, "CREATE", job(metadata__annotations={keys.POLICY_ANNOTATION: "nonsense"}))
    answered = await answer(review, reviewer)
    assert answered is not None and answered["response"]["allowed"] is False
    (record,) = [r for r in caplog.records if r.name == "phalanx.webhooks"]
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert message.startswith("[ml/train] Webhook 'gate-job' denied: ")
    assert answered["response"]["status"]["message"] in message
