"""Topology levels on a stock cluster: preferred topology climbs to the next level of the key's Topology,
and with levels a domain is a path (a rack name that repeats under two blocks is two racks)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState, DevCluster
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.topology import RACK_KEY

from .kube import (
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    delete_namespace,
    domains_of,
    gpu_job,
    hold,
    new_namespace,
    wait_for,
)
from .test_phalanx_admission import condition, group_of, wait_condition

pytestmark = pytest.mark.integration

TOPOLOGIES = "/apis/scheduling.phalanx.dev/v1beta1/topologies"
MANAGED = {"phalanx.dev/managed": "true"}


def topology(name: str, *labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


@contextmanager
def with_topology(ns: Namespace, name: str, *labels: str) -> Iterator[None]:
    ns.api.request("POST", TOPOLOGIES, topology(name, *labels))
    try:
        # Used once the operator has it: its status says how many nodes carry every level.
        wait_for(
            f"Topology {name} counted", lambda: ns.get(f"{TOPOLOGIES}/{name}").get("status", {}).get("nodes")
        )
        yield
    finally:
        ns.api.request("DELETE", f"{TOPOLOGIES}/{name}")


@pytest.fixture
def blocks(ns: Namespace) -> Iterator[None]:
    with with_topology(ns, "blocks", NB_KEY, LB_KEY):
        yield


def test_local_4_required_waits_preferred_is_placed_in_one_network_block(ns: Namespace, blocks: None) -> None:
    # No local block has 4 nodes: required waits, as today.
    ns.create(gpu_job("local-4", 4, labels=MANAGED, annotations={"phalanx.dev/topology-key": LB_KEY}))
    waiting = wait_condition(ns, "local-4", "Admitted", "False", "Unschedulable")
    print(waiting["message"])
    hold("no local-4 pod bound", lambda: not bound(ns.job_pods("local-4")), seconds=2)
    ns.create(
        gpu_job(
            "local-4-preferred",
            4,
            labels=MANAGED,
            annotations={"phalanx.dev/topology-key": LB_KEY, "phalanx.dev/topology-mode": "preferred"},
        )
    )
    pods = wait_for(
        "4 preferred pods bound",
        lambda: ps if len(bound(ps := ns.job_pods("local-4-preferred"))) == 4 else None,
    )
    print(ns.where("job-name=local-4-preferred"))
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    assert len(domains_of(ns.api, pods, LB_KEY)) == 2
    admitted = wait_condition(ns, "local-4-preferred", "Admitted", "True", "Admitted")
    print(admitted["message"])
    assert (
        f"topology mode preferred: no domain of {LB_KEY} had room, so it went to one domain of {NB_KEY}"
        in (admitted["message"])
    )
    group = group_of(ns, "local-4-preferred")
    assert group is not None and group["status"]["admission"]["level"] == NB_KEY
    events = [
        e["message"]
        for e in ns.events_until(
            "the Job's Admitted event",
            lambda evs: any(e["reason"] == "Admitted" and e["involvedObject"]["kind"] == "Job" for e in evs),
        )
        if e["reason"] == "Admitted" and e["involvedObject"]["kind"] == "Job"
    ]
    assert any("(topology mode preferred)" in m for m in events), events
    assert condition(group_of(ns, "local-4"), "Admitted")["reason"] == "Unschedulable"  # type: ignore[index]


# ---------------------------------------------------------------------- path domains
@pytest.fixture(scope="module")
def racks_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    """The seed nodes with a rack label repeating under both network blocks (`--topology racks`)."""
    cluster = DevCluster(Path(tmp_path_factory.mktemp("cluster-racks")))
    state = cluster.up(mode="stock", topology="racks", log=lambda m: print(f"[dev-cluster racks] {m}"))
    try:
        yield state
    finally:
        cluster.down(log=lambda m: print(f"[dev-cluster racks] {m}"))


@pytest.fixture(scope="module")
def racks_phalanx(racks_cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    operator = OperatorProcess(racks_cluster, Path(tmp_path_factory.mktemp("operator-racks")))
    try:
        operator.start()
        yield
    finally:
        operator.stop()
        print(f"operator log: {operator.log_path}")


@pytest.fixture
def racks_ns(
    racks_cluster: ClusterState, racks_phalanx: None, request: pytest.FixtureRequest
) -> Iterator[Namespace]:
    namespace = new_namespace(racks_cluster, request.node.name)
    yield namespace
    delete_namespace(namespace)


def test_a_rack_gang_never_spans_blocks_once_a_topology_gives_the_levels(racks_ns: Namespace) -> None:
    ns = racks_ns
    # r1 is was-worker, was-worker2 (nb-a) and was-worker5, was-worker6 (nb-b): with one busy node in each
    # half, the label alone sees two free nodes in "r1" across the two blocks.
    ns.fill("was-worker", "was-worker6")
    ns.create(gpu_job("rack-bare", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": RACK_KEY}))
    bare = wait_for(
        "rack-bare bound", lambda: ps if len(bound(ps := ns.job_pods("rack-bare"))) == 2 else None
    )
    print(ns.where("job-name=rack-bare"))
    assert domains_of(ns.api, bare, NB_KEY) == {"nb-a", "nb-b"}  # one rack value, two places
    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/rack-bare?propagationPolicy=Foreground"
    )
    wait_for("rack-bare pods gone", lambda: not ns.job_pods("rack-bare"), timeout=60)

    with with_topology(ns, "racks", NB_KEY, RACK_KEY):
        ns.create(gpu_job("rack-path", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": RACK_KEY}))
        pods = wait_for(
            "rack-path bound", lambda: ps if len(bound(ps := ns.job_pods("rack-path"))) == 2 else None
        )
        print(ns.where("job-name=rack-path"))
        assert len(domains_of(ns.api, pods, NB_KEY)) == 1  # nb-a/r1 and nb-b/r1 each had one free node
        assert domains_of(ns.api, pods, RACK_KEY) == {"r2"}
        admitted = wait_condition(ns, "rack-path", "Admitted", "True", "Admitted")
        assert "/r2" in admitted["message"], admitted["message"]  # the domain is a path


def test_a_2_pod_gang_of_1_gpu_pods_goes_to_one_node(racks_ns: Namespace) -> None:
    ns = racks_ns
    job = gpu_job("small", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": RACK_KEY})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    with with_topology(ns, "racks-small", NB_KEY, RACK_KEY):
        ns.create(job)
        pods = wait_for("small bound", lambda: ps if len(bound(ps := ns.job_pods("small"))) == 2 else None)
        print(ns.where("job-name=small"))
        assert len({p["spec"]["nodeName"] for p in pods}) == 1
