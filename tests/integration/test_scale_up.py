"""Scaling a running gang up on a full domain (issue 16 item 8), on the dev cluster: an elastic Indexed Job
of 2 pods runs in one network block whose other nodes are taken; its parallelism (and completions) go to 4.
The new pods wait, past the node-failure grace period, while the running pods keep running and the Job is
not suspended; once the block has room they join the running pods there. With
`phalanx.dev/on-scale-up: requeue` the same scale-up requeues the Job whole (its running pods go, once) and
its 4 pods are admitted whole in the other network block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .kube import NB_KEY, Namespace, bound, hold, node_labels, wait_for
from .test_phalanx_admission import group_of, managed_job

ON_SCALE_UP = "phalanx.dev/on-scale-up"
GRACE = 30.0  # phalanx run's default --node-failure-grace


def running(ns: Namespace, count: int) -> list[dict[str, Any]] | None:
    pods = bound(ns.job_pods("train"))
    return pods if len(pods) == count else None


def min_count(ns: Namespace) -> int | None:
    spec = (group_of(ns, "train") or {}).get("spec") or {}
    found: int | None = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    return found


@dataclass(frozen=True)
class FullBlock:
    labels: dict[str, dict[str, str]]  # every node's labels
    home: str  # the network block train runs in
    uids: set[str]  # its running pods'
    others: list[str]  # the block's other nodes, filled


def running_in_a_full_block(ns: Namespace, **annotations: str) -> FullBlock:
    """train (2 pods) running in one network block whose other nodes others then take."""
    ns.create(managed_job("train", 2, NB_KEY, **annotations))
    first = wait_for("train's 2 pods bound", lambda: running(ns, 2), timeout=120)
    labels = node_labels(ns.api)
    nodes = {p["spec"]["nodeName"] for p in first}
    (home,) = {labels[n][NB_KEY] for n in nodes}
    others = sorted(n for n, lb in labels.items() if lb.get(NB_KEY) == home and n not in nodes)
    ns.fill(*others)
    return FullBlock(labels, home, {p["metadata"]["uid"] for p in first}, others)


def test_new_pods_of_a_scaled_up_gang_wait_beside_the_running_ones_then_join_them(ns: Namespace) -> None:
    block = running_in_a_full_block(ns)
    labels, home, uids = block.labels, block.home, block.uids

    ns.patch_job("train", {"spec": {"parallelism": 4, "completions": 4}})
    wait_for("the PodGroup's minCount 4", lambda: min_count(ns) == 4 or None)
    wait_for("4 pods", lambda: len(ns.job_pods("train")) == 4 or None, timeout=60)

    def untouched() -> bool:
        job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
        alive = {p["metadata"]["uid"] for p in bound(ns.job_pods("train"))}
        return not job["spec"].get("suspend") and uids <= alive

    hold("the running pods kept, the Job not suspended", untouched, seconds=GRACE + 15)

    for node in block.others:
        ns.unfill(node)
    now = wait_for("train's 4 pods bound", lambda: running(ns, 4), timeout=120)
    assert uids <= {p["metadata"]["uid"] for p in now}
    assert {labels[p["spec"]["nodeName"]][NB_KEY] for p in now} == {home}


def test_with_on_scale_up_requeue_a_scale_up_that_does_not_fit_is_placed_again_whole(ns: Namespace) -> None:
    block = running_in_a_full_block(ns, **{ON_SCALE_UP: "requeue"})
    labels, home, uids = block.labels, block.home, block.uids

    ns.patch_job("train", {"spec": {"parallelism": 4, "completions": 4}})

    def whole_elsewhere() -> list[dict[str, Any]] | None:
        pods = running(ns, 4)
        if pods is None or uids & {p["metadata"]["uid"] for p in pods}:
            return None
        return pods if {labels[p["spec"]["nodeName"]][NB_KEY] for p in pods} != {home} else None

    now = wait_for("train's 4 new pods bound outside its first block", whole_elsewhere, timeout=180)
    print(ns.where("job-name=train"))
    assert len({labels[p["spec"]["nodeName"]][NB_KEY] for p in now}) == 1  # whole, in one block
    events = ns.events_until(
        "the Requeued event",
        lambda evs: any(e["reason"] == "Requeued" and e["involvedObject"]["name"] == "train" for e in evs),
    )
    (requeued,) = [e for e in events if e["reason"] == "Requeued" and e["involvedObject"]["name"] == "train"]
    assert requeued["message"].startswith("scaled up to 4 pods: the 2 new pod(s) do not fit beside its 2 "), (
        requeued
    )
    assert requeued["message"].endswith(f"{ON_SCALE_UP}: requeue asks to place it again whole"), requeued
    job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
    assert not job["spec"].get("suspend") and int(job["status"].get("failed") or 0) == 0, job["status"]
    wait_for(
        "the PodGroup says the new block",
        lambda: ((group_of(ns, "train") or {}).get("status") or {}).get("domain") not in (None, home),
    )
