"""LeaderWorkerSet (issue 17) against the real LWS v0.8.0 controller, with Phalanx on the same cluster: each
group (a leader and size - 1 workers) is one gang — the article's gang case, subgroups as slices in local
blocks, startupPolicy LeaderReady without deadlock, a node failure under a group (a replacement in its
domain while there is room, else the group requeued whole by deleting its pods), and bad input refused."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.tools import fail_node, heal_node
from phalanx.devcluster.topology import seed_topology

from .kinds import (
    LWS_GROUP,
    LWS_NAME,
    LWS_WORKER,
    condition,
    diagnose_lws,
    events_of,
    explain,
    gated,
    label_of,
    lws,
    lws_gang,
    lws_pods,
    owned,
    priority_classes,
    reasons_of,
    wait_bound,
    wait_unschedulable,
    whole_gangs,
    worker_node,
)
from .kube import LB_KEY, NB_KEY, Namespace, bound, gpu_job, hold, node_labels, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.addons("lws")]

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")


def test_an_lws_group_waits_whole_on_three_free_nodes_and_starts_whole_when_a_fourth_frees(
    kinds_ns: Namespace,
) -> None:
    ns = kinds_ns
    ns.fill(*FIVE_BUSY)
    with whole_gangs(ns, {"serve/0": 4}, lws_gang):
        ns.create(lws("serve", 4))
        group = wait_unschedulable(ns, "LeaderWorkerSet/serve", "podgroups")
        print(condition(group)["message"])
        hold("no serve pod bound", lambda: not bound(lws_pods(ns, "serve")), seconds=2)
        assert len(gated(lws_pods(ns, "serve"))) == 4
        print(explain(ns, "lws/serve"))
        ns.unfill("was-worker")
        wait_bound(ns, "serve", lambda: lws_pods(ns, "serve"), 4)
    print(ns.where("leaderworkerset.sigs.k8s.io/name=serve"))
    (group,) = owned(ns, "LeaderWorkerSet/serve")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    wait_for(
        "event Admitted on the LWS", lambda: "Admitted" in reasons_of(ns, "LeaderWorkerSet", "serve") or None
    )


def test_lws_subgroups_are_slices_each_in_one_local_block_of_one_network_block(kinds_ns: Namespace) -> None:
    """subGroupSize 2: a group of 4 is two subgroups (the leader with worker 1, workers 2 and 3). nb-a has
    two free nodes in two local blocks (was-worker and was-worker3 busy), so the group goes to nb-b, each
    subgroup in a local block of its own."""
    ns = kinds_ns
    ns.fill("was-worker", "was-worker3")
    keys = {"phalanx.dev/topology-key": NB_KEY, "phalanx.dev/slice-topology-key": LB_KEY}
    with whole_gangs(ns, {"sub/0": 4}, lws_gang):
        ns.create(lws("sub", 4, subgroup_size=2, annotations=keys))
        pods = wait_bound(ns, "sub", lambda: lws_pods(ns, "sub"), 4)
    print(ns.where("leaderworkerset.sigs.k8s.io/name=sub"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-b"}
    by_sub: dict[int, set[str]] = {}
    for pod in pods:
        worker = int(pod["metadata"]["labels"][LWS_WORKER])
        by_sub.setdefault(worker // 2, set()).add(label_of(pod["spec"]["nodeName"], LB_KEY, labels))
    assert all(len(blocks) == 1 for blocks in by_sub.values()) and by_sub[0] != by_sub[1], by_sub
    wait_for(  # written once Phalanx has seen the pods bound (a pass after the release)
        "the CompositePodGroup's status.domain nb-b",
        lambda: [
            r
            for r in owned(ns, "LeaderWorkerSet/sub", "compositepodgroups")
            if (r.get("status") or {}).get("domain") == "nb-b"
        ],
        timeout=120,
    )
    assert len(owned(ns, "LeaderWorkerSet/sub")) == 2  # one PodGroup per subgroup


def test_leader_ready_decides_the_whole_group_with_its_leader_and_never_deadlocks(
    kinds_ns: Namespace,
) -> None:
    """startupPolicy LeaderReady: LWS makes the workers only once the leader is Ready. With 3 free nodes the
    leader does not start either (its whole group is decided with it), and `phalanx explain` says so, with
    the workers' slots; with 4 the leader goes, becomes Ready (kwok), and its workers go into the room held
    for them: one decision."""
    ns = kinds_ns
    ns.fill(*FIVE_BUSY)
    ns.create(lws("ready", 4, leader_ready=True, annotations={"phalanx.dev/topology-key": NB_KEY}))
    waiting = wait_unschedulable(ns, "LeaderWorkerSet/ready", "podgroups")
    # counted for the leader and the slots of its 3 workers together, on nb-a's 3 free nodes
    said = condition(waiting)["message"]
    assert "nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in said, said
    hold("the leader waits", lambda: len(gated(lws_pods(ns, "ready"))) == 1, seconds=2)
    assert len(lws_pods(ns, "ready")) == 1  # no worker before the leader is Ready
    # explain says what the loop decided, with the workers' slots: not that three pods are missing.
    waits = explain(ns, "lws/ready")
    print(waits)
    assert waits.startswith(
        f"leaderworkerset/ready in namespace {ns.name}: waiting: no {NB_KEY} domain has room for 4 pods at "
        "once; the closest is nb-a, with room for 3"
    )
    assert "(each pod asks for nvidia.com/gpu 8):\n  nb-a: 3 of 4 pods fit (1 node: Insufficient" in waits
    ns.unfill("was-worker")
    pods = wait_bound(ns, "ready", lambda: lws_pods(ns, "ready"), 4)
    print(ns.where("leaderworkerset.sigs.k8s.io/name=ready"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    (group,) = owned(ns, "LeaderWorkerSet/ready")
    admission = group["status"]["admission"]
    assert admission.get("attempt", 0) == 0
    slots = sorted(a["node"] for a in admission["assignments"] if "-slot-" in a["pod"])
    workers = sorted(p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"][LWS_WORKER] != "0")
    assert slots == workers


def test_a_node_failure_under_a_group_is_replaced_in_its_block_then_the_group_is_requeued_whole(
    kinds_ns: Namespace,
) -> None:
    """restartPolicy None (LWS recreates only the failed worker). A group of 3 in nb-a (nb-b busy at first);
    was-worker4 stays free. The first failure, under a worker: the new worker goes to nb-a's free node. The
    second, under another worker: nb-a has no room, so Phalanx requeues the group through its leader (LWS has
    no suspend), LWS makes it again, gated, and it is placed whole in nb-b. The third, under the leader: LWS
    makes the whole group again itself, and it is placed whole again."""
    ns = kinds_ns
    ns.fill(*NB_B)
    key = {"phalanx.dev/topology-key": NB_KEY}
    ns.create(lws("infer", 3, restart_policy="None", annotations=key))
    pods = wait_bound(ns, "infer", lambda: lws_pods(ns, "infer"), 3)
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    for node in NB_B:
        ns.unfill(node)
    failed: list[str] = []
    try:
        first = worker_node(pods)
        fail_node(ns.api, first, how="taint")
        failed.append(first)
        pods = wait_for(
            "3 bound again in nb-a, off the failed node",
            lambda: (
                ps
                if len(bound(ps := lws_pods(ns, "infer"))) == 3
                and first not in {p["spec"]["nodeName"] for p in ps}
                else None
            ),
            timeout=240,
        )
        assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
        assert "Requeued" not in reasons_of(ns, "LeaderWorkerSet", "infer")
        second = worker_node(pods)
        fail_node(ns.api, second, how="taint")
        failed.append(second)
        pods = wait_for(
            "3 bound in nb-b",
            lambda: (
                ps
                if len(bound(ps := lws_pods(ns, "infer"))) == 3
                and {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in ps} == {"nb-b"}
                else None
            ),
            timeout=240,
        )
        print(ns.where("leaderworkerset.sigs.k8s.io/name=infer"))
        requeued = wait_for(
            "event Requeued on the LWS",
            lambda: [
                e["message"] for e in events_of(ns, "LeaderWorkerSet", "infer") if e["reason"] == "Requeued"
            ],
        )
        assert "below its minCount" in requeued[0], requeued
        hold("it stays whole in nb-b", lambda: len(bound(lws_pods(ns, "infer"))) == 3, seconds=2)
        # The leader's node fails: LWS makes the whole group again itself (the workers' StatefulSet is the
        # leader pod's); the old workers are no members of the new leader, the group goes whole to nb-b's
        # three nodes left, every pod new.
        before = {p["metadata"]["uid"] for p in pods}
        (leader,) = [p for p in pods if p["metadata"]["labels"].get(LWS_WORKER) == "0"]
        fail_node(ns.api, leader["spec"]["nodeName"], how="taint")
        failed.append(leader["spec"]["nodeName"])
        pods = wait_for(
            "3 new pods bound in nb-b",
            lambda: (
                ps
                if len(bound(ps := lws_pods(ns, "infer"))) == 3
                and not before & {p["metadata"]["uid"] for p in ps}
                else None
            ),
            timeout=240,
        )
        print(ns.where("leaderworkerset.sigs.k8s.io/name=infer"))
        assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-b"}
        hold("it stays whole", lambda: len(bound(lws_pods(ns, "infer"))) == 3, seconds=2)
    except AssertionError:  # what the cluster looked like when a wait timed out (a flake seen once)
        diagnose_lws(ns, "infer")
        raise
    finally:
        for node in failed:
            heal_node(ns.api, node)


def test_a_leader_ready_groups_slot_node_deleted_before_its_workers_come_is_decided_again_in_its_block(
    kinds_ns: Namespace,
) -> None:
    """startupPolicy LeaderReady, a group of 3 in nb-a (nb-b busy): the leader runs, the decision holds its
    workers' slots on two nodes of nb-a. Before the workers exist (the StatefulSet controller is held,
    SIGSTOP of kube-controller-manager, so that LWS's worker StatefulSet makes no pod yet), one slot's
    node is deleted. The group keeps running, and when its workers come it is decided again around its
    leader: they go to the nodes of nb-a left, the leader never restarts, and no pass fails. Before: every
    scheduling pass failed from the deletion on (a KeyError on the slot's node), for every gang."""
    ns = kinds_ns
    ns.fill(*NB_B)
    kcm = ns.cluster.pids["kube-controller-manager"]
    ns.create(lws("slot", 3, leader_ready=True, annotations={"phalanx.dev/topology-key": NB_KEY}))
    (leader,) = wait_for("the leader pod", lambda: lws_pods(ns, "slot"), timeout=60, interval=0.05)
    deleted = ""
    os.kill(kcm, signal.SIGSTOP)
    try:
        (leader,) = wait_bound(ns, "slot leader", lambda: lws_pods(ns, "slot"), 1)
        (group,) = owned(ns, "LeaderWorkerSet/slot")
        assignments = group["status"]["admission"]["assignments"]
        slots = sorted(a["node"] for a in assignments if "-slot-" in a["pod"])
        assert len(slots) == 2 and leader["spec"]["nodeName"] not in slots, assignments
        deleted = slots[0]
        ns.api.request("DELETE", f"/api/v1/nodes/{deleted}")
        wait_for(
            "the node gone",
            lambda: deleted not in {n["metadata"]["name"] for n in ns.api.get("/api/v1/nodes")["items"]},
        )
        # Time for passes to see it: the operator's resync is 10 s at most, and this group's pods changed.
        hold("only the leader, running", lambda: len(bound(lws_pods(ns, "slot"))) == 1, seconds=2)
    finally:
        os.kill(kcm, signal.SIGCONT)
    try:
        pods = wait_bound(ns, "slot", lambda: lws_pods(ns, "slot"), 3)
        print(ns.where("leaderworkerset.sigs.k8s.io/name=slot"))
        labels = node_labels(ns.api)
        assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
        assert deleted not in {p["spec"]["nodeName"] for p in pods}
        (still,) = [p for p in pods if p["metadata"]["labels"].get(LWS_WORKER) == "0"]
        assert still["metadata"]["uid"] == leader["metadata"]["uid"], "the leader was restarted"
        assert "Requeued" not in reasons_of(ns, "LeaderWorkerSet", "slot")
        # No failed pass: kinds_ns fails the test if the operator's log says one failed (operator_fixtures).
    finally:
        if deleted:
            restore_node(ns, deleted)


def restore_node(ns: Namespace, node: str) -> None:
    """Make a deleted seed node again, Ready (kwok manages it again)."""
    body = next(n.manifest() for n in seed_topology() if n.name == node)
    try:
        ns.api.request("POST", "/api/v1/nodes", body)
    except ApiError as e:
        if e.status != 409:
            raise
    ns.api.request(
        "PATCH", f"/api/v1/nodes/{node}/status", {"status": body["status"]}, "application/merge-patch+json"
    )


HOLD = "test.phalanx.dev/hold"


def _hold_deletion(ns: Namespace, pod: str, on: bool) -> None:
    """A finalizer of ours on the pod (on) or none (off): a deleted pod with it stays, terminating, as on a
    NotReady node whose kubelet never confirms the end."""
    patch = {"metadata": {"finalizers": [HOLD] if on else None}}
    try:
        ns.api.request(
            "PATCH", f"/api/v1/namespaces/{ns.name}/pods/{pod}", patch, "application/merge-patch+json"
        )
    except ApiError as e:
        if e.status != 404:
            raise


def test_a_leader_ready_group_whose_workers_are_stuck_terminating_is_requeued_past_the_grace(
    kinds_ns: Namespace,
) -> None:
    """LeaderReady, restartPolicy None (LWS makes only a lost worker again, through the leader's StatefulSet,
    once the old one is gone). A group of 3 fills nb-a's three free nodes; both workers' nodes fail (tainted
    NoExecute) and the workers are deleted but stay terminating (a finalizer stands in for a kubelet that
    never confirms). Their StatefulSet makes no other, so no worker pod is left to say they came — but the
    terminating ones do (kinds/lws._gone_workers): past the grace (2 s) Phalanx tries them beside the leader,
    finds no room in nb-a, and requeues the group through its leader. Before, the leader ran alone for as
    long as the workers terminated. Once they are gone and the nodes heal, the group runs whole in nb-a."""
    ns = kinds_ns
    ns.fill(*FIVE_BUSY)
    ns.create(
        lws(
            "stuck",
            3,
            leader_ready=True,
            restart_policy="None",
            annotations={"phalanx.dev/topology-key": NB_KEY},
        )
    )
    pods = wait_bound(ns, "stuck", lambda: lws_pods(ns, "stuck"), 3)
    leader = next(p for p in pods if p["metadata"]["labels"][LWS_WORKER] == "0")
    workers = [p for p in pods if p is not leader]
    failed: list[str] = []
    try:
        for pod in workers:
            _hold_deletion(ns, pod["metadata"]["name"], True)
            fail_node(ns.api, pod["spec"]["nodeName"], how="taint")
            failed.append(pod["spec"]["nodeName"])
            ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}/pods/{pod['metadata']['name']}")
        requeued = wait_for(
            "event Requeued on the LWS",
            lambda: [
                e["message"] for e in events_of(ns, "LeaderWorkerSet", "stuck") if e["reason"] == "Requeued"
            ],
            timeout=60,
        )
        print("Requeued:", requeued)
        assert "below its minCount" in requeued[0], requeued
        wait_for(
            "the leader deleted",
            lambda: leader["metadata"]["uid"] not in {p["metadata"]["uid"] for p in lws_pods(ns, "stuck")},
            timeout=60,
        )
    except AssertionError:
        diagnose_lws(ns, "stuck")
        raise
    finally:
        for pod in workers:
            _hold_deletion(ns, pod["metadata"]["name"], False)
        for node in failed:
            heal_node(ns.api, node)
    before = {p["metadata"]["uid"] for p in pods}
    again = wait_for(
        "3 new pods bound",
        lambda: (
            ps
            if len(bound(ps := lws_pods(ns, "stuck"))) == 3
            and not before & {p["metadata"]["uid"] for p in ps}
            else None
        ),
        timeout=180,
    )
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in again} == {"nb-a"}


