"""A TrainJob queued in Kueue (Kueue's trainer.kubeflow.org/trainjob integration) taken away from its running
pods by either system, with the real Kueue v0.17.0, Kubeflow Trainer v2.2.0 and JobSet v0.11.1 controllers
and Phalanx on one dev cluster (`addons_cluster`; the module's ClusterQueue of 48 GPUs and LocalQueue `lq`:
tests/integration/kueue_fixtures.py). test_kueue.py has the TrainJob Kueue preempts in its ClusterQueue
and by reclaim in a cohort, and Phalanx's requeue of one after a node failure; here:

- Phalanx's own preemption, of a TrainJob as a whole victim: Kueue admitted both it and the higher-priority
  gang (the quota holds both), only a block's nodes are short. Phalanx never suspends or resumes a
  TrainJob Kueue manages (docs/kueue.md rule 2): one of Trainer's kind of runtime (no podFailurePolicy:
  each pod deleted while it runs would count against its child Job's backoffLimit) is taken back through
  Kueue — its Kueue Workload deactivated, then activated again once Kueue has stopped it —, one whose
  runtime ignores disruption targets by deleting its pods, under its admission.
- Kueue's fair sharing (`fairSharing` in Kueue's Configuration; the test restarts Kueue with it on,
  `fair_kns`) preempting a TrainJob of a ClusterQueue beyond its fair share of a cohort for another
  ClusterQueue's Job (`Preempted=True InCohortFairSharing`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from phalanx.controller.apply.events import COMPONENT
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import filler_pod

from .kinds import (
    GATE,
    GPUS,
    JOBSETS,
    KUEUE,
    RUNTIMES,
    TRAINJOBS,
    FirstSeen,
    GroupSays,
    JobSetSuspendWatch,
    SuspendWatch,
    TrainJobSuspendWatch,
    WorkloadVersion,
    WorkloadWatch,
    changes,
    condition,
    cq_counts,
    delete_runtime,
    ensure,
    events_of,
    gated,
    jobset_block,
    jobset_pods,
    kueue_condition,
    kueue_workloads,
    queued_job,
    requeue_writes,
    suspend_flips,
    torch_runtime,
    whole_gangs,
    whole_in_one_block,
    workload_of,
)
from .kube import GPU_KEY, Namespace, bound, hold, wait_for
from .kueue_fixtures import cq_active, fair_share
from .test_kueue import (
    IGNORE_DISRUPTIONS,
    NB_B,
    TRAINJOB_RUNTIME,
    Disruptions,
    JobFailures,
    Preemptor,
    delete_if_there,
    explain,
    pod_gang,
    queued_trainjob,
    trainjob_preempted_and_readmitted,
)
from .test_kueue_lws import counting

pytestmark = [pytest.mark.integration, pytest.mark.addons("kueue", "trainer")]


# ---------------------------------------------------------------------------- Phalanx preempts a TrainJob
def six_gpu_runtime(name: str, priority_class: str, ignore_disruptions: bool = False) -> dict[str, Any]:
    """The torch runtime of four nodes, each pod asking for 6 GPUs (as the other Kueue tests' gangs: one pod
    a node, and room for a small pod beside it) and of `priority_class` (Kueue takes a TrainJob's priority
    from its pod sets, Phalanx its pods'): 24 of the ClusterQueue's 48 GPUs, so a gang of the same size
    fits the quota beside it. Like Trainer's own runtimes, no podFailurePolicy and the default backoffLimit
    6 — or, `ignore_disruptions`, its child Job's podFailurePolicy ignores the pods that were disruption
    targets (a rule Ignore on DisruptionTarget, which needs restartPolicy Never)."""
    runtime = torch_runtime(name, 4)
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    pod = job["template"]["spec"]
    pod["containers"][0]["resources"]["limits"][GPU_KEY] = str(GPUS)
    pod["priorityClassName"] = priority_class
    if ignore_disruptions:
        job["podFailurePolicy"] = IGNORE_DISRUPTIONS
        pod["restartPolicy"] = "Never"
    return runtime


def new_pods_waiting(ns: Namespace, name: str, old: set[str]) -> list[dict[str, Any]] | None:
    """The TrainJob's 4 live pods once all are new (none of `old`), none bound, each behind Phalanx's gate
    alone; else None."""
    pods = jobset_pods(ns, name)
    if len(pods) != 4 or old & {p["metadata"]["name"] for p in pods} or bound(pods):
        return None
    only_ours = all({g["name"] for g in p["spec"].get("schedulingGates") or []} == {GATE} for p in pods)
    return pods if only_ours and len(gated(pods)) == 4 else None


@dataclass(frozen=True)
class Preempted:
    """What `trainjob_preempted_by_phalanx` saw."""

    flips: dict[
        str, list[bool]
    ]  # spec.suspend of the TrainJob, of its JobSet and of `high`, each change once
    versions: list[WorkloadVersion]  # every version of the TrainJob's Kueue Workload
    writes: dict[str, int]  # Phalanx's requeue writes meanwhile (`requeue_writes`)
    said: list[tuple[str, str]]  # the TrainJob's root group's Admitted condition (reason, message), changes
    disruptions: dict[str, str]  # the TrainJob's pods marked DisruptionTarget, by whom (the reason)
    old: set[str]  # the names of its pods that ran before the preemption


def trainjob_preempted_by_phalanx(
    kns: Namespace, kueue_queue: str, operator: OperatorProcess, ignore_disruptions: bool
) -> Preempted:
    """The flow both tests of Phalanx's preemption of a TrainJob share (item 15's set-up, with a TrainJob as
    the victim): a high-priority pod Kueue does not manage (4 GPUs) on was-worker5 leaves nb-b three nodes,
    so `low`, a TrainJob of four 6-GPU pods of low priority (`six_gpu_runtime`) queued in `lq`, is admitted
    by Kueue and runs whole in nb-a. `high`, a Job of four 6-GPU pods of high priority queued in `lq`, fits
    the quota beside it (48 GPUs: Kueue admits both and preempts nothing) but no block: only nb-a's nodes,
    `low`'s, can hold it. Phalanx takes `low` whole (how: each test) and `high` runs whole in nb-a, no pod
    of `low` left running beside it; `low`, admitted by Kueue and unsuspended, has four new pods, which wait
    behind Phalanx's gate alone while nb-b has three nodes for them, and run whole in nb-b once the blocking
    pod goes. Checked throughout: no gang bound in part at any pod event (`whole_gangs`); every pod of `low`
    born gated; `high`'s spec.suspend only Kueue's (created, admitted); never Phalanx's requeue note on the
    TrainJob (Phalanx never suspends a TrainJob Kueue manages); one Kueue Workload (one uid), never
    Preempted (Kueue preempted nothing) nor Finished; the child Job the same throughout, counting no
    failure, neither it, its JobSet nor the TrainJob Failed, no JobSet restart; at the end the Workload
    admitted and active without Phalanx's note, and the ClusterQueue counting both (48 GPUs, two
    Workloads); none of Phalanx's writes failed (`FailedSync`)."""
    suffix = kueue_queue.removeprefix("cq-")
    name, child = "low", "low-node-0"  # the JobSet's one child Job: replicated Job `node`, index 0
    runtime = f"torch-kueue-4x{GPUS}-low-{uuid.uuid4().hex[:5]}"
    ensure(kns, RUNTIMES, six_gpu_runtime(runtime, f"low-{suffix}", ignore_disruptions))
    path = f"{TRAINJOBS.replace('{ns}', kns.name)}/{name}"
    blocker = filler_pod(NB_B[0], gpus=4)
    blocker["spec"]["priorityClassName"] = f"high-{suffix}"  # no victim for high
    both = counting(kns, kueue_queue, 8 * GPUS, 2)
    suspends: dict[str, SuspendWatch] = {
        "TrainJob": TrainJobSuspendWatch(kns, name),
        "JobSet": JobSetSuspendWatch(kns, name),
        "high": SuspendWatch(kns, "high"),
    }
    history = WorkloadWatch(kns, name)
    failures = JobFailures(kns, child)
    marks = Disruptions(kns, name)
    says = GroupSays(kns, f"TrainJob/{name}")
    seen = FirstSeen(kns)
    writes_before = requeue_writes(operator)
    old: set[str] = set()
    try:
        with whole_gangs(kns, {name: 4, "high": 4}, pod_gang):
            kns.create(blocker)
            wait_for("the blocking pod bound", lambda: bound(kns.pods("app=filler")), timeout=60)
            kns.create(queued_trainjob(name, runtime))
            assert wait_for(f"{name} whole", lambda: jobset_block(kns, name, 4), timeout=180) == "nb-a"
            assert kueue_condition(workload_of(kns, name), "Admitted").get("status") == "True"
            job_uid = kns.get(f"/apis/batch/v1/namespaces/{kns.name}/jobs/{child}")["metadata"]["uid"]
            old = {p["metadata"]["name"] for p in jobset_pods(kns, name)}

            kns.create(queued_job("high", 4, priority=f"high-{suffix}"))
            assert wait_for("high whole", lambda: whole_in_one_block(kns, "high", 4), timeout=240) == "nb-a"
            # high runs on low's nodes: no pod of low is left running beside it.
            assert not old & {p["metadata"]["name"] for p in jobset_pods(kns, name)}, kns.where()
            preempted = [e for e in events_of(kns, "TrainJob", name) if e["reason"] == "Preempted"]
            assert [e for e in preempted if e.get("reportingComponent") == COMPONENT], preempted
            # Admitted by Kueue and running (unsuspended): its new pods wait behind Phalanx's gate alone.
            waiting = wait_for(
                f"{name}'s 4 new pods made, waiting behind Phalanx's gate",
                lambda: new_pods_waiting(kns, name, old),
                timeout=240,
            )
            w = workload_of(kns, name)
            assert kueue_condition(w, "Admitted").get("status") == "True", w
            assert w is not None and w["spec"].get("active", True), w["spec"]
            assert "phalanx.dev/requeued" not in (w["metadata"].get("annotations") or {}), w["metadata"]
            assert kns.get(path)["spec"]["suspend"] is False
            wait_for("the ClusterQueue counting both", lambda: cq_counts(kns.api, kueue_queue) == both, 60)
            view = explain(kns, name, "trainjob")
            assert view["kueue"]["holder"] == "Phalanx", view["kueue"]  # admitted: where it runs is ours
            hold(
                f"{name}'s pods still waiting, gated, while nb-b has three nodes for them",
                lambda: new_pods_waiting(kns, name, old) is not None,
                seconds=5,
            )
            kns.delete_pod(blocker["metadata"]["name"])
            again = wait_for(f"{name} whole again", lambda: jobset_block(kns, name, 4), timeout=180)
            assert again == "nb-b", again
            running = {p["metadata"]["name"] for p in jobset_pods(kns, name)}
            assert {p["metadata"]["name"] for p in waiting} == running  # the pods that waited
        print(kns.where(), "\nPreempted:", [e["message"] for e in preempted])
        assert whole_in_one_block(kns, "high", 4) == "nb-a"
        wait_for("the ClusterQueue counting both", lambda: cq_counts(kns.api, kueue_queue) == both, 60)
        writes = {k: v - writes_before[k] for k, v in requeue_writes(operator).items()}
        body = kns.get(path)
        jobset = kns.get(f"{JOBSETS}/{name}")
        job = kns.get(f"/apis/batch/v1/namespaces/{kns.name}/jobs/{child}")
        final = workload_of(kns, name)
    finally:
        flips = {what: suspend_flips(watch.stop()) for what, watch in suspends.items()}
        notes = changes(suspends["TrainJob"].notes)
        versions = history.stop()
        failed = failures.stop()
        reasons = marks.stop()
        said = changes(says.stop())
        seen.stop()
        delete_if_there(kns, path)
        wait_for("its Kueue Workload gone", lambda: workload_of(kns, name) is None, timeout=120)
        delete_runtime(kns, runtime)
    print("suspend:", flips)
    print("Workload:", changes([(v.uid[:8], v.phase) for v in versions]))
    print("Workload conditions:", changes([(v.active, v.note[:30], v.status, v.reasons) for v in versions]))
    print("child Job (uid, failed):", changes([(uid[:8], n) for uid, n in failed]))
    print("DisruptionTarget:", reasons)
    for step in said:
        print("group says:", step)
    print("requeue writes:", writes)
    # Every pod of it born behind Phalanx's gate, the new ones too.
    assert seen.order and not seen.born_ungated, seen.born_ungated
    assert flips["high"] == [True, False], flips  # created suspended by Kueue's webhook, admitted
    assert not [n for _, n in notes if n], notes  # never Phalanx's requeue note on the TrainJob
    assert len({v.uid for v in versions}) == 1, versions
    assert not [v for v in versions if v.true("Preempted") or v.true("Finished")], versions
    # The child Job, the same throughout, counted no failure.
    assert changes(failed) == [(job_uid, 0)], failed
    assert job["metadata"]["uid"] == job_uid and not job["status"].get("failed"), job["status"]
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"], job["status"]
    assert body["spec"]["suspend"] is False and jobset["spec"]["suspend"] is False
    assert condition(body, "Failed").get("status") != "True", body.get("status")
    assert condition(jobset, "Failed").get("status") != "True", jobset.get("status")
    assert not (jobset.get("status") or {}).get("restarts"), jobset.get("status")  # no JobSet restart
    assert kueue_condition(final, "Admitted").get("status") == "True", final
    assert kueue_condition(final, "Finished").get("status") != "True", final
    assert final is not None and final["spec"].get("active", True), final
    assert "phalanx.dev/requeued" not in (final["metadata"].get("annotations") or {}), final["metadata"]
    ours = [e for e in kns.events() if e.get("reportingComponent") == COMPONENT]
    assert not [e for e in ours if e["reason"] == "FailedSync"], ours  # none of its writes failed
    return Preempted(flips, versions, writes, said, reasons, old)


