"""Kueue decides who may run, Phalanx decides where (issue 21, docs/kueue.md), with the real Kueue v0.17.0
(no TAS flavor) and Phalanx on one dev cluster (`addons_cluster`).

Every gang here is a Job labelled for both (`phalanx.dev/managed`, `kueue.x-k8s.io/queue-name`) whose pods ask
for 6 of a node's 8 GPUs (one pod a node), topology key the network block — but for the JobSet, the
LeaderWorkerSet and the TrainJobs (Kueue's trainer.kubeflow.org/trainjob integration; 8 GPUs a node) near
the end. One ClusterQueue for the module: 48 GPUs (two gangs of four), preemption of lower priorities inside
it; the last test adds two ClusterQueues of a cohort of its own (Kueue's reclaim of borrowed quota).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from phalanx.controller.apply.events import COMPONENT
from phalanx.controller.apply.faults import AFTER_DEACTIVATE
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, filler_pod, heal_node

from .kinds import (
    JOBSET_NAME,
    JOBSETS,
    KUEUE,
    RESTART_ATTEMPT,
    RUNTIMES,
    TAS,
    TRAINJOBS,
    FirstSeen,
    GateWatch,
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
    jobset_block,
    jobset_gang,
    jobset_pods,
    kueue_condition,
    kueue_pod_spec,
    kueue_workloads,
    owned,
    queued_job,
    requeue_writes,
    runtime_annotations,
    suspend_flips,
    tas_runtime,
    torch_runtime,
    trainjob,
    whole_gangs,
    whole_gangs_through_a_failure,
    whole_in_one_block,
    workload_of,
)
from .kube import (
    GPU_KEY,
    NB_KEY,
    Namespace,
    bound,
    domains_of,
    hold,
    wait_for,
)
from .kueue_fixtures import cq_active

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale_watch import PodWatch

pytestmark = [pytest.mark.integration, pytest.mark.addons("kueue")]

NB_A = ("was-worker", "was-worker2", "was-worker3", "was-worker4")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")


# ---------------------------------------------------------------------------- helpers
def job_of(ns: Namespace, name: str) -> dict[str, Any]:
    body: dict[str, Any] = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}")
    return body


def group_of(ns: Namespace, job: str) -> dict[str, Any]:
    groups = ns.get("/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups")["items"]
    return next((g for g in groups if g["metadata"].get("labels", {}).get("phalanx.dev/job-name") == job), {})


def admitted_condition(ns: Namespace, job: str) -> dict[str, Any]:
    conditions = group_of(ns, job).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Admitted"), {})


def explain(ns: Namespace, job: str, kind: str = "job") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "phalanx.cli", "explain", f"{kind}/{job}", "-n", ns.name, "-o", "json"],
        env={**os.environ, "KUBECONFIG": str(ns.cluster.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# ---------------------------------------------------------------------------- the tests
def test_quota_admits_two_gangs_the_third_waits_in_kueue_and_each_runs_whole_in_one_block_by_best_fit(
    kns: Namespace,
) -> None:
    """A 2-GPU pod Kueue does not manage runs on was-worker5: best fit sends the first gang to nb-b (the
    fuller block, not the first by name), the second to nb-a; the ClusterQueue's 48 GPUs hold two gangs, so
    the third waits in Kueue's queue — suspended, no pod, nothing held by Phalanx — and explain says Kueue
    holds it."""
    filler = filler_pod("was-worker5", gpus=2)
    kns.create(filler)
    wait_for("the filler bound", lambda: bound(kns.pods("app=filler")), timeout=60)
    kns.create(queued_job("gang-a", 4))
    assert (
        wait_for("gang-a whole in one block", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=120)
        == "nb-b"
    )
    kns.create(queued_job("gang-b", 4))
    assert (
        wait_for("gang-b whole in one block", lambda: whole_in_one_block(kns, "gang-b", 4), timeout=120)
        == "nb-a"
    )
    kns.create(queued_job("gang-c", 4))

    def held() -> dict[str, Any] | None:
        # HeldByKueue says first "Kueue has not made its Workload yet", then, once Kueue has made it and
        # left it unadmitted, that it waits in the LocalQueue: wait for the second.
        cond = admitted_condition(kns, "gang-c")
        waiting = "waiting in Kueue's LocalQueue lq" in str(cond.get("message", ""))
        return cond if cond.get("reason") == "HeldByKueue" and waiting else None

    wait_for("gang-c held by Kueue, waiting in its LocalQueue", held, timeout=60)
    workload = workload_of(kns, "gang-c")
    assert kueue_condition(workload, "QuotaReserved").get("status") == "False", workload
    assert job_of(kns, "gang-c")["spec"]["suspend"] is True
    assert kns.job_pods("gang-c") == []
    status = group_of(kns, "gang-c")["status"]
    assert not status.get("admission") and not status.get("reservation")
    # Kueue wrote its flavor's nodeLabels into the admitted Jobs' pod templates; the pods honour them.
    for job in ("gang-a", "gang-b"):
        selector = job_of(kns, job)["spec"]["template"]["spec"].get("nodeSelector") or {}
        assert selector.get("node.kubernetes.io/instance-type") == "BM.GPU.H100.8", selector
    view = explain(kns, "gang-c")
    assert view["kueue"]["holder"] == "Kueue" and view["kueue"]["workload"] == workload["metadata"]["name"]
    assert {c["type"]: c["status"] for c in view["kueue"]["conditions"]}["QuotaReserved"] == "False"
    assert explain(kns, "gang-a")["kueue"]["holder"] == "Phalanx"


def test_a_node_failure_requeues_a_kueue_gang_by_deleting_its_pods_with_no_suspend_fight(
    kns: Namespace,
) -> None:
    """gang-a runs in nb-a; a node of it fails (NoExecute taint) and nb-a has no other node, so after the
    grace period Phalanx deletes its pods (it never suspends the Job, which Kueue would undo), the Job makes
    them again, gated, and the gang runs whole in nb-b. The Job stays unsuspended and its Workload admitted
    for a minute after the requeue, and no pod counts as a failure (the podFailurePolicy ignores disruption
    targets: Phalanx marks the pods it deletes as such)."""
    kns.create(queued_job("gang-a", 4))
    first = wait_for("gang-a whole in one block", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=120)
    old = {p["metadata"]["name"] for p in kns.job_pods("gang-a")}
    victim = sorted(p["spec"]["nodeName"] for p in kns.job_pods("gang-a"))[0]
    watch = SuspendWatch(kns, "gang-a")
    fail_node(kns.api, victim, how="taint")
    try:
        requeued = wait_for(
            "the Requeued event on gang-a",
            lambda: [e for e in kns.events("involvedObject.name=gang-a") if e["reason"] == "Requeued"],
            timeout=120,
        )
        assert "below its minCount" in requeued[0]["message"]
        started = time.monotonic()
        wait_for(
            "the old pods gone", lambda: not old & {p["metadata"]["name"] for p in kns.pods()}, timeout=120
        )
        again = wait_for("gang-a whole again", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=180)
        assert (first, again) == ("nb-a", "nb-b")
        # No flapping: a minute after the requeue, Kueue never evicted it (nor, below, suspended it).
        while time.monotonic() - started < 60:
            assert kueue_condition(workload_of(kns, "gang-a"), "Evicted").get("status") != "True"
            time.sleep(1)
    finally:
        seen = watch.stop()
        heal_node(kns.api, victim)
    # The watch saw every version of the Job from before the node failed to a minute after the requeue.
    assert seen and not [t for t, suspended in seen if suspended], "Phalanx or Kueue suspended gang-a"
    job = job_of(kns, "gang-a")
    assert not job["spec"].get("suspend") and not job.get("status", {}).get("failed"), job.get("status")
    assert kueue_condition(workload_of(kns, "gang-a"), "Admitted").get("status") == "True"


def counting_job(name: str, count: int) -> dict[str, Any]:
    """`queued_job` without the podFailurePolicy rule and with backoffLimit 1: each pod deleted to requeue
    it would count, and two failures fail it (the node failure's eviction is the one it may have)."""
    job = queued_job(name, count)
    del job["spec"]["podFailurePolicy"]
    job["spec"]["backoffLimit"] = 1
    return job


def running_whole(kns: Namespace, job: dict[str, Any], gangs: Any) -> tuple[str, set[str], str]:
    """Create the Job and wait for it whole in one block, seen so by the pod watch `gangs`: (its block,
    its pods' names, the node to fail: its first by name)."""
    name = job["metadata"]["name"]
    count = job["spec"]["parallelism"]
    kns.create(job)
    first = wait_for(f"{name} whole", lambda: whole_in_one_block(kns, name, count), timeout=120)
    old = {p["metadata"]["name"] for p in kns.job_pods(name)}
    wait_for("the pod watch to see it whole", lambda: gangs.whole(name), 30)
    return first, old, sorted(p["spec"]["nodeName"] for p in kns.job_pods(name))[0]


def back_through_kueue(kns: Namespace, job: str, failed: int) -> None:
    """A Job requeued through Kueue, at the end: resumed, `failed` failures and not Failed, its Kueue
    Workload active again without Phalanx's note, and admitted."""
    body = job_of(kns, job)
    assert not body["spec"].get("suspend"), body["spec"]
    assert body["status"].get("failed", 0) == failed, body["status"]
    assert not [c for c in body["status"].get("conditions") or [] if c["type"] == "Failed"], body["status"]
    w = workload_of(kns, job)
    assert w is not None and w["spec"].get("active", True)
    assert "phalanx.dev/requeued" not in (w["metadata"].get("annotations") or {}), w["metadata"]
    assert kueue_condition(w, "Admitted").get("status") == "True"


def test_a_node_failure_requeues_a_kueue_gang_whose_job_would_count_deleted_pods_through_kueue(
    kns: Namespace,
) -> None:
    """gang-a has no podFailurePolicy and a backoffLimit of 1: the taint manager's eviction of its pod on
    the failed node is its one failure left, and deleting its three other pods to requeue it would fail the
    Job (each a failure: 4 > 1). So Phalanx requeues it through Kueue: it deactivates the Job's Kueue
    Workload with its note, Kueue evicts it and suspends the Job (its pods go, counting no failure) and
    releases its quota, Phalanx activates the Workload again, Kueue readmits it and resumes the Job, and
    the gang runs whole in nb-b. Checked: no partial gang throughout; the Workload's steps in order, one
    Workload; the Job's spec.suspend only Kueue's; status.failed 1 (the eviction); no pod deleted by
    Phalanx; the Requeued event."""
    job = counting_job("gang-a", 4)
    history = WorkloadWatch(kns, "gang-a")
    suspends = SuspendWatch(kns, "gang-a")
    victim = ""
    try:
        with whole_gangs_through_a_failure(kns, {"gang-a": 4}, _job_gang) as gangs:
            first, old, victim = running_whole(kns, job, gangs)
            gangs.failure()
            fail_node(kns.api, victim, how="taint")
            requeued = wait_for(
                "the Requeued event on gang-a",
                lambda: [e for e in kns.events("involvedObject.name=gang-a") if e["reason"] == "Requeued"],
                timeout=120,
            )
            assert "below its minCount" in requeued[0]["message"], requeued
            assert requeued[0].get("reportingComponent") == COMPONENT, requeued
            again = wait_for("gang-a whole again", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=240)
            assert (first, again) == ("nb-a", "nb-b")
            assert not old & {p["metadata"]["name"] for p in kns.job_pods("gang-a")}
        back_through_kueue(kns, "gang-a", failed=1)  # the eviction only
    finally:
        steps = history.stop()
        flips = suspend_flips(suspends.stop())
        if victim:
            heal_node(kns.api, victim)
    reasons = {
        (p["metadata"]["name"], c.get("reason"))
        for p in kns.pods()
        for c in (p.get("status") or {}).get("conditions") or []
        if c["type"] == "DisruptionTarget"
    }
    assert not [r for r in reasons if r[1] == "RequeueByPhalanx"], reasons
    # Created suspended by Kueue's webhook, started, stopped by Kueue's eviction, resumed on readmission.
    assert flips == [True, False, True, False], flips
    assert len({v.uid for v in steps}) == 1, steps
    deactivated = [i for i, v in enumerate(steps) if not v.active and v.note]
    assert deactivated, steps
    assert "below its minCount" in steps[deactivated[0]].note
    evicted = [i for i, v in enumerate(steps) if v.true("Evicted")]
    released = [i for i in evicted if not steps[i].true("QuotaReserved")]
    activated = [i for i, v in enumerate(steps) if v.active and not v.note and i > deactivated[0]]
    assert evicted and released and activated, steps
    # In order: deactivated with the note, evicted, quota released, and only then activated again.
    assert deactivated[0] <= evicted[0] <= released[0] < activated[0], steps
    readmitted = [i for i in activated if steps[i].true("Admitted")]
    assert readmitted, steps


@contextmanager
def armed(operator: OperatorProcess, point: str, ns: Namespace, count: int = 1) -> Iterator[OperatorProcess]:
    """The session's operator restarted with the test-only abort `point` armed (controller/apply/faults.py);
    at the end restarted without it, whatever happened (a test sharing it after this one finds it unarmed).
    Yielded once the apiserver calls the new process's webhooks (`webhooks_answer`)."""
    operator.stop()
    operator.env[point] = str(count)
    try:
        operator.start()
        webhooks_answer(ns)
        yield operator
    finally:
        operator.env.pop(point, None)
        operator.stop()  # still running armed if the test failed before the abort; a dead one: nothing
        operator.start()


def webhooks_answer(ns: Namespace) -> None:
    """Wait until a Job's creation (dry run) gets through the webhooks: the operator is ready once its
    webhook configuration names its new port, and the apiserver may still call the old one for a moment
    (connection refused)."""

    def answered() -> bool:
        try:
            ns.create(queued_job("probe", 1), f"/apis/batch/v1/namespaces/{ns.name}/jobs?dryRun=All")
        except ApiError:
            return False
        return True

    wait_for("the apiserver calling the operator's webhooks", answered, timeout=60)


def released_by_kueue(ns: Namespace, job: str) -> dict[str, Any] | None:
    """The Job's Kueue Workload once Kueue has evicted it and released its quota while it is still
    deactivated with Phalanx's note (nobody activated it), or None."""
    w = workload_of(ns, job)
    if w is None or w["spec"].get("active", True):
        return None
    if not (w["metadata"].get("annotations") or {}).get("phalanx.dev/requeued"):
        return None
    if kueue_condition(w, "Evicted").get("status") != "True":
        return None
    return None if kueue_condition(w, "QuotaReserved").get("status") == "True" else w


def test_phalanx_killed_right_after_deactivating_a_kueue_workload_activates_it_once_restarted(
    kns: Namespace, phalanx_addons: OperatorProcess
) -> None:
    """A requeue through Kueue cut by a real SIGKILL between its two writes: gang-a (no podFailurePolicy,
    backoffLimit 1, as above) loses a node to a taint; the operator, with PHALANX_FAULT_ABORT_AFTER_DEACTIVATE
    =1, deactivates its Kueue Workload with the note and dies at once. While it is down Kueue evicts the
    Workload, suspends the Job and releases its quota, and the Workload stays deactivated with the note
    (nobody else activates it). Restarted without the fault, Phalanx finds from state alone a Workload
    with its note and no quota, activates it and clears the note; Kueue readmits it and the gang runs
    whole in nb-b. Checked: no partial gang throughout; one Workload, deactivated once (not requeued again
    after the restart); the Job's status.failed only ever 0 then 1 (the eviction); the Job not Failed."""
    job = counting_job("gang-a", 4)
    history = WorkloadWatch(kns, "gang-a")
    failures = JobFailures(kns, "gang-a")
    victim = ""
    try:
        with whole_gangs_through_a_failure(kns, {"gang-a": 4}, _job_gang) as gangs:
            with armed(phalanx_addons, AFTER_DEACTIVATE, kns) as operator:
                killed = operator.proc
                assert killed is not None
                first, old, victim = running_whole(kns, job, gangs)
                gangs.failure()
                fail_node(kns.api, victim, how="taint")
                wait_for(
                    "the operator killed right after the deactivation",
                    lambda: killed.poll() is not None,
                    timeout=180,
                )
                assert killed.returncode == -signal.SIGKILL, killed.returncode
                log = operator.current_log()
                assert f"fault injection: SIGKILL at {AFTER_DEACTIVATE} #1" in log, log[-3000:]
                # Phalanx is down: Kueue evicts the Workload, stops the Job (its pods go) and releases the
                # quota; the Workload stays deactivated with the note.
                down = wait_for(
                    "Kueue to evict the Workload and release its quota",
                    lambda: released_by_kueue(kns, "gang-a"),
                    timeout=180,
                )
                assert "below its minCount" in down["metadata"]["annotations"]["phalanx.dev/requeued"]
                wait_for(
                    "the Job suspended by Kueue, its pods gone",
                    lambda: job_of(kns, "gang-a")["spec"].get("suspend") and not kns.pods("job-name=gang-a"),
                    timeout=180,
                )
                assert killed.poll() is not None and operator.proc is killed  # nobody restarted Phalanx
                still = released_by_kueue(kns, "gang-a")
                assert still is not None, workload_of(kns, "gang-a")
                assert still["metadata"]["uid"] == down["metadata"]["uid"]
            # Restarted without the fault (armed's exit): from state alone, activated and readmitted.
            assert phalanx_addons.proc is not killed and phalanx_addons.proc is not None
            assert phalanx_addons.proc.poll() is None
            assert AFTER_DEACTIVATE not in phalanx_addons.env
            again = wait_for("gang-a whole again", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=240)
            assert (first, again) == ("nb-a", "nb-b")
            assert not old & {p["metadata"]["name"] for p in kns.job_pods("gang-a")}
        back_through_kueue(kns, "gang-a", failed=1)  # the eviction only
    finally:
        steps = history.stop()
        failed = failures.stop()
        if victim:
            heal_node(kns.api, victim)
    assert len({v.uid for v in steps}) == 1, steps
    assert len({uid for uid, _ in failed}) == 1 and changes([n for _, n in failed]) == [0, 1], failed
    # Deactivated once: one version going from active to inactive with the note, none after the restart.
    went_inactive = [
        i for i in range(1, len(steps)) if steps[i - 1].active and not steps[i].active and steps[i].note
    ]
    assert len(went_inactive) == 1, [v.phase for v in steps]
    assert not [v for v in steps if not v.active and not v.note], [v.phase for v in steps]
    deactivated = went_inactive[0]
    released = [i for i, v in enumerate(steps) if v.phase == "released" and i > deactivated]
    activated = [i for i, v in enumerate(steps) if v.active and not v.note and i > deactivated]
    assert released and activated, [v.phase for v in steps]
    assert released[0] < activated[0], [v.phase for v in steps]
    assert [i for i in activated if steps[i].true("Admitted")], [v.phase for v in steps]
    assert changes([v.phase for v in steps])[-1] == "admitted", [v.phase for v in steps]


def _job_gang(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get("job-name") or "")


def test_kueue_preempts_a_low_priority_gang_and_phalanx_places_the_high_one_in_the_freed_block(
    kns: Namespace, kueue_queue: str
) -> None:
    suffix = kueue_queue.removeprefix("cq-")
    kns.create(queued_job("low-a", 4, priority=f"low-{suffix}"))
    wait_for("low-a whole in one block", lambda: whole_in_one_block(kns, "low-a", 4), timeout=120)
    kns.create(queued_job("low-b", 4, priority=f"low-{suffix}"))
    wait_for("low-b whole in one block", lambda: whole_in_one_block(kns, "low-b", 4), timeout=120)
    blocks = {job: whole_in_one_block(kns, job, 4) for job in ("low-a", "low-b")}
    pods_before = {job: {p["metadata"]["name"] for p in kns.job_pods(job)} for job in blocks}
    kns.create(queued_job("high", 4, priority=f"high-{suffix}"))

    def evicted() -> str | None:
        for job in blocks:
            if kueue_condition(workload_of(kns, job), "Preempted").get("status") == "True":
                return job
        return None

    loser = wait_for("Kueue to preempt one low gang", evicted, timeout=120)
    block = wait_for("high whole in one block", lambda: whole_in_one_block(kns, "high", 4), timeout=180)
    assert block == blocks[loser], (block, blocks)
    survivor = next(job for job in blocks if job != loser)
    assert {p["metadata"]["name"] for p in kns.job_pods(survivor)} == pods_before[survivor]
    assert whole_in_one_block(kns, survivor, 4) == blocks[survivor]
    assert job_of(kns, loser)["spec"]["suspend"] is True  # Kueue's suspension, not Phalanx's
    assert not [e for e in kns.events() if e["reason"] == "Preempting"]  # Phalanx preempted nothing
    cond = admitted_condition(kns, loser)
    assert cond.get("reason") == "HeldByKueue", cond


def test_phalanx_preempts_a_kueue_job_that_would_count_deleted_pods_through_kueue_and_it_fails_nothing(
    kns: Namespace, kueue_queue: str
) -> None:
    """Phalanx's own preemption inside a ClusterQueue: a high-priority pod (4 GPUs, not Kueue's) on
    was-worker5 leaves nb-b three nodes, so low (four 6-GPU pods, low priority) runs in nb-a. high (the
    same, high priority) fits the quota beside it (Kueue admits both: 48 GPUs) but no block: Phalanx takes
    low whole. low has no podFailurePolicy and backoffLimit 0, so a deleted pod would fail it at once: it is
    requeued through Kueue (its Workload deactivated with Phalanx's note; Kueue evicts it and suspends the
    Job; its quota released, activated again; readmitted). high runs whole in nb-a; low's new pods wait
    gated (nb-b still has three nodes) and, once the blocking pod goes, run whole in nb-b. No gang bound in
    part at any pod event; low never failed, nor counted a failure."""
    suffix = kueue_queue.removeprefix("cq-")
    blocker = filler_pod(NB_B[0], gpus=4)
    blocker["spec"]["priorityClassName"] = f"high-{suffix}"  # not a victim for high
    low = queued_job("low", 4, priority=f"low-{suffix}")
    del low["spec"]["podFailurePolicy"]
    history = WorkloadWatch(kns, "low")
    with whole_gangs(kns, {"low": 4, "high": 4}, _job_gang):
        kns.create(blocker)
        wait_for("the blocking pod bound", lambda: bound(kns.pods("app=filler")), timeout=60)
        kns.create(low)
        assert wait_for("low whole", lambda: whole_in_one_block(kns, "low", 4), timeout=120) == "nb-a"
        old = {p["metadata"]["name"] for p in kns.job_pods("low")}
        kns.create(queued_job("high", 4, priority=f"high-{suffix}"))
        assert wait_for("high whole", lambda: whole_in_one_block(kns, "high", 4), timeout=240) == "nb-a"
        preempted = [e for e in kns.events("involvedObject.name=low") if e["reason"] == "Preempted"]
        assert [e for e in preempted if e.get("reportingComponent") == COMPONENT], preempted
        # Readmitted by Kueue, resumed, its new pods made and waiting gated: nb-b has three nodes for four.
        wait_for(
            "low's new pods made, gated",
            lambda: (
                (pods := kns.job_pods("low"))
                and len(pods) == 4
                and not old & {p["metadata"]["name"] for p in pods}
                and all(p["spec"].get("schedulingGates") for p in pods)
            ),
            timeout=180,
        )
        w = workload_of(kns, "low")
        assert kueue_condition(w, "Admitted").get("status") == "True", w
        assert "phalanx.dev/requeued" not in ((w or {})["metadata"].get("annotations") or {})
        kns.delete_pod(blocker["metadata"]["name"])
        assert wait_for("low whole again", lambda: whole_in_one_block(kns, "low", 4), timeout=180) == "nb-b"
    steps = history.stop()
    body = job_of(kns, "low")
    assert not body["status"].get("failed") and body["spec"]["backoffLimit"] == 0, body["status"]
    assert not [c for c in body["status"].get("conditions") or [] if c["type"] == "Failed"], body["status"]
    notes = [v.note for v in steps if not v.active and v.note]
    assert notes and notes[0].startswith("preempted by"), steps
    assert len({v.uid for v in steps}) == 1, steps


def _both(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"phalanx.dev/managed": "true", "kueue.x-k8s.io/queue-name": "lq"},
        "annotations": {"phalanx.dev/topology-key": NB_KEY},
    }