def test_a_whole_lws_group_is_preempted_by_a_higher_priority_job_and_comes_back_gated_and_whole(
    kinds_ns: Namespace,
) -> None:
    """Two low-priority groups of 4 hold all 8 nodes; a high-priority gang Job of 2 needs two of them. One
    group is one victim, taken whole: its leader deleted (LWS has no suspend; the garbage collector takes
    the workers with their StatefulSet, the leader's), the other group untouched. LWS makes the group again;
    its new pods wait gated, all 4 (2 free nodes cannot take them), until the Job is gone, then the group is
    placed whole again."""
    ns = kinds_ns
    priority_classes(ns)
    sizes = {"low/0": 4, "low/1": 4}
    with whole_gangs(ns, sizes, lws_gang):
        ns.create(lws("low", 4, replicas=2, priority_class="low"))
        first = wait_bound(ns, "low", lambda: lws_pods(ns, "low"), 8)
    names = {p["metadata"]["name"]: p["metadata"]["uid"] for p in first}
    try:
        ns.create(gpu_job("high-2", 2, labels={"phalanx.dev/managed": "true"}, priority_class="high"))
        high = wait_for(
            "high-2 bound", lambda: ps if len(bound(ps := ns.job_pods("high-2"))) == 2 else None, 120
        )
        freed = {p["spec"]["nodeName"] for p in high}

        def group_of(pod: dict[str, Any]) -> str:
            return str(pod["metadata"]["labels"][LWS_GROUP])

        def settled() -> tuple[str, list[dict[str, Any]]] | None:
            """One group running whole on its old pods, the other made again: 4 new pods, all gated."""
            pods = lws_pods(ns, "low")
            by_group: dict[str, list[dict[str, Any]]] = {}
            for pod in pods:
                by_group.setdefault(group_of(pod), []).append(pod)
            made_again = [
                g
                for g, ps in by_group.items()
                if all(names.get(p["metadata"]["name"]) != p["metadata"]["uid"] for p in ps)
            ]
            if len(made_again) != 1 or len(by_group.get(made_again[0], [])) != 4:
                return None
            (victim,) = made_again
            kept = [p for g, ps in by_group.items() if g != victim for p in ps]
            if len(gated(by_group[victim])) != 4 or len(bound(kept)) != 4:
                return None
            return victim, kept

        found = wait_for("one group made again and gated whole, the other running", settled, timeout=120)
        victim, kept = found
        print(ns.where("leaderworkerset.sigs.k8s.io/name=low"))
        assert all(names.get(p["metadata"]["name"]) == p["metadata"]["uid"] for p in kept)  # never touched
        assert not freed & {p["spec"]["nodeName"] for p in kept}
        hold(
            "the recreated group stays gated whole while the Job runs",
            lambda: (
                len(gated([p for p in lws_pods(ns, "low") if group_of(p) == victim])) == 4
                and len(bound(ns.job_pods("high-2"))) == 2
            ),
            seconds=2,
        )
        wait_for(
            "events Preempted and Requeued on the LWS",
            lambda: {"Preempted", "Requeued"} <= reasons_of(ns, "LeaderWorkerSet", "low") or None,
        )
        (group,) = [
            g for g in owned(ns, "LeaderWorkerSet/low") if g["metadata"]["name"].split("-")[2] == victim
        ]
        print(group["metadata"]["name"], condition(group))
        assert condition(group).get("reason") != "Admitted"  # the recreated group waits, whole
        # (its PodGroup is low-<hash of the LWS's uid>-<group index>-<template revision>)
        with whole_gangs(ns, sizes, lws_gang):
            ns.api.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{ns.name}/jobs/high-2",
                {"propagationPolicy": "Background"},
            )
            wait_bound(
                ns, "low", lambda: lws_pods(ns, "low"), 8, timeout=120
            )  # whole again once there is room
    except AssertionError:
        diagnose_lws(ns, "low")
        raise


