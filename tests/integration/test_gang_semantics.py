"""Issue 18 on the dev cluster: `topology-mode: auto`, trees that preempt, hand-made groups requeued whole.

- auto, with a Topology of (network block, local block): a 3-pod job can never fit a 2-node local block,
  so it takes one network block with the fewest local blocks; a 2-pod job can, so it waits for a local
  block of its own instead of spreading (preferred would spread); each condition says which applied, why.
- A high-priority sliced Job preempts a low-priority gang whole, as a plain gang of its priority would
  (before, a tree never preempted and waited behind it for ever).
- A high-priority hand-made tree (the article's slices) preempts a low-priority gang whole the same way.
- A hand-made PodGroup whose StatefulSet pods lost a member with its node, with no room left in its
  domain, is requeued whole by deleting its pods after --node-failure-grace; the StatefulSet makes them
  again (gated) and they are placed whole in the other block.
- The same for a hand-made tree (the article's CompositePodGroup over two slice PodGroups, each slice's
  pods made by a StatefulSet): a node under one slice fails, and after the grace every pod of the tree,
  the intact slice's too, is deleted and made again, and the tree is placed whole in the other network
  block; at no moment are its pods in two blocks.
"""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import (
    GPU_KEY,
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    domains_of,
    gpu_job,
    hold,
    node_labels,
    wait_for,
)
from .priority_fixtures import block_topology_fixture, module_priority_classes
from .scenarios import PHALANX
from .semantics_scenarios import tree_preemption
from .slice_scenarios import PHALANX_SLICES, SLICES, composite, pod_group, workload
from .test_phalanx_admission import MANAGED, group_of, wait_bound, wait_condition

pytestmark = pytest.mark.integration

LOW, HIGH = "phalanx-gs-low", "phalanx-gs-high"
PHALANX_API = "scheduling.phalanx.dev/v1beta1"
GRACE = 30.0  # phalanx run's default --node-failure-grace


priority_classes = module_priority_classes({LOW: 10, HIGH: 1000})
block_topology = block_topology_fixture("gs")


def auto_job(name: str, count: int) -> dict[str, Any]:
    notes = {"phalanx.dev/topology-key": LB_KEY, "phalanx.dev/topology-mode": "auto"}
    return gpu_job(name, count, labels=MANAGED, annotations=notes)


# ---------------------------------------------------------------------- auto
def test_auto_takes_one_network_block_for_a_job_that_can_never_fit_a_local_block(
    ns: Namespace, block_topology: str
) -> None:
    ns.create(auto_job("auto-3", 3))
    pods = wait_bound(ns, "auto-3", 3)
    print(ns.where("job-name=auto-3"))
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    assert len(domains_of(ns.api, pods, LB_KEY)) == 2  # the fewest local blocks that hold three pods
    group = group_of(ns, "auto-3")
    assert group is not None
    assert group["metadata"]["annotations"]["phalanx.dev/topology-mode"] == "auto"
    admission = group["status"]["admission"]
    note = f"auto: 3 pods can never fit one domain of {LB_KEY} (at most 2 do), so one domain of {NB_KEY}"
    assert admission["level"] == NB_KEY and admission["modeNote"].startswith(note)
    cond = wait_condition(ns, "auto-3", "Admitted", "True")
    assert note in cond["message"], cond


def longest_wait(operator: OperatorProcess) -> float:
    for line in operator.scrape().splitlines():
        if line.startswith("phalanx_longest_wait_seconds "):
            return float(line.split()[1])
    raise AssertionError("phalanx_longest_wait_seconds is not exported")


def test_auto_keeps_a_job_that_fits_a_local_block_waiting_for_one_where_preferred_spreads(
    ns: Namespace, block_topology: str, phalanx: OperatorProcess
) -> None:
    ns.fill("was-worker", "was-worker3", "was-worker5", "was-worker7")  # one free node per local block
    ns.create(auto_job("auto-2", 2))
    cond = wait_condition(ns, "auto-2", "Admitted", "False", "Unschedulable")
    print(cond["message"])
    assert (
        f"auto: 2 pods fit one domain of {LB_KEY} when its nodes are free, so one is required"
        in cond["message"]
    )
    hold("auto-2 waits for a local block", lambda: not bound(ns.job_pods("auto-2")), seconds=3)
    # The longest wait is exported, and grows while auto-2 waits.
    wait_for("phalanx_longest_wait_seconds past 3 s", lambda: longest_wait(phalanx) >= 3.0, timeout=60)
    preferred = gpu_job(
        "preferred-2",
        2,
        labels=MANAGED,
        annotations={"phalanx.dev/topology-key": LB_KEY, "phalanx.dev/topology-mode": "preferred"},
    )
    ns.create(preferred)
    pods = wait_bound(ns, "preferred-2", 2)
    assert len(domains_of(ns.api, pods, LB_KEY)) == 2  # preferred spreads at once
    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/preferred-2", {"propagationPolicy": "Background"}
    )
    wait_for("preferred-2's pods gone", lambda: not ns.pods("job-name=preferred-2"), timeout=60)
    hold("auto-2 still waits", lambda: not bound(ns.job_pods("auto-2")), seconds=2)
    # A local block frees: auto-2 takes it whole.
    ns.unfill("was-worker7")
    placed = wait_bound(ns, "auto-2", 2, timeout=90)
    assert {p["spec"]["nodeName"] for p in placed} == {"was-worker7", "was-worker8"}