@pytest.mark.addons("jobset", "lws")
def test_a_queued_jobset_and_leaderworkerset_run_whole_once_kueue_admits_them(kns: Namespace) -> None:
    """Kueue suspends the JobSet at creation, gates the LeaderWorkerSet's pods (kueue.x-k8s.io/admission);
    each runs whole in one network block once Kueue admits it, and Phalanx releases no pod while Kueue's
    gate is still on it."""
    watch = GateWatch(kns, "leaderworkerset.sigs.k8s.io/name", "serve")
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _both("train"),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "backoffLimit": 0,
                            "template": {"spec": kueue_pod_spec()},
                        }
                    },
                }
            ]
        },
    }
    created = kns.create(jobset, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kns.name}/jobsets")
    assert created["spec"]["suspend"] is True  # Kueue's webhook
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _both("serve"),
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": kueue_pod_spec(None)}},
        },
    }
    kns.create(lws, f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{kns.name}/leaderworkersets")
    try:

        def whole(selector: str) -> str | None:
            pods = [p for p in kns.pods(selector) if not p["metadata"].get("deletionTimestamp")]
            if len(pods) != 2 or len(bound(pods)) != 2:
                return None
            blocks = domains_of(kns.api, pods, NB_KEY)
            return next(iter(blocks)) if len(blocks) == 1 else None

        wait_for(
            "the JobSet's 2 pods bound in one block",
            lambda: whole("jobset.sigs.k8s.io/jobset-name=train"),
            180,
        )
        wait_for(
            "the LWS group's 2 pods bound in one block",
            lambda: whole("leaderworkerset.sigs.k8s.io/name=serve"),
            180,
        )
    finally:
        watch.stop()
        for path in (
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kns.name}/jobsets/train",
            f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{kns.name}/leaderworkersets/serve",
        ):
            kns.api.request("DELETE", path)
    assert watch.kueue_gated, "the LWS's pods were never seen behind Kueue's gate"
    assert not watch.early, f"released while Kueue's gate was on: {watch.early}"


