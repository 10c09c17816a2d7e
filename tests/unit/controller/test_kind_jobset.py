"""The JobSet kind through `plan()`: a labelled JobSet is one tree (a CompositePodGroup over a PodGroup per
child Job), made from its spec, placed all or nothing; its child Jobs are never admitted on their own."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import kopf
import pytest
from testkit import (
    LB,
    LOCAL,
    NB,
    NOW,
    StaticContext,
    cluster,
    job_body,
    jobset_body,
    jobset_cluster,
    jobset_pod,
    made_groups,
    written,
)

from phalanx.api import conditions as c
from phalanx.api.scheduling import SchedulingPolicy
from phalanx.controller.kinds.jobset import JobSetKind
from phalanx.controller.loop.incremental import UnitMemo
from phalanx.controller.model.actions import (
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    ResumeJob,
    SuspendJob,
    UngatePod,
    status_write,
)
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan import Plan, plan
from phalanx.controller.plan.status import SETTLE_SECONDS
from phalanx.controller.watch.webhooks import Webhooks

BLOCK = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}
TOPOLOGY = {"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB}


def all_pods(name: str = "train", replicas: int = 2, parallelism: int = 2) -> list[dict[str, Any]]:
    return [
        jobset_pod(name, "workers", j, i, global_index=j) for j in range(replicas) for i in range(parallelism)
    ]


def made(result: Plan) -> list[Any]:
    """The groups the plan creates, as the cache would hold them once created (at NOW)."""
    out: list[Any] = []
    for a in result.actions:
        if isinstance(a, CreateCompositePodGroup):
            body = a.group.to_api()
            body["metadata"].update(uid="root", creationTimestamp=NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))
            out.append(CompositePodGroupRecord.from_body(body))
        elif isinstance(a, CreatePodGroup):
            body = a.pod_group.to_api()
            body["metadata"].update(
                uid=f"pg-{body['metadata']['name']}", creationTimestamp=NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
            )
            out.append(PodGroupRecord.from_body(body))
    return out


def test_a_new_jobset_gets_its_tree_and_is_placed_whole_with_each_child_job_in_one_local_block() -> None:
    result = plan(jobset_cluster([jobset_body(annotations=TOPOLOGY)], all_pods()), NOW)
    kinds = [type(a).__name__ for a in result.actions]
    assert kinds[:4] == ["CreateWorkload", "CreateCompositePodGroup", "CreatePodGroup", "CreatePodGroup"]
    (workload,) = [a.workload for a in result.actions if isinstance(a, CreateWorkload)]
    assert workload.spec.controller_ref is not None and workload.spec.controller_ref.kind == "JobSet"
    groups = [a.pod_group for a in result.actions if isinstance(a, CreatePodGroup)]
    assert [g.spec.scheduling_policy.gang.min_count for g in groups] == [2, 2]  # each child Job's parallelism
    releases = {a.pod.name: a.node for a in result.actions if isinstance(a, ReleasePod)}
    assert len(releases) == 4
    assert {BLOCK[n] for n in releases.values()} == {"nb-a"}  # all in one network block
    by_child = {name.rsplit("-", 1)[0]: LOCAL[int(node[1:])] for name, node in releases.items()}
    assert by_child["train-workers-0"] != by_child["train-workers-1"]  # a local block per child Job
    events = {(e.involved.kind, e.reason) for e in result.actions if isinstance(e, PostEvent)}
    assert ("JobSet", "Admitted") in events and ("JobSet", "PodGroupCreated") in events
    owners = {
        a.pod_group.metadata["annotations"]["phalanx.dev/owner"]
        for a in result.actions
        if isinstance(a, CreatePodGroup)
    }
    assert owners == {"JobSet/train"}  # kubectl get podgroups' OWNER column


def test_a_child_jobs_podgroup_without_a_key_of_its_own_shows_its_trees_domain_while_it_runs() -> None:
    """`kubectl get podgroups`' DOMAIN column: a JobSet keyed on its network block, its child Jobs without a
    slice key: each child's PodGroup says the block from its admission on, and still once its pods run (it
    was written with the decision, then dropped by the next status write)."""
    js = jobset_body(annotations={"phalanx.dev/topology-key": NB})
    first = plan(jobset_cluster([js], all_pods()), NOW)
    records = {a.group.name: a for a in first.actions if isinstance(a, RecordAdmission)}
    children = [name for name, a in records.items() if a.group.kind == "PodGroup"]
    assert len(children) == 2
    assert all(records[n].status is not None and records[n].status.domain == "nb-a" for n in children)
    released = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    running = [
        jobset_pod(
            "train", "workers", j, i, global_index=j, gated=False, node=released[f"train-workers-{j}-{i}"]
        )
        for j in range(2)
        for i in range(2)
    ]
    later = plan(jobset_cluster([js], running, groups=made_groups(first)), NOW + dt.timedelta(seconds=5))
    statuses = {g.name: g.status for g in written(later, made_groups(first))}
    assert [statuses[n].phase for n in children] == ["Running", "Running"]
    assert [statuses[n].domain for n in children] == ["nb-a", "nb-a"]


def test_a_jobset_whose_child_jobs_are_not_all_made_yet_waits_whole() -> None:
    first = plan(jobset_cluster([jobset_body()], all_pods()[:2]), NOW)  # the second child Job has no pods yet
    assert not [a for a in first.actions if isinstance(a, ReleasePod)]
    # Its groups' first "waiting for pods" is written only if the pods have not come SETTLE_SECONDS later.
    assert not [a for a in first.actions if isinstance(a, PatchStatus)]
    later = plan(
        jobset_cluster([jobset_body()], all_pods()[:2], groups=made(first)),
        NOW + dt.timedelta(seconds=SETTLE_SECONDS),
    )
    assert not [a for a in later.actions if isinstance(a, ReleasePod)]
    root = [a for a in later.actions if isinstance(a, PatchStatus) and a.group.kind == "CompositePodGroup"]
    (patch,) = root
    condition = patch.status.condition(c.ADMITTED)
    assert condition is not None and condition.reason == c.REASON_WAITING_FOR_PODS


def test_a_jobset_that_does_not_fit_releases_nothing_and_says_why() -> None:
    jobset = jobset_body(annotations=TOPOLOGY)
    groups = made(plan(jobset_cluster([jobset], all_pods()), NOW))
    result = plan(jobset_cluster([jobset], all_pods(), groups=groups, busy=(1, 3, 5, 7)), NOW)
    assert not [a for a in result.actions if isinstance(a, ReleasePod)]
    statuses = [a.status.condition(c.ADMITTED) for a in result.actions if isinstance(a, PatchStatus)]
    assert statuses and {s.reason for s in statuses if s is not None} == {c.REASON_UNSCHEDULABLE}


def test_a_suspended_jobset_holds_nothing_and_a_requeued_one_is_resumed_once_its_pods_are_gone() -> None:
    suspended = jobset_body(suspend=True)
    result = plan(jobset_cluster([suspended], all_pods()), NOW)
    assert not [a for a in result.actions if isinstance(a, ReleasePod)]
    requeued = jobset_body(suspend=True, annotations={"phalanx.dev/requeued": "preempted by podgroup x"})
    gone = plan(jobset_cluster([requeued], []), NOW)
    assert [a.job.kind for a in gone.actions if isinstance(a, ResumeJob)] == ["JobSet"]


def test_the_child_jobs_of_a_jobset_are_never_admitted_nor_let_go_as_jobs() -> None:
    child = job_body("train-workers-0", 2)
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "train",
            "uid": "uid-js-train",
            "controller": True,
        }
    ]
    child["metadata"]["labels"] = {}  # a child Job carries the gate in its template, not the label
    result = plan(jobset_cluster([jobset_body()], all_pods(), jobs=[(child, None, [])]), NOW)
    assert not [a for a in result.actions if isinstance(a, UngatePod)]
    assert {u.key for u in result.units} == {"JobSet/ml/train"}


def test_an_unlabelled_jobset_with_gated_templates_is_let_go() -> None:
    result = plan(jobset_cluster([jobset_body(managed=False)], all_pods()), NOW)
    assert len([a for a in result.actions if isinstance(a, UngatePod)]) == 4


# ---------------------------------------------------------------------- the webhooks
HOOKS = Webhooks(StaticContext())
GATE = HOOKS.gate_owner(JobSetKind())
VALIDATE = HOOKS.validate_owner(JobSetKind())


def test_the_gate_adds_phalanxs_gate_to_every_replicated_jobs_pod_template() -> None:
    body = jobset_body(replicated=(("driver", 1, 1), ("workers", 2, 4)), gated=False, annotations=TOPOLOGY)
    patch = kopf.Patch()
    GATE(body=kopf.Body(body), patch=patch)
    rjobs = patch["spec"]["replicatedJobs"]
    assert [r["template"]["spec"]["template"]["spec"]["schedulingGates"] for r in rjobs] == [
        [{"name": "phalanx.dev/admission"}]
    ] * 2


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        (
            {"phalanx.dev/topology-mode": "sometimes", "phalanx.dev/topology-key": NB},
            "phalanx.dev/topology-mode",
        ),
        ({"phalanx.dev/topolgy-key": NB}, "did you mean phalanx.dev/topology-key"),
        (
            {"phalanx.dev/topology-key": NB, "alpha.jobset.sigs.k8s.io/exclusive-topology": NB},
            "exclusive placement",
        ),
        ({"phalanx.dev/slice-size": "2"}, "unknown Phalanx annotation"),
        (
            {"phalanx.dev/topology-key": "not a label key!"},
            'metadata.annotations[phalanx.dev/topology-key]: "not a label key!" is not a valid label key',
        ),
        (
            {"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": "rack/"},
            'metadata.annotations[phalanx.dev/slice-topology-key]: "rack/" is not a valid label key',
        ),
        (
            {"phalanx.dev/topology-key": " "},
            'metadata.annotations[phalanx.dev/topology-key]: "" is not a valid label key: must not be empty',
        ),
    ],
)
def test_bad_annotations_are_refused_naming_the_field(annotations: dict[str, str], field: str) -> None:
    with pytest.raises(kopf.AdmissionError) as error:
        GATE(body=kopf.Body(jobset_body(annotations=annotations, gated=False)), patch=kopf.Patch())
    assert field in str(error.value)


def test_a_jobset_with_a_bad_key_made_around_the_webhook_is_said_invalid_and_the_others_are_placed() -> None:
    """Its record reads the key as the webhook would have, so the pass says InvalidPolicy on it instead of
    failing to build its groups (which would stop every other gang too)."""
    bad = jobset_body("bad", annotations={"phalanx.dev/topology-key": "not a label key!"})
    good = jobset_body("good", created="2026-11-30T11:05:00Z")
    result = plan(jobset_cluster([bad, good], all_pods("bad") + all_pods("good")), NOW)
    warnings = [(e.involved.name, e.reason) for e in result.actions if isinstance(e, PostEvent)]
    assert ("bad", "InvalidPolicy") in warnings
    released = [a.pod.name for a in result.actions if isinstance(a, ReleasePod)]
    assert len(released) == 4 and all(name.startswith("good-") for name in released)


@pytest.mark.parametrize(("count", "refused"), [(8, False), (9, True)])
def test_a_jobset_of_more_replicated_jobs_than_a_workload_has_templates_is_refused(
    count: int, refused: bool
) -> None:
    """One PodGroupTemplate per replicated Job, at most 8 in a Workload (as upstream's): refused at creation,
    and said on one made around the webhook, whose groups could not be made (the others are placed)."""
    replicated = tuple((f"r{i}", 1, 1) for i in range(count))
    body = jobset_body("many", replicated=replicated, gated=False, gpus=1)
    if refused:
        with pytest.raises(kopf.AdmissionError) as error:
            GATE(body=kopf.Body(body), patch=kopf.Patch())
        assert f"spec.replicatedJobs: has {count} replicated Jobs" in str(error.value)
        assert "holds at most 8" in str(error.value)
    else:
        GATE(body=kopf.Body(body), patch=kopf.Patch())
    many = jobset_body("many", replicated=replicated, gpus=1)
    good = jobset_body("good", created="2026-11-30T11:05:00Z")
    pods = [jobset_pod("many", f"r{i}", 0, 0, global_index=i, gpus=1) for i in range(count)]
    result = plan(jobset_cluster([many, good], pods + all_pods("good")), NOW)
    said = [(e.involved.name, e.reason) for e in result.actions if isinstance(e, PostEvent)]
    assert (("many", "InvalidPolicy") in said) == refused
    released = {a.pod.name.split("-")[0] for a in result.actions if isinstance(a, ReleasePod)}
    assert released == ({"good"} if refused else {"many", "good"})


def test_a_jobset_of_a_system_priority_class_is_refused_and_said_invalid_if_made_around_the_webhook() -> None:
    """No PodGroup may carry a system class's priority (above 1000000000, as upstream's)."""
    body = jobset_body(gated=False)
    pod_spec = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["priorityClassName"] = "system-cluster-critical"
    with pytest.raises(kopf.AdmissionError) as error:
        GATE(body=kopf.Body(body), patch=kopf.Patch())
    field = "spec.replicatedJobs[0].template.spec.template.spec.priorityClassName"
    assert f'{field}: "system-cluster-critical" is a system PriorityClass' in str(error.value)
    critical = jobset_body("critical")
    critical_spec = critical["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    critical_spec["priorityClassName"] = "system-cluster-critical"
    good = jobset_body("good", created="2026-11-30T11:05:00Z")
    classes = [{"metadata": {"name": "system-cluster-critical"}, "value": 2_000_000_000}]
    pods = all_pods("critical") + all_pods("good")
    result = plan(
        cluster(owners=[("JobSet", critical), ("JobSet", good)], others=pods, priority_classes=classes), NOW
    )
    said = [(e.involved.name, e.reason) for e in result.actions if isinstance(e, PostEvent)]
    assert ("critical", "InvalidPolicy") in said
    released = [a.pod.name for a in result.actions if isinstance(a, ReleasePod)]
    assert len(released) == 4 and all(name.startswith("good-") for name in released)


@pytest.mark.parametrize(
    ("parallelism", "completions", "at_once"),
    [(4, None, 4), (4, 2, 2), (2, 6, 2), (4, 4, 4)],
)
def test_a_child_jobs_gang_is_the_pods_it_runs_at_once(
    parallelism: int, completions: int | None, at_once: int
) -> None:
    """The Job controller never runs more pods than completions are left: a child Job of fewer completions
    than parallelism makes only that many, and a gang of its parallelism would wait for ever."""
    jobset = jobset_body(replicated=(("workers", 1, parallelism),), gpus=1)
    if completions is not None:
        jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = completions
    pods = [jobset_pod("train", "workers", 0, i, gpus=1) for i in range(at_once)]
    result = plan(jobset_cluster([jobset], pods), NOW)
    made = [a.pod_group.spec.scheduling_policy.gang for a in result.actions if isinstance(a, CreatePodGroup)]
    assert [g.min_count for g in made if g is not None] == [at_once]
    assert len([a for a in result.actions if isinstance(a, ReleasePod)]) == at_once


def test_keys_are_read_without_surrounding_whitespace() -> None:
    """As a Job's annotations: a YAML accident, not a choice; the groups carry the key itself."""
    spaced = {"phalanx.dev/topology-key": f" {NB}", "phalanx.dev/slice-topology-key": f"{LB} "}
    GATE(body=kopf.Body(jobset_body(annotations=spaced, gated=False)), patch=kopf.Patch())
    result = plan(jobset_cluster([jobset_body(annotations=spaced)], all_pods()), NOW)
    keys = [
        *(
            a.group.spec.scheduling_constraints
            for a in result.actions
            if isinstance(a, CreateCompositePodGroup)
        ),
        *(a.pod_group.spec.scheduling_constraints for a in result.actions if isinstance(a, CreatePodGroup)),
    ]
    assert [k.topology[0].key for k in keys if k is not None and k.topology] == [NB, LB, LB]


