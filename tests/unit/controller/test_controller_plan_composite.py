"""`plan()` for hand-made trees (CompositePodGroup + PodGroups + labelled pods) and standalone PodGroups.

The article's Slices section on its seed topology: 8 nodes of 8 GPUs, n1-n4 in nb-a (lb-a1: n1 n2,
lb-a2: n3 n4), n5-n8 in nb-b (lb-b1: n5 n6, lb-b2: n7 n8).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
import testkit
from testkit import GATE, LB, LOCAL, NB, NOW, RACK, node_body
from testkit import filler as _filler
from testkit import member as pod

from phalanx.api import conditions as c
from phalanx.api.status import Admission, Assignment, CompositePodGroupStatus, GroupStatus, PodGroupStatus
from phalanx.controller.kinds.handmade import MAX_GROUPS
from phalanx.controller.model.actions import Action, PatchStatus, PostEvent, RecordAdmission, ReleasePod
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan import Plan, PlanInput, plan

JobSpec = tuple[dict[str, Any], Any, list[dict[str, Any]]]
LEVELS = {NB: (NB, LB), LB: (NB, LB)}


def filler(i: int) -> dict[str, Any]:
    return _filler(f"n{i}")


CREATED = {"creationTimestamp": "2026-11-30T11:00:00Z"}  # an hour before NOW: groups in the cache have one


def composite(
    name: str = "slices", *, min_groups: int = 2, key: str | None = NB, status: GroupStatus | None = None
) -> CompositePodGroupRecord:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "slices", "templateName": "job"},
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
    }
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            **CREATED,
        },
        "spec": spec,
    }
    if status is not None:
        body["status"] = status.to_api()
    return CompositePodGroupRecord.from_body(body)


def pod_group(
    name: str,
    *,
    parent: str | None = "slices",
    min_count: int = 2,
    key: str | None = LB,
    status: GroupStatus | None = None,
) -> PodGroupRecord:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
        spec["workloadRef"] = {"workloadName": "slices", "templateName": "slice"}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            **CREATED,
        },
        "spec": spec,
    }
    if status is not None:
        body["status"] = status.to_api()
    return PodGroupRecord.from_body(body)


def article_pods(*, gpus: int = 8) -> list[dict[str, Any]]:
    return [pod(f"{g}-{i}", g, gpus=gpus) for g in ("slices-0", "slices-1") for i in (0, 1)]


def cluster(
    composites: Sequence[CompositePodGroupRecord],
    groups: Sequence[PodGroupRecord],
    pods: Sequence[dict[str, Any]],
    *,
    busy: Sequence[int] = (),
    levels: dict[str, tuple[str, ...]] | None = None,
    nodes: Sequence[dict[str, Any]] | None = None,
    jobs: Sequence[JobSpec] = (),
    others: Sequence[dict[str, Any]] = (),
    node_failure_grace: float = 30.0,
) -> PlanInput:
    """Hand-made groups and the pods that join them (and any Jobs), on the seed cluster."""
    return testkit.cluster(
        jobs,
        groups=[*composites, *groups],
        pods=pods,
        others=others,
        busy=busy,
        levels=levels,
        nodes=nodes,
        node_failure_grace=node_failure_grace,
    )


def kinds(actions: Sequence[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def only(actions: Sequence[Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def status_on(result: Plan, name: str) -> GroupStatus:
    status: GroupStatus = testkit.written_statuses(result)[name]
    return status


def admitted(status: GroupStatus) -> tuple[str, str, str]:
    cond = status.condition(c.ADMITTED)
    assert cond is not None
    return cond.status, cond.reason, cond.message


TREE = (composite(), pod_group("slices-0"), pod_group("slices-1"))


def blocks(result: Plan) -> dict[str, str]:
    return {r.pod.name: LOCAL[int(r.node[1:])] for r in only(result.actions, ReleasePod)}


# ---------------------------------------------------------------------- the cases
def test_empty_cluster_records_the_tree_on_the_root_then_each_group_then_releases_slice_by_slice() -> None:
    root, s0, s1 = TREE
    result = plan(cluster([root], [s0, s1], article_pods()), NOW)
    names = kinds(result.actions)
    records = only(result.actions, RecordAdmission)
    # One atomic write of the whole tree on the root, with the version it was planned on, first.
    assert [r.group.kind for r in records] == ["CompositePodGroup", "PodGroup", "PodGroup"]
    assert records[0].resource_version == "7"
    assert len(records[0].admission.assignments) == 4
    assert max(i for i, n in enumerate(names) if n == "RecordAdmission") < names.index("ReleasePod")
    where = blocks(result)
    assert where["slices-0-0"] == where["slices-0-1"] and where["slices-1-0"] == where["slices-1-1"]
    assert where["slices-0-0"] != where["slices-1-0"]
    assert {b[:4] for b in where.values()} == {"lb-a"}  # both slices in one network block (nb-a)
    assert records[0].admission.domain == "nb-a"
    assert result.units[0].admitted_pods == 4
    root_status = status_on(result, "slices")
    assert admitted(root_status) == ("True", c.REASON_ADMITTED, "2 child group(s) admitted in nb-a")
    initial = root_status.condition(c.COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED)
    assert initial is not None and initial.status == "True"
    assert root_status.admission == records[0].admission
    leaf = status_on(result, "slices-0")
    assert admitted(leaf)[:2] == ("True", c.REASON_ADMITTED)
    assert leaf.domain == where["slices-0-0"]
    assert {(e.involved.kind, e.reason) for e in only(result.actions, PostEvent)} == {
        ("CompositePodGroup", "Admitted"),
        ("PodGroup", "Admitted"),
    }


def test_one_busy_node_in_three_local_blocks_the_whole_job_waits_with_the_reason_on_every_group() -> None:
    root, s0, s1 = TREE
    result = plan(cluster([root], [s0, s1], article_pods(), busy=(1, 3, 5)), NOW)
    assert not only(result.actions, ReleasePod)
    assert not only(result.actions, RecordAdmission)
    flag, reason, message = admitted(status_on(result, "slices"))
    assert (flag, reason) == ("False", c.REASON_UNSCHEDULABLE)
    assert message.startswith(
        f"composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NB}"
    )
    assert "slices-1: lb-b1: 1 of 2 pods fit" in message
    upstream = status_on(result, "slices").condition(c.COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED)
    assert upstream is not None and upstream.status == "False"
    assert upstream.message == message.split("; ")[0]
    for name in ("slices-0", "slices-1"):
        status = status_on(result, name)
        flag, reason, message = admitted(status)
        assert (flag, reason) == ("False", c.REASON_UNSCHEDULABLE)
        assert message.startswith(
            "pod group is unschedulable: CompositePodGroup slices cannot be placed whole"
        )
        initial = status.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
        assert initial is not None and initial.status == "False" and message.startswith(initial.message)
    assert "fits in lb-b2, waits for the rest of the tree" in admitted(status_on(result, "slices-0"))[2]
    warnings = [
        (e.involved.kind, e.involved.name) for e in only(result.actions, PostEvent) if e.type == "Warning"
    ]
    assert sorted(warnings) == [
        ("CompositePodGroup", "slices"),
        ("PodGroup", "slices-0"),
        ("PodGroup", "slices-1"),
    ]
    assert result.waiting_by_reason == {c.REASON_UNSCHEDULABLE: 2}


def _written(result: Plan, records: dict[str, Any]) -> dict[str, Any]:
    """The records after the plan's status patches (what the next pass sees)."""
    out = dict(records)
    for name, status in testkit.written_statuses(result).items():
        out[name] = dataclasses.replace(out[name], status=status)
    return out