def test_kueues_partial_admission_lowers_the_gang_to_what_it_admitted_and_phalanx_places_that_whole(
    kns: Namespace,
) -> None:
    """gang-a takes 24 of the 48 GPUs; a Job of six pods that allows partial admission down to two
    (`kueue.x-k8s.io/job-min-parallelism`) is admitted by Kueue with the four that fit its quota: Phalanx's
    gang follows the parallelism Kueue admitted (minCount 4, not 6) and runs whole in the other block."""
    kns.create(queued_job("gang-a", 4))
    first = wait_for("gang-a whole in one block", lambda: whole_in_one_block(kns, "gang-a", 4), timeout=120)
    kns.create(queued_job("part", 6, annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}))
    block = wait_for(
        "part's admitted four whole in one block", lambda: whole_in_one_block(kns, "part", 4), 180
    )
    assert {first, block} == {"nb-a", "nb-b"}
    workload = workload_of(kns, "part")
    assert kueue_condition(workload, "Admitted").get("status") == "True"
    (assignment,) = (workload or {})["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 4, assignment
    assert job_of(kns, "part")["spec"]["parallelism"] == 4
    gang = group_of(kns, "part")["spec"]["schedulingPolicy"]["gang"]
    assert gang["minCount"] == 4, gang
    assert admitted_condition(kns, "part").get("status") == "True"


def test_a_job_with_kueue_tas_annotations_is_refused_naming_both_systems_and_the_field(
    kns: Namespace,
) -> None:
    job = queued_job("tas", 2)
    job["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": NB_KEY}}
    with pytest.raises(ApiError) as error:
        kns.create(job)
    assert error.value.status == 422
    text = str(error.value)
    assert "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]" in text
    assert "Kueue's Topology-Aware Scheduling and Phalanx" in text


