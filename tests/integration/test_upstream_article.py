"""The article's experiments against upstream v1.37.2's in-tree gang scheduler (--mode upstream).

These prove the harness is real: the same control plane binaries, feature gates on, the Job
controller and kube-scheduler doing the work, and the article's outcomes observed.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import LB_KEY, Namespace, bound, gpu_job, hold, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.upstream]

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")


def upstream_pod_groups(ns: Namespace) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get("/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups")["items"]
    return items


def condition(group: dict[str, Any], kind: str = "PodGroupInitiallyScheduled") -> dict[str, Any] | None:
    for c in group.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return None


def gang(min_count: int, key: str | None = None) -> dict[str, Any]:
    scheduling: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key:
        scheduling["schedulingConstraints"] = {"topology": [{"key": key}]}
    return scheduling


def test_plain_4_with_five_nodes_filled_runs_3_and_leaves_1_pending(upstream_ns: Namespace) -> None:
    ns = upstream_ns
    ns.fill(*FIVE_BUSY)
    ns.create(gpu_job("plain-4", 4))
    wait_for(
        "3 plain-4 pods running",
        lambda: sum(p["status"].get("phase") == "Running" for p in ns.job_pods("plain-4")) == 3,
        timeout=60,
    )
    pending = wait_for(
        "the 4th pod reported unschedulable",
        lambda: [
            p
            for p in ns.job_pods("plain-4")
            if any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions", [])
            )
        ],
        timeout=30,
    )
    print(ns.where("job-name=plain-4"))
    assert len(pending) == 1
    message = next(c["message"] for c in pending[0]["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "Insufficient nvidia.com/gpu" in message
    # As in the article, WorkloadWithJob gives even a plain Job a Workload and a Basic PodGroup.
    groups = wait_for("a Basic PodGroup for plain-4", lambda: upstream_pod_groups(ns), timeout=20)
    assert "basic" in groups[0]["spec"]["schedulingPolicy"]


def test_gang_4_with_three_free_nodes_binds_none_then_all_four(upstream_ns: Namespace) -> None:
    ns = upstream_ns
    ns.fill(*FIVE_BUSY)
    ns.create(gpu_job("gang-4", 4, scheduling=gang(4)))
    group = wait_for(
        "the gang-4 PodGroup Unschedulable",
        lambda: next(
            (
                g
                for g in upstream_pod_groups(ns)
                if (c := condition(g)) and c["status"] == "False" and c["reason"] == "Unschedulable"
            ),
            None,
        ),
        timeout=60,
    )
    message = condition(group)["message"]  # type: ignore[index]
    print(message)
    assert "minCount (4) cannot be satisfied" in message
    hold("no gang-4 pod bound", lambda: not bound(ns.job_pods("gang-4")), seconds=3)
    print(ns.where("job-name=gang-4"))

    ns.unfill("was-worker")
    pods = wait_for(
        "all 4 gang-4 pods bound",
        lambda: ps if len(bound(ps := ns.job_pods("gang-4"))) == 4 else None,
        timeout=90,
    )
    print(ns.where("job-name=gang-4"))
    assert len({p["spec"]["nodeName"] for p in pods}) == 4


def test_local_4_waits_with_zero_of_four_placements(upstream_ns: Namespace) -> None:
    ns = upstream_ns
    ns.create(gpu_job("local-4", 4, scheduling=gang(4, LB_KEY)))
    group = wait_for(
        "the local-4 PodGroup Unschedulable",
        lambda: next(
            (g for g in upstream_pod_groups(ns) if (c := condition(g)) and c["status"] == "False"), None
        ),
        timeout=60,
    )
    message = condition(group)["message"]  # type: ignore[index]
    print(message)
    assert "0/4 placements are available" in message
    assert not bound(ns.job_pods("local-4"))