def test_a_managed_label_on_a_replicated_jobs_template_is_refused() -> None:
    body = jobset_body(gated=False)
    body["spec"]["replicatedJobs"][0]["template"]["metadata"] = {"labels": {"phalanx.dev/managed": "true"}}
    with pytest.raises(kopf.AdmissionError, match=r"spec\.replicatedJobs\[0\]\.template\.metadata\.labels"):
        GATE(body=kopf.Body(body), patch=kopf.Patch())


def test_phalanx_annotations_are_fixed_once_the_jobset_exists() -> None:
    old = jobset_body(annotations={"phalanx.dev/topology-key": NB})
    edited = jobset_body(annotations={"phalanx.dev/topology-key": LB})
    with pytest.raises(kopf.AdmissionError, match="cannot change"):
        VALIDATE(body=kopf.Body(edited), old=kopf.Body(old))
    VALIDATE(body=kopf.Body(old), old=kopf.Body(old))


def _with(groups: list[Any], result: Plan) -> list[Any]:
    """The groups as the cache holds them once the plan's status writes are applied."""
    written = {ref.name: status for ref, status in (w for w in map(status_write, result.actions) if w)}
    return [dataclasses.replace(g, status=written.get(g.name, g.status)) for g in groups]


def test_a_failure_policy_restart_places_the_new_pods_whole_where_the_jobset_was() -> None:
    """Placed in nb-b (n1 busy); its child Jobs deleted and made anew by the JobSet controller, with both
    blocks free (nb-a first by the usual rule): the root remembers nb-b while no pod is there, and the new
    pods go back there whole."""
    jobset = jobset_body(annotations={"phalanx.dev/topology-key": NB})
    groups = made(plan(jobset_cluster([jobset], []), NOW))
    first = plan(jobset_cluster([jobset], all_pods(), groups=groups, busy=(1,)), NOW)
    assert {BLOCK[a.node] for a in first.actions if isinstance(a, ReleasePod)} == {"nb-b"}
    groups = _with(groups, first)
    (root,) = [g for g in groups if isinstance(g, CompositePodGroupRecord)]
    assert root.status.last_domain == "nb-b"
    gone = plan(jobset_cluster([jobset], [], groups=groups), NOW)  # the restart: every pod deleted
    groups = _with(groups, gone)
    (root,) = [g for g in groups if isinstance(g, CompositePodGroupRecord)]
    assert root.status.admission is None and root.status.last_domain == "nb-b"
    again = plan(jobset_cluster([jobset], all_pods(), groups=groups), NOW)
    assert {BLOCK[a.node] for a in again.actions if isinstance(a, ReleasePod)} == {"nb-b"}
    assert len([a for a in again.actions if isinstance(a, ReleasePod)]) == 4


