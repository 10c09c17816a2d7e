"""Trees in the state machine (issue 18): sliced Jobs and hand-made trees preempt like gangs (the reservation
on the root CompositePodGroup), hand-made trees are requeued whole by deleting their pods, preferred leaves
inside a tree are passed through, and members that completed count toward their slice.

The seed cluster: nb-a = n1-n4 (lb-a1: n1 n2, lb-a2: n3 n4), nb-b = n5-n8 (lb-b1: n5 n6, lb-b2: n7 n8)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from testkit import (
    LB,
    NB,
    NOW,
    cluster,
    group_of,
    job_body,
    member,
    only,
    pod_body,
    running,
    waiting_status,
)

from phalanx.api import conditions as c
from phalanx.api.builders import build_sliced_objects
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import parse_job_policy
from phalanx.api.status import Admission, Assignment, GroupStatus, PodGroupStatus
from phalanx.controller.model.actions import (
    DeletePod,
    EvictPod,
    PatchStatus,
    RecordAdmission,
    ReleasePod,
    SuspendJob,
    status_write,
)
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan import Plan, plan

SLICED = {"phalanx.dev/topology-key": NB, "phalanx.dev/slice-size": "2", "phalanx.dev/slice-topology-key": LB}
BLOCK = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}
LOCAL = {1: "lb-a1", 2: "lb-a1", 3: "lb-a2", 4: "lb-a2", 5: "lb-b1", 6: "lb-b1", 7: "lb-b2", 8: "lb-b2"}


def _low(name: str, first: int, priority: int = 10) -> tuple[dict[str, Any], PodGroupRecord, list[Any]]:
    """A plain gang of 4 running on n<first>..n<first+3> (one network block)."""
    job = job_body(name, 4, created="2026-11-30T10:00:00Z")
    group = group_of(job)
    return job, group, [running(name, i, f"n{first + i}", group.name, priority=priority) for i in range(4)]


def _sliced(
    name: str = "sliced",
    *,
    priority: int = 1000,
    annotations: dict[str, str] | None = None,
    pods: list[dict[str, Any]] | None = None,
    root_status: GroupStatus | None = None,
) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
    """A sliced Job of 4 pods in 2 slices of 2 (one local block each, in one network block), made already."""
    job = job_body(name, 4, annotations={**SLICED, **(annotations or {})}, indexed=True)
    policy = parse_job_policy(job)
    _, root, groups = build_sliced_objects(job, policy, parse_job_layout(job, policy), priority)
    root_body = root.to_api()
    root_body["metadata"].update(uid="uid-root", resourceVersion="5")
    if root_status is not None:
        root_body["status"] = root_status.to_api()
    made: list[Any] = [CompositePodGroupRecord.from_body(root_body)]
    made += [
        PodGroupRecord.from_body({**g.to_api(), "metadata": {**g.to_api()["metadata"], "uid": f"u{i}"}})
        for i, g in enumerate(groups)
    ]
    if pods is None:
        pods = [pod_body(name, i, priority=priority, completion_index=i) for i in range(4)]
    return job, made, pods


def _status(result: Plan, kind: str) -> GroupStatus:
    writes = (status_write(a) for a in result.actions)
    (status,) = [s for ref, s in (w for w in writes if w is not None) if ref.kind == kind]
    return status


def _reason(status: GroupStatus) -> str:
    cond = status.condition(c.ADMITTED)
    assert cond is not None
    return cond.reason


# ---------------------------------------------------------------------- a sliced Job preempts
def test_a_high_priority_sliced_job_preempts_one_low_gang_whole_and_reserves_the_room_on_its_root() -> None:
    result = plan(cluster([_low("low-a", 1), _low("low-b", 5), _sliced()]), NOW)
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.job.name in {"low-a", "low-b"}
    assert suspend.why.startswith("preempted by compositepodgroup ml/")
    assert not only(result.actions, EvictPod) and not only(result.actions, ReleasePod)
    root = _status(result, "CompositePodGroup")
    assert _reason(root) == c.REASON_PREEMPTING
    held = root.reservation
    assert held is not None and len(held.nodes) == 4 and held.domain in {"nb-a", "nb-b"}
    victim_block = "nb-a" if suspend.job.name == "low-a" else "nb-b"
    assert {BLOCK[n] for n in held.nodes} == {victim_block}
    slices = [a.status for a in only(result.actions, PatchStatus) if a.group.kind == "PodGroup"]
    assert {_reason(s) for s in slices if s.condition(c.ADMITTED)} >= {c.REASON_PREEMPTING}
    assert any(u.preempted_pods == 4 for u in result.units)


def test_while_its_victims_terminate_the_reserved_room_stays_the_trees() -> None:
    first = plan(cluster([_low("low-a", 1), _low("low-b", 5), _sliced()]), NOW)
    held = _status(first, "CompositePodGroup")
    (suspend,) = only(first.actions, SuspendJob)
    victim, other = ("low-a", 5) if suspend.job.name == "low-a" else ("low-b", 1)
    # Three of the victim's pods are gone, one still terminates: the tree keeps waiting, nothing new is
    # preempted, and a gang planned after it cannot take the room being freed.
    job, group, pods = _low(victim, 1 if victim == "low-a" else 5)
    pods = pods[3:]
    pods[0]["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:01Z"
    rival = job_body("rival", 2, annotations={"phalanx.dev/topology-key": LB}, created="2026-11-30T09:00:00Z")
    rival_group = group_of(rival)
    rival_pods = [pod_body("rival", i, priority=10, group=rival_group.name) for i in range(2)]
    tree = _sliced(root_status=held)
    state = cluster([(job, group, pods), _low("other", other), tree, (rival, rival_group, rival_pods)])
    result = plan(state, NOW + dt.timedelta(seconds=1))
    assert not only(result.actions, SuspendJob) and not only(result.actions, ReleasePod)
    assert _reason(_status(result, "CompositePodGroup")) == c.REASON_PREEMPTING


def test_a_sliced_job_that_never_preempts_waits() -> None:
    never = {"phalanx.dev/preemption-policy": "Never"}
    result = plan(cluster([_low("low-a", 1), _low("low-b", 5), _sliced(annotations=never)]), NOW)
    assert not only(result.actions, SuspendJob)
    assert _reason(_status(result, "CompositePodGroup")) == c.REASON_UNSCHEDULABLE


def test_a_sliced_job_of_equal_priority_does_not_preempt() -> None:
    result = plan(cluster([_low("low-a", 1, 1000), _low("low-b", 5, 1000), _sliced()]), NOW)
    assert not only(result.actions, SuspendJob)


# ---------------------------------------------------------------------- hand-made trees
def _composite(
    name: str = "slices", status: GroupStatus | None = None, key: str | None = NB, min_groups: int = 2
) -> CompositePodGroupRecord:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "workloadRef": {"workloadName": "slices", "templateName": "job"},
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        },
    }
    if key:
        body["spec"]["schedulingConstraints"] = {"topology": [{"key": key}]}
    if status is not None:
        body["status"] = status.to_api()
    return CompositePodGroupRecord.from_body(body)


def _leaf(
    name: str, *, mode: str = "", status: GroupStatus | None = None, min_count: int = 2
) -> PodGroupRecord:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "3"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "parentCompositePodGroupName": "slices",
            "workloadRef": {"workloadName": "slices", "templateName": "slice"},
            "schedulingConstraints": {"topology": [{"key": LB}]},
        },
    }
    if mode:
        body["metadata"]["annotations"] = {"phalanx.dev/topology-mode": mode}
    if status is not None:
        body["status"] = status.to_api()
    return PodGroupRecord.from_body(body)


def _member(name: str, group: str, *, priority: int = 0, **kw: Any) -> dict[str, Any]:
    body = member(name, group, **kw)
    body["spec"]["priority"] = priority
    return body


def test_a_hand_made_tree_of_high_priority_preempts_a_low_gang() -> None:
    pods = [_member(f"{g}-{i}", g, priority=1000) for g in ("slices-0", "slices-1") for i in (0, 1)]
    groups = [_composite(), _leaf("slices-0"), _leaf("slices-1")]
    result = plan(cluster([_low("low-a", 1), _low("low-b", 5)], groups=groups, pods=pods), NOW)
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.why.startswith("preempted by compositepodgroup ml/slices")
    root = _status(result, "CompositePodGroup")
    assert _reason(root) == c.REASON_PREEMPTING and root.reservation is not None


def _recorded_tree(nodes: dict[str, str]) -> Admission:
    return Admission(
        domain="nb-a",
        assignments=[Assignment(pod=p, node=n) for p, n in nodes.items()],
        admitted_at=NOW - dt.timedelta(minutes=5),
        attempt=0,
    )


def _broken_tree(waited: float) -> tuple[list[Any], list[dict[str, Any]]]:
    """slices-1 lost the pod on n4 (a replacement made by its controller waits, gated); lb-a2 has no room."""
    record = _recorded_tree({"slices-0-0": "n1", "slices-0-1": "n2", "slices-1-0": "n3", "slices-1-1": "n4"})
    root_status = waiting_status(NOW - dt.timedelta(seconds=waited)).model_copy(
        update={"admission": record, "last_domain": "nb-a"}
    )
    groups = [_composite(status=root_status), _leaf("slices-0"), _leaf("slices-1")]
    pods = [
        _member("slices-0-0", "slices-0", node="n1"),
        _member("slices-0-1", "slices-0", node="n2"),
        _member("slices-1-0", "slices-1", node="n3"),
        _member("slices-1-1", "slices-1"),  # the replacement
    ]
    return groups, pods


def test_a_broken_hand_made_tree_is_requeued_whole_by_deleting_its_pods_after_the_grace() -> None:
    groups, pods = _broken_tree(5)
    within = plan(cluster(groups=groups, pods=pods, busy=(4,)), NOW)
    assert not only(within.actions, DeletePod)
    groups, pods = _broken_tree(31)
    after = plan(cluster(groups=groups, pods=pods, busy=(4,)), NOW)
    deleted = sorted(a.pod.name for a in only(after.actions, DeletePod))
    # The pods that hold nodes; the gated replacement holds nothing and is placed afresh with the rest.
    assert deleted == ["slices-0-0", "slices-0-1", "slices-1-0"]
    assert {a.cause for a in only(after.actions, DeletePod)} == {"below-min-count"}
    root = _status(after, "CompositePodGroup")
    assert _reason(root) == c.REASON_REQUEUED
    assert root.admission is None  # pods made again under the same names are decided afresh
    assert root.last_domain is None  # and not sent back to the domain they were requeued from
    assert not only(after.actions, ReleasePod)


def test_a_hand_made_groups_released_pod_that_cannot_bind_requeues_it_at_once() -> None:
    group = PodGroupRecord.from_body(
        {
            "metadata": {"name": "solo", "namespace": "ml", "uid": "uid-solo"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    stuck = _member("solo-1", "solo", released_to="n2")
    stuck["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes fit"}
    ]
    pods = [_member("solo-0", "solo", node="n1"), stuck]
    result = plan(cluster(groups=[group], pods=pods), NOW)
    assert sorted(a.pod.name for a in only(result.actions, DeletePod)) == ["solo-0", "solo-1"]
    assert {a.cause for a in only(result.actions, DeletePod)} == {"unbindable"}


def test_preferred_and_auto_leaves_inside_a_hand_made_tree_are_passed_to_the_engine() -> None:
    # One node of each local block busy: no local block holds a slice of 2, a network block does.
    pods = [_member(f"slices-0-{i}", "slices-0") for i in (0, 1)]
    root = _composite(min_groups=1)
    required = plan(cluster(groups=[root, _leaf("slices-0")], pods=pods, busy=(1, 3, 5, 7)), NOW)
    assert not only(required.actions, ReleasePod)
    preferred = plan(
        cluster(groups=[root, _leaf("slices-0", mode="preferred")], pods=pods, busy=(1, 3, 5, 7)), NOW
    )
    assert sorted(a.node for a in only(preferred.actions, ReleasePod)) == ["n2", "n4"]
    (record,) = [a for a in only(preferred.actions, RecordAdmission) if a.group.kind == "PodGroup"]
    assert record.admission.level == ""  # its parent's whole domain (nb-a)
    # An auto slice of 3 can never fit a 2-node local block: it is required in its parent's network block.
    three = [_member(f"slices-0-{i}", "slices-0") for i in range(3)]
    auto = plan(cluster(groups=[root, _leaf("slices-0", mode="auto", min_count=3)], pods=three), NOW)
    nodes = sorted(a.node for a in only(auto.actions, ReleasePod))
    assert len(nodes) == 3 and len({BLOCK[n] for n in nodes}) == 1, nodes
    (record,) = [a for a in only(auto.actions, RecordAdmission) if a.group.kind == "PodGroup"]
    assert record.admission.mode_note is not None
    assert record.admission.mode_note.startswith(f"auto: 3 pods can never fit one domain of {LB}")
    leaf = _status(auto, "PodGroup")
    cond = leaf.condition(c.ADMITTED)
    assert cond is not None and record.admission.mode_note in cond.message


# ---------------------------------------------------------------------- members that completed
def test_a_slice_whose_member_succeeded_places_the_replacement_of_the_other_in_the_jobs_block() -> None:
    # Index 0 succeeded, index 1 failed and its replacement waits; slice 1 (indexes 2, 3) runs in lb-a2.
    succeeded = pod_body("sliced", 0, gated=False, node="n1", phase="Succeeded", completion_index=0)
    pods = [
        succeeded,
        pod_body("sliced", 1, completion_index=1),
        running("sliced", 2, "n3", completion_index=2),
        running("sliced", 3, "n4", completion_index=3),
    ]
    result = plan(cluster([_sliced(priority=0, pods=pods)]), NOW)
    (release,) = only(result.actions, ReleasePod)
    assert release.pod.name == "sliced-1" and BLOCK[release.node] == "nb-a"
    assert _reason(_status(result, "CompositePodGroup")) == c.REASON_ADMITTED
    assert not only(result.actions, SuspendJob)


def test_the_waiting_since_is_when_the_group_stopped_being_admitted() -> None:
    from phalanx.controller.plan.starvation import waiting_since

    since = NOW - dt.timedelta(seconds=42)
    assert waiting_since(waiting_status(since)) == since
    assert waiting_since(PodGroupStatus()) is None


@pytest.mark.parametrize(("waited", "requeued"), [(5, False), (31, True)])
def test_a_hand_made_tree_that_lost_a_member_for_good_is_requeued_after_the_grace(
    waited: float, requeued: bool
) -> None:
    """As above, but the member made by hand is gone with its node and nothing makes it again (no pod
    waits): after the grace the tree is requeued whole instead of holding its nodes short for ever."""
    groups, pods = _broken_tree(waited)
    result = plan(cluster(groups=groups, pods=pods[:3], busy=(4,)), NOW)
    deleted = sorted(a.pod.name for a in only(result.actions, DeletePod))
    assert deleted == (["slices-0-0", "slices-0-1", "slices-1-0"] if requeued else [])
    if requeued:
        assert (
            "nothing makes its lost pods again" in _status(result, "CompositePodGroup").conditions[-1].message
        )
