"""Slices on a stock cluster: the article's hand-made Workload, CompositePodGroup and PodGroups (Phalanx's
group; pods join with the phalanx.dev/pod-group label), placed whole by Phalanx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.controller.apply.faults import AFTER_RELEASES
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, bound, domains_of, gpu_job, hold, node_labels, wait_for
from .slice_scenarios import PHALANX_SLICES, SLICES, condition, create_slices, slice_pods

pytestmark = pytest.mark.integration

PHALANX_API = "scheduling.phalanx.dev/v1beta1"


def group(ns: Namespace, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = ns.get(f"/apis/{PHALANX_API}/namespaces/{{ns}}/{plural}/{name}")
    return obj


def wait_admitted_reason(ns: Namespace, plural: str, name: str, status: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        cond = condition(group(ns, plural, name), "Admitted")
        return cond if cond and (cond["status"], cond["reason"]) == (status, reason) else None

    return wait_for(f"{plural}/{name} Admitted={status} {reason}", probe, timeout=60)


def test_empty_cluster_each_slice_in_its_own_local_block_both_in_one_network_block(ns: Namespace) -> None:
    create_slices(ns, PHALANX_SLICES)
    pods = wait_for("4 slice pods bound", lambda: ps if len(bound(ps := slice_pods(ns))) == 4 else None)
    print(ns.where("app=slices"))
    labels = node_labels(ns.api)
    by_group: dict[str, set[str]] = {}
    for p in pods:
        g = p["metadata"]["labels"]["phalanx.dev/pod-group"]
        by_group.setdefault(g, set()).add(labels[p["spec"]["nodeName"]][LB_KEY])
    assert all(len(blocks) == 1 for blocks in by_group.values()), by_group
    assert by_group["slices-0"] != by_group["slices-1"], by_group
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    cpg = wait_admitted_reason(ns, "compositepodgroups", "slices", "True", "Admitted")
    print(cpg["message"])
    root = group(ns, "compositepodgroups", "slices")
    assert root["status"]["admission"]["domain"] in {"nb-a", "nb-b"}
    assert len(root["status"]["admission"]["assignments"]) == 4  # the tree's decision, recorded whole
    initial = condition(root, "CompositePodGroupInitiallyScheduled")
    assert initial is not None and initial["status"] == "True"
    for g in SLICES:
        wait_admitted_reason(ns, "podgroups", g, "True", "Admitted")
        leaf = group(ns, "podgroups", g)
        assert leaf["status"]["domain"] in by_group[g]


def test_one_busy_node_in_three_local_blocks_the_whole_job_waits_with_the_reason_on_every_group(
    ns: Namespace,
) -> None:
    ns.fill("was-worker", "was-worker3", "was-worker5")  # lb-a1, lb-a2, lb-b1
    create_slices(ns, PHALANX_SLICES)
    cpg = wait_admitted_reason(ns, "compositepodgroups", "slices", "False", "Unschedulable")
    print("CompositePodGroup/slices:", cpg["message"])
    assert cpg["message"].startswith(
        f"composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NB_KEY}"
    )
    assert "slices-0:" in cpg["message"] and "slices-1:" in cpg["message"]
    for g in SLICES:
        cond = wait_admitted_reason(ns, "podgroups", g, "False", "Unschedulable")
        print(f"PodGroup/{g}:", cond["message"])
        assert cond["message"].startswith(
            "pod group is unschedulable: CompositePodGroup slices cannot be placed whole"
        )
        assert f"{g}:" in cond["message"]
        upstream = condition(group(ns, "podgroups", g), "PodGroupInitiallyScheduled")
        assert upstream is not None and upstream["status"] == "False"
    hold("no slice pod bound", lambda: not bound(slice_pods(ns)), seconds=3)
    print(ns.where())
    warnings = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in ns.events()
        if e["type"] == "Warning" and e["reason"] == "Unschedulable"
    }
    assert ("CompositePodGroup", "slices") in warnings
    # Room in lb-b1 again: nb-b now holds a slice in each of its local blocks, and the whole tree goes.
    ns.unfill("was-worker5")
    pods = wait_for("4 slice pods bound", lambda: ps if len(bound(ps := slice_pods(ns))) == 4 else None)
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}
    print(ns.where("app=slices"))


# ---------------------------------------------------------------------- a Job in slices, by annotation
SLICED = {
    "phalanx.dev/topology-key": NB_KEY,
    "phalanx.dev/slice-size": "2",
    "phalanx.dev/slice-topology-key": LB_KEY,
}


def sliced_job(name: str, gpus: int = 8, **more: str) -> dict[str, Any]:
    job = gpu_job(name, 4, labels={"phalanx.dev/managed": "true"}, annotations={**SLICED, **more})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU_KEY] = str(gpus)
    return job


def by_index(pods: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}


def test_a_job_of_4_in_slices_of_2_fills_two_local_blocks_of_one_network_block_in_rank_order(
    ns: Namespace,
) -> None:
    ns.create(sliced_job("sliced"))
    pods = wait_for(
        "4 sliced pods bound", lambda: ps if len(bound(ps := ns.job_pods("sliced"))) == 4 else None
    )
    print(ns.where("job-name=sliced"))
    labels = node_labels(ns.api)
    block = {i: labels[p["spec"]["nodeName"]][LB_KEY] for i, p in by_index(pods).items()}
    assert block[0] == block[1] and block[2] == block[3] and block[0] != block[2], block
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    groups = {i: p["metadata"]["labels"]["phalanx.dev/pod-group"] for i, p in by_index(pods).items()}
    assert groups[0] == groups[1] != groups[2] == groups[3]
    cpgs = ns.get(f"/apis/{PHALANX_API}/namespaces/{{ns}}/compositepodgroups")["items"]
    assert len(cpgs) == 1 and cpgs[0]["metadata"]["labels"]["phalanx.dev/job-name"] == "sliced"
    cpg = wait_admitted_reason(ns, "compositepodgroups", cpgs[0]["metadata"]["name"], "True", "Admitted")
    print(cpg["message"])
    for g in set(groups.values()):
        leaf = group(ns, "podgroups", g)
        assert leaf["spec"]["parentCompositePodGroupName"] == cpgs[0]["metadata"]["name"]
        assert leaf["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


def test_the_same_job_of_4_gpu_pods_packs_each_slice_on_one_node(ns: Namespace) -> None:
    ns.create(sliced_job("packed", gpus=4))
    pods = wait_for(
        "4 packed pods bound", lambda: ps if len(bound(ps := ns.job_pods("packed"))) == 4 else None
    )
    print(ns.where("job-name=packed"))
    node = {i: p["spec"]["nodeName"] for i, p in by_index(pods).items()}
    assert node[0] == node[1] and node[2] == node[3] and node[0] != node[2], node


def test_slices_are_checked_at_the_webhook(ns: Namespace) -> None:
    bad = sliced_job("bad", **{"phalanx.dev/slice-size": "3", "phalanx.dev/slice-topology-key": NB_KEY})
    with pytest.raises(ApiError) as refused:
        ns.create(bad)
    text = str(refused.value)
    print(text)
    assert "metadata.annotations[phalanx.dev/slice-size]: 3 does not divide parallelism 4" in text
    assert "metadata.annotations[phalanx.dev/slice-topology-key]: is the same label as" in text
    non_indexed = sliced_job("non-indexed")
    non_indexed["spec"]["completionMode"] = "NonIndexed"
    with pytest.raises(ApiError) as refused:
        ns.create(non_indexed)
    assert "spec.completionMode: slices need completionMode Indexed" in str(refused.value)


# ---------------------------------------------------------------------- a restart mid-release
@pytest.fixture
def killable_operator(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """An operator SIGKILLed by itself right after its first pod release, instead of the session's."""
    phalanx.stop()
    operator = OperatorProcess(stock_cluster, tmp_path, name="slices-restart", env={AFTER_RELEASES: "1"})
    try:
        yield operator
    finally:
        operator.stop()
        print(f"operator log: {operator.log_path}")
        phalanx.start()


