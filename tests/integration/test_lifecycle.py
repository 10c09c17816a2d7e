"""Lifecycle follows the current Job, and a released pod is always one kube-scheduler can bind (issue 7)."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kube import Namespace, bound, gpu_job, hold, wait_for
from .test_phalanx_admission import MANAGED, condition, group_of, managed_job, wait_bound, wait_condition

pytestmark = pytest.mark.integration

OTHER_GATE = "example.com/quota"


def events(ns: Namespace, job: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in ns.events(f"involvedObject.name={job}") if e["reason"] == reason]


def event_count(ns: Namespace, job: str, reason: str) -> int:
    return sum(int(e.get("count") or 1) for e in events(ns, job, reason))


def test_removing_the_label_lets_the_job_go_and_the_removal_sticks(ns: Namespace) -> None:
    """Suspend a managed Job, remove its only label, resume: its pods run (ungated by Phalanx, placed by
    kube-scheduler), its PodGroup and Workload are deleted, and the label does not come back."""
    body = managed_job("train", 2)
    body["spec"]["suspend"] = True
    ns.create(body)
    wait_for("the PodGroup", lambda: group_of(ns, "train"))
    ns.patch_job("train", {"metadata": {"labels": {"phalanx.dev/managed": None}}})
    ns.patch_job("train", {"spec": {"suspend": False}})
    wait_bound(ns, "train", 2)
    wait_for("the PodGroup deleted", lambda: group_of(ns, "train") is None)
    job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
    assert "phalanx.dev/managed" not in (job["metadata"].get("labels") or {})
    (event,) = wait_for("a ReleasedFromPhalanx event", lambda: events(ns, "train", "ReleasedFromPhalanx"))
    print(f"{event['reason']}: {event['message']}")


def test_a_deleted_job_leaves_nothing_behind_and_nothing_comes_back(ns: Namespace) -> None:
    ns.create(managed_job("gone", 2))
    wait_bound(ns, "gone", 2)
    ns.api.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns.name}/jobs/gone",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    wait_for("the PodGroup garbage-collected", lambda: group_of(ns, "gone") is None, timeout=60)
    hold("no PodGroup is made again", lambda: group_of(ns, "gone") is None, seconds=5)
    assert event_count(ns, "gone", "PodGroupCreated") == 1


def test_a_job_labelled_after_it_started_is_not_said_to_be_admitted(ns: Namespace) -> None:
    ns.create(gpu_job("late", 2))
    wait_bound(ns, "late", 2)
    ns.patch_job("late", {"metadata": {"labels": MANAGED}})
    cond = wait_condition(ns, "late", "Admitted", "False", "NotGated")
    assert "after its creation" in cond["message"]
    assert condition(group_of(ns, "late"), "PodGroupInitiallyScheduled") is None


def test_a_gang_waits_while_another_controllers_gate_remains_then_runs_whole(ns: Namespace) -> None:
    body = managed_job("quota", 4)
    body["spec"]["template"]["spec"]["schedulingGates"] = [{"name": OTHER_GATE}]
    ns.create(body)
    cond = wait_condition(ns, "quota", "Admitted", "False", "WaitingForGates")
    assert OTHER_GATE in cond["message"]
    pods = ns.job_pods("quota")
    assert all(len(p["spec"]["schedulingGates"]) == 2 for p in pods)
    hold("no pod is released while the other gate is on", lambda: not bound(ns.job_pods("quota")), 2)
    for pod in pods:  # the other controller lets go: only Phalanx's gate is left
        ns.api.request(
            "PATCH",
            f"/api/v1/namespaces/{ns.name}/pods/{pod['metadata']['name']}",
            {"spec": {"schedulingGates": [{"name": "phalanx.dev/admission"}]}},
            "application/merge-patch+json",
        )
    wait_bound(ns, "quota", 4)


def test_a_basic_job_whose_template_carries_the_gate_is_never_stuck(ns: Namespace) -> None:
    body = managed_job("copied", 2, **{"phalanx.dev/policy": "basic"})
    body["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "phalanx.dev/admission"}]
    ns.create(body)
    wait_bound(ns, "copied", 2)


def test_basic_with_a_topology_key_is_refused_at_creation(ns: Namespace) -> None:
    body = managed_job("spread", 2, **{"phalanx.dev/policy": "basic", "phalanx.dev/topology-key": "rack"})
    with pytest.raises(ApiError) as refused:
        ns.create(body)
    assert "phalanx.dev/topology-key" in str(refused.value) and "needs policy gang" in str(refused.value)


def test_an_immutable_annotation_changed_while_phalanx_was_down_gets_one_warning(
    ns: Namespace, phalanx: Any
) -> None:
    ns.create(managed_job("moved", 2, key="oci.oraclecloud.com/rdma.network_block_id"))
    wait_bound(ns, "moved", 2)
    phalanx.stop()
    try:
        # The update webhook fails open while Phalanx is away, so the edit goes through.
        ns.patch_job(
            "moved", {"metadata": {"annotations": {"phalanx.dev/topology-key": "oci.oraclecloud.com/rack"}}}
        )
    finally:
        phalanx.start()
    (event,) = wait_for(
        "an ImmutableChangeIgnored Warning", lambda: events(ns, "moved", "ImmutableChangeIgnored")
    )
    assert "phalanx.dev/topology-key" in event["message"]
    hold("said once", lambda: event_count(ns, "moved", "ImmutableChangeIgnored") == 1, seconds=3)


def test_a_hand_edit_of_a_job_owned_pod_group_is_refused_and_the_job_is_the_way(ns: Namespace) -> None:
    ns.create(managed_job("owned", 4, **{"phalanx.dev/min-count": "4"}))
    group = wait_for("the PodGroup", lambda: group_of(ns, "owned"))
    path = f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/podgroups/{group['metadata']['name']}"
    edit = {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}
    with pytest.raises(ApiError) as refused:
        ns.api.request("PATCH", path, edit, "application/merge-patch+json")
    assert "phalanx.dev/min-count" in str(refused.value)
    # The Job is the source of truth: its annotation changes the gang size, through the same webhook.
    ns.patch_job("owned", {"metadata": {"annotations": {"phalanx.dev/min-count": "3"}}})
    wait_for(
        "minCount 3 on the PodGroup",
        lambda: ns.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3,
    )


def test_a_pod_group_made_by_hand_stays_editable(ns: Namespace) -> None:
    body = {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "by-hand"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    ns.create(body)
    path = f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/podgroups/by-hand"
    ns.api.request(
        "PATCH",
        path,
        {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}},
        "application/merge-patch+json",
    )
    assert ns.get(path)["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