def test_a_second_pass_with_nothing_new_writes_nothing_and_announces_nothing() -> None:
    root, s0, s1 = TREE
    first = plan(cluster([root], [s0, s1], article_pods(), busy=(1, 3, 5)), NOW)
    seen = _written(first, {"slices": root, "slices-0": s0, "slices-1": s1})
    again = plan(
        cluster([seen["slices"]], [seen["slices-0"], seen["slices-1"]], article_pods(), busy=(1, 3, 5)),
        NOW + dt.timedelta(seconds=5),
    )
    assert again.actions == []


def test_a_slice_short_of_pods_holds_the_whole_tree_and_says_which() -> None:
    root, s0, s1 = TREE
    pods = article_pods()[:3]  # slices-1 has one pod of two
    result = plan(cluster([root], [s0, s1], pods), NOW)
    assert not only(result.actions, ReleasePod)
    flag, reason, message = admitted(status_on(result, "slices"))
    assert (flag, reason) == ("False", c.REASON_WAITING_FOR_PODS)
    assert "slices-1" in message
    assert admitted(status_on(result, "slices-1"))[1] == c.REASON_WAITING_FOR_PODS


def _recorded(nodes: dict[str, str], domain: str = "nb-b") -> Admission:
    """A recorded decision: the root's in nb-b, a slice's in its local block."""
    return Admission(
        domain=domain,
        assignments=[Assignment(pod=p, node=n) for p, n in nodes.items()],
        admitted_at=NOW - dt.timedelta(seconds=30),
        attempt=0,
    )


DECIDED = {"slices-0-0": "n5", "slices-0-1": "n6", "slices-1-0": "n7", "slices-1-1": "n8"}


def test_a_restart_after_a_partial_release_finishes_the_recorded_tree_without_deciding_again() -> None:
    # The root's record was written, slices-0 was recorded and released, then the operator died.
    root = composite(status=CompositePodGroupStatus(admission=_recorded(DECIDED)))
    s0 = pod_group(
        "slices-0",
        status=PodGroupStatus(admission=_recorded({k: DECIDED[k] for k in list(DECIDED)[:2]}, "lb-b1")),
    )
    s1 = pod_group("slices-1")
    pods = [
        pod("slices-0-0", "slices-0", released_to="n5"),
        pod("slices-0-1", "slices-0", released_to="n6"),
        pod("slices-1-0", "slices-1"),
        pod("slices-1-1", "slices-1"),
    ]
    result = plan(cluster([root], [s0, s1], pods), NOW)
    releases = {r.pod.name: r.node for r in only(result.actions, ReleasePod)}
    assert releases == {"slices-1-0": "n7", "slices-1-1": "n8"}  # where the record says, not decided anew
    (record,) = only(result.actions, RecordAdmission)
    assert record.group.name == "slices-1"  # the PodGroup's own record, missing, written first
    assert record.admission.domain == "lb-b2"  # its own domain, of its key (not the root's nb-b)
    assert kinds(result.actions).index("RecordAdmission") < kinds(result.actions).index("ReleasePod")
    # Then slices-1-1's release failed, and the process restarted again: the record is finished, not made
    # again (its domain is checked against the node's label of slices-1's key).
    s1 = dataclasses.replace(s1, status=PodGroupStatus(admission=record.admission))
    pods[2] = pod("slices-1-0", "slices-1", released_to="n7")
    again = plan(cluster([root], [s0, s1], pods), NOW)
    assert {r.pod.name: r.node for r in only(again.actions, ReleasePod)} == {"slices-1-1": "n8"}
    assert not only(again.actions, RecordAdmission)