# ---------------------------------------------------------------------- a tree preempts
def sliced_job(name: str, priority_class: str) -> dict[str, Any]:
    notes = {
        "phalanx.dev/topology-key": NB_KEY,
        "phalanx.dev/slice-size": "2",
        "phalanx.dev/slice-topology-key": LB_KEY,
    }
    return gpu_job(name, 4, labels=MANAGED, annotations=notes, priority_class=priority_class)


def test_a_high_priority_sliced_job_preempts_a_low_priority_gang_whole(ns: Namespace) -> None:
    for name in ("low-a", "low-b"):
        notes = {"phalanx.dev/topology-key": NB_KEY}
        ns.create(gpu_job(name, 4, labels=MANAGED, annotations=notes, priority_class=LOW))
        wait_bound(ns, name, 4)
    ns.create(sliced_job("sliced", HIGH))
    pods = wait_bound(ns, "sliced", 4, timeout=120)
    print(ns.where())
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    labels = node_labels(ns.api)
    index = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}
    local = {i: labels[p["spec"]["nodeName"]][LB_KEY] for i, p in index.items()}
    assert local[0] == local[1] != local[2] == local[3], local
    events = ns.events()
    preempted = {
        e["involvedObject"]["name"]
        for e in events
        if e["reason"] == "Preempted" and e["involvedObject"]["kind"] == "Job"
    }
    assert len(preempted) == 1 and preempted <= {"low-a", "low-b"}
    said = [
        e
        for e in events
        if e["reason"] == "Preempting" and e["involvedObject"]["kind"] == "CompositePodGroup"
    ]
    assert said, "the CompositePodGroup says it preempts"
    (victim,) = preempted
    survivor = "low-b" if victim == "low-a" else "low-a"
    assert len(bound(ns.job_pods(survivor))) == 4  # only what was needed


def test_a_high_priority_hand_made_tree_preempts_a_low_priority_gang_whole(ns: Namespace) -> None:
    """The article's hand-made slices (Workload, CompositePodGroup, two PodGroups, bare pods) of priority
    high, behind low-a and low-b filling both network blocks (semantics_scenarios.tree_preemption, the
    row of bench/comparison.py): one low gang goes whole, the tree runs in its block."""
    outcome = tree_preemption(PHALANX, ns)
    print(outcome.line)
    assert outcome.facts["running"], outcome.line
    fates = sorted(outcome.facts["fates"])
    gone = [f for f in fates if f.endswith("4 of 4 pods gone")]
    untouched = [f for f in fates if f.endswith("untouched")]
    assert len(gone) == 1 and len(untouched) == 1, fates  # one gang whole, the other not at all
    assert len(outcome.domains[0]) == 1, outcome.domains  # the tree in one network block
    said = [
        e
        for e in ns.events()
        if e["reason"] == "Preempting" and e["involvedObject"]["kind"] == "CompositePodGroup"
    ]
    assert said, "the CompositePodGroup says it preempts"


# ---------------------------------------------------------------------- a hand-made group requeued whole
def statefulset(name: str, group: str, replicas: int, extra: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": name, "phalanx.dev/pod-group": group, **(extra or {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "w",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {GPU_KEY: "8"}},
                        }
                    ]
                },
            },
        },
    }