def test_phalanx_preempts_a_queued_trainjob_whole_through_kueue_and_it_runs_whole_again_failing_nothing(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """Phalanx's own preemption of a TrainJob Kueue admitted, whose runtime is like Trainer's own (no
    podFailurePolicy: each pod deleted while it runs would count against its child Job's backoffLimit), so
    Phalanx takes it whole THROUGH KUEUE (`trainjob_preempted_by_phalanx`): it deactivates the TrainJob's
    Kueue Workload with its note `preempted by …`; Kueue evicts it (`Evicted=True Deactivated`) and
    suspends the TrainJob, Trainer its JobSet, whose child Job deletes the pods (counting no failure); once
    Kueue has released the quota Phalanx activates the Workload again and clears the note; Kueue queues it,
    readmits it and resumes the TrainJob, whose new pods wait for room and run whole. Checked: the
    TrainJob's and its JobSet's spec.suspend only Kueue's (created, admitted, evicted, readmitted; Trainer's
    after it on the JobSet): no suspend fight; the one Workload going exactly queued, admitted,
    deactivated (Phalanx's note), evicted, released, queued, admitted, activated only once Kueue released
    its quota; one Workload deactivation and one activation by Phalanx and no pod deleted by it (none
    marked `PreemptionByPhalanx`); its groups saying Phalanx requeued it and Kueue holds it meanwhile."""
    run = trainjob_preempted_by_phalanx(kns, kueue_queue, phalanx_addons, ignore_disruptions=False)
    assert run.flips == {
        "TrainJob": [True, False, True, False],
        "JobSet": [True, False, True, False],
        "high": [True, False],
    }, run.flips
    # One Workload, through Kueue's requeue: deactivated with Phalanx's note, evicted for it, its quota
    # released, then activated without the note, queued and admitted again.
    steps = changes([v.phase for v in run.versions])
    assert steps == ["queued", "admitted", "deactivated", "evicted", "released", "queued", "admitted"], steps
    (note,) = {v.note for v in run.versions if v.note}
    assert note.startswith("preempted by podgroup ") and "(priority 1000)" in note, note
    evicted = [v for v in run.versions if v.phase == "evicted"]
    assert {v.reasons.get("Evicted") for v in evicted} == {"Deactivated"}, run.versions
    requeued = changes([v.reasons["Requeued"] for v in run.versions if "Requeued" in v.reasons])
    assert requeued == ["Deactivated", "Reactivated"], requeued
    assert run.writes == {
        "DeactivateKueueWorkload": 1,
        "ActivateKueueWorkload": 1,
        "DeletePod": 0,
        "requeues": 1,
    }, run.writes
    # No pod of it marked (nor so deleted) by Phalanx: its pods went with Kueue's suspension.
    assert not run.disruptions, run.disruptions
    # Its groups said so while Kueue stopped it: requeued by Phalanx (the preemption), held by Kueue.
    through = [
        m
        for r, m in run.said
        if r == "Requeued" and "; held by Kueue: Phalanx deactivated its Workload " in m
    ]
    assert through and all(m.startswith(f"requeued by Phalanx: {note}; ") for m in through), run.said


def test_phalanx_preempts_a_queued_trainjob_ignoring_disruptions_whole_by_deleting_its_pods(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """Phalanx's own preemption of a TrainJob Kueue admitted, whose runtime's child Job ignores disruption
    targets (a podFailurePolicy rule Ignore on DisruptionTarget: docs/kueue.md's advice), so Phalanx takes
    it whole BY DELETING ITS FOUR PODS, each marked `DisruptionTarget` `PreemptionByPhalanx`
    (`trainjob_preempted_by_phalanx`): that costs the child Job nothing, and Kueue's admission and quota
    stay (Kueue already decided both fit the ClusterQueue). The child Job makes the pods again at once, born
    gated, and they wait for room and run whole. Checked: the TrainJob and its JobSet never suspended after
    Kueue's admission (spec.suspend only true then false, Kueue's): no suspend fight; the one Workload
    admitted from its admission on, never deactivated, evicted or preempted; four pods deleted by Phalanx
    and no Workload write; its groups never saying it was deactivated."""
    run = trainjob_preempted_by_phalanx(kns, kueue_queue, phalanx_addons, ignore_disruptions=True)
    assert run.flips == {"TrainJob": [True, False], "JobSet": [True, False], "high": [True, False]}, run.flips
    assert changes([v.phase for v in run.versions]) == ["queued", "admitted"], run.versions
    admitted = next(i for i, v in enumerate(run.versions) if v.true("Admitted"))
    kept = run.versions[admitted:]
    assert all(v.true("Admitted") and v.true("QuotaReserved") for v in kept), run.versions
    assert not [v for v in run.versions if v.true("Evicted") or not v.active or v.note], run.versions
    assert run.writes == {
        "DeactivateKueueWorkload": 0,
        "ActivateKueueWorkload": 0,
        "DeletePod": 4,
        "requeues": 1,
    }, run.writes
    # Every pod that ran, marked by Phalanx's preemption before it was deleted (the rule ignores them).
    assert run.disruptions == dict.fromkeys(run.old, "PreemptionByPhalanx"), run.disruptions
    assert not [m for _, m in run.said if "deactivated" in m], run.said


# ---------------------------------------------------------------------------- Kueue's fair sharing
@contextmanager
def cohort_of(
    kns: Namespace, kueue_queue: str, queues: dict[str, tuple[int, dict[str, str]]]
) -> Iterator[str]:
    """ClusterQueues of one cohort of their own over the module's flavor, `queues`: name -> (GPUs of
    nominal quota, preemption), each with a LocalQueue `lq-<name>` in `kns`; Active before the block.
    After it the namespace's Kueue Workloads gone, then the queues deleted. Yields the ClusterQueues'
    name suffix (`<name>-<suffix>`)."""
    cq = kns.get(f"{KUEUE}/clusterqueues/{kueue_queue}")
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    suffix = uuid.uuid4().hex[:6]
    made: list[tuple[str, dict[str, Any]]] = []
    for name, (gpus, preemption) in queues.items():
        made.append(
            (
                f"{KUEUE}/clusterqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": f"{name}-{suffix}"},
                    "spec": {
                        "cohortName": f"co-{suffix}",
                        "namespaceSelector": {},
                        "preemption": preemption,
                        "resourceGroups": [
                            {
                                "coveredResources": [GPU_KEY],
                                "flavors": [
                                    {
                                        "name": flavor,
                                        "resources": [{"name": GPU_KEY, "nominalQuota": str(gpus)}],
                                    }
                                ],
                            }
                        ],
                    },
                },
            )
        )
        made.append(
            (
                f"{KUEUE}/namespaces/{kns.name}/localqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": f"lq-{name}"},
                    "spec": {"clusterQueue": f"{name}-{suffix}"},
                },
            )
        )
    try:
        for path, obj in made:
            kns.api.request("POST", path, obj)
        for name in queues:
            cq_name = f"{name}-{suffix}"
            wait_for(f"the ClusterQueue {cq_name} Active", partial(cq_active, kns.api, cq_name), timeout=60)
        yield suffix
    finally:
        wait_for("the namespace's Kueue Workloads gone", lambda: not kueue_workloads(kns), timeout=120)
        for path, obj in reversed(made):
            delete_if_there(kns, f"{path}/{obj['metadata']['name']}")