def test_a_recorded_tree_is_not_finished_on_a_node_relabelled_into_another_domain_since() -> None:
    """The restart above, but n8 was relabelled into nb-a meanwhile (a topology label corrected): releasing
    slices-1 where the record says would split the tree across network blocks. It is decided again
    instead — here nb-b has no other local block with two free nodes, so it waits, nothing released."""
    root = composite(status=CompositePodGroupStatus(admission=_recorded(DECIDED)))
    s0 = pod_group(
        "slices-0",
        status=PodGroupStatus(admission=_recorded({k: DECIDED[k] for k in list(DECIDED)[:2]}, "lb-b1")),
    )
    pods = [
        pod("slices-0-0", "slices-0", released_to="n5"),
        pod("slices-0-1", "slices-0", released_to="n6"),
        pod("slices-1-0", "slices-1"),
        pod("slices-1-1", "slices-1"),
    ]
    nodes = [testkit.node_body(n) for n in testkit.NODES]
    nodes[7]["metadata"]["labels"][NB] = "nb-a"
    result = plan(cluster([root], [s0, pod_group("slices-1")], pods, nodes=nodes), NOW)
    assert not only(result.actions, ReleasePod), "released across two network blocks"
    assert admitted(status_on(result, "slices"))[1] == c.REASON_UNSCHEDULABLE


def test_a_recorded_tree_is_not_finished_while_a_leaf_of_it_would_stay_short() -> None:
    """slices-0 was released in part (slices-0-0 on n5), then its gated pod was replaced under another name
    and its recorded node taken: releasing slices-1 by the record would leave slices-0 at 1 of 2."""
    root = composite(status=CompositePodGroupStatus(admission=_recorded(DECIDED)))
    s0 = pod_group(
        "slices-0",
        status=PodGroupStatus(admission=_recorded({"slices-0-0": "n5", "slices-0-1": "n6"}, "lb-b1")),
    )
    s1 = pod_group("slices-1")
    rest = [pod("slices-1-0", "slices-1"), pod("slices-1-1", "slices-1")]
    for second, finished in (("slices-0-1", True), ("slices-0-2", False)):
        pods = [pod("slices-0-0", "slices-0", released_to="n5"), pod(second, "slices-0"), *rest]
        result = plan(cluster([root], [s0, s1], pods, busy=() if finished else (6,)), NOW)
        released = {r.pod.name: r.node for r in only(result.actions, ReleasePod)}
        if finished:
            assert released == {"slices-0-1": "n6", "slices-1-0": "n7", "slices-1-1": "n8"}
        else:
            assert released == {}, "slices-1 went while slices-0 stays short"


def test_a_recorded_tree_that_no_longer_fits_is_decided_afresh_keeping_the_released_pods() -> None:
    root = composite(status=CompositePodGroupStatus(admission=_recorded(DECIDED)))
    s0 = pod_group("slices-0")
    s1 = pod_group("slices-1")
    pods = [
        pod("slices-0-0", "slices-0", released_to="n5"),
        pod("slices-0-1", "slices-0", released_to="n6"),
        pod("slices-1-0", "slices-1"),
        pod("slices-1-1", "slices-1"),
    ]
    # Someone took n8 meanwhile: the recorded nodes of slices-1 no longer fit, and nb-b has no other
    # local block with two free nodes: the tree waits (no partial release).
    result = plan(cluster([root], [s0, s1], pods, busy=(8,)), NOW)
    assert not only(result.actions, ReleasePod)
    assert admitted(status_on(result, "slices"))[1] == c.REASON_UNSCHEDULABLE


def test_a_tree_decided_again_while_it_runs_records_the_pods_still_placed_beside_the_new_one() -> None:
    """slices-0-1 went (its pod deleted) and its replacement slices-0-2 waits; n6 is free again. The tree is
    decided again for the one pod: the root's record, and slices-0's own, still name the pods that run, or
    a later loss of one of them would not be seen as a loss (plan/lost.py reads the record)."""
    root = composite(status=CompositePodGroupStatus(admission=_recorded(DECIDED)))
    s0 = pod_group(
        "slices-0",
        status=PodGroupStatus(admission=_recorded({"slices-0-0": "n5", "slices-0-1": "n6"}, "lb-b1")),
    )
    s1 = pod_group(
        "slices-1",
        status=PodGroupStatus(admission=_recorded({"slices-1-0": "n7", "slices-1-1": "n8"}, "lb-b2")),
    )
    pods = [
        pod("slices-0-0", "slices-0", node="n5"),
        pod("slices-0-2", "slices-0"),
        pod("slices-1-0", "slices-1", node="n7"),
        pod("slices-1-1", "slices-1", node="n8"),
    ]
    result = plan(cluster([root], [s0, s1], pods), NOW)
    assert {r.pod.name: r.node for r in only(result.actions, ReleasePod)} == {"slices-0-2": "n6"}
    records = {
        r.group.name: {a.pod: a.node for a in r.admission.assignments}
        for r in only(result.actions, RecordAdmission)
    }
    assert records["slices"] == {
        "slices-0-0": "n5",
        "slices-0-2": "n6",
        "slices-1-0": "n7",
        "slices-1-1": "n8",
    }
    assert records["slices-0"] == {"slices-0-0": "n5", "slices-0-2": "n6"}
    assert "slices-1" not in records  # nothing new for it


def test_a_standalone_hand_made_pod_group_is_placed_whole_in_one_domain() -> None:
    group = pod_group("solo", parent=None, min_count=2, key=LB)
    pods = [pod("solo-0", "solo"), pod("solo-1", "solo")]
    result = plan(cluster([], [group], pods, busy=(1, 3)), NOW)
    names = kinds(result.actions)
    assert names.index("RecordAdmission") < names.index("ReleasePod")
    (record,) = only(result.actions, RecordAdmission)
    assert record.resource_version == "3"
    assert set(blocks(result).values()) == {"lb-b1"}
    assert admitted(status_on(result, "solo"))[:2] == ("True", c.REASON_ADMITTED)


def test_a_pod_group_whose_parent_does_not_exist_is_in_no_tree_and_its_pods_stay_gated() -> None:
    result = plan(cluster([], [pod_group("slices-0")], article_pods()[:2]), NOW)
    assert kinds(result.actions) == ["PostEvent", "RememberAnnounced"]  # why, once (below), nothing placed