def test_a_job_queued_behind_a_flavor_with_a_topology_name_is_warned_of_before_kueue_admits_it(
    kns: Namespace,
) -> None:
    """A second LocalQueue feeds a ClusterQueue (no quota: it never admits) whose ResourceFlavor has a
    topologyName, Kueue's Topology-Aware Scheduling: a Phalanx-managed Job queued there gets one Warning
    (KueueTopologyConflict) naming the LocalQueue, the ClusterQueue and the flavor while Kueue still holds
    it."""
    suffix = uuid.uuid4().hex[:6]
    flavor, cq, topology = f"tas-{suffix}", f"cq-tas-{suffix}", f"topo-{suffix}"
    made = [
        (
            f"{KUEUE}/resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {
                    "nodeLabels": {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"},
                    "topologyName": topology,
                },
            },
        ),
        (
            f"{KUEUE}/clusterqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU_KEY],
                            "flavors": [
                                {"name": flavor, "resources": [{"name": GPU_KEY, "nominalQuota": "0"}]}
                            ],
                        }
                    ],
                },
            },
        ),
        (
            f"{KUEUE}/namespaces/{kns.name}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "lq-tas"},
                "spec": {"clusterQueue": cq},
            },
        ),
    ]
    for path, obj in made:
        kns.api.request("POST", path, obj)
    try:
        job = queued_job("tas-q", 2)
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq-tas"
        kns.create(job)
        warnings = wait_for(
            "the KueueTopologyConflict warning on tas-q",
            lambda: [
                e for e in kns.events("involvedObject.name=tas-q") if e["reason"] == "KueueTopologyConflict"
            ],
            timeout=120,
        )
        (warning,) = warnings
        message = warning["message"]
        assert warning["type"] == "Warning" and warning["involvedObject"]["kind"] == "Job"
        assert "Topology-Aware Scheduling would also place this Job" in message
        assert f"LocalQueue {kns.name}/lq-tas feeds ClusterQueue {cq}" in message
        assert f"{flavor} (topologyName {topology})" in message
        assert job_of(kns, "tas-q")["spec"].get("suspend") is True  # Kueue holds it, and Phalanx with it
        held = wait_for("tas-q held by Kueue", lambda: admitted_condition(kns, "tas-q") or None, timeout=60)
        assert held["reason"] == "HeldByKueue", held
        assert not [p for p in kns.job_pods("tas-q") if p["spec"].get("nodeName")]
    finally:
        kns.api.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{kns.name}/jobs/tas-q",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        wait_for("tas-q's Kueue Workload gone", lambda: workload_of(kns, "tas-q") is None, timeout=120)
        for path, obj in reversed(made):
            try:
                kns.api.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise


def test_a_gang_kueue_admitted_that_no_block_can_hold_is_reported_as_never_fitting(kns: Namespace) -> None:
    kns.create(queued_job("big", 5))  # 30 GPUs fit the quota; no network block has 5 nodes

    def never() -> dict[str, Any] | None:
        cond = admitted_condition(kns, "big")
        return cond if cond.get("message", "").startswith("never fits: ") else None

    cond = wait_for("big said never to fit", never, timeout=120)
    assert "Kueue admitted it into ClusterQueue" in cond["message"] and cond["reason"] == "Unschedulable"
    assert kueue_condition(workload_of(kns, "big"), "Admitted").get("status") == "True"
    # The event is its own write, after (or beside) the status patch: wait for it, then count it.
    warnings = wait_for(
        "big's never-fits event",
        lambda: [e for e in kns.events("involvedObject.name=big") if e["message"].startswith("never fits: ")],
        timeout=60,
    )
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    view = explain(kns, "big")
    assert view["kueue"]["holder"] == "Phalanx" and view["placement"]["neverFits"] is True


