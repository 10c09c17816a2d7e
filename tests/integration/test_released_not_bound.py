"""Released but not bound (issue 10): a node goes bad between Phalanx's decision and kube-scheduler's
binding — tainted, or relabelled into another domain (the release pins the node's topology labels as the
decision saw them). Phalanx sees the scheduler refuse (PodScheduled=False), rolls the release back by
requeueing the Job, and places the gang again whole — no pod is left Pending behind a stale nodeSelector,
and no gang runs across two domains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import NB_KEY, Namespace, bound, domains_of, node_labels, relabel, wait_for
from .test_phalanx_admission import group_of, managed_job

pytestmark = pytest.mark.integration
PAUSE = "8"  # seconds between the recorded decision and the release (the test-only fault switch)


@pytest.fixture
def pausing_operator(
    stock_cluster: ClusterState, phalanx: OperatorProcess, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """Phalanx with a pause between recording a decision and releasing its pods, instead of the session's."""
    phalanx.stop()
    operator = OperatorProcess(
        stock_cluster, tmp_path, name="pausing", env={"PHALANX_FAULT_PAUSE_BEFORE_RELEASE": PAUSE}
    )
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        print(f"operator log: {operator.log_path}")
        phalanx.start()


def test_a_release_the_scheduler_cannot_bind_is_rolled_back_and_placed_again(
    ns: Namespace, pausing_operator: Any
) -> None:
    ns.create(managed_job("train", 2, key=NB_KEY))

    def decided() -> str | None:
        group = group_of(ns, "train")
        admission = (group or {}).get("status", {}).get("admission")
        return admission["assignments"][0]["node"] if admission else None

    doomed = wait_for("the decision recorded", decided)
    assert all(p["spec"].get("schedulingGates") for p in ns.job_pods("train")), "released before the pause"
    fail_node(ns.api, doomed, how="taint")  # the node goes bad before its pod is released and bound
    try:
        final = wait_for(
            "2 pods bound, none on the failed node",
            lambda: (
                ps
                if len(bound(ps := ns.job_pods("train"))) == 2
                and doomed not in {p["spec"]["nodeName"] for p in ps}
                else None
            ),
            timeout=120,
        )
        assert len(domains_of(ns.api, final, NB_KEY)) == 1
        messages = [e["message"] for e in ns.events("involvedObject.name=train") if e["reason"] == "Requeued"]
        assert any("released but not bound" in m for m in messages), messages
        print(messages[0])
    finally:
        heal_node(ns.api, doomed)


def test_a_node_relabelled_into_another_block_before_the_binding_binds_nothing_there(
    ns: Namespace, pausing_operator: Any, blocks: dict[str, str]
) -> None:
    """A gang of 2 decided into one network block; in the pause before its release one of its two nodes is
    relabelled into the other block (a topology label corrected). Its pod is released pinned to the labels
    the decision saw, which that node no longer has: kube-scheduler binds nothing there, and Phalanx rolls
    the gang back and places it again in one block as labelled now. Never are the two bound across the
    blocks. Before (the pin named the node alone): both bound, one in each block."""
    ns.create(managed_job("moved", 2, key=NB_KEY))

    def decided() -> list[str] | None:
        admission = ((group_of(ns, "moved") or {}).get("status") or {}).get("admission")
        return sorted(a["node"] for a in admission["assignments"]) if admission else None

    nodes = wait_for("the decision recorded", decided)
    assert all(p["spec"].get("schedulingGates") for p in ns.job_pods("moved")), "released before the pause"
    home = blocks[nodes[0]]
    other = next(v for v in sorted(set(blocks.values())) if v != home)
    relabel(ns.api, nodes[-1], other)

    def whole_in_one_block() -> list[dict[str, Any]] | None:
        pods = bound(ns.job_pods("moved"))
        now = node_labels(ns.api)
        where = {p["metadata"]["name"]: now[p["spec"]["nodeName"]][NB_KEY] for p in pods}
        taken_back = any(p["metadata"].get("deletionTimestamp") for p in pods)
        assert len(set(where.values())) <= 1 or taken_back, f"bound across blocks: {where}"
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return live if len(live) == 2 else None

    final = wait_for("the gang bound whole in one block", whole_in_one_block, timeout=120)
    print({p["metadata"]["name"]: p["spec"]["nodeName"] for p in final})
    messages = [e["message"] for e in ns.events("involvedObject.name=moved") if e["reason"] == "Requeued"]
    assert any("released but not bound" in m or "cannot be bound" in m for m in messages), messages
    print(messages[0])