def test_levels_make_a_rack_domain_a_path_so_a_rack_gang_never_spans_blocks() -> None:
    # Racks named r1 in both network blocks: with the Topology's levels, nb-a/r1 != nb-b/r1.
    nodes = []
    for i in range(1, 9):
        body = node_body(i)
        body["metadata"]["labels"][RACK] = "r1" if i in (1, 5) else f"r{i}"
        nodes.append(body)
    group = pod_group("rack", parent=None, min_count=2, key=RACK)
    pods = [pod("rack-0", "rack", gpus=8), pod("rack-1", "rack", gpus=8)]
    without = plan(cluster([], [group], pods, nodes=nodes, busy=(6, 7, 8)), NOW)
    assert sorted(r.node for r in only(without.actions, ReleasePod)) == ["n1", "n5"]  # r1 spans blocks
    levels = {NB: (NB, RACK), RACK: (NB, RACK)}
    with_levels = plan(cluster([], [group], pods, nodes=nodes, busy=(6, 7, 8), levels=levels), NOW)
    assert not only(with_levels.actions, ReleasePod)
    assert admitted(status_on(with_levels, "rack"))[1] == c.REASON_UNSCHEDULABLE


# ---------------------------------------------------------------------- a Job's topology mode
def _job(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "local-4",
            "namespace": "ml",
            "uid": "uid-local-4",
            "creationTimestamp": "2026-11-30T11:00:00Z",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": annotations,
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "template": {"spec": {"containers": [{"name": "w", "image": "x"}], "schedulingGates": [GATE]}},
        },
    }


def _job_spec(annotations: dict[str, str]) -> JobSpec:
    from phalanx.api.builders import build_pod_group
    from phalanx.api.job_layout import parse_job_layout
    from phalanx.api.job_policy import parse_job_policy

    job = _job(annotations)
    policy = parse_job_policy(job)
    layout = parse_job_layout(job, policy)
    body = build_pod_group(job, "local-4-wl", policy, None, workload_uid="wl", layout=layout)
    body["metadata"].update(uid="pg-local-4", generation=1)
    pods = []
    for i in range(4):
        p = pod(f"local-4-{i}", "")
        p["metadata"]["labels"] = {"batch.kubernetes.io/controller-uid": "uid-local-4"}
        pods.append(p)
    return job, PodGroupRecord.from_body(body), pods


def _job_state(annotations: dict[str, str]) -> PlanInput:
    return cluster([], [], [], jobs=[_job_spec(annotations)], levels={NB: (NB, LB), LB: (NB, LB)})


def test_preferred_local_4_climbs_to_one_network_block_and_says_so_required_waits() -> None:
    required = plan(_job_state({"phalanx.dev/topology-key": LB}), NOW)
    assert not only(required.actions, ReleasePod)  # no local block has 4 nodes
    (patch,) = only(required.actions, PatchStatus)
    assert admitted(patch.status)[1] == c.REASON_UNSCHEDULABLE

    preferred = plan(
        _job_state({"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"}), NOW
    )
    nodes = sorted(r.node for r in only(preferred.actions, ReleasePod))
    assert nodes in (["n1", "n2", "n3", "n4"], ["n5", "n6", "n7", "n8"])  # one network block
    (record,) = only(preferred.actions, RecordAdmission)
    assert record.admission.level == NB
    status = status_on(preferred, record.group.name)
    flag, reason, message = admitted(status)
    assert (flag, reason) == ("True", c.REASON_ADMITTED)
    assert f"topology mode preferred: no domain of {LB} had room, so it went to one domain of {NB}" in message
    events = [e.message for e in only(preferred.actions, PostEvent) if e.reason == "Admitted"]
    assert any("(topology mode preferred)" in m for m in events), events


# ---------------------------------------------------------------------- a sliced Job
def _sliced_spec(gpus: int, *, created: bool = False) -> JobSpec:
    from phalanx.api.builders import build_sliced_objects
    from phalanx.api.job_layout import parse_job_layout
    from phalanx.api.job_policy import parse_job_policy

    job = _job(
        {
            "phalanx.dev/topology-key": NB,
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": LB,
        }
    )
    job["metadata"]["name"] = "sliced"
    job["metadata"]["uid"] = "uid-sliced"
    pods = []
    for i in (3, 1, 0, 2):  # the order the cache happens to hold them in
        p = pod(f"sliced-{i}-x{i}", "", gpus=gpus)
        p["metadata"]["labels"] = {
            "batch.kubernetes.io/controller-uid": "uid-sliced",
            "batch.kubernetes.io/job-completion-index": str(i),
        }
        pods.append(p)
    made: list[Any] | None = None
    if created:
        policy = parse_job_policy(job)
        _, root, groups = build_sliced_objects(job, policy, parse_job_layout(job, policy), None)
        body = root.to_api()
        body["metadata"].update(uid="uid-root", resourceVersion="9")
        made = [CompositePodGroupRecord.from_body(body)]
        made += [
            PodGroupRecord.from_body({**g.to_api(), "metadata": {**g.to_api()["metadata"], "uid": f"u{i}"}})
            for i, g in enumerate(groups)
        ]
    return job, made, pods


def _sliced_state(gpus: int, *, created: bool = False) -> PlanInput:
    return cluster([], [], [], jobs=[_sliced_spec(gpus, created=created)])