def is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == "phalanx.dev/admission" for g in pod["spec"].get("schedulingGates") or [])


def test_a_sliced_job_cut_mid_release_is_finished_where_recorded_after_a_restart_not_decided_again(
    ns: Namespace, killable_operator: OperatorProcess
) -> None:
    killable_operator.start()
    ns.create(sliced_job("cut"))
    proc = killable_operator.proc
    assert proc is not None
    wait_for("the operator killed after its first release", lambda: proc.poll() is not None, timeout=90)
    cpgs = ns.get(f"/apis/{PHALANX_API}/namespaces/{{ns}}/compositepodgroups")["items"]
    assert len(cpgs) == 1
    name = cpgs[0]["metadata"]["name"]
    recorded = cpgs[0]["status"]["admission"]
    where = {a["pod"]: a["node"] for a in recorded["assignments"]}
    assert len(where) == 4  # the whole tree's decision was written before any release
    pods = ns.job_pods("cut")
    print(ns.where("job-name=cut"))
    assert sum(not is_gated(p) for p in pods) == 1 and sum(is_gated(p) for p in pods) == 3  # cut in two
    # Restarted without the switch: its first pass sees the CompositePodGroup (primed at start) and
    # releases the other three where the record says, instead of deciding the tree again.
    killable_operator.env.pop(AFTER_RELEASES)
    killable_operator.start()
    pods = wait_for("4 cut pods bound", lambda: ps if len(bound(ps := ns.job_pods("cut"))) == 4 else None)
    print(ns.where("job-name=cut"))
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods} == where
    after = group(ns, "compositepodgroups", name)["status"]["admission"]
    assert (after["admittedAt"], after.get("attempt")) == (recorded["admittedAt"], recorded.get("attempt"))
    finished = wait_for(
        "the PodGroups' events of the finished decision",
        lambda: [
            e["message"]
            for e in ns.events()
            if e["involvedObject"]["kind"] == "PodGroup" and "of the recorded decision" in e["message"]
        ],
        timeout=30,
    )
    print(finished)
    released = sum(int(m.split("released ")[1].split(" ")[0]) for m in finished)
    assert released == 3, finished


