"""`plan()` in tables: a state of the cluster in, the actions of one pass out (no cluster, no asyncio)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from testkit import (
    GATE,
    LB,
    NODES,
    NOW,
    TOPOLOGY,
    cluster,
    filler,
    group_of,
    job_body,
    job_key,
    kinds,
    node_body,
    only,
    pod_body,
    status_of,
    written_statuses,
)

from phalanx.api import conditions as c
from phalanx.api.status import Admission, Assignment, PodGroupStatus
from phalanx.controller.model.actions import (
    CreatePodGroup,
    CreateWorkload,
    DeleteObject,
    EvictPod,
    LabelPod,
    PatchMinCount,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    ResumeJob,
    SuspendJob,
    UngatePod,
)
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.plan import Plan, PlanInput, plan
from phalanx.controller.plan.report import LABEL_WAITING_FOR_PODS_AFTER
from phalanx.controller.plan.status import REFRESH_SECONDS, SETTLE_SECONDS


def state(
    jobs: Sequence[tuple[dict[str, Any], PodGroupRecord | None, Sequence[dict[str, Any]]]],
    *,
    others: Sequence[dict[str, Any]] = (),
    backing_off: frozenset[str] = frozenset(),
    announced: dict[str, str] | None = None,
) -> PlanInput:
    return cluster(jobs, others=others, backing_off=backing_off, announced=announced)


def admitted_reason(status: PodGroupStatus) -> tuple[str, str, str]:
    cond = status.condition(c.ADMITTED)
    assert cond is not None
    return cond.status, cond.reason, cond.message


GATED4 = [pod_body("train", i) for i in range(4)]


# ---------------------------------------------------------------------- the cases
def test_a_new_job_gets_its_workload_and_pod_group_and_is_admitted_in_the_same_pass() -> None:
    job = job_body(annotations=TOPOLOGY)
    result = plan(state([(job, None, GATED4)]), NOW)
    actions = result.actions
    assert kinds(actions)[:3] == ["CreateWorkload", "CreatePodGroup", "PostEvent"]
    created = only(actions, CreatePodGroup)[0]
    assert created.pod_group.spec.scheduling_policy.gang.min_count == 4
    assert only(actions, CreateWorkload)[0].workload.metadata["name"] == created.workload
    assert len(only(actions, ReleasePod)) == 4
    assert not only(actions, LabelPod)  # a release labels the pod in the same request
    assert result.units[0].admitted_pods == 4
    assert result.units[0].admission_latency == 3600.0


def test_a_fitting_gang_records_its_decision_before_releasing_any_pod() -> None:
    job = job_body(annotations=TOPOLOGY)
    result = plan(state([(job, group_of(job), GATED4)]), NOW)
    names = kinds(result.actions)
    record = names.index("RecordAdmission")
    assert all(i > record for i, n in enumerate(names) if n == "ReleasePod")
    # One status write: the whole status goes with the decision, before any release.
    assert "PatchStatus" not in names
    (decision,) = only(result.actions, RecordAdmission)
    assert decision.status is not None and decision.status.admission == decision.admission
    assert decision.admission.domain == "nb-a"  # a tie between the blocks: broken by name
    assert decision.admission.attempt == 0
    nodes = {r.node for r in only(result.actions, ReleasePod)}
    assert nodes == {"n1", "n2", "n3", "n4"}
    status = status_of(result)
    assert admitted_reason(status) == ("True", c.REASON_ADMITTED, "4 pod(s) admitted in nb-a")
    assert status.phase == "Admitted"
    assert status.admission == decision.admission
    events = [(e.involved.kind, e.reason) for e in only(result.actions, PostEvent)]
    assert events == [("Job", "Admitted"), ("PodGroup", "Admitted")]


def test_a_gang_whose_pods_are_still_coming_says_so_in_its_status_without_an_event() -> None:
    job = job_body(annotations=TOPOLOGY)
    result = plan(state([(job, group_of(job), GATED4[:2])]), NOW)
    assert not only(result.actions, ReleasePod)
    flag, reason, _ = admitted_reason(status_of(result))
    assert (flag, reason) == ("False", c.REASON_WAITING_FOR_PODS)
    # Every gang's first state: the condition says it; no event on the group or its Job.
    assert not only(result.actions, PostEvent)


@pytest.mark.parametrize(
    ("waited", "labelled"),
    [(0.0, 0), (LABEL_WAITING_FOR_PODS_AFTER - 0.5, 0), (LABEL_WAITING_FOR_PODS_AFTER, 2), (600.0, 2)],
)
def test_pods_of_a_gang_still_waiting_for_its_other_pods_are_labelled_only_after_a_while(
    waited: float, labelled: int
) -> None:
    """The release carries the label: a gang whose pods come in a pass or two is not labelled pod by pod
    first; one that keeps waiting for its pods is."""
    job = job_body(annotations=TOPOLOGY)
    first = plan(state([(job, group_of(job), GATED4[:2])]), NOW)
    assert not only(first.actions, LabelPod)
    later = plan(
        state([(job, group_of(job, status_of(first)), GATED4[:2])]), NOW + dt.timedelta(seconds=waited)
    )
    assert len(only(later.actions, LabelPod)) == labelled
    assert not only(later.actions, ReleasePod)


@pytest.mark.parametrize(
    ("bound", "after", "written"),
    [
        (2, 1.0, False),  # two of four bound a second after the admission: counters alone, not yet
        (2, SETTLE_SECONDS, True),  # still binding past the window: the counters are written
        (4, 1.0, True),  # all four bound: Running, written at once
    ],
)
def test_a_gang_binding_writes_its_counters_with_its_next_state_not_pod_by_pod(
    bound: int, after: float, written: bool
) -> None:
    job = job_body(annotations=TOPOLOGY)
    first = plan(state([(job, group_of(job), GATED4)]), NOW)
    (decision,) = only(first.actions, RecordAdmission)
    assert decision.status is not None
    nodes = {r.pod.name: r.node for r in only(first.actions, ReleasePod)}
    pods = [
        pod_body(
            "train",
            i,
            node=nodes[f"train-{i}"] if i < bound else "",
            released_to=nodes[f"train-{i}"],
            gated=False,
            group=decision.group.name,
        )
        for i in range(4)
    ]
    later = plan(state([(job, group_of(job, decision.status), pods)]), NOW + dt.timedelta(seconds=after))
    statuses = written_statuses(later)
    assert bool(statuses) == written
    if written:
        (status,) = statuses.values()
        assert status.scheduled == bound
        assert status.phase == ("Running" if bound == 4 else "Admitted")
    assert not only(later.actions, ReleasePod)


def test_pods_coming_change_the_waiting_count_only_past_the_window_or_with_the_admission() -> None:
    job = job_body(annotations=TOPOLOGY)
    first = plan(state([(job, group_of(job), GATED4[:1])]), NOW)
    assert status_of(first).waiting == 1
    one_more = plan(
        state([(job, group_of(job, status_of(first)), GATED4[:2])]), NOW + dt.timedelta(seconds=1)
    )
    assert not written_statuses(one_more)
    late = plan(
        state([(job, group_of(job, status_of(first)), GATED4[:2])]),
        NOW + dt.timedelta(seconds=SETTLE_SECONDS),
    )
    assert status_of(late).waiting == 2
    whole = plan(state([(job, group_of(job, status_of(first)), GATED4)]), NOW + dt.timedelta(seconds=1))
    (decision,) = only(whole.actions, RecordAdmission)
    assert decision.status is not None and decision.status.phase == "Admitted"


def test_pods_of_a_gang_waiting_for_room_are_labelled_at_once_and_a_release_labels_in_its_own_request() -> (
    None
):
    job = job_body()
    fillers = [filler(n) for n in ("n1", "n5", "n6", "n7", "n8")]
    waiting = plan(state([(job, group_of(job), GATED4)], others=fillers), NOW)
    assert len(only(waiting.actions, LabelPod)) == 4
    job2 = job_body(annotations=TOPOLOGY)
    coming = plan(state([(job2, group_of(job2), GATED4[:2])]), NOW)
    whole = plan(state([(job2, group_of(job2, status_of(coming)), GATED4)]), NOW + dt.timedelta(seconds=1))
    assert len(only(whole.actions, ReleasePod)) == 4 and not only(whole.actions, LabelPod)


def test_a_gang_that_does_not_fit_waits_unschedulable_with_upstreams_message() -> None:
    job = job_body()
    fillers = [filler(n) for n in ("n1", "n5", "n6", "n7", "n8")]
    result = plan(state([(job, group_of(job), GATED4)], others=fillers), NOW)
    assert not only(result.actions, ReleasePod)
    assert not only(result.actions, RecordAdmission)
    status = status_of(result)
    flag, reason, message = admitted_reason(status)
    assert (flag, reason) == ("False", c.REASON_UNSCHEDULABLE)
    assert message.startswith("pod group is unschedulable")
    assert "minCount (4)" in message
    initial = status.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
    assert initial is not None and (initial.status, initial.reason) == ("False", "Unschedulable")
    warnings = [e for e in only(result.actions, PostEvent) if e.type == "Warning"]
    assert {e.involved.kind for e in warnings} == {"Job", "PodGroup"}
    assert result.waiting_by_reason == {c.REASON_UNSCHEDULABLE: 1}


@pytest.mark.parametrize(
    ("fillers", "reported_ago", "written"),
    [
        # the closest placement's numbers changed (3 of 4 pods fit -> 2 of 4), still unschedulable:
        (("n1", "n2", "n5", "n6", "n7", "n8"), 1.0, False),  # written a second ago: not again yet
        (("n1", "n2", "n5", "n6", "n7", "n8"), REFRESH_SECONDS, True),  # past the window: the new numbers
        (("n1", "n2", "n5", "n6", "n7", "n8"), None, True),  # never written by this process: written
        (("n1", "n5", "n6", "n7"), 1.0, True),  # a new reason (it fits now): written at once
    ],
)
def test_new_numbers_in_why_a_gang_waits_are_written_at_most_once_per_refresh(
    fillers: tuple[str, ...], reported_ago: float | None, written: bool
) -> None:
    job = job_body()
    busy = [filler(n) for n in ("n1", "n5", "n6", "n7", "n8")]
    first = plan(state([(job, group_of(job), GATED4)], others=busy), NOW)
    group = group_of(job, status_of(first))
    later = NOW + dt.timedelta(seconds=2)
    before = state([(job, group, GATED4)], others=[filler(n) for n in fillers])
    if reported_ago is not None:
        when = later - dt.timedelta(seconds=reported_ago)
        before = dataclasses.replace(before, reported={f"PodGroup/{group.namespace}/{group.name}": when})
    result = plan(before, later)
    statuses = written_statuses(result)
    assert bool(statuses) == written
    events = only(result.actions, PostEvent)
    if not written:
        assert not events  # not said as an event either
    elif statuses[group.name].condition(c.ADMITTED).reason == c.REASON_UNSCHEDULABLE:
        assert "2 of 4 pods fit" in admitted_reason(statuses[group.name])[2]
        assert {e.reason for e in events} == {c.REASON_UNSCHEDULABLE}


@pytest.mark.parametrize(
    ("reported_ago", "written"),
    [(1.0, False), (REFRESH_SECONDS, True), (None, True)],
)
def test_a_running_gang_whose_pods_end_one_by_one_writes_its_counters_at_most_once_per_refresh(
    reported_ago: float | None, written: bool
) -> None:
    job = job_body(annotations=TOPOLOGY)
    first = plan(state([(job, group_of(job), GATED4)]), NOW)
    (decision,) = only(first.actions, RecordAdmission)
    nodes = {r.pod.name: r.node for r in only(first.actions, ReleasePod)}
    name = decision.group.name

    def pod(i: int, phase: str) -> dict[str, Any]:
        node = nodes[f"train-{i}"]
        return pod_body("train", i, node=node, released_to=node, gated=False, group=name, phase=phase)

    bound = [pod(i, "Running") for i in range(4)]
    running = plan(state([(job, group_of(job, decision.status), bound)]), NOW + dt.timedelta(seconds=1))
    group = group_of(job, status_of(running))
    assert group.status.phase == "Running"
    later = NOW + dt.timedelta(seconds=60)
    one_done = state([(job, group, [pod(0, "Succeeded"), *bound[1:]])])
    if reported_ago is not None:
        when = later - dt.timedelta(seconds=reported_ago)
        one_done = dataclasses.replace(one_done, reported={f"PodGroup/{group.namespace}/{group.name}": when})
    statuses = written_statuses(plan(one_done, later))
    assert bool(statuses) == written
    if written:
        assert (statuses[name].phase, statuses[name].scheduled, statuses[name].succeeded) == ("Running", 3, 1)


def test_a_second_pass_with_nothing_new_plans_nothing() -> None:
    job = job_body()
    fillers = [filler(n) for n in ("n1", "n5", "n6", "n7", "n8")]
    first = plan(state([(job, group_of(job), GATED4)], others=fillers), NOW)
    assert len(only(first.actions, LabelPod)) == 4
    group = group_of(job, status_of(first))
    labelled = [pod_body("train", i, group=group.name) for i in range(4)]
    again = plan(state([(job, group, labelled)], others=fillers), NOW + dt.timedelta(seconds=5))
    assert again.actions == []


def test_after_a_crash_mid_release_the_rest_of_the_gang_joins_the_same_domain() -> None:
    """Decision recorded for nb-b, two pods released there; best fit alone would now pick nb-a."""
    job = job_body(annotations=TOPOLOGY)
    recorded = Admission(
        domain="nb-b",
        assignments=[Assignment(pod=f"train-{i}", node=f"n{5 + i}") for i in range(4)],
        admitted_at=NOW - dt.timedelta(minutes=1),
        attempt=0,
    )
    group = group_of(job, PodGroupStatus(admission=recorded))
    pods = [
        pod_body("train", 0, gated=False, released_to="n5", group=group.name),
        pod_body("train", 1, gated=False, released_to="n6", group=group.name),
        pod_body("train", 2, group=group.name),
        pod_body("train", 3, group=group.name),
    ]
    fillers = [filler("n1"), filler("n2")]  # nb-a has 2 free nodes, nb-b 2 (after the released pods)
    result = plan(state([(job, group, pods)], others=fillers), NOW)
    releases = only(result.actions, ReleasePod)
    assert {(r.pod.name, r.node) for r in releases} == {("train-2", "n7"), ("train-3", "n8")}
    assert not only(result.actions, RecordAdmission)  # the recorded decision is finished, not made again
    assert status_of(result).admission == recorded

    # If a recorded node was taken meanwhile, the decision is made afresh (in the domain the released
    # pods pin), with the next attempt number.
    taken = plan(state([(job, group, pods)], others=[*fillers, filler("n7")]), NOW)
    assert not only(taken.actions, ReleasePod)
    assert admitted_reason(status_of(taken))[1] == c.REASON_UNSCHEDULABLE
    half = [pod_body("train", i, gpus=4, group=group.name) for i in (2, 3)]  # two fit one node
    moved = plan(state([(job, group, [*pods[:2], *half])], others=[*fillers, filler("n7")]), NOW)
    (decision,) = only(moved.actions, RecordAdmission)
    assert decision.admission.domain == "nb-b" and decision.admission.attempt == 1
    assert {r.node for r in only(moved.actions, ReleasePod)} == {"n8"}


def test_min_count_follows_the_job_and_the_smaller_gang_is_admitted_in_the_same_pass() -> None:
    job = job_body(annotations={"phalanx.dev/min-count": "2"})
    group = group_of(job_body())  # made when the Job had no annotation: minCount 4
    pods = GATED4[:2]
    fillers = [filler(n) for n in NODES[2:]]  # only n1 and n2 free
    result = plan(state([(job, group, pods)], others=fillers), NOW)
    names = kinds(result.actions)
    assert names.index("PatchMinCount") < names.index("RecordAdmission")
    assert only(result.actions, PatchMinCount)[0].min_count == 2
    assert "MinCountChanged" in [e.reason for e in only(result.actions, PostEvent)]
    assert {r.node for r in only(result.actions, ReleasePod)} == {"n1", "n2"}


def test_a_suspended_job_holds_nothing_and_says_so() -> None:
    job = job_body(annotations=TOPOLOGY)
    admitted = plan(state([(job, group_of(job), GATED4)]), NOW)
    group = group_of(job, status_of(admitted))
    suspended = job_body(annotations=TOPOLOGY, suspend=True)
    result = plan(state([(suspended, group, [])]), NOW)
    status = status_of(result)
    assert status.phase == "Suspended"
    assert status.admission is None
    assert admitted_reason(status)[1] == c.REASON_SUSPENDED
    assert not only(result.actions, ReleasePod)

    # Resumed with no room: it waits whole, and says why now (the first condition stays True).
    resumed = plan(state([(job, group_of(job, status), GATED4)], others=[filler(n) for n in NODES[1:]]), NOW)
    now = status_of(resumed)
    assert admitted_reason(now)[:2] == ("False", c.REASON_UNSCHEDULABLE)
    initial = now.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
    assert initial is not None and initial.status == "True"
    assert not only(resumed.actions, ReleasePod)


def test_a_job_being_deleted_gets_nothing_made_again_and_nothing_placed() -> None:
    """Deleted in the foreground, its Workload and PodGroup are deleted before it (blockOwnerDeletion):
    they are not made again for a Job that is going, and its gated pods are not placed."""
    job = job_body()
    job["metadata"].update(deletionTimestamp="2026-11-30T11:59:00Z", finalizers=["foregroundDeletion"])
    actions = plan(state([(job, None, GATED4)]), NOW).actions
    assert not only(actions, CreateWorkload) and not only(actions, CreatePodGroup)
    assert not only(actions, ReleasePod) and not only(actions, PostEvent), actions


def test_a_finished_job_releases_nothing_and_is_finished() -> None:
    job = job_body(finished=True)
    result = plan(state([(job, group_of(job), [])]), NOW)
    status = status_of(result)
    assert status.phase == "Finished"
    assert admitted_reason(status)[1] == c.REASON_FINISHED
    assert not only(result.actions, ReleasePod)


def test_a_basic_group_is_never_held_and_reports_basic() -> None:
    job = job_body(annotations={"phalanx.dev/policy": "basic"})
    pods = [pod_body("train", i, gated=False, node=f"n{i + 1}", phase="Running") for i in range(2)]
    result = plan(state([(job, group_of(job), pods)]), NOW)
    assert not only(result.actions, ReleasePod)
    assert not only(result.actions, RecordAdmission)
    status = status_of(result)
    assert status.policy == "Basic"
    assert status.phase == "Running"


def test_the_last_wave_of_a_job_shrinks_the_gang_to_the_completions_left() -> None:
    job = job_body(count=4, completions=6, succeeded=4)  # 2 completions left, minCount 4
    pods = GATED4[:2]
    fillers = [filler(n) for n in NODES[2:]]
    result = plan(state([(job, group_of(job_body(count=4)), pods)], others=fillers), NOW)
    assert {r.node for r in only(result.actions, ReleasePod)} == {"n1", "n2"}


def test_fewer_pods_than_min_count_wait_for_the_job_to_create_them() -> None:
    job = job_body()
    result = plan(state([(job, group_of(job), GATED4[:3])]), NOW)
    assert not only(result.actions, ReleasePod)
    assert admitted_reason(status_of(result))[1] == c.REASON_WAITING_FOR_PODS


def test_higher_priority_goes_first_and_the_next_group_sees_its_room_taken() -> None:
    low = job_body("low", 4, created="2026-11-30T10:00:00Z")
    high = job_body("high", 4, created="2026-11-30T11:00:00Z")
    low_pods = [pod_body("low", i) for i in range(4)]
    high_pods = [pod_body("high", i, priority=100) for i in range(4)]
    fillers = [filler(n) for n in NODES[4:]]  # room for one gang of 4
    result = plan(
        state([(low, group_of(low), low_pods), (high, group_of(high), high_pods)], others=fillers), NOW
    )
    released = {r.pod.name.rsplit("-", 1)[0] for r in only(result.actions, ReleasePod)}
    assert released == {"high"}
    assert result.waiting_by_reason == {c.REASON_UNSCHEDULABLE: 1}


def test_a_group_that_backs_off_is_left_out_and_the_others_are_planned() -> None:
    a, b = job_body("a", 2), job_body("b", 2)
    pods_a = [pod_body("a", i) for i in range(2)]
    pods_b = [pod_body("b", i) for i in range(2)]
    result = plan(
        state([(a, group_of(a), pods_a), (b, group_of(b), pods_b)], backing_off=frozenset({job_key("a")})),
        NOW,
    )
    assert [g.key for g in result.units] == [job_key("b")]
    assert len(only(result.actions, ReleasePod)) == 2


def test_an_invalid_policy_is_announced_once_per_change() -> None:
    job = job_body(annotations={"phalanx.dev/policy": "gnag"})
    first = plan(state([(job, None, [])]), NOW)
    (event,) = only(first.actions, PostEvent)
    assert (event.type, event.reason) == ("Warning", "InvalidPolicy")
    assert "phalanx.dev/policy" in event.message
    (note,) = only(first.actions, RememberAnnounced)
    again = plan(state([(job, None, [])], announced={note.key: note.message}), NOW)
    assert again.actions == []


@pytest.mark.parametrize("gpus,expected_nodes", [(8, 4), (4, 2)])
def test_pods_pack_onto_the_fullest_nodes(gpus: int, expected_nodes: int) -> None:
    job = job_body(annotations=TOPOLOGY)
    pods = [pod_body("train", i, gpus=gpus) for i in range(4)]
    result = plan(state([(job, group_of(job), pods)]), NOW)
    assert len({r.node for r in only(result.actions, ReleasePod)}) == expected_nodes


def test_a_gang_whose_pods_carry_another_controllers_gate_waits_and_names_it() -> None:
    job = job_body()
    pods = [pod_body("train", i) for i in range(4)]
    for body in pods[2:]:
        body["spec"]["schedulingGates"].append({"name": "example.com/quota"})
    result = plan(state([(job, group_of(job), pods)]), NOW)
    assert not only(result.actions, ReleasePod)
    flag, reason, message = admitted_reason(status_of(result))
    assert (flag, reason) == ("False", c.REASON_WAITING_FOR_GATES)
    assert "example.com/quota" in message and "2 pod(s)" in message

    # Once the other gate is gone from enough pods, the gang is admitted (only pods whose last gate is ours).
    pods[2]["spec"]["schedulingGates"] = [GATE]
    pods[3]["spec"]["schedulingGates"] = [GATE]
    assert len(only(plan(state([(job, group_of(job), pods)]), NOW).actions, ReleasePod)) == 4


def test_a_basic_groups_pods_are_ungated_never_pinned() -> None:
    job = job_body(annotations={"phalanx.dev/policy": "basic"})
    pods = [pod_body("train", i) for i in range(2)]  # a template copied from a gang Job: gated
    result = plan(state([(job, group_of(job), pods)]), NOW)
    assert {u.pod.name for u in only(result.actions, UngatePod)} == {"train-0", "train-1"}
    assert not only(result.actions, ReleasePod)
    assert status_of(result).waiting == 0


def test_a_job_labelled_after_its_creation_is_never_said_to_be_admitted() -> None:
    job = job_body(labelled_late=True)
    pods = [pod_body("train", i, gated=False, node=f"n{i + 1}", phase="Running") for i in range(4)]
    result = plan(state([(job, group_of(job), pods)]), NOW)
    status = status_of(result)
    flag, reason, message = admitted_reason(status)
    assert (flag, reason) == ("False", c.REASON_NOT_GATED)
    assert "after its creation" in message
    initial = status.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
    assert initial is None
    assert not only(result.actions, ReleasePod)


def test_a_job_whose_label_was_removed_is_let_go_its_pods_ungated_and_our_objects_deleted() -> None:
    job = job_body(annotations=TOPOLOGY, managed=False)
    group = group_of(job_body(annotations=TOPOLOGY))
    result = plan(state([(job, group, GATED4)]), NOW)
    assert {u.pod.name for u in only(result.actions, UngatePod)} == {f"train-{i}" for i in range(4)}
    deleted = {(d.target.kind, d.target.name) for d in only(result.actions, DeleteObject)}
    assert deleted == {("PodGroup", group.name), ("Workload", "train-wl")}
    (event,) = only(result.actions, PostEvent)
    assert event.reason == "ReleasedFromPhalanx" and "4 ungated" in event.message
    assert not only(result.actions, ReleasePod)


def test_an_immutable_annotation_changed_around_the_webhook_is_said_once_and_not_applied() -> None:
    group = group_of(job_body(annotations=TOPOLOGY))
    job = job_body(annotations={"phalanx.dev/topology-key": "example.com/rack"})
    first = plan(state([(job, group, GATED4)]), NOW)
    warnings = [e for e in only(first.actions, PostEvent) if e.reason == "ImmutableChangeIgnored"]
    assert len(warnings) == 1 and "phalanx.dev/topology-key" in warnings[0].message
    assert only(first.actions, RecordAdmission)[0].admission.domain == "nb-a"  # still the block key
    (note,) = only(first.actions, RememberAnnounced)
    again = plan(state([(job, group, GATED4)], announced={note.key: note.message}), NOW)
    assert not [e for e in only(again.actions, PostEvent) if e.reason == "ImmutableChangeIgnored"]


def test_the_attempt_number_never_goes_back_after_a_decision_is_cleared() -> None:
    job = job_body(annotations=TOPOLOGY)
    first = plan(state([(job, group_of(job), GATED4)]), NOW)
    admitted = status_of(first)
    assert admitted.admission is not None and admitted.admission.attempt == 0
    assert admitted.admissions == 1
    suspended = plan(
        state([(job_body(annotations=TOPOLOGY, suspend=True), group_of(job, admitted), [])]), NOW
    )
    cleared = status_of(suspended)
    assert cleared.admission is None and cleared.admissions == 1
    resumed = plan(state([(job, group_of(job, cleared), GATED4)]), NOW)
    (decision,) = only(resumed.actions, RecordAdmission)
    assert decision.admission.attempt == 1


def test_a_finished_job_keeps_its_domain_and_says_how_it_ended() -> None:
    job = job_body(annotations=TOPOLOGY)
    running = status_of(plan(state([(job, group_of(job), GATED4)]), NOW))
    failed = job_body(annotations=TOPOLOGY, finished=True)
    failed["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "too many failures"}
    ]
    status = status_of(plan(state([(failed, group_of(job, running), [])]), NOW))
    assert status.phase == "Finished" and status.domain == "nb-a"
    assert admitted_reason(status)[2] == "the Job failed (BackoffLimitExceeded: too many failures)"


def test_a_requeued_job_is_resumed_once_its_pods_are_gone_and_says_why_meanwhile() -> None:
    job = job_body(annotations=TOPOLOGY, suspend=True)
    job["metadata"]["annotations"]["phalanx.dev/requeued"] = "preempted by podgroup ml/high"
    running = [pod_body("train", i, gated=False, node=f"n{i + 1}", phase="Running") for i in range(4)]
    waiting = plan(state([(job, group_of(job), running)]), NOW)
    assert not only(waiting.actions, ResumeJob)
    _, reason, message = admitted_reason(status_of(waiting))
    assert reason == c.REASON_REQUEUED and "preempted by podgroup ml/high" in message
    gone = plan(state([(job, group_of(job), [])]), NOW)
    (resume,) = only(gone.actions, ResumeJob)
    assert resume.job.name == "train"


# ---------------------------------------------------------------------- preemption
def blocks_state(
    jobs: Sequence[tuple[dict[str, Any], PodGroupRecord | None, Sequence[dict[str, Any]]]],
    unevictable: frozenset[str] = frozenset(),
) -> PlanInput:
    """The seed cluster with local blocks: lb-a1 n1-n2, lb-a2 n3-n4, lb-b1 n5-n6, lb-b2 n7-n8."""
    return dataclasses.replace(state(jobs), unevictable=unevictable)


def running_gang(name: str, first_node: int, priority: int, mode: str = "single") -> tuple[Any, Any, Any]:
    job = job_body(name, 4, annotations={"phalanx.dev/disruption-mode": mode}, created="2026-11-30T10:00:00Z")
    group = group_of(job)
    pods = [
        pod_body(
            name,
            i,
            gated=False,
            node=f"n{first_node + i}",
            phase="Running",
            priority=priority,
            group=group.name,
        )
        for i in range(4)
    ]
    return job, group, pods


def preemptor(priority: int = 1000, **annotations: str) -> tuple[Any, Any, Any]:
    job = job_body("high", 2, annotations={"phalanx.dev/topology-key": LB, **annotations})
    group = group_of(job)
    if priority:
        group = dataclasses.replace(group, spec=group.spec.model_copy(update={"priority": priority}))
    pods = [pod_body("high", i, priority=priority, group=group.name) for i in range(2)]
    return job, group, pods


def test_the_articles_preemption_requeues_one_low_gang_whole_and_reserves_its_local_block() -> None:
    low_a = running_gang("low-a", 1, priority=10)
    low_b = running_gang("low-b", 5, priority=10)
    result = plan(blocks_state([low_a, low_b, preemptor()]), NOW)
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.job.name in {"low-a", "low-b"}
    assert suspend.why.startswith("preempted by podgroup ml/")
    assert not only(result.actions, EvictPod)  # minCount 4: the whole gang goes, never 2 of 4
    high_status = next(a.status for a in only(result.actions, PatchStatus) if a.group.name.startswith("high"))
    assert admitted_reason(high_status)[1] == c.REASON_PREEMPTING
    reservation = high_status.reservation
    assert reservation is not None and len(reservation.nodes) == 2
    assert reservation.domain in {"lb-a1", "lb-a2", "lb-b1", "lb-b2"}
    assert not only(result.actions, ReleasePod)
    assert result.units[-1].preempted_pods == 4 or any(g.preempted_pods == 4 for g in result.units)


def preempted_once() -> tuple[Any, Any, Any, str, PodGroupStatus]:
    """low-a (n1-n4) and low-b (n5-n8) run at priority 10; the preemptor `high` (2 pods, one local block)
    comes at 1000 and takes one of them. Returns low-a, low-b, the preemptor, the name of the Job it
    suspended and the status it wrote (with its reservation)."""
    low_a = running_gang("low-a", 1, priority=10)
    low_b = running_gang("low-b", 5, priority=10)
    high = preemptor()
    first = plan(blocks_state([low_a, low_b, high]), NOW)
    (suspend,) = only(first.actions, SuspendJob)
    held = next(a.status for a in only(first.actions, PatchStatus) if a.group.name.startswith("high"))
    assert held.reservation is not None
    return low_a, low_b, high, suspend.job.name, held


def test_victims_made_again_under_their_names_do_not_hold_the_preemptor_back() -> None:
    """A LeaderWorkerSet group is taken back by deleting its pods, and its StatefulSets make them again at
    once under the same names, born gated. The reservation names its victims by namespace/name: such a pod
    is not the victim. Here the room freed went meanwhile to a gang of the preemptor's priority planned
    before it (older; not ready when the preemption was decided), so the preemptor no longer fits there: it
    preempts again at once — before, it waited "for 4 preempted pod(s) to terminate" (the new pods of the
    same names) until the reservation expired, 120 s (found by the preemption crash soak,
    tests/integration/soak_preempt.py)."""
    low_a, low_b, (high_job, _, high_pods), suspended, held = preempted_once()
    assert held.reservation is not None and len(held.reservation.victims) == 4
    victim, other = (low_a, low_b) if suspended == "low-a" else (low_b, low_a)
    job, group, pods = victim
    again = []
    for pod in pods:  # the same names, new pods: gated, on no node, made after the reservation
        fresh = pod_body(job["metadata"]["name"], int(pod["metadata"]["name"].rsplit("-", 1)[1]), priority=10)
        fresh["metadata"].update(
            uid=f"new-{pod['metadata']['uid']}", creationTimestamp="2026-11-30T12:00:01Z"
        )
        again.append(fresh)
    assert {f"ml/{p['metadata']['name']}" for p in again} == set(held.reservation.victims)
    # The older gang of equal priority took a node of each local block of the victim's network block.
    first_node = int(pods[0]["spec"]["nodeName"][1:])
    taken = [held.reservation.nodes[0], *(f"n{first_node + i}" for i in range(4))]
    nodes = [taken[0], next(n for n in taken[1:] if n not in held.reservation.nodes)]
    rival = job_body("rival", 2, created="2026-11-30T09:00:00Z")
    rival_group = group_of(rival)
    rival_pods = [
        pod_body("rival", i, gated=False, node=n, phase="Running", priority=1000, group=rival_group.name)
        for i, n in enumerate(nodes)
    ]
    high = (high_job, group_of(high_job, held), high_pods)
    later = NOW + dt.timedelta(seconds=2)
    result = plan(blocks_state([(job, group, again), other, (rival, rival_group, rival_pods), high]), later)
    (again_suspend,) = only(result.actions, SuspendJob)
    assert again_suspend.job.name == other[0]["metadata"]["name"]  # preempted again, in the other block
    status = next(a.status for a in only(result.actions, PatchStatus) if a.group.name.startswith("high"))
    assert "waiting for" not in admitted_reason(status)[2]
    assert status.reservation is not None and status.reservation.victims != held.reservation.victims

    # A victim still terminating is waited for as before.
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:01Z"
    state = blocks_state([(job, group, pods), other, (rival, rival_group, rival_pods), high])
    waiting = plan(state, later)
    assert not only(waiting.actions, SuspendJob) and not only(waiting.actions, ReleasePod)
    status = next(a.status for a in only(waiting.actions, PatchStatus) if a.group.name.startswith("high"))
    assert "waiting for 4 preempted pod(s) to terminate" in admitted_reason(status)[2]


def test_a_reservation_whose_node_went_away_waits_for_its_victims_and_takes_no_second_gang() -> None:
    """The preemptor reserved n1 and n2 (lb-a1) and low-a, on n1-n4, is terminating; then n1 is deleted.
    Its reservation cannot be met, but its victims still terminate: no new victim meanwhile (upstream's
    rule too) — before, every pass failed on the reserved room of a node the snapshot lacks (KeyError), and
    dropping the reservation would have taken low-b as well, for the room low-a is about to free. Once
    low-a's pods are gone, the preemptor is placed in lb-a2, which they freed."""
    low_a, low_b, (high_job, _, high_pods), suspended, held = preempted_once()
    assert held.reservation is not None and suspended == "low-a"
    assert held.reservation.nodes == ["n1", "n2"]
    job, group, pods = low_a
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:01Z"
    nodes = [node_body(n) for n in NODES if n != "n1"]
    high = (high_job, group_of(high_job, held), high_pods)
    later = NOW + dt.timedelta(seconds=2)
    waiting = plan(cluster([(job, group, pods), low_b, high], nodes=nodes), later)
    assert not only(waiting.actions, SuspendJob) and not only(waiting.actions, ReleasePod)
    status = next(a.status for a in only(waiting.actions, PatchStatus) if a.group.name.startswith("high"))
    assert "waiting for 4 preempted pod(s) to terminate" in admitted_reason(status)[2]
    assert "n1 went away" in admitted_reason(status)[2]
    assert status.reservation == held.reservation
    done = plan(cluster([(job, group, []), low_b, high], nodes=nodes), later)
    assert not only(done.actions, SuspendJob)
    assert sorted(a.node for a in only(done.actions, ReleasePod)) == ["n3", "n4"]