def test_a_sliced_job_gets_its_composite_objects_and_is_placed_whole_in_the_same_pass() -> None:
    result = plan(_sliced_state(8), NOW)
    names = kinds(result.actions)
    assert names[:4] == ["CreateWorkload", "CreateCompositePodGroup", "CreatePodGroup", "CreatePodGroup"]
    (workload,) = [a.workload for a in result.actions if type(a).__name__ == "CreateWorkload"]
    (template,) = workload.spec.composite_pod_group_templates
    assert template.scheduling_policy.gang.min_group_count == 2
    assert template.pod_group_templates[0].scheduling_policy.gang.min_count == 2
    groups = [a.pod_group for a in result.actions if type(a).__name__ == "CreatePodGroup"]
    (root,) = [a.group for a in result.actions if type(a).__name__ == "CreateCompositePodGroup"]
    assert [g.spec.parent_composite_pod_group_name for g in groups] == [root.metadata["name"]] * 2
    releases = {r.pod.name.split("-")[1]: (r.node, r.pod_group) for r in only(result.actions, ReleasePod)}
    assert len(releases) == 4
    block = {i: LOCAL[int(node[1:])] for i, (node, _) in releases.items()}
    # Indices 0-1 share a local block, 2-3 the other, both in one network block.
    assert block["0"] == block["1"] and block["2"] == block["3"] and block["0"] != block["2"]
    assert {b[:4] for b in block.values()} == {"lb-a"}
    assert releases["0"][1] == releases["1"][1] != releases["2"][1]
    # Rank order inside a slice: index 0 on the first node the slice fills.
    assert int(releases["0"][0][1:]) < int(releases["1"][0][1:])
    assert kinds(result.actions).index("RecordAdmission") < kinds(result.actions).index("ReleasePod")
    assert result.units[0].key == "Job/ml/sliced" and result.units[0].admitted_pods == 4


def test_a_sliced_job_of_4_gpu_pods_packs_each_slice_on_one_node() -> None:
    result = plan(_sliced_state(4, created=True), NOW)
    assert not [a for a in result.actions if type(a).__name__.startswith("Create")]
    releases = {r.pod.name.split("-")[1]: r.node for r in only(result.actions, ReleasePod)}
    assert releases["0"] == releases["1"] and releases["2"] == releases["3"]
    assert releases["0"] != releases["2"]
    (record, *_) = only(result.actions, RecordAdmission)
    assert record.group.kind == "CompositePodGroup" and record.resource_version == "9"
    job_events = [e.reason for e in only(result.actions, PostEvent) if e.involved.kind == "Job"]
    assert "Admitted" in job_events


# ---------------------------------------------------------------------- failures of a running sliced Job
GRACE = 30.0


def _slice_pod(i: int, *, node: str = "", released_to: str = "", refused: bool = False) -> dict[str, Any]:
    """Completion index i of the sliced Job: bound on `node`, released to a node, or (neither) a new gated pod
    the Job controller made in place of a lost one."""
    placed = bool(node or released_to)
    p = pod(f"sliced-{i}-{'old' if placed else 'new'}", "", node=node, released_to=released_to)
    p["metadata"]["labels"] = {
        "batch.kubernetes.io/controller-uid": "uid-sliced",
        "batch.kubernetes.io/job-completion-index": str(i),
    }
    if refused:
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes fit"}
        ]
    return p


def _running_sliced_spec(
    pods: list[dict[str, Any]],
    *,
    unschedulable_for: float | None = None,
    annotations: dict[str, str] | None = None,
    requeued: str = "",
    suspended: bool = False,
    reason: str = c.REASON_UNSCHEDULABLE,
) -> JobSpec:
    """The sliced Job of _sliced_spec, admitted on n1-n4 (slice 0 in lb-a1, slice 1 in lb-a2), with `pods`
    as they are now; `unschedulable_for`: its root has said Admitted False (`reason`) for that many
    seconds."""
    from phalanx.api.conditions import Condition

    _, made, _ = _sliced_spec(8, created=True)
    assert made is not None
    composite_record, *slices_made = made
    names = [g.name for g in slices_made]
    record = Admission(
        domain="nb-a",
        assignments=[Assignment(pod=f"sliced-{i}-old", node=f"n{i + 1}") for i in range(4)],
        admitted_at=NOW - dt.timedelta(minutes=10),
        attempt=0,
    )
    conditions = []
    if unschedulable_for is not None:
        since = NOW - dt.timedelta(seconds=unschedulable_for)
        conditions.append(
            Condition(
                type=c.ADMITTED,
                status=c.FALSE,
                reason=reason,
                message="x",
                last_transition_time=since,
            )
        )
    root = dataclasses.replace(
        composite_record, status=CompositePodGroupStatus(admission=record, conditions=conditions or None)
    )
    slices = [
        dataclasses.replace(g, status=PodGroupStatus(admission=record, domain=f"lb-a{i + 1}"))
        for i, g in enumerate(slices_made)
    ]
    for body in pods:
        labels = body["metadata"]["labels"]
        if body["spec"].get("nodeName") or body["spec"].get("nodeSelector"):
            labels["phalanx.dev/pod-group"] = names[
                int(labels["batch.kubernetes.io/job-completion-index"]) // 2
            ]
    job = _job(
        {
            "phalanx.dev/topology-key": NB,
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": LB,
            **(annotations or {}),
        }
    )
    job["metadata"].update(name="sliced", uid="uid-sliced")
    if requeued:
        job["metadata"]["annotations"]["phalanx.dev/requeued"] = requeued
    job["spec"]["suspend"] = suspended
    return job, [root, *slices], pods


def _running_sliced(
    pods: list[dict[str, Any]],
    *,
    busy: Sequence[int] = (),
    unschedulable_for: float | None = None,
    annotations: dict[str, str] | None = None,
    requeued: str = "",
    suspended: bool = False,
    reason: str = c.REASON_UNSCHEDULABLE,
) -> PlanInput:
    spec = _running_sliced_spec(
        pods,
        unschedulable_for=unschedulable_for,
        annotations=annotations,
        requeued=requeued,
        suspended=suspended,
        reason=reason,
    )
    return cluster([], [], [], jobs=[spec], busy=busy, node_failure_grace=GRACE)


# n4 failed: index 3's pod went with it and the Job controller made a new one (gated).
LOST_N4 = [_slice_pod(0, node="n1"), _slice_pod(1, node="n2"), _slice_pod(2, node="n3"), _slice_pod(3)]


def _suspends(result: Plan) -> list[Any]:
    return [a for a in result.actions if type(a).__name__ == "SuspendJob"]


def _root_name(result: Plan) -> str:
    (name,) = {a.group.name for a in only(result.actions, PatchStatus) if a.group.kind == "CompositePodGroup"}
    return name