def test_a_slice_key_without_subgroups_is_refused_at_the_webhook_naming_the_field(
    kinds_ns: Namespace,
) -> None:
    with pytest.raises(ApiError) as refused:
        kinds_ns.create(lws("flat", 4, annotations={"phalanx.dev/slice-topology-key": LB_KEY}))
    message = json.loads(refused.value.body)["message"]
    print(message)
    assert message.startswith('admission webhook "gate-leaderworkerset.phalanx.dev" denied the request: ')
    assert (
        "metadata.annotations[phalanx.dev/slice-topology-key]: needs spec.leaderWorkerTemplate.subGroupPolicy"
        in message
    )


def test_a_preempted_lws_group_whose_workers_end_slowly_is_made_again_once(kinds_ns: Namespace) -> None:
    """Two low-priority groups of 4 hold all 8 nodes and their workers end slowly (a finalizer stands in for
    kubelets that take their time). A high-priority gang Job of 2 takes one group whole through its leader.
    LWS (restartPolicy RecreateGroupOnPodRestart, its default) takes a worker being deleted for a failure of
    the group and deletes the group's leader of the same revision — also a leader it made again after the
    one Phalanx deleted, were that one gone while the old workers end: the group would be made twice (the
    rollout test's surge group was, at times). Phalanx deletes the leader in the foreground, as LWS's own
    group restart does: it stays, being deleted, until its workers' StatefulSet and their pods are gone, so
    a worker's update while it ends (its kubelet's) finds the old leader and LWS deletes nothing. Once the
    workers are gone the group is made again once: no RecreateGroupOnPodRestart, 4 new pods gated whole
    while the Job runs, the other group untouched."""
    ns = kinds_ns
    priority_classes(ns)
    ns.create(lws("slow", 4, replicas=2, priority_class="low"))
    first = wait_bound(ns, "slow", lambda: lws_pods(ns, "slow"), 8)
    workers = [p["metadata"]["name"] for p in first if p["metadata"]["labels"][LWS_WORKER] != "0"]
    uids = {p["metadata"]["uid"] for p in first}
    leaders = {
        p["metadata"]["labels"][LWS_GROUP]: p for p in first if p["metadata"]["labels"][LWS_WORKER] == "0"
    }
    try:
        for name in workers:
            _hold_deletion(ns, name, True)
        ns.create(gpu_job("high-2", 2, labels={"phalanx.dev/managed": "true"}, priority_class="high"))

        def taken() -> tuple[str, list[str]] | None:
            """The victim group's index once its leader is not live, and its old workers being deleted."""
            pods = {p["metadata"]["uid"]: p for p in ns.pods(f"{LWS_NAME}=slow")}
            for index, leader in leaders.items():
                old = pods.get(leader["metadata"]["uid"])
                if old is not None and not old["metadata"].get("deletionTimestamp"):
                    continue
                ending = [
                    p["metadata"]["name"]
                    for p in pods.values()
                    if p["metadata"]["labels"][LWS_GROUP] == index
                    and p["metadata"]["uid"] in uids
                    and p["metadata"].get("deletionTimestamp")
                    and p["metadata"]["labels"][LWS_WORKER] != "0"
                ]
                return (index, ending) if len(ending) == 3 else None
            return None

        victim, ending = wait_for("a group's leader taken, its 3 workers ending", taken, timeout=120)
        print(ns.where(f"{LWS_NAME}=slow"))
        for name in ending:  # what a kubelet writes while a pod ends; LWS reconciles the worker on it
            ns.api.request(
                "PATCH",
                f"/api/v1/namespaces/{ns.name}/pods/{name}",
                {"metadata": {"annotations": {"test.phalanx.dev/ending": "true"}}},
                "application/merge-patch+json",
            )
        hold(
            "LWS deletes no leader while the old workers end",
            lambda: "RecreateGroupOnPodRestart" not in reasons_of(ns, "LeaderWorkerSet", "slow"),
            seconds=3,
        )
        for name in workers:
            _hold_deletion(ns, name, False)

        def again() -> list[dict[str, Any]] | None:
            pods = [p for p in lws_pods(ns, "slow") if p["metadata"]["labels"][LWS_GROUP] == victim]
            if len(pods) != 4 or uids & {p["metadata"]["uid"] for p in pods} or len(gated(pods)) != 4:
                return None
            return pods

        wait_for(f"group {victim} made again, its 4 pods gated", again, timeout=120)
        wait_for("high-2 bound", lambda: len(bound(ns.job_pods("high-2"))) == 2, timeout=120)

        def other_untouched() -> bool:
            other = [p for p in lws_pods(ns, "slow") if p["metadata"]["labels"][LWS_GROUP] != victim]
            return len(bound(other)) == 4 and {p["metadata"]["uid"] for p in other} <= uids

        hold(
            f"group {victim} waits gated whole while the Job runs, the other group untouched",
            lambda: again() is not None and len(bound(ns.job_pods("high-2"))) == 2 and other_untouched(),
            seconds=2,
        )
        said = reasons_of(ns, "LeaderWorkerSet", "slow")
        assert {"Preempted", "Requeued"} <= said and "RecreateGroupOnPodRestart" not in said, said
    except AssertionError:
        diagnose_lws(ns, "slow")
        raise
    finally:
        for name in workers:
            _hold_deletion(ns, name, False)