def test_a_jobset_of_one_child_job_that_loses_a_node_keeps_its_domain_and_is_requeued_saying_where() -> None:
    """One child Job of four pods (a TrainJob's torch JobSet has that shape) runs in nb-a; n1 fails and its
    pod goes. The child Job is short of its minCount, but three of its pods still run there: the root keeps
    its recorded decision and its domain while they do, as a PodGroup keeps its own. The replacement finds
    no room in nb-a, so the JobSet is requeued whole, saying where it was left. (Before, the root dropped
    its decision as soon as its only child group was short, and the requeue of a real TrainJob said "3
    pod(s) of the tree were left, ..." without its block.)"""
    jobset = jobset_body(replicated=(("node", 1, 4),), annotations={"phalanx.dev/topology-key": NB})
    pods = [jobset_pod("train", "node", 0, i) for i in range(4)]
    groups = made(plan(jobset_cluster([jobset], pods), NOW))
    first = plan(jobset_cluster([jobset], pods, groups=groups, busy=(5,)), NOW)
    nodes = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    assert sorted(nodes.values()) == ["n1", "n2", "n3", "n4"]
    groups = _with(groups, first)
    running = []
    for i in range(4):
        pod = jobset_pod("train", "node", 0, i, node=nodes[f"train-node-0-{i}"], gated=False)
        pod["status"]["phase"] = "Running"
        running.append(pod)
    (lost,) = [p for p in running if p["spec"]["nodeName"] == "n1"]
    left = [p for p in running if p is not lost]
    later = NOW + dt.timedelta(seconds=5)
    short = plan(jobset_cluster([jobset], left, groups=groups, busy=(1,)), later)  # n1 unusable now
    groups = _with(groups, short)
    (root,) = [g for g in groups if isinstance(g, CompositePodGroupRecord)]
    assert root.status.admission is not None and root.status.domain == "nb-a", root.status
    replacement = jobset_pod("train", "node", 0, int(lost["metadata"]["name"].rsplit("-", 1)[1]))
    replacement["metadata"].update(name="train-node-0-again", uid="uid-again")
    broken = plan(jobset_cluster([jobset], [*left, replacement], groups=groups, busy=(1,)), later)
    assert not [a for a in broken.actions if isinstance(a, ReleasePod)]  # nb-b has room, but not nb-a
    (suspend,) = [a for a in broken.actions if isinstance(a, SuspendJob)]
    assert suspend.job.kind == "JobSet"
    assert suspend.why.startswith("below its minCount: 3 pod(s) of the tree were left in nb-a, "), suspend.why


