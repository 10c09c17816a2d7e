"""Status that stays true (issue 16 item 9), through `plan()` and `desired_status`: a finished Job's groups
(also a CompositePodGroup root) keep the domain they ran in (docs/api.md says so), and the admitted message
counts the members that already succeeded; DOMAIN says where the pods are (every domain of a preferred gang
spread without a common one, a node relabelled into another domain)."""

from __future__ import annotations

from typing import Any

from test_controller_plan import admitted_reason
from testkit import LB, NB, NODES, NOW, TOPOLOGY, cluster, group_of, job_body, node_body, only, pod_body

from phalanx.api.status import Admission, Assignment, PodGroupStatus
from phalanx.controller.model.actions import PatchStatus, PostEvent
from phalanx.controller.plan import plan
from phalanx.controller.plan.status import GroupFacts, desired_status


def ran(index: int, node: str, phase: str, group: str) -> dict[str, Any]:
    return pod_body("train", index, gated=False, node=node, released_to=node, phase=phase, group=group)


def status_after(job: dict[str, Any], status: PodGroupStatus | None, pods: list[dict[str, Any]]) -> Any:
    group = group_of(job, status)
    patches = only(plan(cluster([(job, group, pods)]), NOW).actions, PatchStatus)
    return patches[0].status if patches else group.status


def test_a_finished_group_keeps_its_domain_and_succeeded_members_are_counted() -> None:
    job = job_body("train", 4, annotations=TOPOLOGY, succeeded=2)
    base = group_of(job).name
    pods = [
        ran(0, "n1", "Succeeded", base),
        ran(1, "n2", "Succeeded", base),
        ran(2, "n3", "Running", base),
        ran(3, "n4", "Running", base),
    ]
    running = status_after(job, None, pods)
    _, reason, message = admitted_reason(running)
    assert reason == "Admitted" and running.domain == "nb-a", (reason, message)
    assert "2 pod(s) admitted in nb-a" in message and "2 more succeeded" in message, message
    # The counters say the whole gang: 2 scheduled + 2 succeeded of minCount 4, and it runs.
    assert (running.scheduled, running.succeeded, running.waiting) == (2, 2, 0)
    assert running.phase == "Running"

    done = job_body("train", 4, annotations=TOPOLOGY, succeeded=4, finished=True)
    pods = [ran(i, f"n{i + 1}", "Succeeded", base) for i in range(4)]
    finished = status_after(done, running, pods)
    _, reason, _ = admitted_reason(finished)
    assert reason == "Finished" and finished.domain == "nb-a"
    assert (finished.scheduled, finished.succeeded) == (0, 4)


def test_a_gang_whose_last_pod_succeeded_is_finished_at_once_and_its_jobs_complete_adds_nothing() -> None:
    """The Job controller writes Complete a moment after the last pod succeeded: the group says Finished
    from that pod on (not "waiting for the Job's pods" in between), once, with no event (the Job controller
    says it), and the Job's Complete then writes nothing."""
    job = job_body("train", 4, annotations=TOPOLOGY, succeeded=2)  # its status lags: 2 of 4 counted
    base = group_of(job).name
    running = status_after(job, None, [ran(i, f"n{i + 1}", "Running", base) for i in range(4)])
    assert running.phase == "Running"
    ended = [ran(i, f"n{i + 1}", "Succeeded", base) for i in range(4)]
    group = group_of(job, running)
    result = plan(cluster([(job, group, ended)]), NOW)
    (patch,) = only(result.actions, PatchStatus)
    _, reason, message = admitted_reason(patch.status)
    assert (reason, patch.status.phase, patch.status.domain) == ("Finished", "Finished", "nb-a"), message
    assert patch.status.admission is None
    assert not only(result.actions, PostEvent)
    done = job_body("train", 4, annotations=TOPOLOGY, succeeded=4, finished=True)
    assert not only(plan(cluster([(done, group_of(done, patch.status), ended)]), NOW).actions, PatchStatus)


def test_a_job_with_more_completions_to_make_is_not_finished_when_a_wave_succeeded() -> None:
    job = job_body("train", 4, annotations=TOPOLOGY, completions=8)
    base = group_of(job).name
    running = status_after(job, None, [ran(i, f"n{i + 1}", "Running", base) for i in range(4)])
    wave = status_after(job, running, [ran(i, f"n{i + 1}", "Succeeded", base) for i in range(4)])
    assert wave.phase != "Finished"


