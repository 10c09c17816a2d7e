"""A managed label edited to a value the webhooks refuse (`True`, `ture`, `yes`), while they did not answer
(they fail open): the owner stays managed — its pods held, its gangs placed whole — and a Warning names
the label; only no label or `false` lets it go. Before, any value but `true` let go of the gang: its pods
were ungated and kube-scheduler placed them one by one. One row per kind and value."""

from __future__ import annotations

from typing import Any

import pytest
from testkit import (
    NOW,
    cluster,
    group_of,
    job_body,
    jobset_body,
    jobset_cluster,
    jobset_pod,
    lws_body,
    lws_pod,
    made_groups,
    only,
    owner_cluster,
    pod_body,
)

from phalanx.api.job_policy import managed_by_label
from phalanx.controller.model.actions import (
    DeleteObject,
    PostEvent,
    RecordAdmission,
    RememberAnnounced,
    UngatePod,
)
from phalanx.controller.plan import Plan, PlanInput, plan

LABEL = "phalanx.dev/managed"


def labelled(body: dict[str, Any], value: str | None) -> dict[str, Any]:
    labels = body["metadata"].setdefault("labels", {})
    labels.pop(LABEL, None)
    if value is not None:
        labels[LABEL] = value
    return body


def a_job(value: str | None) -> PlanInput:
    job = labelled(job_body("train", 2), value)
    made = group_of(job_body("train", 2))  # made while it was managed
    return cluster([(job, made, [pod_body("train", i) for i in range(2)])])


def a_jobset(value: str | None) -> PlanInput:
    body = labelled(jobset_body("train"), value)
    pods = [jobset_pod("train", "workers", j, i, global_index=2 * j + i) for j in range(2) for i in range(2)]
    groups = made_groups(plan(jobset_cluster([jobset_body("train")], pods), NOW))  # made while managed
    return jobset_cluster([body], pods, groups=groups)


def an_lws(value: str | None) -> PlanInput:
    body = labelled(lws_body("serve", size=2), value)
    return owner_cluster([("LeaderWorkerSet", body)], [lws_pod("serve", 0, 0), lws_pod("serve", 0, 1)])


def warnings(result: Plan) -> list[PostEvent]:
    return [e for e in only(result.actions, PostEvent) if e.reason == "InvalidPolicy"]


@pytest.mark.parametrize("owner", [a_job, a_jobset, an_lws], ids=["Job", "JobSet", "LeaderWorkerSet"])
@pytest.mark.parametrize("value", ["True", "ture", "yes", ""])
def test_a_refused_value_keeps_the_owner_managed_and_says_so(owner: Any, value: str) -> None:
    result = plan(owner(value), NOW)
    assert not only(result.actions, UngatePod), "its pods stay held"
    assert not only(result.actions, DeleteObject), "its objects stay"
    (warning,) = warnings(result)
    assert warning.type == "Warning"
    assert warning.message.startswith(f"metadata.labels[{LABEL}]: ")
    assert "Phalanx goes on holding its pods and placing its gangs whole" in warning.message
    (note,) = [n for n in only(result.actions, RememberAnnounced) if n.key.endswith("/managed-label")]
    assert note.message == warning.message


def test_the_warning_is_said_once_and_the_gang_is_still_admitted_whole() -> None:
    first = plan(a_job("True"), NOW)
    assert only(first.actions, RecordAdmission), "placed whole, as a managed Job"
    (note,) = [n for n in only(first.actions, RememberAnnounced) if n.key.endswith("/managed-label")]
    again = plan(a_job_announced(note.key, note.message), NOW)
    assert not warnings(again)


def a_job_announced(key: str, message: str) -> PlanInput:
    job = labelled(job_body("train", 2), "True")
    made = group_of(job_body("train", 2))
    return cluster([(job, made, [pod_body("train", i) for i in range(2)])], announced={key: message})


@pytest.mark.parametrize("owner", [a_job, a_jobset, an_lws], ids=["Job", "JobSet", "LeaderWorkerSet"])
@pytest.mark.parametrize("value", ["false", None])
def test_false_or_no_label_lets_the_owner_go(owner: Any, value: str | None) -> None:
    result = plan(owner(value), NOW)
    assert only(result.actions, UngatePod), "its pods go to kube-scheduler"
    assert not warnings(result)


@pytest.mark.parametrize(
    ("labels", "managed", "said"),
    [
        ({}, False, False),
        ({LABEL: "true"}, True, False),
        ({LABEL: "false"}, False, False),
        ({LABEL: "True"}, True, True),
        ({LABEL: "0"}, True, True),
    ],
)
def test_managed_by_label(labels: dict[str, str], managed: bool, said: bool) -> None:
    got, problem = managed_by_label(labels)
    assert (got, bool(problem)) == (managed, said)


# ---------------------------------------------------------------------- the webhooks read it the same way
def test_the_update_webhooks_hold_an_owner_with_a_refused_value_as_managed() -> None:
    """The controller keeps an owner whose label says `True` managed; once the webhooks answer again they
    must too: a Job's gate taken off its template is refused, an LWS's is put back (through the served
    webhooks, their selectors included)."""
    from test_controller_webhook import JOB_POD, WORKER, _edit, _review

    old = _edit(job_body(suspend=True), label="True")  # edited around the webhook earlier
    new = _edit(old, drop=(JOB_POD,), label="True")  # now its gate is taken off
    assert _review("validate-job", old, new)["allowed"] is False
    old = _edit(lws_body(), label="True")
    new = _edit(old, drop=(WORKER,), label="True")
    assert "patch" in _review("regate-leaderworkerset", old, new)
