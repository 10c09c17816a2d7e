"""The node as the lowest level always (issue 18, item 4), on the dev cluster.

Inside the chosen domain a gang takes the fewest nodes, the last one the tightest that still holds what
is left, with or without a Topology object: without one, two 4-GPU pods of a network-block gang used to go
to two half-busy nodes although one empty node of the same block holds both. The same cases run with no
Topology and with a Topology of (network block, kubernetes.io/hostname): one rule, the same placement.

The cluster: network block nb-b full; in nb-a, was-worker and was-worker2 half busy (4 of 8 GPUs taken),
was-worker3 empty, was-worker4 full or empty as the case needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.tools import filler_pod

from .kube import GPU_KEY, NB_KEY, TOPOLOGIES, Namespace, active_topology, gpu_job, wait_for
from .test_phalanx_admission import MANAGED, wait_bound, wait_condition

pytestmark = pytest.mark.integration

HOSTNAME = "kubernetes.io/hostname"
HALF_BUSY = ("was-worker", "was-worker2")
NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")


@pytest.fixture(params=["no-topology", "topology-with-hostname"])
def levels(request: pytest.FixtureRequest, ns: Namespace) -> Iterator[str]:
    """No Topology at all, or an active one of (network block, hostname)."""
    wait_for(
        "no Topology left by an earlier test",
        lambda: not ns.api.get(TOPOLOGIES)["items"],
        timeout=60,
    )
    if request.param == "no-topology":
        yield request.param
        return
    with active_topology(ns.api, f"nl-{ns.name}"[:60], NB_KEY, HOSTNAME):
        yield request.param


def occupy(ns: Namespace, full: tuple[str, ...], half: tuple[str, ...]) -> None:
    """Fillers: all 8 GPUs of each node of `full`, 4 of each of `half`; wait until all run."""
    for node in full:
        ns.create(filler_pod(node))
    for node in half:
        ns.create(filler_pod(node, gpus=4))
    wanted = len(full) + len(half)
    wait_for(
        f"{wanted} fillers running",
        lambda: (
            len(fillers := ns.pods("app=filler")) == wanted
            and all(p["status"].get("phase") == "Running" for p in fillers)
        ),
        timeout=60,
    )


def half_gpu_gang(name: str, count: int) -> dict[str, Any]:
    """`count` pods of 4 GPUs (half a node), all in one network block (required)."""
    job = gpu_job(name, count, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU_KEY] = "4"
    return job


def test_two_half_node_pods_share_the_one_empty_node_not_two_half_busy_ones(
    ns: Namespace, levels: str
) -> None:
    occupy(ns, full=(*NB_B, "was-worker4"), half=HALF_BUSY)
    ns.create(half_gpu_gang("pair", 2))
    pods = wait_bound(ns, "pair", 2, timeout=90)
    print(levels, ns.where())
    # Two half-busy nodes would also hold the pair (kube-scheduler's spreading, or a node-blind search):
    # the fewest nodes is one, the empty was-worker3.
    assert [p["spec"]["nodeName"] for p in pods] == ["was-worker3", "was-worker3"]
    wait_condition(ns, "pair", "Admitted", "True")


def test_three_half_node_pods_take_the_empty_node_and_then_the_tightest(ns: Namespace, levels: str) -> None:
    occupy(ns, full=NB_B, half=HALF_BUSY)  # was-worker3 and was-worker4 empty
    ns.create(half_gpu_gang("three", 3))
    pods = wait_bound(ns, "three", 3, timeout=90)
    print(levels, ns.where())
    on = Counter(p["spec"]["nodeName"] for p in pods)
    # The fewest nodes is two: one empty node holds two pods; the third goes to the tightest node that
    # still holds it, a half-busy one, not to the other empty node (and not three nodes).
    assert len(on) == 2, on
    (pair_node, _), (single_node, _) = on.most_common()
    assert on[pair_node] == 2 and pair_node in ("was-worker3", "was-worker4"), on
    assert single_node in HALF_BUSY, on
    wait_condition(ns, "three", "Admitted", "True")