def test_a_slice_that_lost_a_pod_with_room_left_in_its_local_block_is_refilled_not_requeued() -> None:
    # n4 is back (or the pod alone went): its slice's local block lb-a2 has room for the new pod.
    result = plan(_running_sliced(LOST_N4), NOW)
    assert not _suspends(result)
    assert {r.pod.name: r.node for r in only(result.actions, ReleasePod)} == {"sliced-3-new": "n4"}


def test_a_slice_below_its_min_count_with_no_room_waits_out_the_grace_then_the_job_is_requeued_whole() -> (
    None
):
    # n4 stays busy (failed, or taken): lb-a2 has no room for index 3; the tree is below its min count.
    fresh = plan(_running_sliced(LOST_N4, busy=(4,)), NOW)
    assert not _suspends(fresh) and not only(fresh.actions, ReleasePod)
    assert admitted(status_on(fresh, _root_name(fresh)))[1] == c.REASON_UNSCHEDULABLE

    within = plan(_running_sliced(LOST_N4, busy=(4,), unschedulable_for=GRACE - 5), NOW)
    assert not _suspends(within)

    after = plan(_running_sliced(LOST_N4, busy=(4,), unschedulable_for=GRACE + 5), NOW)
    (suspend,) = _suspends(after)
    assert suspend.job.name == "sliced" and suspend.cause == "below-min-count"
    assert suspend.why.startswith("below its minCount: 3 pod(s) of the tree were left in nb-a")
    assert not only(after.actions, ReleasePod)  # nothing of the tree is placed again piecemeal
    warned = {(e.involved.kind, e.reason) for e in only(after.actions, PostEvent) if e.type == "Warning"}
    assert {("CompositePodGroup", "Requeued"), ("Job", "Requeued")} <= warned
    root = status_on(after, _root_name(after))
    assert admitted(root)[1] == c.REASON_REQUEUED


@pytest.mark.parametrize(
    ("case", "short_for", "busy", "requeued"),
    [
        ("past the grace, no room in lb-a2 for the pod to come", GRACE + 5, (4,), True),
        ("within the grace", GRACE - 5, (4,), False),
        ("past the grace, room for it on n4", GRACE + 5, (), False),
    ],
)
def test_a_slice_whose_lost_pod_is_not_made_again_yet_is_judged_by_its_template_after_the_grace(
    case: str, short_for: float, busy: tuple[int, ...], requeued: bool
) -> None:
    """n4 failed with index 3's pod; the Job controller backs off before making it again (no pod of it yet):
    past the grace since the tree went short (WaitingForPods), the pod to come is tried in its slice's
    local block, and with no room there the Job is requeued whole now (plan/lost.py)."""
    pods = LOST_N4[:3]
    state = _running_sliced(pods, busy=busy, unschedulable_for=short_for, reason=c.REASON_WAITING_FOR_PODS)
    result = plan(state, NOW)
    suspends = _suspends(result)
    assert bool(suspends) == requeued, case
    if requeued:
        assert suspends[0].why.startswith("below its minCount: 3 pod(s) of the tree were left in nb-a"), case
    assert not only(result.actions, ReleasePod), case


def test_a_sliced_job_in_disruption_mode_all_is_requeued_at_once() -> None:
    result = plan(
        _running_sliced(LOST_N4, busy=(4,), annotations={"phalanx.dev/disruption-mode": "all"}), NOW
    )
    (suspend,) = _suspends(result)
    assert suspend.cause == "below-min-count"


def test_a_whole_slice_lost_with_no_room_in_the_network_block_requeues_the_job() -> None:
    # Both pods of slice 1 gone with lb-a2 (n3, n4 busy); slice 0 still runs in lb-a1 and holds its nodes.
    pods = [_slice_pod(0, node="n1"), _slice_pod(1, node="n2"), _slice_pod(2), _slice_pod(3)]
    result = plan(_running_sliced(pods, busy=(3, 4), unschedulable_for=GRACE + 1), NOW)
    (suspend,) = _suspends(result)
    assert "short of its minCount" in suspend.why


def test_a_released_slice_pod_kube_scheduler_refuses_rolls_back_the_whole_job_at_once() -> None:
    pods = [
        _slice_pod(0, node="n1"),
        _slice_pod(1, node="n2"),
        _slice_pod(2, node="n3"),
        _slice_pod(3, released_to="n4", refused=True),
    ]
    result = plan(_running_sliced(pods), NOW)
    (suspend,) = _suspends(result)
    assert suspend.cause == "unbindable"
    assert suspend.why.startswith("released but not bound: 1 released pod(s) cannot be bound")
    assert "sliced-3-old on n4: 0/8 nodes fit" in suspend.why


def test_a_requeued_sliced_job_is_resumed_once_its_pods_are_gone_and_says_requeued_meanwhile() -> None:
    why = "below its minCount: ..."
    waiting = plan(_running_sliced(LOST_N4, requeued=why, suspended=True), NOW)
    assert not [a for a in waiting.actions if type(a).__name__ == "ResumeJob"]  # its pods are still there
    assert admitted(status_on(waiting, _root_name(waiting)))[1] == c.REASON_REQUEUED
    gone = plan(_running_sliced([], requeued=why, suspended=True), NOW)
    assert [a.job.name for a in gone.actions if type(a).__name__ == "ResumeJob"] == ["sliced"]
    assert not _suspends(gone)


# ---------------------------------------------------------------- annotations changed around the webhook
def _with_annotations(spec: JobSpec, annotations: dict[str, str | None]) -> JobSpec:
    """The same Job, its annotations edited as if the update webhook had been away."""
    job, made, pods = spec
    body = {**job, "metadata": {**job["metadata"]}}
    merged = {**(body["metadata"].get("annotations") or {}), **annotations}
    body["metadata"]["annotations"] = {k: v for k, v in merged.items() if v is not None}
    return body, made, pods


def _ignored(result: Plan) -> list[str]:
    return [e.message for e in only(result.actions, PostEvent) if e.reason == "ImmutableChangeIgnored"]