def test_a_jobset_requeued_by_phalanx_forgets_its_domain() -> None:
    """A requeue (preempted, broken) places it afresh, as a Job's: the domain it left is no reason to go
    back there."""
    jobset = jobset_body(annotations={"phalanx.dev/topology-key": NB})
    groups = made(plan(jobset_cluster([jobset], []), NOW))
    groups = _with(groups, plan(jobset_cluster([jobset], all_pods(), groups=groups, busy=(1,)), NOW))
    requeued = jobset_body(
        annotations={"phalanx.dev/topology-key": NB, "phalanx.dev/requeued": "preempted by podgroup x"},
        suspend=True,
    )
    groups = _with(groups, plan(jobset_cluster([requeued], [], groups=groups), NOW))
    assert all(g.status.last_domain is None for g in groups)
    again = plan(jobset_cluster([jobset], all_pods(), groups=groups), NOW)
    assert {BLOCK[a.node] for a in again.actions if isinstance(a, ReleasePod)} == {"nb-a"}


def test_an_owner_whose_units_cannot_be_made_is_said_once_and_the_others_are_still_scheduled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever makes one owner's units fail (an object no check foresaw, a bug) stops only that owner: a
    Warning on it once, its pods left gated, and every other owner planned — whole passes and incremental."""
    real = JobSetKind.owner_units

    def failing(self: JobSetKind, state: Any, view: Any) -> Any:
        if state.owner.name == "bad":
            raise ValueError("no units for this one")
        return real(self, state, view)

    monkeypatch.setattr(JobSetKind, "owner_units", failing)
    bad, good = jobset_body("bad"), jobset_body("good", created="2026-11-30T11:05:00Z")
    pods = [
        jobset_pod(n, "workers", j, i, global_index=j)
        for n in ("bad", "good")
        for j in range(2)
        for i in range(2)
    ]
    for memo in (None, UnitMemo()):
        result = plan(jobset_cluster([bad, good], pods, memo=memo), NOW)
        released = {a.pod.name.rsplit("-workers-", 1)[0] for a in result.actions if isinstance(a, ReleasePod)}
        assert released == {"good"}
        (warning,) = [a for a in result.actions if isinstance(a, PostEvent) and a.involved.name == "bad"]
        assert warning.reason == "InvalidPolicy" and "no units for this one" in warning.message
        assert "its pods stay gated" in warning.message


@pytest.mark.parametrize(("mode", "released"), [("required", 0), ("preferred", 6)])
def test_a_preferred_jobset_goes_wider_when_no_domain_of_its_key_holds_it(mode: str, released: int) -> None:
    """6 pods of 8 GPUs; workers 1 and 5 busy leave 3 nodes per network block: required waits, preferred is
    placed over both blocks and says so; the mode is kept on the CompositePodGroup it makes."""
    js = jobset_body(
        replicated=(("workers", 3, 2),),
        annotations={"phalanx.dev/topology-key": NB, "phalanx.dev/topology-mode": mode},
    )
    pods = [jobset_pod("train", "workers", j, i, global_index=j) for j in range(3) for i in range(2)]
    result = plan(jobset_cluster([js], pods, busy=(1, 5)), NOW)
    assert len([a for a in result.actions if isinstance(a, ReleasePod)]) == released
    (root,) = [a.group for a in result.actions if isinstance(a, CreateCompositePodGroup)]
    annotations = root.metadata["annotations"]
    assert annotations.get("phalanx.dev/topology-mode") == (None if mode == "required" else "preferred")
    if released:
        (admitted,) = [
            a for a in result.actions if isinstance(a, PostEvent) and a.involved.kind == "CompositePodGroup"
        ]
        assert "no domain of " + NB in admitted.message and "topology mode preferred" in admitted.message


# ---------------------------------------------------------------------- minCount edited around the webhook
@pytest.mark.parametrize(
    ("edits", "free", "released", "ignored"),
    [
        # Two child Jobs of 2 pods; workers-0's PodGroup edited to 1 (validate-podgroup fails open).
        ({"-workers-0": 1}, 1, 0, ["-workers-0: spec.schedulingPolicy.gang.minCount 1 differs from 2"]),
        ({"-workers-0": 1}, 3, 0, ["-workers-0: spec.schedulingPolicy.gang.minCount 1 differs from 2"]),
        ({"-workers-0": 1, "-workers-1": 1}, 8, 4, ["-workers-0: ", "-workers-1: "]),
        ({"-workers-1": 2}, 3, 0, []),  # the size it was made with: nothing to say
    ],
)
def test_a_child_jobs_gang_size_is_its_jobsets_whatever_its_pod_group_was_edited_to(
    edits: dict[str, int], free: int, released: int, ignored: list[str]
) -> None:
    js = jobset_body()
    first = plan(jobset_cluster([js], all_pods(), busy=range(1, 9)), NOW)
    groups = []
    for g in made(first):
        count = next((n for end, n in edits.items() if g.name.endswith(end)), None)
        if isinstance(g, PodGroupRecord) and count is not None:
            gang = SchedulingPolicy.of_gang(count)
            g = dataclasses.replace(g, spec=g.spec.model_copy(update={"scheduling_policy": gang}))
        groups.append(g)
    result = plan(jobset_cluster([js], all_pods(), groups=groups, busy=range(free + 1, 9)), NOW)
    assert len([a for a in result.actions if isinstance(a, ReleasePod)]) == released
    said = sorted(
        e.message for e in result.actions if isinstance(e, PostEvent) and e.reason == "ImmutableChangeIgnored"
    )
    assert len(said) == len(ignored), said
    for part, message in zip(ignored, said, strict=True):
        assert part in message and message.endswith(
            "which the JobSet's spec gives and Phalanx keeps (the gang sizes of a JobSet's groups follow its "
            "spec; recreate the JobSet to change them)"
        ), message


def deleting(body: dict[str, Any]) -> dict[str, Any]:
    """The body as it is while its deletion waits (foreground: for its dependents; or a finalizer)."""
    body["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    body["metadata"]["finalizers"] = ["foregroundDeletion"]
    return body


def test_a_jobset_being_deleted_gets_nothing_made_again_and_nothing_placed() -> None:
    """Deleted in the foreground (or held by another tool's finalizer), the garbage collector deletes its
    Workload and groups before it: they are not made again (nor said to be), and its gated pods, which go
    with it, are not placed even where they would fit whole."""
    result = plan(jobset_cluster([deleting(jobset_body())], all_pods()), NOW)
    assert not [a for a in result.actions if isinstance(a, (CreateWorkload, CreateCompositePodGroup))]
    assert not [a for a in result.actions if isinstance(a, (CreatePodGroup, ReleasePod, PatchStatus))]
    assert not [a for a in result.actions if isinstance(a, PostEvent)], result.actions
    # With its groups still there (a background deletion held by a finalizer), nothing is placed either.
    groups = made(plan(jobset_cluster([jobset_body()], all_pods()), NOW))
    held = plan(jobset_cluster([deleting(jobset_body())], all_pods(), groups=groups), NOW)
    assert not [a for a in held.actions if isinstance(a, ReleasePod)]
    assert not [a for a in held.actions if isinstance(a, (CreateWorkload, CreatePodGroup))]