def test_the_walk_throughs_kueue_step_plays_with_the_kueue_addon(
    addons_cluster: ClusterState, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """`phalanx demo --steps kueue`: Kueue admits one gang of two queued, Phalanx places it, the other waits
    held by Kueue and runs once the first is deleted (the step's own checks; here its verdict)."""
    result = subprocess.run(
        [sys.executable, "-m", "phalanx.cli", "demo", "--dir", str(addons_cluster.dir), "--steps", "kueue"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert (
        "OK kueue (" in result.stdout and "queue-b Admitted=False HeldByKueue: held by Kueue" in result.stdout
    )
    assert "walk-through: 1 OK, 0 skipped, 0 failed" in result.stdout


@pytest.mark.addons("jobset")
def test_a_jobset_kueue_preempts_goes_whole_with_no_suspend_fight_and_is_placed_whole_when_readmitted(
    kns: Namespace, kueue_queue: str
) -> None:
    """A low-priority JobSet (two child Jobs of two pods) queued in Kueue runs whole in one network block; a
    high-priority Job takes the other half of the quota, a second one needs the JobSet's: Kueue preempts the
    JobSet (suspends it), and Phalanx lets Kueue hold it — it never resumes it, nor marks it requeued — while
    the second Job runs in the freed block. Once that Job is deleted Kueue readmits the JobSet, and its new
    pods, born gated, are placed whole again in one block."""
    suffix = kueue_queue.removeprefix("cq-")
    pod_spec = kueue_pod_spec() | {"priorityClassName": f"low-{suffix}"}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _both("train"),
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 2,
                            "completions": 2,
                            "backoffLimit": 0,
                            "template": {"spec": pod_spec},
                        }
                    },
                }
            ]
        },
    }
    selector = "jobset.sigs.k8s.io/jobset-name=train"
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kns.name}/jobsets/train"

    def whole() -> str | None:
        pods = [p for p in kns.pods(selector) if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 4 or len(bound(pods)) != 4:
            return None
        blocks = domains_of(kns.api, pods, NB_KEY)
        return next(iter(blocks)) if len(blocks) == 1 else None

    watch = JobSetSuspendWatch(kns, "train")
    try:
        kns.create(jobset, f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kns.name}/jobsets")
        first = wait_for("the JobSet whole in one block", whole, timeout=180)
        old = {p["metadata"]["name"] for p in kns.pods(selector)}
        kns.create(queued_job("high-a", 4, priority=f"high-{suffix}"))
        other = wait_for("high-a whole in one block", lambda: whole_in_one_block(kns, "high-a", 4), 120)
        assert other != first
        kns.create(queued_job("high-b", 4, priority=f"high-{suffix}"))
        wait_for(
            "Kueue to preempt the JobSet",
            lambda: kueue_condition(workload_of(kns, "train"), "Preempted").get("status") == "True" or None,
            timeout=120,
        )
        block = wait_for("high-b whole in the freed block", lambda: whole_in_one_block(kns, "high-b", 4), 180)
        assert block == first
        assert not old & {p["metadata"]["name"] for p in kns.pods(selector)}  # the JobSet's pods all went
        assert kns.get(path)["spec"]["suspend"] is True  # Kueue's suspension, kept
        root = wait_for(
            "the JobSet's groups say Kueue holds it",
            lambda: next(
                (
                    g
                    for g in kns.get(
                        "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/compositepodgroups"
                    )["items"]
                    if g["metadata"].get("annotations", {}).get("phalanx.dev/owner") == "JobSet/train"
                    and any(
                        c["type"] == "Admitted" and c.get("reason") == "HeldByKueue"
                        for c in g.get("status", {}).get("conditions", [])
                    )
                ),
                None,
            ),
            timeout=60,
        )
        assert not root["status"].get("admission")  # nothing held for it while Kueue holds it
        kns.api.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{kns.name}/jobs/high-b",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        again = wait_for("the JobSet whole again once Kueue readmits it", whole, timeout=180)
        assert again == first
        assert kueue_condition(workload_of(kns, "train"), "Admitted").get("status") == "True"
    finally:
        seen = watch.stop()
        kns.api.request("DELETE", path)
    # Created suspended by Kueue, started, preempted, started again: no other change, no tug-of-war.
    assert suspend_flips(seen) == [True, False, True, False], suspend_flips(seen)
    ours = [e for e in kns.events("involvedObject.name=train") if e.get("reportingComponent") == COMPONENT]
    assert not [e for e in ours if e["reason"] in ("Requeued", "Preempted")], ours  # Kueue's preemption
    assert not [e for e in kns.events() if e["reason"] == "Preempting"]  # Phalanx preempted nothing


# ---------------------------------------------------------------------------- a TrainJob through Kueue
TRAINJOB_RUNTIME = "torch-kueue-4x8"  # 4 nodes of 8 GPUs: 32 of the ClusterQueue's 48, so one at a time


def queued_trainjob(name: str, runtime: str = TRAINJOB_RUNTIME, queue: str = "lq") -> dict[str, Any]:
    """A TrainJob of the torch runtime above (or `runtime`), labelled for both (Phalanx's network-block
    key), queued in `queue`."""
    body = trainjob(name, runtime, {"phalanx.dev/topology-key": NB_KEY})
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = queue
    return body


@pytest.mark.addons("trainer")
def test_a_queued_trainjob_runs_whole_once_kueue_admits_it_and_the_next_waits_in_kueue_for_quota(
    kns: Namespace,
) -> None:
    """Kueue's `trainer.kubeflow.org/trainjob` integration with Phalanx: two TrainJobs of four 8-GPU nodes
    queued in `lq` (48 GPUs: room for one). Kueue's webhook suspends each at creation and adds its runtime
    patch beside Phalanx's; Kueue admits the first (unsuspends it) and Phalanx places its JobSet's four pods
    whole in one network block. The second waits in Kueue — suspended, its Workload without quota, no pod
    made, its groups `HeldByKueue` and holding nothing — until the first is deleted; then Kueue admits it and
    it runs whole in one block. No gang is ever bound in part, and neither TrainJob's spec.suspend goes
    anywhere but from Kueue's true to its false (Phalanx neither suspends nor resumes them)."""
    ensure(kns, RUNTIMES, torch_runtime(TRAINJOB_RUNTIME, 4))
    paths = {n: f"{TRAINJOBS.replace('{ns}', kns.name)}/{n}" for n in ("first", "second")}
    suspends = {n: TrainJobSuspendWatch(kns, n) for n in paths}
    seen = FirstSeen(kns)

    def whole(name: str) -> str | None:
        pods = jobset_pods(kns, name)
        if len(pods) != 4 or len(bound(pods)) != 4:
            return None
        blocks = domains_of(kns.api, pods, NB_KEY)
        return next(iter(blocks)) if len(blocks) == 1 else None

    def held(name: str) -> dict[str, Any] | None:
        roots = owned(kns, f"TrainJob/{name}", "compositepodgroups")
        cond = condition(roots[0]) if roots else {}
        waiting = "waiting in Kueue's LocalQueue lq" in str(cond.get("message", ""))
        return roots[0] if cond.get("reason") == "HeldByKueue" and waiting else None

    try:
        with whole_gangs(kns, {"first": 4, "second": 4}, jobset_gang):
            created = kns.create(queued_trainjob("first"))
            assert created["spec"]["suspend"] is True  # Kueue's webhook
            managers = [p["manager"] for p in created["spec"]["runtimePatches"]]
            assert sorted(managers) == ["kueue.x-k8s.io/manager", "phalanx.dev/manager"], managers
            first = wait_for("the first TrainJob's 4 pods whole in one block", lambda: whole("first"), 180)
            assert kueue_condition(workload_of(kns, "first"), "Admitted").get("status") == "True"
            assert kns.get(paths["first"])["spec"]["suspend"] is False  # Kueue admitted it

            kns.create(queued_trainjob("second"))
            root = wait_for("the second held by Kueue, waiting in its LocalQueue", lambda: held("second"), 90)
            assert not root["status"].get("admission") and not root["status"].get("reservation")
            workload = workload_of(kns, "second")
            assert kueue_condition(workload, "QuotaReserved").get("status") == "False", workload
            assert kns.get(paths["second"])["spec"]["suspend"] is True
            assert kns.get(f"{JOBSETS}/second")["spec"]["suspend"] is True  # Trainer keeps it in step
            assert not kns.pods(f"{JOBSET_NAME}=second")
            assert whole("first") == first  # untouched

            seen.mark("first deleted")
            kns.api.request(
                "DELETE",
                paths["first"],
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
            block = wait_for("the second TrainJob's 4 pods whole in one block", lambda: whole("second"), 180)
            assert kueue_condition(workload_of(kns, "second"), "Admitted").get("status") == "True"
            print(kns.where(f"{JOBSET_NAME}=second"), f"first ran in {first}, second in {block}")
    finally:
        flips = {n: suspend_flips(w.stop()) for n, w in suspends.items()}
        seen.stop()
        for path in paths.values():
            try:
                kns.api.request("DELETE", path)
            except ApiError as e:
                if e.status != 404:
                    raise
    assert seen.order, "the pod watch saw nothing"
    assert not seen.pods_before("first deleted", "second"), seen.order  # no pod while Kueue held it
    # Created suspended by Kueue, admitted (unsuspended) by Kueue: no other change, no tug-of-war.
    assert flips == {"first": [True, False], "second": [True, False]}, flips
    ours = [e for e in kns.events() if e.get("reportingComponent") == COMPONENT]
    assert not [e for e in ours if e["reason"] in ("Requeued", "Preempted", "Preempting")], ours


def cq_reserved(api: RestClient, name: str) -> dict[tuple[str, str], str]:
    """What the ClusterQueue has reserved, by (flavor, resource)."""
    status = api.get(f"{KUEUE}/clusterqueues/{name}").get("status", {})
    return {
        (f["name"], r["name"]): str(r.get("total"))
        for f in status.get("flavorsReservation") or []
        for r in f.get("resources") or []
    }


@pytest.mark.addons("trainer")
def test_a_queued_trainjob_whose_runtime_asks_kueue_tas_is_refused_so_nothing_is_queued_or_reserved(
    kns: Namespace, kueue_queue: str
) -> None:
    """A TrainJob labelled for both, queued in `lq`, of a ClusterTrainingRuntime whose trainer pods carry
    kueue.x-k8s.io/podset-required-topology: refused at its creation naming the runtime, its field and both
    systems, so Kueue never sees it: no Workload, nothing reserved in the ClusterQueue, no JobSet, no pod
    (before, the TrainJob was let through: Kueue made a Workload asking TAS for it, and a ClusterQueue with
    a topologyName flavor admitted it and reserved its 32 GPUs while Trainer's every JobSet creation was
    refused). The runtime's owner removes the annotation; the TrainJob, queued again, is admitted by Kueue
    and runs whole in one network block."""
    runtime = f"torch-tas-{uuid.uuid4().hex[:5]}"
    ensure(kns, RUNTIMES, tas_runtime(runtime))
    path = f"{TRAINJOBS.replace('{ns}', kns.name)}/tas"
    # The module's earlier tests' Workloads are gone (their namespaces' teardown), but the ClusterQueue's
    # status may still count them for a moment on a loaded machine: its baseline is read once it reserves
    # for nothing.
    wait_for(
        "the ClusterQueue reserving for no Workload",
        lambda: cq_counts(kns.api, kueue_queue)["reserving"] == 0,
        60,
    )
    reserved = cq_reserved(kns.api, kueue_queue)
    try:
        with pytest.raises(ApiError) as refused:
            kns.create(queued_trainjob("tas", runtime))
        assert refused.value.status == 422
        message = json.loads(refused.value.body)["message"]
        print(message)
        assert message.startswith(
            'admission webhook "gate-trainjob.phalanx.dev" denied the request: spec.runtimeRef: '
            f"ClusterTrainingRuntime {runtime} has spec.template.spec.replicatedJobs[0].template.spec."
            f"template.metadata.annotations[{TAS}], which Kubeflow Trainer puts on this TrainJob's pods: "
            "Kueue's Topology-Aware Scheduling and Phalanx would both place these pods"
        )

        def nothing() -> bool:
            return (
                not kueue_workloads(kns)
                and cq_reserved(kns.api, kueue_queue) == reserved
                and not kns.pods()
                and not kns.get(TRAINJOBS)["items"]
                and not kns.get(JOBSETS)["items"]
            )

        hold("nothing queued, reserved or made for it", nothing, seconds=2)

        runtime_annotations(kns, runtime, None)
        with whole_gangs(kns, {"tas": 4}, jobset_gang):
            kns.create(queued_trainjob("tas", runtime))
            block = wait_for("its 4 pods whole in one block", lambda: trainjob_whole(kns, "tas"), 180)
        assert kueue_condition(workload_of(kns, "tas"), "Admitted").get("status") == "True"
        print(kns.where(f"{JOBSET_NAME}=tas"), f"ran in {block}")
    finally:
        delete_if_there(kns, path)
        wait_for("its Kueue Workload gone", lambda: workload_of(kns, "tas") is None, timeout=120)
        delete_runtime(kns, runtime)


# ---------------------------------------------------------------------------- Kueue preempts a TrainJob
def priority_runtime(name: str, priority_class: str) -> dict[str, Any]:
    """The torch runtime of four 8-GPU nodes, its pods of `priority_class`: Kueue takes a TrainJob's
    priority from its pod sets, which Trainer's runtime makes."""
    runtime = torch_runtime(name, 4)
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["template"]["spec"]["priorityClassName"] = priority_class
    return runtime


def trainjob_whole(ns: Namespace, name: str) -> str | None:
    """The network block the TrainJob's four pods are all bound in, or None."""
    return jobset_block(ns, name, 4)


def pod_gang(pod: dict[str, Any]) -> str:
    """A pod's gang: its JobSet (a TrainJob's is named after the TrainJob), else its Job."""
    labels = pod["metadata"].get("labels") or {}
    return str(labels.get(JOBSET_NAME) or labels.get("job-name") or "")


def delete_if_there(ns: Namespace, path: str) -> None:
    try:
        ns.api.request(
            "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        )
    except ApiError as e:
        if e.status != 404:
            raise


def trainjob_held_by_kueue(ns: Namespace, name: str, queue: str) -> dict[str, Any] | None:
    """The TrainJob's root group once it says Kueue holds it, waiting in its LocalQueue `queue` again since
    Kueue evicted it (not being evicted: Kueue has released its quota)."""
    roots = owned(ns, f"TrainJob/{name}", "compositepodgroups")
    cond = condition(roots[0]) if roots else {}
    waiting = f"waiting in Kueue's LocalQueue {queue} since Kueue evicted it" in str(cond.get("message", ""))
    return roots[0] if cond.get("reason") == "HeldByKueue" and waiting else None


@dataclass(frozen=True)
class Preemptor:
    """What Kueue preempts the TrainJob for: its body, its object's path, its gang's size, how to see it
    whole in one block, and how to watch its spec.suspend."""

    name: str
    body: dict[str, Any]
    path: str
    size: int
    whole: Callable[[], str | None]
    suspends: type[SuspendWatch]


def trainjob_preempted_and_readmitted(
    kns: Namespace,
    body: dict[str, Any],
    preemptor: Preemptor,
    reason: str,
    admitted: Callable[[], None] = lambda: None,
) -> None:
    """The flow both preemption tests share. The TrainJob `body` (`low`, queued) runs whole in one
    network block; `preemptor` is made and Kueue preempts `low` for it (its Workload `Preempted=True`,
    `reason`): every pod of `low` goes, the TrainJob and its JobSet stay suspended, its groups say Kueue
    holds it (holding nothing), and the preemptor runs whole. The preemptor deleted, Kueue readmits `low`,
    whose new pods, each born gated, run whole in one block again. Checked throughout: no gang bound in part
    at any pod event (`whole_gangs`), no pod of `low` made between its preemption and the preemptor's
    deletion, spec.suspend of the TrainJob and of its JobSet only Kueue's (created suspended, admitted,
    preempted, readmitted), the preemptor's only created suspended then admitted, and no requeue or
    preemption of Phalanx's. `admitted()` checks what the test expects of Kueue once `low` runs whole,
    before the preemptor is made."""
    low, queue = body["metadata"]["name"], body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    low_path = f"{TRAINJOBS.replace('{ns}', kns.name)}/{low}"
    suspends = {
        "TrainJob": TrainJobSuspendWatch(kns, low),
        "JobSet": JobSetSuspendWatch(kns, low),
        "preemptor": preemptor.suspends(kns, preemptor.name),
    }
    seen = FirstSeen(kns)
    try:
        with whole_gangs(kns, {low: 4, preemptor.name: preemptor.size}, pod_gang):
            kns.create(body)
            first = wait_for(f"{low}'s 4 pods whole in one block", lambda: trainjob_whole(kns, low), 180)
            assert kueue_condition(workload_of(kns, low), "Admitted").get("status") == "True"
            old = {p["metadata"]["name"] for p in kns.pods(f"{JOBSET_NAME}={low}")}
            admitted()

            seen.mark("preemptor made")
            kns.create(preemptor.body)
            preempted = wait_for(
                f"Kueue to preempt {low}",
                lambda: kueue_condition(workload_of(kns, low), "Preempted") or None,
                timeout=180,
            )
            assert preempted["status"] == "True" and preempted["reason"] == reason, preempted
            wait_for(
                f"every pod of {low} gone",
                lambda: not old & {p["metadata"]["name"] for p in kns.pods(f"{JOBSET_NAME}={low}")},
                timeout=180,
            )
            block = wait_for(f"{preemptor.name} whole in one block", preemptor.whole, 180)
            root = wait_for(
                f"{low}'s groups say Kueue holds it, waiting in {queue} since it evicted it",
                lambda: trainjob_held_by_kueue(kns, low, queue),
                timeout=120,
            )
            assert not root["status"].get("admission") and not root["status"].get("reservation")
            view = explain(kns, low, "trainjob")["kueue"]
            assert view["holder"] == "Kueue", view
            assert view["summary"].startswith(f"waiting in Kueue's LocalQueue {queue} since Kueue"), view
            assert kueue_condition(workload_of(kns, low), "QuotaReserved").get("status") == "False"
            assert kns.get(low_path)["spec"]["suspend"] is True  # Kueue's suspension, kept
            assert kns.get(f"{JOBSETS}/{low}")["spec"]["suspend"] is True  # Trainer keeps it in step
            assert not jobset_pods(kns, low)

            seen.mark("preemptor deleted")
            delete_if_there(kns, preemptor.path)
            again = wait_for(
                f"{low}'s 4 pods whole again once Kueue readmits it", lambda: trainjob_whole(kns, low), 240
            )
            assert kueue_condition(workload_of(kns, low), "Admitted").get("status") == "True"
            print(
                kns.where(f"{JOBSET_NAME}={low}"),
                f"{low} in {first}, {preemptor.name} in {block}, {low} in {again}",
            )
    finally:
        flips = {what: suspend_flips(w.stop()) for what, w in suspends.items()}
        seen.stop()
        for path in (low_path, preemptor.path):
            delete_if_there(kns, path)
    assert seen.order, "the pod watch saw nothing"
    # No pod of it made (nor so released) while Kueue held it; every pod of both runs born gated.
    new = [p for p in seen.pods_before("preemptor deleted", low) if p.removeprefix(f"{low}/") not in old]
    assert not new, seen.order
    assert not seen.born_ungated, seen.born_ungated
    # Created suspended by Kueue, admitted, preempted, readmitted: Kueue's, and Trainer's after it.
    assert flips == {
        "TrainJob": [True, False, True, False],
        "JobSet": [True, False, True, False],
        "preemptor": [True, False],
    }, flips
    ours = [e for e in kns.events() if e.get("reportingComponent") == COMPONENT]
    assert not [e for e in ours if e["reason"] in ("Requeued", "Preempted", "Preempting")], ours


@pytest.mark.addons("trainer")
def test_a_trainjob_kueue_preempts_goes_whole_with_no_suspend_fight_and_is_placed_whole_when_readmitted(
    kns: Namespace, kueue_queue: str
) -> None:
    """A low-priority TrainJob of four 8-GPU nodes (32 of the ClusterQueue's 48 GPUs) runs whole; a
    high-priority TrainJob of the same size in the same ClusterQueue has no quota left, so Kueue preempts
    the low one (within the ClusterQueue) — it goes whole, Phalanx neither resumes it nor requeues it, and
    the high one runs whole; once the high one is deleted Kueue readmits the low one, whose new pods are
    born gated and run whole in one block (`trainjob_preempted_and_readmitted`)."""
    suffix = kueue_queue.removeprefix("cq-")
    runtimes = {p: f"{TRAINJOB_RUNTIME}-{p}-{suffix}" for p in ("low", "high")}
    for p, name in runtimes.items():
        ensure(kns, RUNTIMES, priority_runtime(name, f"{p}-{suffix}"))
    try:
        high = Preemptor(
            "high",
            queued_trainjob("high", runtimes["high"]),
            f"{TRAINJOBS.replace('{ns}', kns.name)}/high",
            4,
            lambda: trainjob_whole(kns, "high"),
            TrainJobSuspendWatch,
        )
        low = queued_trainjob("low", runtimes["low"])
        trainjob_preempted_and_readmitted(kns, low, high, "InClusterQueue")
    finally:
        for name in runtimes.values():
            delete_if_there(kns, f"{RUNTIMES}/{name}")


@pytest.mark.addons("trainer")
def test_a_trainjob_borrowing_in_a_cohort_is_reclaimed_by_kueue_goes_whole_and_is_placed_whole_again(
    kns: Namespace, kueue_queue: str
) -> None:
    """Kueue's reclaim across ClusterQueues: two ClusterQueues of one cohort over the module's flavor,
    `borrower` (16 GPUs) and `lender` (32, reclaiming within the cohort). A TrainJob of four 8-GPU nodes
    queued in `borrower` is admitted by borrowing 16 of the lender's GPUs and runs whole; a Job of four
    6-GPU pods (24 GPUs) queued in `lender` needs its own quota back, so Kueue preempts the TrainJob
    (`InCohortReclamation`) — it goes whole, no suspend fight, the Job runs whole; once the Job is deleted
    Kueue readmits the TrainJob, placed whole again (`trainjob_preempted_and_readmitted`)."""
    cq = kns.get(f"{KUEUE}/clusterqueues/{kueue_queue}")
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    suffix = uuid.uuid4().hex[:6]
    cohort = f"co-{suffix}"

    def cluster_queue(name: str, gpus: int, preemption: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"{name}-{suffix}"},
            "spec": {
                "cohortName": cohort,
                "namespaceSelector": {},
                "preemption": preemption,
                "resourceGroups": [
                    {
                        "coveredResources": [GPU_KEY],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": GPU_KEY, "nominalQuota": str(gpus)}]}
                        ],
                    }
                ],
            },
        }

    made = [
        (f"{KUEUE}/clusterqueues", cluster_queue("borrower", 16, {})),
        (f"{KUEUE}/clusterqueues", cluster_queue("lender", 32, {"reclaimWithinCohort": "Any"})),
        *(
            (
                f"{KUEUE}/namespaces/{kns.name}/localqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": f"lq-{name}"},
                    "spec": {"clusterQueue": f"{name}-{suffix}"},
                },
            )
            for name in ("borrower", "lender")
        ),
    ]
    for path, obj in made:
        kns.api.request("POST", path, obj)
    ensure(kns, RUNTIMES, torch_runtime(TRAINJOB_RUNTIME, 4))
    job = queued_job("reclaim", 4)
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq-lender"
    try:
        for _, obj in made[:2]:
            name = obj["metadata"]["name"]
            wait_for(f"the ClusterQueue {name} Active", partial(cq_active, kns.api, name), timeout=60)
        lender = Preemptor(
            "reclaim",
            job,
            f"/apis/batch/v1/namespaces/{kns.name}/jobs/reclaim",
            4,
            lambda: whole_in_one_block(kns, "reclaim", 4),
            SuspendWatch,
        )
        body = queued_trainjob("borrowing", queue="lq-borrower")
        trainjob_preempted_and_readmitted(kns, body, lender, "InCohortReclamation")
    finally:
        delete_if_there(kns, f"{TRAINJOBS.replace('{ns}', kns.name)}/borrowing")
        delete_if_there(kns, f"/apis/batch/v1/namespaces/{kns.name}/jobs/reclaim")
        wait_for("the namespace's Kueue Workloads gone", lambda: not kueue_workloads(kns), timeout=120)
        for path, obj in reversed(made):
            delete_if_there(kns, f"{path}/{obj['metadata']['name']}")