def test_kueues_fair_sharing_preempts_a_trainjob_beyond_its_share_whole_and_it_runs_whole_again(
    fair_kns: Namespace, kueue_queue: str
) -> None:
    """Kueue's fair sharing (Kueue restarted with `fairSharing` on: `fair_kns`): two ClusterQueues of one
    cohort over the module's flavor, `heavy` and `light`, 16 GPUs each, `light` reclaiming within the cohort
    (with fair sharing on, that also lets it preempt while borrowing). A TrainJob of four 8-GPU nodes (32
    GPUs) queued in `heavy` is admitted by borrowing all of `light`'s 16 and runs whole: `heavy` is beyond
    its fair share (Kueue's weighted share of it above 0, `light`'s 0). A Job of four 6-GPU pods (24 GPUs)
    queued in `light` would borrow 8 of them: its share then (8 borrowed) is below `heavy`'s now (16), so
    Kueue's fair sharing preempts the TrainJob (`Preempted=True InCohortFairSharing`; Kueue's classical
    preemption would not: `light` would borrow, and it has no borrowWithinCohort). The TrainJob goes whole —
    every pod gone, the TrainJob and its JobSet kept suspended, its groups saying Kueue holds it and holding
    nothing, no pod of it made while Kueue holds it, Phalanx neither resuming nor requeuing it — and the Job
    runs whole; once the Job is deleted Kueue readmits the TrainJob, whose new pods, each born gated, run
    whole in one block (`trainjob_preempted_and_readmitted`: no gang bound in part at any pod event, each
    spec.suspend only Kueue's)."""
    kns = fair_kns
    queues = {"heavy": (16, {}), "light": (16, {"reclaimWithinCohort": "Any"})}
    ensure(kns, RUNTIMES, torch_runtime(TRAINJOB_RUNTIME, 4))
    with cohort_of(kns, kueue_queue, queues) as suffix:
        heavy, light = f"heavy-{suffix}", f"light-{suffix}"
        job = queued_job("fair", 4)
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq-light"
        preemptor = Preemptor(
            "fair",
            job,
            f"/apis/batch/v1/namespaces/{kns.name}/jobs/fair",
            4,
            lambda: whole_in_one_block(kns, "fair", 4),
            SuspendWatch,
        )
        shares: dict[str, int | None] = {}

        def beyond_its_share() -> None:
            # heavy borrows 16 of light's 16: Kueue says it is beyond its fair share, light not.
            shares.update(
                wait_for(
                    "Kueue's weighted shares: heavy above 0, light 0",
                    lambda: (
                        s
                        if (s := {q: fair_share(kns.api, q) for q in (heavy, light)})[heavy] and s[light] == 0
                        else None
                    ),
                    timeout=60,
                )
            )
            assert cq_counts(kns.api, heavy)["admitted"] == 1

        try:
            body = queued_trainjob("share", queue="lq-heavy")
            trainjob_preempted_and_readmitted(kns, body, preemptor, "InCohortFairSharing", beyond_its_share)
        finally:
            delete_if_there(kns, f"{TRAINJOBS.replace('{ns}', kns.name)}/share")
            delete_if_there(kns, preemptor.path)
        print("weighted shares while the TrainJob ran alone:", shares)
