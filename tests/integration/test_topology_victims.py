"""Topology-aware victims on the dev cluster (issue 18, KAI-Scheduler#1591).

- A topology-required gang preempts inside a fully packed domain: a candidate domain counts what its
  victims would free, not only its free room (there a pre-filter on free capacity dropped such domains
  before the victim search ran).
- Of victim sets of equal cost, the one whose removal empties one local block wins over one scattered
  across two (with a Topology listing the network block and the local block, so the search knows the
  level below the preemptor's domain). The victims are named so that the scattered set has the smallest
  ids: without the spread rule it would win the tie.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import (
    GPU_KEY,
    LB_KEY,
    NB_KEY,
    Namespace,
    domains_of,
    gpu_job,
    hold,
    node_labels,
    wait_for,
)
from .priority_fixtures import block_topology_fixture, module_priority_classes
from .test_phalanx_admission import MANAGED, wait_bound

pytestmark = pytest.mark.integration

LOW, HIGH, GUARD = "phalanx-tv-low", "phalanx-tv-high", "phalanx-tv-guard"
VALUES = {LOW: 10, HIGH: 1000, GUARD: 5000}
NB_A = ("was-worker", "was-worker2", "was-worker3", "was-worker4")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")


priority_classes = module_priority_classes(VALUES)
block_topology = block_topology_fixture("tv")


def occupant(name: str, node: str, priority_class: str) -> dict[str, Any]:
    """A pod Phalanx does not manage, bound to `node` (nodeName), taking its 8 GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "occupant"}},
        "spec": {
            "nodeName": node,
            "priorityClassName": priority_class,
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU_KEY: "8"}}}
            ],
        },
    }


def running(ns: Namespace, names: set[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in ns.pods("app=occupant")}
    return all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)


def high_job(name: str, count: int, key: str) -> dict[str, Any]:
    return gpu_job(
        name, count, labels=MANAGED, annotations={"phalanx.dev/topology-key": key}, priority_class=HIGH
    )


def test_a_block_gang_preempts_inside_a_fully_packed_block(ns: Namespace) -> None:
    lows = {f"low-{i}": node for i, node in enumerate(NB_A)}
    guards = {f"guard-{i}": node for i, node in enumerate(NB_B)}
    for name, node in lows.items():
        ns.create(occupant(name, node, LOW))
    for name, node in guards.items():
        ns.create(occupant(name, node, GUARD))
    wait_for("the cluster packed", lambda: running(ns, set(lows) | set(guards)), timeout=60)
    ns.create(high_job("block-4", 4, NB_KEY))
    pods = wait_bound(ns, "block-4", 4, timeout=120)
    print(ns.where())
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-a"}
    left = {
        p["metadata"]["name"] for p in ns.pods("app=occupant") if not p["metadata"].get("deletionTimestamp")
    }
    assert left == set(guards)  # the four in nb-a went, the higher-priority ones stayed


# nb-a's occupants, named so that the scattered pair (one in each local block) sorts first.
SCATTERED_FIRST = {
    "victim-a": "was-worker",
    "victim-b": "was-worker3",
    "victim-c": "was-worker2",
    "victim-d": "was-worker4",
}


def make_tied_victims(ns: Namespace, tries: int = 10) -> None:
    """The four occupants of nb-a created within one second (Kubernetes start times have whole seconds:
    equal start times are what makes the victim sets tie before the spread decides)."""
    for _ in range(tries):
        for name, node in SCATTERED_FIRST.items():
            ns.create(occupant(name, node, LOW))
        made = {
            p["metadata"]["creationTimestamp"]
            for p in ns.pods("app=occupant")
            if p["metadata"]["name"] in SCATTERED_FIRST
        }
        if len(made) == 1:
            return
        for name in SCATTERED_FIRST:
            ns.delete_pod(name)
        wait_for(
            "the occupants gone",
            lambda: not [p for p in ns.pods("app=occupant") if p["metadata"]["name"] in SCATTERED_FIRST],
            timeout=60,
        )
    pytest.fail(f"could not create 4 pods within one second in {tries} tries")


def test_victims_that_empty_one_local_block_beat_victims_scattered_over_two(
    ns: Namespace, block_topology: str
) -> None:
    guards = {f"guard-{i}": node for i, node in enumerate(NB_B)}
    for name, node in guards.items():
        ns.create(occupant(name, node, GUARD))
    make_tied_victims(ns)
    wait_for("the cluster packed", lambda: running(ns, set(SCATTERED_FIRST) | set(guards)), timeout=60)
    # Two pods in one network block: any two of nb-a's four victims make room, at the same cost.
    ns.create(high_job("block-2", 2, NB_KEY))
    pods = wait_bound(ns, "block-2", 2, timeout=120)
    print(ns.where())
    labels = node_labels(ns.api)
    assert {labels[p["spec"]["nodeName"]][LB_KEY] for p in pods} == {"lb-a1"}
    left = {
        p["metadata"]["name"] for p in ns.pods("app=occupant") if not p["metadata"].get("deletionTimestamp")
    }
    assert left == {"victim-b", "victim-d"} | set(guards)  # victim-a and victim-c: all of lb-a1
    hold("the rest keeps running", lambda: running(ns, {"victim-b", "victim-d"} | set(guards)), seconds=2)