# ---------------------------------------------------------------------------- Phalanx requeues a TrainJob
class JobFailures:
    """Every version of a Job's (uid, status.failed), listed then watched."""

    def __init__(self, ns: Namespace, job: str) -> None:
        self.job = job
        self.seen: list[tuple[str, int]] = []
        self._watch = PodWatch(ns.cluster, ns.name, self._see, collection="apis/batch/v1/jobs")
        self._watch.start()

    def _see(self, _kind: str, job: dict[str, Any], _now: float) -> None:
        if job["metadata"]["name"] == self.job:
            self.seen.append((job["metadata"]["uid"], int((job.get("status") or {}).get("failed") or 0)))

    def stop(self) -> list[tuple[str, int]]:
        self._watch.stop()
        return self.seen


class Disruptions:
    """The DisruptionTarget reason of every pod of JobSet `jobset` that got one (listed, then watched): who
    took it away (the taint manager's eviction, Phalanx's requeue)."""

    def __init__(self, ns: Namespace, jobset: str) -> None:
        self.jobset = jobset
        self.reasons: dict[str, str] = {}
        self._watch = PodWatch(ns.cluster, ns.name, self._see)
        self._watch.start()

    def _see(self, _kind: str, pod: dict[str, Any], _now: float) -> None:
        if (pod["metadata"].get("labels") or {}).get(JOBSET_NAME) != self.jobset:
            return
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond["type"] == "DisruptionTarget" and cond["status"] == "True":
                self.reasons[pod["metadata"]["name"]] = str(cond.get("reason") or "")

    def stop(self) -> dict[str, str]:
        self._watch.stop()
        return self.reasons