def test_a_finished_composite_root_keeps_its_domain_too() -> None:
    """A CompositePodGroup's root is given no domain once nothing of its tree is placed (report.py): when
    its Job finished, the status still says where the tree ran; before that, no domain means none."""
    ran_in = status_facts(domain="nb-a", scheduled=2, waiting=0)
    running = desired_status(PodGroupStatus(), ran_in, None, NOW, 1, None)
    assert running.domain == "nb-a"
    finished = desired_status(running, status_facts(finished=True, waiting=0), None, NOW, 1, None)
    assert finished.domain == "nb-a" and finished.phase == "Finished"
    requeued = desired_status(running, status_facts(waiting=2), None, NOW, 1, None)
    assert requeued.domain is None  # not finished: nothing placed now, no domain


def status_facts(**overrides: Any) -> GroupFacts:
    base: dict[str, Any] = dict(gang=True, min_count=2, scheduled=0, released=0, waiting=2, domain=None)
    base.update(overrides)
    return GroupFacts(**base)


def _admitted_on(job: dict[str, Any], nodes: list[str], domain: str | None, level: str | None) -> Any:
    admission = Admission(
        domain=domain,
        assignments=[Assignment(pod=f"train-{i}", node=n) for i, n in enumerate(nodes)],
        admitted_at=NOW,
        attempt=0,
        level=level,
    )
    return group_of(job, PodGroupStatus(admission=admission))


def _domain(job: dict[str, Any], group: Any, nodes: list[str], bodies: list[dict[str, Any]]) -> str | None:
    pods = [ran(i, n, "Running", group.name) for i, n in enumerate(nodes)]
    patches = only(plan(cluster([(job, group, pods)], nodes=bodies), NOW).actions, PatchStatus)
    domain: str | None = patches[0].status.domain
    return domain


def test_domain_says_every_domain_a_preferred_gang_without_a_topology_spread_over() -> None:
    job = job_body(
        "train", 3, annotations={"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"}
    )
    where = ["n1", "n3", "n5"]
    group = _admitted_on(job, where, None, "")  # no common domain: it went anywhere
    assert _domain(job, group, where, [node_body(n) for n in NODES]) == "lb-a1,lb-a2,lb-b1"


def test_domain_follows_a_node_relabelled_into_another_domain() -> None:
    job = job_body("train", 4, annotations=TOPOLOGY)
    where = ["n1", "n2", "n3", "n4"]
    group = _admitted_on(job, where, "nb-a", None)
    bodies = [node_body(n) for n in NODES]
    assert _domain(job, group, where, bodies) == "nb-a"
    bodies[3]["metadata"]["labels"][NB] = "nb-b"  # n4 moved to nb-b
    assert _domain(job, group, where, bodies) == "nb-a,nb-b"


def test_a_gang_whose_member_completed_counts_it_and_a_composite_counts_child_groups_only() -> None:
    """A gang of 4 (minCount 4, less the member that completed: 3) with 3 bound and 1 succeeded is whole:
    Running, `succeeded` 1; a CompositePodGroup's counters count child groups and say no `succeeded`."""
    whole = status_facts(min_count=3, scheduled=3, waiting=0, succeeded=1, domain="nb-a")
    status = desired_status(PodGroupStatus(), whole, None, NOW, 1, None)
    assert (status.scheduled, status.succeeded, status.phase) == (3, 1, "Running")
    _, reason, message = admitted_reason(status)
    assert reason == "Admitted" and message == "3 pod(s) admitted in nb-a; 1 more succeeded", message
    tree = status_facts(scheduled=2, waiting=0, succeeded=0, members="child group(s)")
    composite = desired_status(
        PodGroupStatus(), tree, None, NOW, 1, None, initial_type="CompositePodGroupInitiallyScheduled"
    )
    assert composite.succeeded is None and composite.scheduled == 2


def test_a_member_seen_succeeded_before_the_jobs_status_counts_it_is_counted_at_once() -> None:
    """The Job controller counts a completion (status.succeeded) a moment after the pod ends: a pass in
    between must not ask for 4 and call the gang short ("waiting for the Job's pods")."""
    job = job_body("train", 4, annotations=TOPOLOGY, succeeded=0)
    base = group_of(job).name
    pods = [ran(0, "n1", "Succeeded", base), *(ran(i, f"n{i + 1}", "Running", base) for i in (1, 2, 3))]
    status = status_after(job, None, pods)
    _, reason, message = admitted_reason(status)
    assert reason == "Admitted" and message == "3 pod(s) admitted in nb-a; 1 more succeeded", message
    assert (status.scheduled, status.succeeded, status.phase) == (3, 1, "Running")
