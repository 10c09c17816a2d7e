"""TrainJob (issue 17) against the real Kubeflow Trainer v2.2.0 and JobSet v0.11.1 controllers, with Phalanx
on the same cluster. A ClusterTrainingRuntime of the torch-distributed shape (one replicated Job `node`,
numNodes 4, 8 GPUs a node) and a TrainJob labelled for Phalanx with a network-block key: Phalanx's runtime
patch carries the label to the JobSet Trainer makes, which is then gated and placed all or nothing in one
network block; `kubectl get podgroups`, events and `phalanx explain trainjob/NAME` name the TrainJob."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .kinds import (
    JOBSET_NAME,
    JOBSETS,
    RESTART_ATTEMPT,
    RUNTIMES,
    TAS,
    TRAINJOBS,
    condition,
    delete_runtime,
    ensure,
    events_of,
    explain,
    fail_pod,
    gated,
    initializer_runtime,
    jobset_gang,
    jobset_pods,
    kubectl,
    label_of,
    objects_made,
    owned,
    phalanx_objects,
    reasons_of,
    requeued_after_a_node_failure,
    runtime_annotations,
    tas_runtime,
    torch_runtime,
    trainjob,
    wait_bound,
    wait_unschedulable,
    whole_gangs,
)
from .kube import NB_KEY, Namespace, bound, hold, node_labels, wait_for

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")

pytestmark = [pytest.mark.integration, pytest.mark.addons("trainer")]

RUNTIME = "torch-distributed-4x8"
KEY = {"phalanx.dev/topology-key": NB_KEY}


def test_a_torch_trainjob_runs_all_four_nodes_in_one_network_block_or_nothing(kinds_ns: Namespace) -> None:
    """was-worker and was-worker5 busy: six nodes are free, three in each network block, so the four nodes
    of the TrainJob fit nowhere whole: nothing starts. Freeing was-worker makes nb-a whole: all four start
    there together."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    ns.fill("was-worker", "was-worker5")
    with whole_gangs(ns, {"llm": 4}, jobset_gang):
        ns.create(trainjob("llm", RUNTIME, KEY))
        patches = ns.get(f"{TRAINJOBS}/llm")["spec"]["runtimePatches"]
        # Phalanx's entry, and Kueue's: its TrainJob integration is on, and its webhook adds one (empty for a
        # TrainJob not queued in Kueue) to every TrainJob.
        assert sorted(p["manager"] for p in patches) == ["kueue.x-k8s.io/manager", "phalanx.dev/manager"]
        made = wait_for("its JobSet", lambda: _get(ns, f"{JOBSETS}/llm"), timeout=60)
        assert made["metadata"]["labels"]["phalanx.dev/managed"] == "true"  # through the runtime patch
        assert made["metadata"]["annotations"]["phalanx.dev/topology-key"] == NB_KEY
        wait_unschedulable(ns, "TrainJob/llm")
        hold("no llm pod bound", lambda: not bound(jobset_pods(ns, "llm")), seconds=2)
        assert len(gated(jobset_pods(ns, "llm"))) == 4
        waiting = explain(ns, "trainjob/llm")
        print(waiting)
        assert waiting.startswith(
            f"trainjob/llm in namespace {ns.name}: waiting: composite group is unschedulable"
        )
        ns.unfill("was-worker")
        pods = wait_bound(ns, "llm", lambda: jobset_pods(ns, "llm"), 4)
    print(ns.where("jobset.sigs.k8s.io/jobset-name=llm"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    assert len({p["spec"]["nodeName"] for p in pods}) == 4

    table = kubectl(ns, "get", "podgroups.scheduling.phalanx.dev")
    print(table)
    header, row = table.splitlines()[:2]
    assert header.split()[:2] == ["NAME", "OWNER"] and row.split()[1] == "TrainJob/llm"
    wait_for(  # written once Phalanx has seen the pods bound (a pass after the release)
        "the CompositePodGroup's status.domain nb-a",
        lambda: [
            r
            for r in owned(ns, "TrainJob/llm", "compositepodgroups")
            if (r.get("status") or {}).get("domain") == "nb-a"
        ],
        timeout=120,
    )
    wait_for(
        "events PodGroupCreated and Admitted on the TrainJob",
        lambda: {"PodGroupCreated", "Admitted"} <= reasons_of(ns, "TrainJob", "llm") or None,
    )
    assert not reasons_of(ns, "JobSet", "llm") & {"Admitted", "PodGroupCreated"}
    admitted = explain(ns, "TrainJob/llm")  # as the OWNER column spells it
    print(admitted)
    assert admitted.startswith(
        f"trainjob/llm in namespace {ns.name}: admitted in {NB_KEY}=nb-a: 4 of 4 pods bound"
    )


STEP = "jobset.sigs.k8s.io/replicatedjob-name"


def _trainer_step(pod: dict[str, Any]) -> str:
    """The gang the watch checks: the trainer step's pods (the initializers end before it is made)."""
    labels = pod["metadata"].get("labels") or {}
    return str(labels.get(JOBSET_NAME, "")) if labels.get(STEP) == "node" else ""


def test_a_trainjob_with_initializers_is_decided_whole_and_its_nodes_run_whole_where_it_was_put(
    kinds_ns: Namespace,
) -> None:
    """Trainer's fine-tuning runtimes: a dataset and a model initializer first, the four nodes `dependsOn`
    both Complete (JobSet makes their Job only after). was-worker and was-worker5 busy, no network block has
    four free nodes: nothing of the TrainJob starts, not even its initializers (the staged tree is decided
    whole with its first stage, so they never take room its nodes then lack). Freeing was-worker: the
    initializers run in nb-a and end, then the four nodes are made and bound together on the four nodes
    recorded for them when the tree was decided, never split."""
    ns = kinds_ns
    runtime = "torch-initializers-4x8"
    ensure(ns, RUNTIMES, initializer_runtime(runtime, 4))
    ns.fill("was-worker", "was-worker5")
    with whole_gangs(ns, {"tune": 4}, _trainer_step):
        ns.create(trainjob("tune", runtime, KEY))
        wait_unschedulable(ns, "TrainJob/tune")
        hold("no pod of tune bound", lambda: not bound(jobset_pods(ns, "tune")), seconds=2)
        assert {p["metadata"]["labels"][STEP] for p in gated(jobset_pods(ns, "tune"))} == {
            "dataset-initializer",
            "model-initializer",
        }
        waiting = explain(ns, "trainjob/tune")
        print(waiting)
        assert waiting.startswith(
            f"trainjob/tune in namespace {ns.name}: waiting: composite group is unschedulable"
        )
        ns.unfill("was-worker")
        nodes = wait_bound(
            ns,
            "tune's nodes",
            lambda: [p for p in jobset_pods(ns, "tune") if p["metadata"]["labels"][STEP] == "node"],
            4,
            timeout=120,
        )
    labels = node_labels(ns.api)
    everyone = ns.pods(f"{JOBSET_NAME}=tune")  # the ended initializers too
    print(ns.where("jobset.sigs.k8s.io/jobset-name=tune"))
    initializers = [p for p in everyone if p["metadata"]["labels"][STEP] != "node"]
    assert len(initializers) == 2 and all(p["status"]["phase"] == "Succeeded" for p in initializers)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in everyone} == {"nb-a"}
    assert len({p["spec"]["nodeName"] for p in nodes}) == 4
    (root,) = owned(ns, "TrainJob/tune", "compositepodgroups")
    slots = sorted(a["node"] for a in root["status"]["admission"]["assignments"] if "node-0-" in a["pod"])
    assert slots == sorted(p["spec"]["nodeName"] for p in nodes), (slots, root["status"]["admission"])
    wait_for(
        "the root Running",
        lambda: (
            (owned(ns, "TrainJob/tune", "compositepodgroups")[0].get("status") or {}).get("phase")
            == "Running"
            or None
        ),
        timeout=60,
    )
    assert "Admitted" in reasons_of(ns, "TrainJob", "tune")
    admitted = explain(ns, "trainjob/tune")
    print(admitted)
    assert admitted.startswith(f"trainjob/tune in namespace {ns.name}: admitted in {NB_KEY}=nb-a"), admitted


def _get(ns: Namespace, path: str) -> dict[str, object] | None:
    try:
        body: dict[str, object] = ns.get(path)
        return body
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def test_a_trainjob_with_a_bad_phalanx_annotation_is_refused_naming_the_field(kinds_ns: Namespace) -> None:
    ensure(kinds_ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    bad = trainjob("typo", RUNTIME, {"phalanx.dev/topology-mode": "sometimes", **KEY})
    with pytest.raises(ApiError) as refused:
        kinds_ns.create(bad)
    message = json.loads(refused.value.body)["message"]
    print(message)
    assert message.startswith('admission webhook "gate-trainjob.phalanx.dev" denied the request: ')
    assert (
        "metadata.annotations[phalanx.dev/topology-mode]: 'sometimes' is not one of required, preferred"
        in message
    )


# ---------------------------------------------------------------------- the user's suspend and resume
def _suspend(ns: Namespace, name: str, on: bool) -> None:
    ns.api.request(
        "PATCH",
        f"{TRAINJOBS.replace('{ns}', ns.name)}/{name}",
        {"spec": {"suspend": on}},
        "application/merge-patch+json",
    )


def _text(event: dict[str, Any]) -> str:
    return str(event.get("message") or event.get("note") or "")


def _made_once(ns: Namespace, owner: str) -> dict[str, list[str]] | None:
    """One Workload, one CompositePodGroup and one PodGroup for `owner` (their uids), else None."""
    made = phalanx_objects(ns, owner)
    return made if [len(uids) for uids in made.values()] == [1, 1, 1] else None


def test_a_trainjob_suspended_and_resumed_by_its_user_comes_back_gated_and_runs_whole_again(
    kinds_ns: Namespace,
) -> None:
    """The TrainJob runs whole in nb-a; its user suspends it (spec.suspend true): Trainer suspends its JobSet,
    the JobSet controller its child Jobs, and every pod goes. While it is suspended five nodes fill up, so on
    resume its new pods are born gated and wait, whole, until nb-a has four free nodes again; then all four
    start together. Its groups are the same objects throughout, and say Suspended, then why it waits, then
    Admitted."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    with whole_gangs(ns, {"pause": 4}, jobset_gang):
        ns.create(trainjob("pause", RUNTIME, KEY))
        first = wait_bound(ns, "pause", lambda: jobset_pods(ns, "pause"), 4)
        made = wait_for(
            "one Workload, CompositePodGroup and PodGroup", lambda: _made_once(ns, "TrainJob/pause")
        )
        _suspend(ns, "pause", True)
        wait_for(
            "its JobSet suspended and every pod gone",
            lambda: (
                (
                    ns.get(f"{JOBSETS}/pause")["spec"].get("suspend") is True
                    and not ns.pods("jobset.sigs.k8s.io/jobset-name=pause")
                )
                or None
            ),
            timeout=90,
        )
        wait_for(
            "the root says Suspended",
            lambda: (
                condition(owned(ns, "TrainJob/pause", "compositepodgroups")[0]).get("reason") == "Suspended"
                or None
            ),
        )
        ns.fill(*FIVE_BUSY)
        _suspend(ns, "pause", False)
        wait_unschedulable(ns, "TrainJob/pause")
        hold("no resumed pod bound", lambda: not bound(jobset_pods(ns, "pause")), seconds=2)
        resumed = jobset_pods(ns, "pause")
        assert len(gated(resumed)) == 4, ns.where("jobset.sigs.k8s.io/jobset-name=pause")
        assert not {p["metadata"]["uid"] for p in first} & {p["metadata"]["uid"] for p in resumed}
        ns.unfill("was-worker")
        pods = wait_bound(ns, "pause", lambda: jobset_pods(ns, "pause"), 4)
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    assert phalanx_objects(ns, "TrainJob/pause") == made  # the same groups, none made again
    root = wait_for(
        "the root Admitted again",
        lambda: (
            r
            if condition(r := owned(ns, "TrainJob/pause", "compositepodgroups")[0]).get("status") == "True"
            else None
        ),
        timeout=60,
    )
    assert root["status"].get("phase") in ("Admitted", "Running"), root["status"]
    body = ns.get(f"{TRAINJOBS}/pause")
    assert not body["spec"].get("suspend") and "phalanx.dev/requeued" not in body["metadata"].get(
        "annotations", {}
    )
    assert int(ns.get(f"{JOBSETS}/pause").get("status", {}).get("restarts") or 0) == 0


def test_a_trainjob_deleted_while_its_gang_waits_leaves_nothing_of_phalanxs_behind(
    kinds_ns: Namespace,
) -> None:
    """A TrainJob waits whole (three free nodes of each block for four pods) and its user deletes it
    (foreground, as `kubectl delete --cascade=foreground`): the TrainJob, its JobSet, their Jobs and gated
    pods, and every Workload and group Phalanx made go, and nothing is made again while they go."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    ns.fill("was-worker", "was-worker5")
    ns.create(trainjob("gone", RUNTIME, KEY))
    wait_unschedulable(ns, "TrainJob/gone")
    made = wait_for("its groups", lambda: _made_once(ns, "TrainJob/gone"))
    with objects_made(ns, "TrainJob/gone") as seen:
        ns.api.request(
            "DELETE",
            f"{TRAINJOBS.replace('{ns}', ns.name)}/gone",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
        )

        def all_gone() -> bool:
            left = [p for p in (f"{TRAINJOBS}/gone", f"{JOBSETS}/gone") if _get(ns, p) is not None]
            return (
                not left
                and not ns.pods(f"{JOBSET_NAME}=gone")
                and not any(phalanx_objects(ns, "TrainJob/gone").values())
            )

        wait_for("the TrainJob deleted with everything it had", all_gone, timeout=90)
    assert {p: sorted(uids) for p, uids in seen.items()} == made  # nothing made again while it went
    created = [e for e in events_of(ns, "TrainJob", "gone") if e["reason"] == "PodGroupCreated"]
    assert [e.get("count", 1) for e in created] == [1], created


# ---------------------------------------------------------------------- failed and deleted pods
RESTARTING = "torch-distributed-4x8-restart"


def restarting_runtime() -> dict[str, Any]:
    """The torch runtime whose JobSet restarts once when a node's Job fails (failurePolicy maxRestarts 1),
    each Job failing at its first failed pod (backoffLimit 0)."""
    runtime = torch_runtime(RESTARTING, 4)
    spec = runtime["spec"]["template"]["spec"]
    spec["failurePolicy"] = {"maxRestarts": 1}
    spec["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    return runtime


def test_a_trainjob_whose_pod_fails_is_restarted_by_its_jobset_and_placed_whole_again(
    kinds_ns: Namespace,
) -> None:
    """A pod of a running TrainJob fails: its Job fails, and the JobSet's failurePolicy restarts it (every
    child Job deleted and made again). The new pods are born gated and placed whole, in one network block,
    by a second decision on the same groups; the TrainJob neither fails nor is suspended."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, restarting_runtime())
    with whole_gangs(ns, {"again": 4}, jobset_gang):
        ns.create(trainjob("again", RESTARTING, KEY))
        first = wait_bound(ns, "again", lambda: jobset_pods(ns, "again"), 4)
        made = wait_for("its groups", lambda: _made_once(ns, "TrainJob/again"))
    fail_pod(ns, first[0])  # the gang is one short until the JobSet restarts: watched again after that
    wait_for("the restart's first pod", lambda: _restarted(ns, "again"), timeout=120)
    with whole_gangs(ns, {"again": 4}, jobset_gang):
        pods = wait_bound(ns, "again", lambda: _restarted(ns, "again"), 4, timeout=180)
    print(ns.where(f"{JOBSET_NAME}=again"))
    labels = node_labels(ns.api)
    assert len({label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods}) == 1
    assert int(ns.get(f"{JOBSETS}/again").get("status", {}).get("restarts") or 0) == 1
    assert phalanx_objects(ns, "TrainJob/again") == made  # the same groups, none made again
    (root,) = owned(ns, "TrainJob/again", "compositepodgroups")
    assert root["status"]["admission"]["attempt"] == 1  # a second decision, for the new pods
    body = ns.get(f"{TRAINJOBS}/again")
    assert not body["spec"].get("suspend")
    assert not [c for c in body.get("status", {}).get("conditions", []) if c["type"] == "Failed"]
    assert "Requeued" not in reasons_of(ns, "TrainJob", "again")


def _restarted(ns: Namespace, name: str) -> list[dict[str, Any]]:
    return [p for p in jobset_pods(ns, name) if p["metadata"]["labels"].get(RESTART_ATTEMPT) == "1"]


def test_a_pod_of_a_running_trainjob_deleted_by_hand_is_replaced_in_the_gangs_block(
    kinds_ns: Namespace,
) -> None:
    """A pod of a running TrainJob is deleted by hand: its Job (backoffLimit left to Trainer's runtime) makes
    a replacement, born gated, which Phalanx places beside the three still running, in their network block:
    the gang is whole again, on the same groups."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    ns.fill("was-worker5")  # nb-b has three free nodes: the gang and its replacement can only be in nb-a
    with whole_gangs(ns, {"hand": 4}, jobset_gang):
        ns.create(trainjob("hand", RUNTIME, KEY))
        first = wait_bound(ns, "hand", lambda: jobset_pods(ns, "hand"), 4)
        made = wait_for("its groups", lambda: _made_once(ns, "TrainJob/hand"))
    ns.delete_pod(first[0]["metadata"]["name"])  # one short until its replacement binds

    def replaced() -> list[dict[str, Any]] | None:
        pods = jobset_pods(ns, "hand")
        names = {p["metadata"]["name"] for p in pods}
        whole = len(pods) == 4 and len(bound(pods)) == 4
        return pods if whole and first[0]["metadata"]["name"] not in names else None

    pods = wait_for("the replacement bound beside the other three", replaced, timeout=120)
    print(ns.where(f"{JOBSET_NAME}=hand"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    assert phalanx_objects(ns, "TrainJob/hand") == made
    assert not ns.get(f"{TRAINJOBS}/hand")["spec"].get("suspend")


def test_a_trainjob_whose_block_has_no_room_for_its_lost_pod_is_suspended_resumed_and_runs_whole_elsewhere(
    kinds_ns: Namespace,
) -> None:
    """A TrainJob of the torch runtime (four 8-GPU nodes in one network block: it fills one), not queued in
    Kueue, runs whole; one of its nodes fails (a NoExecute taint: the taint manager evicts its pod) and its
    block has no other node. Phalanx requeues it whole: it suspends the *TrainJob* (spec.suspend true,
    phalanx.dev/requeued saying why; Trainer suspends its JobSet, the JobSet controller its child Job,
    whose three pods left go), resumes it once they are gone (the note cleared; Trainer resumes the
    JobSet), and its four new pods, born gated, run whole in the other block. The child Job (the runtime
    sets no backoffLimit: the Job's default 6; no failurePolicy) counts the eviction as its one failure,
    the suspension none; the same child Job throughout, no JobSet restart, the TrainJob not failed."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))
    run = requeued_after_a_node_failure(ns, "TrainJob/moved", trainjob("moved", RUNTIME, KEY), 4)
    why = run.moved_whole()
    again = run.blocks[1]
    # Phalanx suspended the TrainJob with its note and resumed it, the note gone; Trainer kept its JobSet
    # in step (Phalanx writes no note there). Nothing else.
    assert run.notes == {
        "TrainJob": [(False, ""), (True, why), (False, "")],
        "JobSet": [(False, ""), (True, ""), (False, "")],
    }, run.notes
    assert ("Requeued", f"requeued by Phalanx: {why}") in run.said, run.said
    assert run.said[-1][0] == "Admitted", run.said
    # Made again by the same child Job, resumed: no JobSet restart.
    assert {p["metadata"]["labels"].get(RESTART_ATTEMPT) for p in run.pods} == {"0"}
    assert not (ns.get(f"{JOBSETS}/moved").get("status") or {}).get("restarts")
    ((child, uid),) = run.children.items()
    job = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{child}")
    assert job["metadata"]["uid"] == uid
    assert (int(job["status"].get("failed") or 0), job["spec"]["backoffLimit"]) == (1, 6), job["status"]
    body = ns.get(f"{TRAINJOBS}/moved")
    assert not body["spec"].get("suspend")
    assert condition(body, "Failed").get("status") != "True", body.get("status")
    wait_for(
        f"the root's status.domain {again}",
        lambda: [
            r
            for r in owned(ns, "TrainJob/moved", "compositepodgroups")
            if (r.get("status") or {}).get("domain") == again
        ],
        timeout=60,
    )


# ---------------------------------------------------------------------- Kueue's TAS through Trainer
BOTH = "Kueue's Topology-Aware Scheduling and Phalanx would both place these pods"
POD_TEMPLATE = "spec.template.spec.replicatedJobs[0].template.spec.template"
REFUSED_BY_US = 'admission webhook "gate-trainjob.phalanx.dev" denied the request: '


def _nothing_of(ns: Namespace, name: str) -> bool:
    """No TrainJob, JobSet, pod, event, Workload or group of Phalanx's for `name` in the namespace."""
    return (
        _get(ns, f"{TRAINJOBS}/{name}") is None
        and _get(ns, f"{JOBSETS}/{name}") is None
        and not ns.pods()
        and not events_of(ns, "TrainJob", name)
        and not any(phalanx_objects(ns, f"TrainJob/{name}").values())
    )


def _refusal(ns: Namespace, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as refused:
        ns.create(body)
    assert refused.value.status == 422, refused.value
    message: str = json.loads(refused.value.body)["message"]
    print(message)
    return message


def test_a_trainjob_whose_runtime_asks_kueue_tas_is_refused_naming_the_runtime_and_runs_whole_once_fixed(
    kinds_ns: Namespace,
) -> None:
    """A ClusterTrainingRuntime whose trainer pods carry kueue.x-k8s.io/podset-required-topology: a
    Phalanx-managed TrainJob of it is refused at its creation, where its user looks (kubectl's answer),
    naming the runtime, the runtime's field and both systems. Nothing is made for it: no TrainJob, no JobSet
    (Trainer never tries, so no refusal of Trainer's retries either), no pod, no group. Its runtime's owner
    removes the annotation and the same TrainJob, created again, runs whole in one network block."""
    ns = kinds_ns
    runtime = f"torch-tas-{uuid.uuid4().hex[:5]}"
    ensure(ns, RUNTIMES, tas_runtime(runtime))
    try:
        message = _refusal(ns, trainjob("tas", runtime, KEY))
        assert message.startswith(
            f"{REFUSED_BY_US}spec.runtimeRef: ClusterTrainingRuntime {runtime} has "
            f"{POD_TEMPLATE}.metadata.annotations[{TAS}], which Kubeflow Trainer puts on this TrainJob's "
            f"pods: {BOTH}"
        )
        assert (
            f"refer to a runtime without {TAS} (or remove it from ClusterTrainingRuntime {runtime})"
            in message
        )
        assert "or remove the label phalanx.dev/managed from the TrainJob" in message
        hold("nothing made for it", lambda: _nothing_of(ns, "tas"), seconds=2)

        runtime_annotations(ns, runtime, None)
        with whole_gangs(ns, {"tas": 4}, jobset_gang):
            ns.create(trainjob("tas", runtime, KEY))
            pods = wait_bound(ns, "tas", lambda: jobset_pods(ns, "tas"), 4)
        labels = node_labels(ns.api)
        assert len({label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods}) == 1
        assert not [p for p in pods if TAS in (p["metadata"].get("annotations") or {})]
        assert "TrainJobResourcesCreationFailed" not in reasons_of(ns, "TrainJob", "tas")
    finally:
        delete_runtime(ns, runtime)


def test_a_trainjob_whose_runtime_patch_asks_kueue_tas_is_refused_naming_the_entry_and_runs_whole_without_it(
    kinds_ns: Namespace,
) -> None:
    """A TrainJob's own runtime patch (Trainer v2.2's spec.runtimePatches: an entry of the user's manager
    patching the `node` replicated Job's pod template) adds kueue.x-k8s.io/podset-required-topology: refused
    at its creation naming the entry's field, its manager and both systems; nothing is made. The same entry
    without it (another annotation kept) is accepted beside Phalanx's entry and Kueue's, and the TrainJob runs
    whole in one network block with the entry's annotation on its pods."""
    ns = kinds_ns
    ensure(ns, RUNTIMES, torch_runtime(RUNTIME, 4))

    def patched(annotations: dict[str, str]) -> dict[str, Any]:
        body = trainjob("patched", RUNTIME, KEY)
        pod = {"metadata": {"annotations": annotations}}
        rjob = {"name": "node", "template": {"spec": {"template": pod}}}
        entry = {"manager": "example.com/placement", "trainingRuntimeSpec": {"template": {"spec": {}}}}
        entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [rjob]
        body["spec"]["runtimePatches"] = [entry]
        return body

    message = _refusal(ns, patched({TAS: NB_KEY, "example.com/team": "vision"}))
    assert message.startswith(
        f"{REFUSED_BY_US}spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template"
        f".spec.template.metadata.annotations[{TAS}]: {BOTH}"
    )
    assert f"remove {TAS} from this runtime patch (manager example.com/placement)" in message
    hold("nothing made for it", lambda: _nothing_of(ns, "patched"), seconds=2)

    with whole_gangs(ns, {"patched": 4}, jobset_gang):
        created = ns.create(patched({"example.com/team": "vision"}))
        managers = sorted(p["manager"] for p in created["spec"]["runtimePatches"])
        assert managers == ["example.com/placement", "kueue.x-k8s.io/manager", "phalanx.dev/manager"]
        pods = wait_bound(ns, "patched", lambda: jobset_pods(ns, "patched"), 4)
    labels = node_labels(ns.api)
    assert len({label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods}) == 1
    assert {(p["metadata"].get("annotations") or {}).get("example.com/team") for p in pods} == {"vision"}


def test_a_runtime_given_kueue_tas_after_its_trainjobs_creation_is_said_in_the_trainjobs_events(
    kinds_ns: Namespace, phalanx_addons: OperatorProcess
) -> None:
    """What the TrainJob's webhook cannot see: its runtime given Kueue's TAS after the TrainJob was created.
    The TrainJob is created suspended (its JobSet with it); its runtime's owner adds the annotation: Trainer's
    next apply of the JobSet is refused by Phalanx's JobSet validator, and Trainer's Warning on the TrainJob
    (TrainJobResourcesCreationFailed) says, whole, that the JobSet is the TrainJob's, which annotation, both
    systems and where to remove it. The JobSet is deleted, so Trainer makes it again from the runtime:
    Phalanx's JobSet gate refuses that, saying the same. No JobSet, pod or group meanwhile. The annotation
    removed, Trainer's next try makes the JobSet, and the TrainJob, resumed, runs whole."""
    ns = kinds_ns
    runtime = f"torch-late-{uuid.uuid4().hex[:5]}"
    ensure(ns, RUNTIMES, torch_runtime(runtime, 4))
    path = f"{TRAINJOBS.replace('{ns}', ns.name)}/late"
    field = f"spec.replicatedJobs[0].template.spec.template.metadata.annotations[{TAS}]: {BOTH}"
    try:
        body = trainjob("late", runtime, KEY)
        body["spec"]["suspend"] = True
        ns.create(body)
        wait_for("its suspended JobSet", lambda: _get(ns, f"{JOBSETS}/late"), timeout=60)
        runtime_annotations(ns, runtime, {TAS: NB_KEY})

        # Trainer reads the runtime from its informer. Deleting the JobSet before that has the annotation lets
        # Trainer make it again without it (seen once on a loaded machine, 2026-12-07: the gate let that
        # JobSet pass, and Trainer's next apply, an update, was refused by the validator instead). So first
        # each edit of the TrainJob makes Trainer apply its JobSet again, until one apply is refused by the
        # validator: then Trainer has the annotation, and the JobSet it makes next carries it.
        touches = iter(range(1_000_000))

        def refused() -> list[dict[str, Any]]:
            found = [
                e
                for e in events_of(ns, "TrainJob", "late")
                if e["reason"] == "TrainJobResourcesCreationFailed"
                and 'admission webhook "validate-jobset.phalanx.dev" denied the request: ' in _text(e)
            ]
            if not found:
                touch = {"metadata": {"annotations": {"example.com/touch": str(next(touches))}}}
                ns.api.request("PATCH", path, touch, "application/merge-patch+json")
            return found

        (event, *_) = wait_for("Trainer's warning on the TrainJob", refused, timeout=90, interval=1.0)
        text = _text(event)
        print(text)
        assert event["type"] == "Warning"
        assert field in text
        assert "this JobSet is Kubeflow Trainer's for TrainJob late, made from its runtime" in text
        assert text.endswith("or the label phalanx.dev/managed from the TrainJob to let Kueue place it"), text

        # Trainer's next refusals are the same event again (events.k8s.io counts a series by reason, not by
        # message): the gate's refusal of the JobSet made again is read in Phalanx's log.
        ns.api.request("DELETE", f"{JOBSETS.replace('{ns}', ns.name)}/late")
        gate = f"[{ns.name}/late] Webhook 'gate-jobset' denied: {field}"
        said = wait_for(
            "Phalanx's gate refusing the JobSet Trainer makes again",
            lambda: [x for x in phalanx_addons.current_log().splitlines() if gate in x],
            timeout=90,
        )
        assert "this JobSet is Kubeflow Trainer's for TrainJob late, made from its runtime" in said[0]
        assert _get(ns, f"{JOBSETS}/late") is None and not ns.pods()
        wait_for(  # the suspended JobSet's groups go with it (garbage collected), none made again
            "no group of Phalanx's for it",
            lambda: not any(phalanx_objects(ns, "TrainJob/late").values()),
            timeout=60,
        )

        runtime_annotations(ns, runtime, None)
        wait_for("Trainer's next try to make the JobSet", lambda: _get(ns, f"{JOBSETS}/late"), timeout=120)
        with whole_gangs(ns, {"late": 4}, jobset_gang):
            _suspend(ns, "late", False)
            pods = wait_bound(ns, "late", lambda: jobset_pods(ns, "late"), 4)
        labels = node_labels(ns.api)
        assert len({label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods}) == 1
    finally:
        delete_runtime(ns, runtime)