def cq_once(ns: Namespace, cq: str) -> dict[str, Any]:
    """`cq_counts` of ClusterQueue `cq` counting one TrainJob of four 8-GPU nodes (32 GPUs), once."""
    flavor = ns.get(f"{KUEUE}/clusterqueues/{cq}")["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    return {
        "reserved": {(flavor, GPU_KEY): "32"},
        "used": {(flavor, GPU_KEY): "32"},
        "reserving": 1,
        "admitted": 1,
    }


IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def ignoring_runtime(name: str) -> dict[str, Any]:
    """The torch runtime of four 8-GPU nodes whose child Job ignores the failures of pods that were
    disruption targets (a podFailurePolicy rule Ignore on DisruptionTarget, which needs restartPolicy
    Never): the only place a TrainJob's child Job can get one (Trainer's runtime patches carry none)."""
    runtime = torch_runtime(name, 4)
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["podFailurePolicy"] = IGNORE_DISRUPTIONS
    job["template"]["spec"]["restartPolicy"] = "Never"
    return runtime


def phalanx_requeues(ns: Namespace, name: str) -> list[dict[str, Any]]:
    """Phalanx's Requeued events on TrainJob `name` (a repeat of one bumps its count)."""
    return [
        e
        for e in events_of(ns, "TrainJob", name)
        if e["reason"] == "Requeued" and e.get("reportingComponent") == COMPONENT
    ]


def _count(events: list[dict[str, Any]]) -> int:
    return sum(int(e.get("count") or 1) for e in events)


def requeued_times(ns: Namespace, name: str, times: int) -> list[dict[str, Any]] | None:
    """Phalanx's Requeued events on TrainJob `name` once they tell of `times` requeues at least."""
    events = phalanx_requeues(ns, name)
    return events if _count(events) >= times else None


def pods_gone(ns: Namespace, jobset: str, names: set[str]) -> bool:
    """None of these pods of JobSet `jobset` is left."""
    return not names & {p["metadata"]["name"] for p in ns.pods(f"{JOBSET_NAME}={jobset}")}


@dataclass(frozen=True)
class FailureRun:
    """What `trainjob_through_node_failures` saw."""

    blocks: list[str]  # the network block the gang ran in: first, then after each requeue
    victims: list[str]  # the nodes that failed, one a requeue
    old: set[str]  # every pod of the placements before the last
    requeued: list[dict[str, Any]]  # Phalanx's Requeued events on the TrainJob
    # The Requeued event's message after each requeue (one Event per object and reason: it keeps the latest)
    requeue_messages: list[str]
    failed_after: list[int]  # the child Job's status.failed once the gang ran whole again, a requeue each
    flips: dict[str, list[bool]]  # spec.suspend of the TrainJob and of its JobSet, each change once
    workloads: list[WorkloadVersion]  # every version of its Kueue Workload(s)
    disruptions: dict[str, str]  # the pods marked DisruptionTarget, by whom (the condition's reason)
    failed_seen: list[tuple[str, int]]  # every version of the child Job's (uid, status.failed)
    job: dict[str, Any]  # the child Job at the end
    said: list[tuple[str, str]]  # the root group's Admitted condition (reason, message), each change once
    writes: dict[str, int]  # Phalanx's requeue writes meanwhile (`requeue_writes`)


def trainjob_through_node_failures(
    kns: Namespace,
    kueue_queue: str,
    operator: OperatorProcess,
    runtime: str,
    failures: int,
    while_requeued: Callable[[str], None] = lambda _path: None,
) -> FailureRun:
    """The flow both node-failure tests share. A TrainJob of four 8-GPU nodes of `runtime`, queued in `lq`,
    is admitted by Kueue and placed whole by Phalanx in one network block, all four of its nodes. Then,
    `failures` times: one of its nodes fails (a NoExecute taint: its pod is evicted; the node failed before
    is healed first, so the other block is whole again) and its block has no other node, so Phalanx
    requeues the gang whole (its Requeued event on the TrainJob); once every pod from before is gone
    (`while_requeued(path)` checks then what each test expects of the requeue), the gang runs whole in the
    other block. Checked throughout: no pod placed beside the ones a failure left, and the gang whole again
    within SETTLE (`whole_gangs_through_a_failure`); every pod born gated. At the end: the pods made again by
    the same child Job (no JobSet restart: none of the runtimes asks for one), the Workload admitted, the
    ClusterQueue counting the TrainJob's 32 GPUs once, the TrainJob unsuspended and not failed."""
    name, child = "tj", "tj-node-0"  # the JobSet's one child Job: replicated Job `node`, index 0
    path = f"{TRAINJOBS.replace('{ns}', kns.name)}/{name}"
    once = cq_once(kns, kueue_queue)
    suspends = {"TrainJob": TrainJobSuspendWatch(kns, name), "JobSet": JobSetSuspendWatch(kns, name)}
    workloads = WorkloadWatch(kns, name)
    marks = Disruptions(kns, name)
    jobs = JobFailures(kns, child)
    says = GroupSays(kns, f"TrainJob/{name}")
    seen = FirstSeen(kns)
    victims: list[str] = []
    blocks: list[str] = []
    old: set[str] = set()
    failed_after: list[int] = []
    requeued: list[dict[str, Any]] = []
    messages: list[str] = []
    writes_before = requeue_writes(operator)
    try:
        with whole_gangs_through_a_failure(kns, {name: 4}, jobset_gang) as gangs:
            kns.create(queued_trainjob(name, runtime))
            blocks.append(
                wait_for(f"{name}'s 4 pods whole in one block", lambda: trainjob_whole(kns, name), 180)
            )
            assert kueue_condition(workload_of(kns, name), "Admitted").get("status") == "True"
            wait_for("the ClusterQueue counting it once", lambda: cq_counts(kns.api, kueue_queue) == once, 60)
            job_uid = kns.get(f"/apis/batch/v1/namespaces/{kns.name}/jobs/{child}")["metadata"]["uid"]
            for n in range(1, failures + 1):
                pods = jobset_pods(kns, name)
                before = {p["metadata"]["name"] for p in pods}
                old |= before
                nodes = sorted(p["spec"]["nodeName"] for p in pods)
                assert nodes == sorted(NB_A if blocks[-1] == "nb-a" else NB_B), nodes  # no free node left
                wait_for("the pod watch to see it whole", lambda: gangs.whole(name), 30)
                if victims:
                    heal_node(kns.api, victims[-1])  # the other block whole again
                victims.append(nodes[0])
                gangs.failure()
                fail_node(kns.api, victims[-1], how="taint")
                requeued = wait_for(
                    f"Phalanx's Requeued event on TrainJob {name} ({n})",
                    partial(requeued_times, kns, name, n),
                    timeout=180,
                )
                assert _count(requeued) == n, requeued
                assert all("below its minCount" in e["message"] for e in requeued), requeued
                print(f"Requeued ({n}):", requeued[-1]["message"])
                messages.append(requeued[-1]["message"])
                wait_for(
                    f"every pod of {name} from before failure {n} gone",
                    partial(pods_gone, kns, name, before),
                    timeout=180,
                )
                while_requeued(path)
                blocks.append(
                    wait_for(f"{name}'s 4 pods whole again ({n})", lambda: trainjob_whole(kns, name), 300)
                )
                assert blocks[-1] != blocks[-2]  # its block has three nodes left
                job = kns.get(f"/apis/batch/v1/namespaces/{kns.name}/jobs/{child}")
                failed_after.append(int(job["status"].get("failed") or 0))
        pods = jobset_pods(kns, name)
        print(kns.where(f"{JOBSET_NAME}={name}"), f"{name} ran in {blocks}; {victims} failed in turn")
        made = sorted(p["metadata"]["creationTimestamp"] for p in pods)
        print(f"requeued at {requeued[-1].get('lastTimestamp')}; the pods made again at {made}")
        assert not old & {p["metadata"]["name"] for p in pods}
        # Made again by the Job controller: the same child Job, no restart of the JobSet.
        assert {p["metadata"]["labels"].get(RESTART_ATTEMPT) for p in pods} == {"0"}
        job = kns.get(f"/apis/batch/v1/namespaces/{kns.name}/jobs/{child}")
        assert job["metadata"]["uid"] == job_uid
        assert not (kns.get(f"{JOBSETS}/{name}").get("status") or {}).get("restarts")
        assert kueue_condition(workload_of(kns, name), "Admitted").get("status") == "True"
        wait_for("the ClusterQueue counting it once", lambda: cq_counts(kns.api, kueue_queue) == once, 60)
        body = kns.get(path)
        assert body["spec"]["suspend"] is False
        assert condition(body, "Failed").get("status") != "True", body.get("status")
        writes = {k: v - writes_before[k] for k, v in requeue_writes(operator).items()}
    finally:
        flips = {what: suspend_flips(w.stop()) for what, w in suspends.items()}
        versions = workloads.stop()
        reasons = marks.stop()
        job_versions = jobs.stop()
        said = says.stop()
        seen.stop()
        for victim in victims:
            heal_node(kns.api, victim)
        delete_if_there(kns, path)
    assert seen.order and not seen.born_ungated, seen.born_ungated
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"], job["status"]
    ours = [e for e in kns.events() if e.get("reportingComponent") == COMPONENT]
    # Phalanx preempted nothing, and none of its writes failed (a refused Workload patch would say so).
    assert not [e for e in ours if e["reason"] in ("Preempted", "Preempting", "FailedSync")], ours
    print("suspend:", flips)
    print("Workload:", changes([(v.uid[:8], v.phase) for v in versions]))
    print("Workload conditions:", changes([(v.active, v.note[:20], v.status, v.reasons) for v in versions]))
    print("child Job (uid, failed):", changes([(uid[:8], failed) for uid, failed in job_versions]))
    print("DisruptionTarget:", reasons)
    for step in changes(said):
        print("group says:", step)
    print("requeue writes:", writes)
    return FailureRun(
        blocks,
        victims,
        old,
        requeued,
        messages,
        failed_after,
        flips,
        versions,
        reasons,
        job_versions,
        job,
        changes(said),
        writes,
    )