def test_slices_added_to_a_job_that_has_its_pod_group_are_said_once_not_applied() -> None:
    spec = _with_annotations(
        _job_spec({"phalanx.dev/topology-key": NB}),
        {"phalanx.dev/slice-size": "2", "phalanx.dev/slice-topology-key": LB},
    )
    result = plan(cluster([], [], [], jobs=[spec], levels=LEVELS), NOW)
    assert not [a for a in result.actions if type(a).__name__.startswith("Create")]  # no slices made
    (message,) = _ignored(result)
    assert message.startswith("phalanx.dev/slice-size: '2' differs from None, which the PodGroup keeps")
    assert "phalanx.dev/slice-topology-key" in message
    assert len(only(result.actions, ReleasePod)) == 4  # placed as the one gang it was made as
    # Said once: with the message remembered, the next pass says nothing.
    said = {"uid-local-4/immutable": message}
    again = plan(testkit.cluster([spec], announced=said, levels=LEVELS), NOW)
    assert not _ignored(again)


def test_a_topology_mode_changed_after_creation_is_not_applied_either_way() -> None:
    # Made required: local-4 fits no local block and waits, even though the Job says preferred now.
    required = _with_annotations(
        _job_spec({"phalanx.dev/topology-key": LB}), {"phalanx.dev/topology-mode": "preferred"}
    )
    result = plan(cluster([], [], [], jobs=[required], levels=LEVELS), NOW)
    assert not only(result.actions, ReleasePod)
    (message,) = _ignored(result)
    assert message.startswith(
        "phalanx.dev/topology-mode: 'preferred' differs from 'required', which the PodGroup keeps"
    )
    # Made preferred (the PodGroup carries it): still climbs after the annotation is removed.
    preferred = _with_annotations(
        _job_spec({"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"}),
        {"phalanx.dev/topology-mode": None},
    )
    result = plan(cluster([], [], [], jobs=[preferred], levels=LEVELS), NOW)
    assert len(only(result.actions, ReleasePod)) == 4
    (message,) = _ignored(result)
    assert "'required' differs from 'preferred'" in message


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ({"phalanx.dev/slice-size": "4"}, "phalanx.dev/slice-size: '4' differs from '2'"),
        (
            {"phalanx.dev/slice-size": None, "phalanx.dev/slice-topology-key": None},
            "phalanx.dev/slice-size: None differs from '2', which the PodGroup of each slice keeps",
        ),
        ({"phalanx.dev/slice-topology-key": RACK}, f"phalanx.dev/slice-topology-key: '{RACK}' differs"),
    ],
)
def test_a_sliced_job_keeps_the_slices_it_was_made_with(edit: dict[str, str | None], named: str) -> None:
    result = plan(cluster([], [], [], jobs=[_with_annotations(_sliced_spec(8, created=True), edit)]), NOW)
    (message,) = _ignored(result)
    assert named in message, message
    assert not [a for a in result.actions if type(a).__name__.startswith("Create")]
    releases = {r.pod.name.split("-")[1]: r.node for r in only(result.actions, ReleasePod)}
    block = {i: LOCAL[int(node[1:])] for i, node in releases.items()}
    # Still two slices of 2, each in one local block.
    assert block["0"] == block["1"] and block["2"] == block["3"] and block["0"] != block["2"], block


def test_a_sliced_job_whose_slices_are_unknown_and_annotations_gone_waits_and_says_so() -> None:
    # Its CompositePodGroup exists, its slices' PodGroups are not in the cache (not made yet, or deleted),
    # and its slice annotations were removed around the webhook: nothing to place it by, and no crash.
    job, made, pods = _sliced_spec(8, created=True)
    assert made is not None
    edited = _with_annotations(
        (job, made[:1], pods), {"phalanx.dev/slice-size": None, "phalanx.dev/slice-topology-key": None}
    )
    result = plan(cluster([], [], [], jobs=[edited]), NOW)
    assert not only(result.actions, ReleasePod)
    assert not [a for a in result.actions if type(a).__name__.startswith("Create")]
    (message,) = _ignored(result)
    assert message.startswith("phalanx.dev/slice-size, phalanx.dev/slice-topology-key: removed")


# ---------------------------------------------------------------------- trees as preemption victims
def _high_priority_gang() -> JobSpec:
    """A plain gang of 2 pods x 8 GPUs in one local block, priority 1000, not yet placed."""
    from phalanx.api.builders import build_pod_group
    from phalanx.api.job_policy import parse_job_policy

    job = _job({"phalanx.dev/topology-key": LB})
    job["metadata"].update(name="high", uid="uid-high", creationTimestamp="2026-11-30T11:59:00Z")
    job["spec"].update(parallelism=2, completions=2)
    body = build_pod_group(job, "high-wl", parse_job_policy(job), 1000, workload_uid="wl-high")
    body["metadata"].update(uid="pg-high", generation=1)
    pods = []
    for i in range(2):
        p = pod(f"high-{i}", "")
        p["metadata"]["labels"] = {"batch.kubernetes.io/controller-uid": "uid-high"}
        p["spec"]["priority"] = 1000
        pods.append(p)
    return job, PodGroupRecord.from_body(body), pods


def _guarded_filler(i: int) -> dict[str, Any]:
    """A pod on n<i> of a priority above the preemptor's: never a victim."""
    body = filler(i)
    body["spec"]["priority"] = 5000
    return body


def test_a_running_sliced_job_is_a_victim_only_whole_requeued_never_one_pod_of_a_slice() -> None:
    running = [_slice_pod(i, node=f"n{i + 1}") for i in range(4)]
    busy = [_guarded_filler(i) for i in range(5, 9)]
    jobs = [_running_sliced_spec(running), _high_priority_gang()]
    result = plan(cluster([], [], [], jobs=jobs, others=busy), NOW)
    assert not [a for a in result.actions if type(a).__name__ == "EvictPod"]
    (suspend,) = _suspends(result)
    assert suspend.job.name == "sliced"  # the whole Job, to be placed again as one tree