def test_no_preemption_for_an_equal_priority_or_a_never_group() -> None:
    low_a = running_gang("low-a", 1, priority=1000)
    low_b = running_gang("low-b", 5, priority=1000)
    equal = plan(blocks_state([low_a, low_b, preemptor()]), NOW)
    assert not only(equal.actions, SuspendJob) and not only(equal.actions, EvictPod)

    low_a = running_gang("low-a", 1, priority=10)
    low_b = running_gang("low-b", 5, priority=10)
    never = plan(blocks_state([low_a, low_b, preemptor(**{"phalanx.dev/preemption-policy": "Never"})]), NOW)
    assert not only(never.actions, SuspendJob) and not only(never.actions, EvictPod)
    patches = only(never.actions, PatchStatus)
    high_status = next(a.status for a in patches if a.group.name.startswith("high"))
    assert "preemptionPolicy Never" in admitted_reason(high_status)[2]


def test_a_gang_backing_off_is_still_a_victim_only_whole() -> None:
    """A unit whose last write failed is not planned until its backoff ends, but its running pods are still
    its gang's: a preemptor takes the gang whole, never single pods of it (which would leave it short)."""
    gangs = [running_gang("low-a", 1, priority=10), running_gang("low-b", 5, priority=10)]
    both = frozenset({job_key("low-a"), job_key("low-b")})
    for backing_off in (frozenset(), both):
        result = plan(dataclasses.replace(blocks_state([*gangs, preemptor()]), backing_off=backing_off), NOW)
        assert not only(result.actions, EvictPod), backing_off
        (suspend,) = only(result.actions, SuspendJob)
        assert suspend.job.name in {"low-a", "low-b"}