# ---------------------------------------------------------------------- a node fails under a sliced Job
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
GRACE = 30.0  # phalanx run's default --node-failure-grace


def test_a_sliced_job_that_loses_a_node_with_no_room_in_its_slice_domain_is_requeued_whole(
    ns: Namespace,
) -> None:
    ns.fill(*NB_B)  # the sliced Job goes to nb-a and fills it: a slice in each of lb-a1 and lb-a2
    ns.create(sliced_job("broken"))
    pods = wait_for(
        "4 broken pods bound", lambda: ps if len(bound(ps := ns.job_pods("broken"))) == 4 else None
    )
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-a"}
    for node in NB_B:
        ns.unfill(node)  # nb-b is free again: the requeued Job can go there
    lost = sorted(p["spec"]["nodeName"] for p in pods)[0]
    fail_node(ns.api, lost, how="taint")
    try:
        # Its slice is below minCount and its local block has no other node: after the grace period the
        # whole Job is requeued (not left with 3 pods holding nb-a) and placed again whole, in nb-b.
        pods = wait_for(
            "4 broken pods bound in nb-b",
            lambda: (
                ps
                if len(bound(ps := ns.job_pods("broken"))) == 4 and domains_of(ns.api, ps, NB_KEY) == {"nb-b"}
                else None
            ),
            timeout=GRACE + 120,
        )
        print(ns.where("job-name=broken"))
        labels = node_labels(ns.api)
        block = {i: labels[p["spec"]["nodeName"]][LB_KEY] for i, p in by_index(pods).items()}
        assert block[0] == block[1] and block[2] == block[3] and block[0] != block[2], block
        requeued = [
            e["message"]
            for e in ns.events()
            if e["reason"] == "Requeued" and e["involvedObject"]["kind"] in ("Job", "CompositePodGroup")
        ]
        print(requeued)
        assert any(
            m.startswith("below its minCount: 3 pod(s) of the tree were left in nb-a") for m in requeued
        )
        job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/broken")
        assert int(job.get("status", {}).get("failed") or 0) == 1  # the evicted pod; the requeue adds none
    finally:
        heal_node(ns.api, lost)
