"""A LeaderWorkerSet queued in Kueue (`kueue.x-k8s.io/queue-name`) and placed by Phalanx, whose running group
Phalanx has to take back or complete: a node failure under it, and Phalanx's own preemption of it — with the
real Kueue v0.17.0 and LWS v0.8.0 controllers and Phalanx on one dev cluster (`addons_cluster`; the module's
ClusterQueue of 48 GPUs and LocalQueue `lq`: tests/integration/kueue_fixtures.py).

How Kueue holds an LWS (its leaderworkerset integration, which rides on its pod groups): one Workload per
group, made by Kueue's LWS reconciler at the group's index, owned by the LWS (`<lws>-<index>-<hash>`,
annotation `kueue.x-k8s.io/component-workload-index`); every pod of the group is born with Kueue's gates
(`kueue.x-k8s.io/admission`, `kueue.x-k8s.io/topology`) and joins the Workload's pod group (label
`kueue.x-k8s.io/pod-group-name`); Kueue lifts its gates once the Workload is admitted. LWS has no suspend,
so Phalanx takes a group back by deleting its leader pod (docs/kueue.md rule 2, docs/integrations.md): the
garbage collector takes the workers with their StatefulSet, LWS makes the whole group again, born gated.
What Kueue does with the group's Workload then (read in its source, pkg/controller/jobs/pod and
leaderworkerset, and checked here): nothing. The Workload is the LWS's, not the pods': the pod-group
reconciler, finding no pod of the group for a moment, only drops the Workload's finalizer; the LWS reconciler
keeps one Workload per index below `spec.replicas`; a serving pod group (Kueue marks an LWS's pods
`kueue.x-k8s.io/pod-group-serving`) never finishes. So the group made again joins the same Workload, still
admitted, its quota kept, and Kueue lifts its gates at once: it is not queued again. The tests check that,
with the pods of 6 GPUs (one a node) the other Kueue tests use.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from phalanx.controller.apply.events import COMPONENT
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, filler_pod, heal_node

from .kinds import (
    GATE,
    GPUS,
    KUEUE,
    LWS_NAME,
    GateWatch,
    ThroughFailure,
    WorkloadVersion,
    WorkloadWatch,
    changes,
    cq_counts,
    diagnose_lws,
    gated,
    kueue_condition,
    lws,
    lws_gang,
    lws_pods,
    queued_job,
    requeue_writes,
    requeues_of,
    whole_gangs,
    whole_gangs_through_a_failure,
    whole_in_one_block,
    whole_lws_groups,
    worker_node,
    workload_of,
)
from .kube import GPU_KEY, NB_KEY, Namespace, bound, domains_of, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.addons("kueue", "lws")]

NB_A = ("was-worker", "was-worker2", "was-worker3", "was-worker4")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
NAME = "serve"
GROUP = f"{NAME}/0"  # lws_gang's name of its one group


def queued_lws(size: int, priority: str | None = None) -> dict[str, Any]:
    """LWS `serve`: one group of `size` pods of 6 GPUs, labelled for both (Phalanx's network-block key),
    queued in `lq`. restartPolicy None: a lost worker is made again alone (LWS's default would make the
    whole group again itself), so what becomes of the group is Phalanx's to decide."""
    body = lws(
        NAME,
        size,
        restart_policy="None",
        priority_class=priority,
        annotations={"phalanx.dev/topology-key": NB_KEY},
    )
    body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq"
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["limits"][GPU_KEY] = str(GPUS)
    return body


def lws_block(ns: Namespace, count: int, pods: list[dict[str, Any]] | None = None) -> str | None:
    """The network block all `count` live pods of `serve` (read now, or `pods`) are bound in, or None."""
    pods = lws_pods(ns, NAME) if pods is None else pods
    if len(pods) != count or len(bound(pods)) != count:
        return None
    blocks = domains_of(ns.api, pods, NB_KEY)
    return next(iter(blocks)) if len(blocks) == 1 else None


def counting(ns: Namespace, cq: str, gpus: int, workloads: int) -> dict[str, Any]:
    """`cq_counts` of ClusterQueue `cq` reserving and using `gpus` GPUs for `workloads` Workloads."""
    flavor = ns.get(f"{KUEUE}/clusterqueues/{cq}")["spec"]["resourceGroups"][0]["flavors"][0]["name"]
    return {
        "reserved": {(flavor, GPU_KEY): str(gpus)},
        "used": {(flavor, GPU_KEY): str(gpus)},
        "reserving": workloads,
        "admitted": workloads,
    }


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def print_history(versions: list[WorkloadVersion]) -> None:
    """What became of the group's Kueue Workload: its steps, and its conditions as they changed."""
    print("Workload:", changes([(v.uid[:8], v.phase) for v in versions]))
    conditions = [
        sorted((kind, status, v.reasons[kind]) for kind, status in v.status.items()) for v in versions
    ]
    for step in changes(conditions):
        print("  Workload conditions:", step)


@dataclass
class GroupWatches:
    """What a test of the group watches while it runs, and what it saw."""

    history: WorkloadWatch  # the group's Kueue Workload, version by version
    gates: GateWatch  # whose gates each of the group's pods had
    writes: dict[str, int]  # Phalanx's requeue writes before the test
    victim: str = ""  # the node the test failed, healed at the end
    versions: list[WorkloadVersion] = field(default_factory=list)
    made: dict[str, int] = field(default_factory=dict)  # Phalanx's requeue writes during the test


@contextmanager
def the_groups_watches(ns: Namespace, operator: OperatorProcess) -> Iterator[GroupWatches]:
    """Watch the group (its Workload, its pods' gates, Phalanx's requeue writes) for the block; on an
    AssertionError say where the group stands; at the end stop the watches and heal the failed node,
    whatever happened, and print what the Workload went through."""
    run = GroupWatches(WorkloadWatch(ns, NAME), GateWatch(ns, LWS_NAME, NAME), requeue_writes(operator))
    try:
        yield run
        run.made = {k: v - run.writes[k] for k, v in requeue_writes(operator).items()}
    except AssertionError:
        diagnose_lws(ns, NAME)
        raise
    finally:
        run.versions = run.history.stop()
        run.gates.stop()
        if run.victim:
            heal_node(ns.api, run.victim)
    print_history(run.versions)
    print("Phalanx's requeue writes:", run.made)


def a_worker_node_failed(
    ns: Namespace, queue: str, run: GroupWatches, gangs: ThroughFailure, size: int, counted: dict[str, Any]
) -> tuple[str, list[dict[str, Any]], str]:
    """The node-failure tests' first steps: the group of `size` queued, Kueue admitting it (the ClusterQueue
    `counted` as given) and Phalanx placing it whole in one block, seen whole by the pod watch; then a
    worker's node fails (a NoExecute taint). Returns the block, the group's pods before, the failed node."""
    ns.create(queued_lws(size))
    block = wait_for("serve whole in one block", lambda: lws_block(ns, size), timeout=180)
    before = lws_pods(ns, NAME)
    wait_for("the ClusterQueue counting it", lambda: cq_counts(ns.api, queue) == counted, 60)
    wait_for("the pod watch to see it whole", lambda: gangs.whole(GROUP), 30)
    victim = run.victim = worker_node(before)
    gangs.failure()
    fail_node(ns.api, victim, how="taint")
    return str(block), before, victim


def kept_admitted(versions: list[WorkloadVersion]) -> None:
    """The group's one Kueue Workload, admitted once and never let go: queued, then admitted, and from its
    admission on every version admitted with its quota, never evicted, preempted or deactivated."""
    assert versions, "the Workload watch saw nothing"
    assert len({v.uid for v in versions}) == 1, versions
    assert changes([v.phase for v in versions]) == ["queued", "admitted"], [v.phase for v in versions]
    admitted = next(i for i, v in enumerate(versions) if v.true("Admitted"))
    assert all(v.true("Admitted") and v.true("QuotaReserved") for v in versions[admitted:]), versions
    assert not [v for v in versions if v.true("Evicted") or v.true("Preempted") or not v.active], versions


def kueue_kept_the_group(ns: Namespace, versions: list[WorkloadVersion], early: list[str]) -> None:
    """How every test here ends: the group's one Workload kept admitted (kept_admitted), no pod released
    while Kueue's gate was on (`early`: the gate watch's), Kueue stopped nothing, nobody touched the LWS."""
    kept_admitted(versions)
    assert not early, f"released while Kueue's gate was on: {early}"
    kueue_stopped_nothing(ns)
    lws_untouched(ns)


def kueue_stopped_nothing(ns: Namespace) -> None:
    """Kueue stopped no pod of the namespace (its pod-group reconciler marks a pod it stops
    TerminationTarget and says Stopped; an extra pod of a group it deletes says ExcessPodDeleted)."""
    said = [(e["involvedObject"]["name"], e["reason"]) for e in ns.events()]
    assert not [s for s in said if s[1] in ("Stopped", "ExcessPodDeleted")], said


def lws_untouched(ns: Namespace) -> None:
    """Nobody changed the LWS's spec since its creation (Kueue holds a group by its pods' gates, Phalanx
    by its own: neither has a suspend to write)."""
    body = ns.get(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{{ns}}/leaderworkersets/{NAME}")
    assert body["metadata"]["generation"] == 1, body["metadata"]


def test_a_node_failure_under_a_queued_lws_group_with_room_in_its_block_is_completed_there(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """nb-b is busy, so Kueue admits the group of 3 and Phalanx places it whole in nb-a, one of nb-a's nodes
    left free. A worker's node fails (a NoExecute taint evicts its pod) and LWS makes that worker again:
    Phalanx places it on nb-a's free node, beside the two pods the failure left, and the group runs whole
    again in nb-a. Nothing is requeued: the leader and the other worker keep running, no pod deleted by
    Phalanx, no Requeued event. Kueue lifts its gates from the new worker under the group's one Workload,
    admitted throughout (never evicted, never deactivated), and the ClusterQueue ends counting the group's
    18 GPUs once; no pod released by Phalanx while Kueue's gate was on it; the LWS's spec untouched."""
    kns.fill(*NB_B)
    once = counting(kns, kueue_queue, 3 * GPUS, 1)
    with the_groups_watches(kns, phalanx_addons) as run:
        with whole_gangs_through_a_failure(kns, {GROUP: 3}, lws_gang, completed_in=NB_KEY) as gangs:
            block, before, victim = a_worker_node_failed(kns, kueue_queue, run, gangs, 3, once)
            assert block == "nb-a"
            lost = {p["metadata"]["uid"] for p in before if p["spec"]["nodeName"] == victim}
            pods = wait_for(
                "serve whole again in nb-a, its lost worker made again",
                lambda: (
                    ps
                    if lws_block(kns, 3, ps := lws_pods(kns, NAME)) == "nb-a" and not lost & uids(ps)
                    else None
                ),
                timeout=180,
            )
        print(kns.where(f"{LWS_NAME}={NAME}"), f"{victim} failed")
        assert victim not in {p["spec"]["nodeName"] for p in pods}
        assert uids(before) - lost < uids(pods)  # the leader and the other worker kept running
        wait_for("the ClusterQueue counting it once", lambda: cq_counts(kns.api, kueue_queue) == once, 60)
        assert kueue_condition(workload_of(kns, NAME), "Admitted").get("status") == "True"
    versions, made = run.versions, run.made
    assert not requeues_of(kns, "LeaderWorkerSet", NAME)
    assert made == {"DeactivateKueueWorkload": 0, "ActivateKueueWorkload": 0, "DeletePod": 0, "requeues": 0}
    assert uids(before) | uids(pods) <= run.gates.kueue_gated, run.gates.kueue_gated  # the new worker's too
    kueue_kept_the_group(kns, versions, run.gates.early)


def test_a_node_failure_under_a_queued_lws_group_with_no_room_left_requeues_it_whole_under_its_admission(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """Kueue admits the group of 4 and Phalanx places it whole in one network block, all four of its nodes.
    A worker's node fails (a NoExecute taint evicts its pod) and LWS makes that worker again, which no longer
    fits in the block: Phalanx requeues the group whole at once by deleting its leader (one pod deleted by
    Phalanx; LWS has no suspend, and Phalanx never deactivates the Workload of an LWS group), the garbage
    collector takes the workers, LWS makes the whole group again, and it runs whole in the other block.
    Throughout: no pod of the new group bound while a pod of the old one still ran, and the new group whole
    once placed (`whole_gangs_through_a_failure`). Kueue keeps the group's one Workload admitted (never
    evicted, deactivated or preempted: the same admission) and lifts its gates from the new pods at once;
    no pod released by Phalanx while Kueue's gate was on it; Kueue stopped no pod; the ClusterQueue ends
    counting the group's 24 GPUs once; the LWS's spec untouched."""
    once = counting(kns, kueue_queue, 4 * GPUS, 1)
    with the_groups_watches(kns, phalanx_addons) as run:
        with whole_gangs_through_a_failure(kns, {GROUP: 4}, lws_gang) as gangs:
            first, before, victim = a_worker_node_failed(kns, kueue_queue, run, gangs, 4, once)
            requeued = wait_for(
                "Phalanx's Requeued event on the LWS", lambda: requeues_of(kns, "LeaderWorkerSet", NAME), 120
            )
            old = uids(before)
            wait_for(
                "every pod of the group from before the failure gone",
                lambda: not old & uids(kns.pods(f"{LWS_NAME}={NAME}")),
                timeout=180,
            )
            again = wait_for("serve whole again", lambda: lws_block(kns, 4), timeout=180)
        pods = lws_pods(kns, NAME)
        print(kns.where(f"{LWS_NAME}={NAME}"), f"ran in {first}, then {again}; {victim} failed")
        print("Requeued:", [e["message"] for e in requeued])
        assert again != first
        assert not old & uids(pods)
        (why,) = {e["message"] for e in requeued}
        assert why.startswith(f"below its minCount: 3 of its 4 pods were left in {first}"), why
        wait_for("the ClusterQueue counting it once", lambda: cq_counts(kns.api, kueue_queue) == once, 60)
        assert kueue_condition(workload_of(kns, NAME), "Admitted").get("status") == "True"
    versions, made = run.versions, run.made
    # The leader deleted, nothing else: the workers went with their StatefulSet, the Workload untouched.
    assert made == {"DeactivateKueueWorkload": 0, "ActivateKueueWorkload": 0, "DeletePod": 1, "requeues": 1}
    assert uids(pods) <= run.gates.kueue_gated, (
        run.gates.kueue_gated
    )  # the new group passed Kueue's gates again
    kueue_kept_the_group(kns, versions, run.gates.early)


def test_phalanx_preempts_a_queued_lws_group_whole_for_a_higher_priority_gang_and_kueue_keeps_both_admitted(
    kns: Namespace, kueue_queue: str, phalanx_addons: OperatorProcess
) -> None:
    """Phalanx's own preemption inside a ClusterQueue, of an LWS group: a high-priority pod Kueue does not
    manage (4 GPUs) on was-worker5 leaves nb-b three nodes, so the low-priority group of 4 runs in nb-a.
    `high`, a Job of four 6-GPU pods of high priority queued in `lq`, fits the quota beside it (48 GPUs:
    Kueue admits both and preempts nothing) but no block: Phalanx takes the group whole, by deleting its
    leader (one pod), and `high` runs whole in nb-a. LWS makes the group again; Kueue lifts its gates at
    once (its one Workload still admitted: never evicted, deactivated or preempted) and its four new pods
    wait behind Phalanx's gate, whole, while nb-b has three nodes for them; once the blocking pod goes they
    run whole in nb-b. No gang bound in part at any pod event (`whole_gangs`; the group's, once placed, in
    one block: `whole_lws_groups`, which counts a pod being deleted as gone); the ClusterQueue counts both
    (48 GPUs, two Workloads) while the group waits and at the end; Kueue stopped no pod; the LWS's spec
    untouched."""
    suffix = kueue_queue.removeprefix("cq-")
    blocker = filler_pod(NB_B[0], gpus=4)
    blocker["spec"]["priorityClassName"] = f"high-{suffix}"  # no victim for high
    both = counting(kns, kueue_queue, 8 * GPUS, 2)

    def gang_of(pod: dict[str, Any]) -> str:
        return str((pod["metadata"].get("labels") or {}).get("job-name") or "")

    with the_groups_watches(kns, phalanx_addons) as run:
        with whole_gangs(kns, {"high": 4}, gang_of), whole_lws_groups(kns, NAME, 4, NB_KEY):
            kns.create(blocker)
            wait_for("the blocking pod bound", lambda: bound(kns.pods("app=filler")), timeout=60)
            kns.create(queued_lws(4, priority=f"low-{suffix}"))
            assert wait_for("serve whole", lambda: lws_block(kns, 4), timeout=180) == "nb-a"
            old = uids(lws_pods(kns, NAME))
            kns.create(queued_job("high", 4, priority=f"high-{suffix}"))
            assert wait_for("high whole", lambda: whole_in_one_block(kns, "high", 4), timeout=240) == "nb-a"
            preempted = wait_for(
                "Phalanx's Preempted event on the LWS",
                lambda: [
                    e
                    for e in kns.events(f"involvedObject.name={NAME}")
                    if e["reason"] == "Preempted" and e.get("reportingComponent") == COMPONENT
                ],
                timeout=60,
            )
            waiting = wait_for(
                "the group made again, its 4 new pods behind Phalanx's gate only",
                lambda: (
                    ps
                    if len(ps := lws_pods(kns, NAME)) == 4
                    and not old & uids(ps)
                    and all({g["name"] for g in p["spec"].get("schedulingGates") or []} == {GATE} for p in ps)
                    else None
                ),
                timeout=180,
            )
            assert len(gated(waiting)) == 4 and not bound(waiting)
            assert kueue_condition(workload_of(kns, NAME), "Admitted").get("status") == "True"
            wait_for("the ClusterQueue counting both", lambda: cq_counts(kns.api, kueue_queue) == both, 60)
            kns.delete_pod(blocker["metadata"]["name"])
            assert wait_for("serve whole again", lambda: lws_block(kns, 4), timeout=180) == "nb-b"
        print(kns.where(), "\nPreempted:", [e["message"] for e in preempted])
        assert whole_in_one_block(kns, "high", 4) == "nb-a"
        wait_for("the ClusterQueue counting both", lambda: cq_counts(kns.api, kueue_queue) == both, 60)
    versions, made = run.versions, run.made
    assert (
        made["DeletePod"] == 1 and not made["DeactivateKueueWorkload"] and not made["ActivateKueueWorkload"]
    )
    assert not [v for v in versions if v.note], versions  # never Phalanx's requeue note on it
    kueue_kept_the_group(kns, versions, run.gates.early)