def test_pods_of_a_gang_whose_unit_is_unknown_are_never_victims() -> None:
    """The low gangs' units could not be made this pass (kinds/common.owner_units_of): their running pods,
    placed into their PodGroups, are not taken one by one by a one-pod Job of higher priority."""
    high = job_body("high", 1, created="2026-11-30T11:30:00Z")
    gangs = [running_gang("low-a", 1, priority=10), running_gang("low-b", 5, priority=10)]
    state = blocks_state([*gangs, (high, group_of(high), [pod_body("high", 0, priority=1000)])])
    known = dataclasses.replace(state, units=tuple(u for u in state.units if u.key == job_key("high")))
    assert only(plan(state, NOW).actions, SuspendJob)  # with their units, one gang is taken whole
    result = plan(known, NOW)
    assert not only(result.actions, EvictPod) and not only(result.actions, SuspendJob)


# ---------------------------------------------------------------------- node failure
def test_a_running_gang_below_min_count_with_no_room_left_is_requeued_after_the_grace_period() -> None:
    """train-3 ran in nb-a on n1-n3; n3 failed (its pod is gone, the replacement waits) and nb-a has no
    free node: after the grace period the Job is requeued whole; before it, it waits."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    base = group_of(job)
    pods = [
        pod_body("train", 0, gated=False, node="n1", phase="Running", group=base.name),
        pod_body("train", 1, gated=False, node="n2", phase="Running", group=base.name),
        pod_body("train", 3, group=base.name),  # the replacement, gated
    ]
    fillers = [filler("n4")]  # nb-a's last free node is taken (n3 is the failed one, tainted away)
    tainted = node_body("n3")
    tainted["spec"]["taints"] = [{"key": "example.com/failed", "value": "true", "effect": "NoExecute"}]

    def at(now: dt.datetime, group: PodGroupRecord) -> Plan:
        nodes = [tainted if n == "n3" else node_body(n) for n in NODES]
        return plan(cluster([(job, group, pods)], others=fillers, nodes=nodes), now)

    first = at(NOW, base)
    assert not only(first.actions, SuspendJob)
    waiting = status_of(first)
    assert admitted_reason(waiting)[1] == c.REASON_UNSCHEDULABLE
    later = at(NOW + dt.timedelta(seconds=31), group_of(job, waiting))
    (suspend,) = only(later.actions, SuspendJob)
    assert "2 of its 3 pods were left in nb-a" in suspend.why
    assert admitted_reason(status_of(later))[1] == c.REASON_REQUEUED


def test_released_pods_the_scheduler_cannot_bind_are_rolled_back_through_a_requeue() -> None:
    job = job_body("train", 2, annotations=TOPOLOGY)
    group = group_of(job)
    pods = [pod_body("train", i, gated=False, released_to=f"n{i + 1}", group=group.name) for i in range(2)]
    fine = plan(state([(job, group, pods)]), NOW)
    assert not only(fine.actions, SuspendJob)  # released and not bound yet: normal, for a moment
    pods[1]["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/8 nodes are available",
        }
    ]
    stuck = plan(state([(job, group, pods)]), NOW)
    (suspend,) = only(stuck.actions, SuspendJob)
    assert suspend.why.startswith("released but not bound") and "train-1 on n2" in suspend.why
    assert admitted_reason(status_of(stuck))[1] == c.REASON_REQUEUED