@pytest.mark.addons("trainer")
def test_a_node_failure_under_a_queued_trainjob_requeues_it_whole_through_kueue_counting_no_failure(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """A TrainJob of the module's torch runtime, like Trainer's own (no podFailurePolicy: the child Job
    counts every pod deleted while it runs as a failure, within its default backoffLimit 6), queued in
    `lq`, runs whole in one network block; one of its nodes fails and Phalanx requeues it whole THROUGH
    KUEUE, twice (`trainjob_through_node_failures`): it deactivates the TrainJob's Kueue Workload with its
    note (`spec.active: false`, `phalanx.dev/requeued`: the Requeued event's words); Kueue evicts it
    (`Evicted=True Deactivated`) and suspends the TrainJob, Trainer its JobSet, whose child Job deletes
    its pods; Kueue releases the quota once none is active (`QuotaReserved=False`); Phalanx activates the
    Workload again and clears its note; Kueue queues it and admits it again, the same Workload; the
    TrainJob is resumed and its new pods, born gated, run whole in the other block. Checked: spec.suspend of
    the TrainJob and of its JobSet go true, false (Kueue's creation and admission) and then true, false for
    each requeue (Kueue's eviction and readmission; Trainer's after it) and nothing else; the Workload's
    steps exactly those, Phalanx's activation only once Kueue released the quota; no pod deleted by
    Phalanx (none marked `RequeueByPhalanx`); the child Job counts only the taint manager's evictions as
    failures (1 after the first requeue, 2 after the second), where deleting the pods cost 4 a requeue
    before: this test failed then at the second requeue, the Job past its backoffLimit, then the JobSet and
    the TrainJob (docs/kueue.md, item 14 of How it is tested)."""
    ensure(kns, RUNTIMES, torch_runtime(TRAINJOB_RUNTIME, 4))
    run = trainjob_through_node_failures(kns, kueue_queue, phalanx_addons, TRAINJOB_RUNTIME, failures=2)
    # Each requeue says where the gang was left: the block it ran in before it.
    left = [m.split(", ")[0] for m in run.requeue_messages]
    assert left == [f"below its minCount: 3 pod(s) of the tree were left in {b}" for b in run.blocks[:-1]], (
        left
    )
    why = set(run.requeue_messages)
    # Kueue suspended and resumed it for each requeue: its creation, its admission, then each eviction and
    # readmission; Trainer keeps the JobSet in step. Phalanx never wrote either.
    assert run.flips == {"TrainJob": [True, False] * 3, "JobSet": [True, False] * 3}, run.flips
    # The one Workload, deactivated with Phalanx's note, evicted by Kueue, its quota released, activated
    # again without the note, queued and admitted: once a requeue.
    assert len({v.uid for v in run.workloads}) == 1, run.workloads
    steps = changes([v.phase for v in run.workloads])
    requeue = ["deactivated", "evicted", "released", "queued", "admitted"]
    assert steps == ["queued", "admitted", *requeue, *requeue], steps
    assert {v.note for v in run.workloads if v.note} == why, run.workloads
    evicted = [v for v in run.workloads if v.phase == "evicted"]
    assert {v.reasons.get("Evicted") for v in evicted} == {"Deactivated"}, evicted
    # Kueue requeued it because it was reactivated (Requeued=False Deactivated, then True Reactivated).
    requeued = changes([v.reasons["Requeued"] for v in run.workloads if "Requeued" in v.reasons])
    assert requeued == ["Deactivated", "Reactivated"] * 2, requeued
    # One deactivation and one activation a requeue, no pod deleted by Phalanx.
    assert run.writes == {
        "DeactivateKueueWorkload": 2,
        "ActivateKueueWorkload": 2,
        "DeletePod": 0,
        "requeues": 2,
    }, run.writes
    # Its groups said so while Kueue stopped it.
    through = [
        m
        for r, m in run.said
        if r == "Requeued" and "; held by Kueue: Phalanx deactivated its Workload " in m
    ]
    said = tuple(f"requeued by Phalanx: {w}; held by Kueue: " for w in why)
    assert through and all(m.startswith(said) for m in through), run.said
    # Nothing of it deleted by Phalanx: only each failed node's pod is a disruption target (the taint
    # manager's eviction); the others went with Kueue's suspension.
    assert len(run.disruptions) == 2 and set(run.disruptions) <= run.old, run.disruptions
    assert "RequeueByPhalanx" not in run.disruptions.values(), run.disruptions
    # So the child Job counts the two evictions only, one a requeue, within its backoffLimit.
    assert run.failed_after == [1, 2], run.failed_after
    assert changes(run.failed_seen) == [(run.job["metadata"]["uid"], n) for n in (0, 1, 2)], run.failed_seen
    assert run.job["status"].get("failed") == 2 and run.job["spec"]["backoffLimit"] == 6, run.job["status"]


@pytest.mark.addons("trainer")
def test_a_node_failure_under_a_queued_trainjob_ignoring_disruptions_requeues_it_by_deleting_its_pods(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """A TrainJob of a runtime whose child Job ignores disruption targets (a podFailurePolicy rule Ignore
    on DisruptionTarget: docs/kueue.md's advice), queued in `lq`, runs whole in one network block; one of
    its nodes fails and Phalanx requeues it whole by deleting its three pods left, each marked
    `DisruptionTarget` `RequeueByPhalanx` (`trainjob_through_node_failures`): deleting them costs the Job
    nothing, and Kueue's admission and quota stay. Checked: while requeued, the TrainJob unsuspended, its
    Workload admitted and the ClusterQueue counting its 32 GPUs once; spec.suspend of the TrainJob and its
    JobSet only Kueue's true then false (no suspend fight); the one Workload admitted from its admission on,
    never deactivated, evicted or preempted; no failure counted by the child Job."""
    runtime = f"{TRAINJOB_RUNTIME}-ignore-{uuid.uuid4().hex[:5]}"
    ensure(kns, RUNTIMES, ignoring_runtime(runtime))
    once = cq_once(kns, kueue_queue)

    def untouched(path: str) -> None:
        # Requeued by deleting its pods: the TrainJob runs on, Kueue's admission and quota untouched.
        assert kns.get(path)["spec"]["suspend"] is False
        assert kueue_condition(workload_of(kns, "tj"), "Admitted").get("status") == "True"
        assert cq_counts(kns.api, kueue_queue) == once

    try:
        run = trainjob_through_node_failures(
            kns, kueue_queue, phalanx_addons, runtime, failures=1, while_requeued=untouched
        )
    finally:
        delete_runtime(kns, runtime)
    # Created suspended by Kueue, admitted by Kueue: no other change, no tug-of-war.
    assert run.flips == {"TrainJob": [True, False], "JobSet": [True, False]}, run.flips
    # One Workload, never deactivated, evicted or preempted, and admitted from its admission on.
    assert len({v.uid for v in run.workloads}) == 1, run.workloads
    assert changes([v.phase for v in run.workloads]) == ["queued", "admitted"], run.workloads
    admitted = next(i for i, v in enumerate(run.workloads) if v.true("Admitted"))
    assert all(v.true("Admitted") and v.true("QuotaReserved") for v in run.workloads[admitted:]), (
        run.workloads
    )
    assert not [v for v in run.workloads if v.true("Evicted") or v.true("Preempted")], run.workloads
    # The failed node's pod evicted by the taint manager, the three others deleted by Phalanx.
    by_phalanx = sorted(pod for pod, reason in run.disruptions.items() if reason == "RequeueByPhalanx")
    assert len(by_phalanx) == 3 and set(by_phalanx) < run.old, run.disruptions
    assert len(run.disruptions) == 4 and set(run.disruptions) <= run.old, run.disruptions
    assert run.writes == {
        "DeactivateKueueWorkload": 0,
        "ActivateKueueWorkload": 0,
        "DeletePod": 3,
        "requeues": 1,
    }, run.writes
    assert not [m for _, m in run.said if "deactivated" in m], run.said
    # Each was marked a disruption target (the taint manager's, Phalanx's), which the rule ignores.
    assert run.failed_after == [0], run.failed_after
    assert changes(run.failed_seen) == [(run.job["metadata"]["uid"], 0)], run.failed_seen
    assert run.job["status"].get("failed", 0) == 0 and run.job["spec"]["backoffLimit"] == 6, run.job["status"]