def test_pods_of_a_hand_made_tree_are_never_preemption_victims() -> None:
    running = [
        pod(f"{g}-{i}", g, node=f"n{n}")
        for n, (g, i) in enumerate([(g, i) for g in ("slices-0", "slices-1") for i in (0, 1)], start=1)
    ]
    busy = [_guarded_filler(i) for i in range(5, 9)]
    state = cluster(list(TREE[:1]), list(TREE[1:]), running, jobs=[_high_priority_gang()], others=busy)
    result = plan(state, NOW)
    assert not [a for a in result.actions if type(a).__name__ in ("EvictPod", "SuspendJob")]
    assert not only(result.actions, ReleasePod)
    (patch,) = [a for a in only(result.actions, PatchStatus) if a.group.name.startswith("high")]
    assert admitted(patch.status)[1] == c.REASON_UNSCHEDULABLE


def _hand_made(name: str, parent: str | None) -> CompositePodGroupRecord:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"gang": {"minGroupCount": 1}},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return CompositePodGroupRecord.from_body(
        {"metadata": {"name": name, "namespace": "ml", "uid": f"u-{name}", **CREATED}, "spec": spec}
    )


@pytest.mark.parametrize(
    ("composites", "said"),
    [
        ([("a", "b"), ("b", "a")], "they form a cycle"),  # the parent field is immutable: it stays so
        ([("a", "gone")], "no CompositePodGroup 'gone' made by hand in ml"),
    ],
)
def test_groups_no_root_reaches_say_why_once_and_release_nothing(
    composites: list[tuple[str, str]], said: str
) -> None:
    made = [_hand_made(name, parent) for name, parent in composites]
    pods = [pod("leaf-0", "leaf"), pod("leaf-1", "leaf")]
    result = plan(cluster(made, [pod_group("leaf", parent="a", min_count=2)], pods), NOW)
    assert not only(result.actions, ReleasePod)
    warned = {a.involved.name: a for a in only(result.actions, PostEvent)}
    assert set(warned) == {*(name for name, _ in composites), "leaf"}
    assert all(a.reason == "NotInATree" and a.type == "Warning" for a in warned.values())
    assert said in warned["leaf"].message or said in warned["a"].message


def test_a_tree_of_more_composite_groups_than_phalanx_places_says_so_on_its_root() -> None:
    made = [_hand_made("root", None), *(_hand_made(f"c{i}", "root") for i in range(MAX_GROUPS))]
    result = plan(cluster(made, [], []), NOW)
    (warning,) = only(result.actions, PostEvent)
    assert warning.involved.name == "root" and warning.reason == "TreeNotPlaced"
    assert f"more than the {MAX_GROUPS}" in warning.message


def _edited_slice(slice_size: int) -> tuple[dict[str, Any], list[Any], list[dict[str, Any]]]:
    """Job `sliced` (4 pods of 4 GPUs, slices of `slice_size`) with its objects made, and its first slice's
    PodGroup edited to minCount 1 around validate-podgroup."""
    from phalanx.api.builders import build_sliced_objects
    from phalanx.api.job_layout import parse_job_layout
    from phalanx.api.job_policy import parse_job_policy

    annotations = {"phalanx.dev/topology-key": NB, "phalanx.dev/slice-size": str(slice_size)}
    job = _job({**annotations, "phalanx.dev/slice-topology-key": LB})
    job["metadata"].update(name="sliced", uid="uid-sliced")
    policy = parse_job_policy(job)
    _, root, groups = build_sliced_objects(job, policy, parse_job_layout(job, policy), None)
    body = root.to_api()
    body["metadata"].update(uid="uid-root", resourceVersion="9")
    made: list[Any] = [CompositePodGroupRecord.from_body(body)]
    made += [
        PodGroupRecord.from_body({**g.to_api(), "metadata": {**g.to_api()["metadata"], "uid": f"u{i}"}})
        for i, g in enumerate(groups)
    ]
    first = made[1]
    gang = first.spec.scheduling_policy.gang
    assert gang is not None and gang.min_count == slice_size
    edited = first.spec.scheduling_policy.model_copy(
        update={"gang": gang.model_copy(update={"min_count": 1})}
    )
    made[1] = dataclasses.replace(first, spec=first.spec.model_copy(update={"scheduling_policy": edited}))
    pods = []
    for i in range(4):
        p = pod(f"sliced-{i}-x{i}", "", gpus=4)
        p["metadata"]["labels"] = {
            "batch.kubernetes.io/controller-uid": "uid-sliced",
            "batch.kubernetes.io/job-completion-index": str(i),
        }
        pods.append(p)
    return job, made, pods


@pytest.mark.parametrize("slice_size", [2, 4], ids=["two slices", "one slice"])
def test_a_slice_whose_min_count_was_edited_around_the_webhook_keeps_the_slice_size(slice_size: int) -> None:
    """validate-podgroup refuses the edit but fails open: a slice edited to minCount 1 would remake the
    Job's slices (slices of 1) and place a slice in part, or across local blocks. The slice size stays the
    gang size, said once. Pod 0 is missing: its slice must wait; with one slice, every local block has room
    for 2 of its 4 pods only (n1, n3, n5, n7 full): it must wait too."""
    job, made, pods = _edited_slice(slice_size)
    result = plan(cluster([], [], [], jobs=[(job, made, pods[1:])], busy=(1, 3, 5, 7)), NOW)
    assert not only(result.actions, ReleasePod), "a slice placed in part, or across local blocks"
    assert not [a for a in result.actions if type(a).__name__ == "CreatePodGroup"], "the Job was sliced anew"
    (said,) = [e for e in only(result.actions, PostEvent) if e.reason == "ImmutableChangeIgnored"]
    assert said.message.startswith(
        f"PodGroup {made[1].name}: spec.schedulingPolicy.gang.minCount 1 differs from {slice_size}"
    )
