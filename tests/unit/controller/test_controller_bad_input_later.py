"""Bad input only knowable later: a condition and one event saying so, from `plan()` (pure).

A PriorityClass that does not exist (the Job controller cannot create the pods), a topology key no node
carries, and requests no node can ever satisfy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_controller_plan import GATED4, admitted_reason, state
from testkit import NB, NOW, filler, group_of, job_body, only, pod_body, status_of

from phalanx.api import conditions as c
from phalanx.api.status import PodGroupStatus
from phalanx.controller.model.actions import PatchStatus, PostEvent, ReleasePod
from phalanx.controller.model.records import PriorityClassRecord
from phalanx.controller.plan import Plan, PlanInput, plan


def with_class(cluster: PlanInput, name: str) -> PlanInput:
    record = PriorityClassRecord.from_body({"metadata": {"name": name}, "value": 1000})
    return dataclasses.replace(cluster, priority_classes={name: record})


def again(job: dict[str, Any], result: Plan) -> Any:
    """The group as the next pass sees it: with the status the first pass wrote."""
    return group_of(job, status_of(result))


def warnings(result: Plan) -> list[tuple[str, str]]:
    return [(e.involved.kind, e.reason) for e in only(result.actions, PostEvent) if e.type == "Warning"]


# ---------------------------------------------------------------------- a PriorityClass that does not exist
def test_a_missing_priority_class_is_said_instead_of_waiting_for_pods_forever() -> None:
    job = job_body(priority_class="nope")
    result = plan(state([(job, group_of(job), [])]), NOW)
    flag, reason, message = admitted_reason(status_of(result))
    assert (flag, reason) == ("False", c.REASON_PRIORITY_CLASS_NOT_FOUND)
    assert message.startswith("spec.template.spec.priorityClassName: PriorityClass 'nope' does not exist")
    assert status_of(result).phase == "Pending"
    assert warnings(result) == [
        ("Job", c.REASON_PRIORITY_CLASS_NOT_FOUND),
        ("PodGroup", c.REASON_PRIORITY_CLASS_NOT_FOUND),
    ]
    # The next pass: nothing new, so no write and no second event.
    second = plan(state([(job, again(job, result), [])]), NOW)
    assert not only(second.actions, PatchStatus) and not only(second.actions, PostEvent)


def test_once_the_priority_class_exists_the_gang_is_admitted() -> None:
    job = job_body(priority_class="high")
    missing = plan(state([(job, group_of(job), [])]), NOW)
    assert admitted_reason(status_of(missing))[1] == c.REASON_PRIORITY_CLASS_NOT_FOUND
    pods = [pod_body("train", i, priority=1000) for i in range(4)]
    result = plan(with_class(state([(job, again(job, missing), pods)]), "high"), NOW)
    assert len(only(result.actions, ReleasePod)) == 4
    assert admitted_reason(status_of(result))[1] == c.REASON_ADMITTED


def test_pods_made_before_the_class_was_deleted_are_scheduled_as_usual() -> None:
    job = job_body(priority_class="gone")
    result = plan(state([(job, group_of(job), GATED4)]), NOW)
    assert len(only(result.actions, ReleasePod)) == 4


# ---------------------------------------------------------------------- a system PriorityClass
def test_a_gang_of_a_system_priority_class_made_around_the_webhook_is_said_invalid_and_the_others_go() -> (
    None
):
    """No PodGroup may carry a system class's priority (above 1000000000, as upstream's): the Job's record
    says so (InvalidPolicy, once) instead of the pass failing to build its groups, and the other gang is
    placed."""
    system = job_body(priority_class="system-cluster-critical")
    other = job_body("other", 2, created="2026-11-30T11:05:00Z")
    critical = {"metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000}
    cluster = state(
        [
            (system, None, [pod_body("train", i, priority=2_000_000_000) for i in range(4)]),
            (other, None, [pod_body("other", i) for i in range(2)]),
        ]
    )
    classes = {"system-cluster-critical": PriorityClassRecord.from_body(critical)}
    result = plan(dataclasses.replace(cluster, priority_classes=classes), NOW)
    assert ("Job", "InvalidPolicy") in warnings(result)
    (said,) = [e.message for e in only(result.actions, PostEvent) if e.reason == "InvalidPolicy"]
    assert said.startswith('spec.template.spec.priorityClassName: "system-cluster-critical" is a system')
    assert sorted(a.pod.name for a in only(result.actions, ReleasePod)) == ["other-0", "other-1"]


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({"phalanx.dev/min-count": "9" * 5000}, "metadata.annotations[phalanx.dev/min-count]"),
        (
            {"phalanx.dev/slice-size": "9" * 5000, "phalanx.dev/slice-topology-key": "rack"},
            "metadata.annotations[phalanx.dev/slice-size]",
        ),
    ],
)
def test_an_integer_of_thousands_of_digits_made_around_the_webhook_is_said_invalid(
    annotations: dict[str, str], field: str
) -> None:
    """Python reads no integer of more than 4300 digits: the Job's record says the annotation is out of
    range (InvalidPolicy) instead of the cache failing to read the Job, and the other gang is placed."""
    bad = job_body(annotations=annotations)
    other = job_body("other", 2, created="2026-11-30T11:05:00Z")
    result = plan(state([(bad, None, GATED4), (other, None, [pod_body("other", i) for i in range(2)])]), NOW)
    (said,) = [e.message for e in only(result.actions, PostEvent) if e.reason == "InvalidPolicy"]
    assert said.startswith(f"{field}: ") and "is out of range" in said
    assert sorted(a.pod.name for a in only(result.actions, ReleasePod)) == ["other-0", "other-1"]


# ---------------------------------------------------------------------- a topology key no node carries
def test_a_topology_key_no_node_carries_says_so_with_the_label_it_was_probably_meant_to_be() -> None:
    job = job_body(annotations={"phalanx.dev/topology-key": NB.replace("network_block", "network-block")})
    result = plan(state([(job, group_of(job), GATED4)]), NOW)
    assert not only(result.actions, ReleasePod)
    flag, reason, message = admitted_reason(status_of(result))
    assert (flag, reason) == ("False", c.REASON_UNSCHEDULABLE)
    assert (
        "0/0 placements are available: no node has the label oci.oraclecloud.com/rdma.network-block_id"
        in message
    )
    assert message.endswith(f"; did you mean {NB} (on 8 node(s))?")
    assert warnings(result) == [("Job", c.REASON_UNSCHEDULABLE), ("PodGroup", c.REASON_UNSCHEDULABLE)]
    second = plan(state([(job, again(job, result), GATED4)]), NOW)
    assert not only(second.actions, PostEvent)


def test_a_topology_key_like_no_node_label_says_how_to_fix_it() -> None:
    job = job_body(annotations={"phalanx.dev/topology-key": "example.com/zzzz-qqqq"})
    message = admitted_reason(status_of(plan(state([(job, group_of(job), GATED4)]), NOW)))[2]
    assert message.endswith("; set phalanx.dev/topology-key to a node label, or label the nodes")


# ---------------------------------------------------------------------- requests no node can ever satisfy
def test_a_gang_that_can_never_fit_gets_one_stable_message_while_other_work_comes_and_goes() -> None:
    job = job_body()
    huge = [pod_body("train", i, gpus=9) for i in range(4)]  # 9 GPUs a pod; nodes have 8
    first = plan(state([(job, group_of(job), huge)]), NOW)
    flag, reason, message = admitted_reason(status_of(first))
    assert (flag, reason) == ("False", c.REASON_UNSCHEDULABLE)
    assert (
        "it can never fit in this cluster: with every node empty the largest domain holds 0 of the 4 pods"
        in message
    )
    assert "8 nodes: Insufficient nvidia.com/gpu" in message
    assert len(warnings(first)) == 2
    # Other pods fill and leave nodes: what "fits now" changes, the message (and so the events) does not.
    busy = [filler(n) for n in ("n1", "n2", "n5")]
    second = plan(state([(job, again(job, first), huge)], others=busy), NOW)
    assert not only(second.actions, PostEvent)
    assert not only(second.actions, PatchStatus)


def test_a_gang_larger_than_any_domain_is_told_so_without_counts_that_change_with_the_load() -> None:
    job = job_body(count=5, annotations={"phalanx.dev/topology-key": NB})
    pods = [pod_body("train", i) for i in range(5)]
    first = plan(state([(job, group_of(job), pods)]), NOW)
    message = admitted_reason(status_of(first))[2]
    assert message.endswith(
        "; it can never fit in this cluster: with every node empty the largest domain holds 4 of the 5 pods"
    )
    assert "of 5 pods fit" not in message  # how many fit now: true for a moment only
    second = plan(state([(job, again(job, first), pods)], others=[filler("n1")]), NOW)
    assert not only(second.actions, PostEvent)


def test_a_gang_that_only_has_to_wait_keeps_its_per_domain_explanation() -> None:
    job = job_body()
    busy = [filler(n) for n in ("n1", "n5", "n6", "n7", "n8")]
    message = admitted_reason(status_of(plan(state([(job, group_of(job), GATED4)], others=busy), NOW)))[2]
    assert "never fit" not in message and "pods fit" in message


def test_the_status_model_accepts_the_new_reason() -> None:
    job = job_body(priority_class="nope")
    status = status_of(plan(state([(job, group_of(job), [])]), NOW))
    assert PodGroupStatus.model_validate(status.to_api()).condition(c.ADMITTED) is not None