def test_a_hand_made_group_that_lost_a_member_with_its_node_is_requeued_whole_into_the_other_block(
    ns: Namespace,
) -> None:
    ns.fill("was-worker3", "was-worker4")  # nb-a keeps two free nodes: the tighter block for a pair
    group = {
        "apiVersion": PHALANX_API,
        "kind": "PodGroup",
        "metadata": {"name": "pair"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": NB_KEY}]},
        },
    }
    ns.create(group)
    ns.create(statefulset("pair", "pair", 2), path=f"/apis/apps/v1/namespaces/{ns.name}/statefulsets")

    def pair(block: str) -> list[dict[str, Any]] | None:
        pods = [p for p in ns.pods("app=pair") if not p["metadata"].get("deletionTimestamp")]
        return pods if len(bound(pods)) == 2 and domains_of(ns.api, pods, NB_KEY) == {block} else None

    pods = wait_for("the pair bound in nb-a", lambda: pair("nb-a"), timeout=90)
    failed = pods[0]["spec"]["nodeName"]
    try:
        fail_node(ns.api, failed, how="taint")  # its pod is evicted; the StatefulSet makes it again, gated
        placed = wait_for("the pair requeued whole into nb-b", lambda: pair("nb-b"), timeout=GRACE + 120)
        print(ns.where("app=pair"))
        assert failed not in {p["spec"]["nodeName"] for p in placed}
        said = [
            e for e in ns.events() if e["reason"] == "Requeued" and e["involvedObject"]["kind"] == "PodGroup"
        ]
        assert said and "below its minCount" in said[0]["message"], said
        record = ns.get(f"/apis/{PHALANX_API}/namespaces/{{ns}}/podgroups/pair")["status"]
        assert record["domain"] == "nb-b" and record["admission"]["domain"] == "nb-b"
    finally:
        heal_node(ns.api, failed)


def test_a_hand_made_tree_that_lost_a_member_with_its_node_is_requeued_whole_into_the_other_block(
    ns: Namespace,
) -> None:
    """The article's slices (one network block, a local block per slice) with each slice's two pods made
    by a StatefulSet, so that pods deleted by the requeue come back (gated) and can be placed again."""
    api = PHALANX_SLICES.workload_api
    ns.create(workload(api))
    ns.create(composite(api))
    for g in SLICES:
        ns.create(pod_group(g, api))
    path = f"/apis/apps/v1/namespaces/{ns.name}/statefulsets"
    for g in SLICES:
        ns.create(statefulset(g, g, 2, {"tree": "slices"}), path=path)

    def live() -> list[dict[str, Any]]:
        pods = [p for p in ns.pods("tree=slices") if not p["metadata"].get("deletionTimestamp")]
        blocks = domains_of(ns.api, pods, NB_KEY)
        assert len(blocks) <= 1, f"the tree's pods in two network blocks at once: {ns.where('tree=slices')}"
        return pods

    def whole() -> list[dict[str, Any]] | None:
        pods = live()
        return pods if len(bound(pods)) == 4 else None

    first = wait_for("the tree bound", whole, timeout=120)
    print(ns.where("tree=slices"))
    (block,) = domains_of(ns.api, first, NB_KEY)
    other = "nb-b" if block == "nb-a" else "nb-a"
    labels = node_labels(ns.api)
    index = {p["metadata"]["name"]: labels[p["spec"]["nodeName"]][LB_KEY] for p in first}
    assert index["slices-0-0"] == index["slices-0-1"] != index["slices-1-0"] == index["slices-1-1"], index
    original = {p["metadata"]["uid"] for p in first}
    failed = next(p["spec"]["nodeName"] for p in first if p["metadata"]["name"] == "slices-1-0")

    def placed_again() -> list[dict[str, Any]] | None:
        pods = whole()
        if pods is None or domains_of(ns.api, pods, NB_KEY) != {other}:
            return None
        return pods

    try:
        fail_node(ns.api, failed, how="taint")  # slices-1-0 is evicted; its StatefulSet makes it again, gated
        placed = wait_for("the tree requeued whole into the other block", placed_again, timeout=GRACE + 180)
        print(ns.where("tree=slices"))
        assert not original & {p["metadata"]["uid"] for p in placed}, "every pod of the tree was made again"
        assert failed not in {p["spec"]["nodeName"] for p in placed}
        labels = node_labels(ns.api)
        index = {p["metadata"]["name"]: labels[p["spec"]["nodeName"]][LB_KEY] for p in placed}
        assert index["slices-0-0"] == index["slices-0-1"] != index["slices-1-0"] == index["slices-1-1"], index
        said = [
            e
            for e in ns.events()
            if e["reason"] == "Requeued" and e["involvedObject"]["kind"] == "CompositePodGroup"
        ]
        assert said and "below its minCount" in said[0]["message"], said
        record = ns.get(f"/apis/{api}/namespaces/{{ns}}/compositepodgroups/slices")["status"]
        assert record["domain"] == other and record["admission"]["domain"] == other, record
        hold("the tree stays whole in the other block", lambda: placed_again() is not None, seconds=3)
    finally:
        heal_node(ns.api, failed)
