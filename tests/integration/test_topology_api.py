"""The Topology API and pods that join a PodGroup by label, on the real stock dev cluster with Phalanx up.

Topologies are cluster-scoped and the cluster lives for the session: every test deletes the ones it made.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError

from .kube import LB_KEY, NB_KEY, Namespace, hold, wait_for

TOPOLOGIES = "/apis/scheduling.phalanx.dev/v1beta1/topologies"
HOSTNAME = "kubernetes.io/hostname"
GATE = {"name": "phalanx.dev/admission"}


def topology(name: str, *labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


@pytest.fixture
def topologies(ns: Namespace) -> Iterator[list[str]]:
    """Names of the Topologies a test made; deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        try:
            ns.api.request("DELETE", f"{TOPOLOGIES}/{name}")
        except ApiError as e:
            if e.status != 404:
                raise


def create(ns: Namespace, made: list[str], name: str, *labels: str) -> dict[str, Any]:
    created: dict[str, Any] = ns.api.request("POST", TOPOLOGIES, topology(name, *labels))
    made.append(name)
    return created


def status(ns: Namespace, name: str) -> dict[str, Any]:
    got: dict[str, Any] = ns.api.get(f"{TOPOLOGIES}/{name}").get("status") or {}
    return got


def nodes_with(ns: Namespace, *labels: str) -> int:
    return sum(
        1
        for n in ns.api.get("/api/v1/nodes")["items"]
        if all(x in n["metadata"].get("labels", {}) for x in labels)
    )


def kubectl(cluster: ClusterState, *args: str) -> str:
    done = subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def test_kubectl_get_topo_shows_the_nodes_carrying_every_level_and_follows_node_changes(
    ns: Namespace, stock_cluster: ClusterState, topologies: list[str]
) -> None:
    name = unique("rdma")
    create(ns, topologies, name, NB_KEY, LB_KEY)
    expected = nodes_with(ns, NB_KEY, LB_KEY)
    assert expected >= 8, "the seed cluster's eight GPU nodes carry both labels"

    def row() -> list[str] | None:
        lines = kubectl(stock_cluster, "get", "topo", name).splitlines()
        print(lines)
        assert lines[0].split() == ["NAME", "NODES", "AGE"]
        fields = lines[1].split()
        return fields if fields[1] == str(expected) else None

    wait_for(f"kubectl get topo {name} to show {expected} nodes", row, timeout=30)
    wide = kubectl(stock_cluster, "get", "topologies", name, "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "NODES", "COARSEST", "FINEST", "AGE"]
    assert wide[1].split()[:4] == [name, str(expected), NB_KEY, LB_KEY], wide
    active = next(c for c in status(ns, name)["conditions"] if c["type"] == "Active")
    assert (active["status"], active["reason"]) == ("True", "Active")

    # A node that comes with both labels counts; one with only the coarse level does not.
    extra, partial = unique("topo-extra"), unique("topo-partial")
    for node, labels in ((extra, {NB_KEY: "nb-x", LB_KEY: "lb-x1"}), (partial, {NB_KEY: "nb-x"})):
        ns.api.request(
            "POST",
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}},
        )
    try:
        wait_for("status.nodes +1", lambda: status(ns, name).get("nodes") == expected + 1, timeout=30)
        # Written once per change, not once per pass: a pass woken by pods does not patch it again.
        version = ns.api.get(f"{TOPOLOGIES}/{name}")["metadata"]["resourceVersion"]
        ns.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wake"}, "spec": _sleeper()})
        hold(
            "the Topology's resourceVersion",
            lambda: ns.api.get(f"{TOPOLOGIES}/{name}")["metadata"]["resourceVersion"] == version,
            seconds=3,
        )
    finally:
        for node in (extra, partial):
            ns.api.request("DELETE", f"/api/v1/nodes/{node}")
    wait_for("status.nodes back", lambda: status(ns, name).get("nodes") == expected, timeout=30)


def _sleeper() -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}


def test_a_second_topology_listing_a_label_is_refused_naming_it(ns: Namespace, topologies: list[str]) -> None:
    first = unique("rdma")
    create(ns, topologies, first, NB_KEY, LB_KEY)
    with pytest.raises(ApiError) as error:
        create(ns, topologies, unique("racks"), LB_KEY, HOSTNAME)
    print(error.value.body)
    assert error.value.status == 422
    assert f"nodeLabel '{LB_KEY}' is already a level of Topology '{first}'" in error.value.body
    assert "at most one Topology may list a given label" in error.value.body
    # The same Topology may be updated (its own labels are no conflict); its levels are immutable.
    ns.api.request(
        "PATCH", f"{TOPOLOGIES}/{first}", {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json"
    )
    with pytest.raises(ApiError) as immutable:
        ns.api.request(
            "PATCH",
            f"{TOPOLOGIES}/{first}",
            {"spec": {"levels": [{"nodeLabel": NB_KEY}]}},
            "application/merge-patch+json",
        )
    assert "levels is immutable" in immutable.value.body


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ((NB_KEY, NB_KEY), "each nodeLabel may appear in one level only"),
        ((HOSTNAME, NB_KEY), "kubernetes.io/hostname can only be the last (finest) level"),
        (("bad key!",), "spec.levels[0].nodeLabel"),
        ((), "spec.levels"),
    ],
)
def test_the_apiserver_refuses_an_invalid_topology(
    ns: Namespace, topologies: list[str], labels: tuple[str, ...], says: str
) -> None:
    with pytest.raises(ApiError) as error:
        create(ns, topologies, unique("bad"), *labels)
    print(error.value.body)
    assert error.value.status == 422 and says in error.value.body


def labelled_pod(name: str, group: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"phalanx.dev/pod-group": group}},
        "spec": {**_sleeper(), **spec},
    }


def test_a_pod_with_the_pod_group_label_is_born_gated_and_stays_so(ns: Namespace) -> None:
    created = ns.create(labelled_pod("slice-0-0", "slices-0"))
    assert GATE in created["spec"]["schedulingGates"]
    hold(
        "the pod gated and unbound",
        lambda: (
            (p := ns.get("/api/v1/namespaces/{ns}/pods/slice-0-0"))["spec"].get("schedulingGates") == [GATE]
            and not p["spec"].get("nodeName")
        ),
        seconds=3,
    )
    # An unlabelled pod is not Phalanx's business.
    plain = ns.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"}, "spec": _sleeper()})
    assert not plain["spec"].get("schedulingGates")


@pytest.mark.parametrize(
    ("group", "spec", "says"),
    [
        ("Slices_0", {}, "label phalanx.dev/pod-group: 'Slices_0' is not a PodGroup name"),
        ("slices-0", {"nodeName": "was-worker"}, "spec.nodeName is set: a pod bound by hand cannot join"),
    ],
)
def test_a_pod_that_cannot_join_is_refused_saying_why(
    ns: Namespace, group: str, spec: dict[str, Any], says: str
) -> None:
    with pytest.raises(ApiError) as error:
        ns.create(labelled_pod("p", group, **spec))
    print(error.value.body)
    assert error.value.status == 422 and says in error.value.body
    assert not ns.pods()


def test_with_phalanx_away_labelled_pods_are_refused_and_a_conflicting_topology_is_not_used(
    ns: Namespace, phalanx: Any, topologies: list[str]
) -> None:
    first = unique("rdma")
    create(ns, topologies, first, NB_KEY, LB_KEY)
    wait_for("the first Topology's status", lambda: status(ns, first).get("conditions"), timeout=30)
    second = unique("racks")
    phalanx.stop()
    try:
        with pytest.raises(ApiError) as error:
            ns.create(labelled_pod("early", "slices-0"))
        print(error.value.body)
        assert "gate-pod" in error.value.body or "webhook" in error.value.body
        # The Topology webhook fails open: the conflict gets in, and Phalanx says it does not use it.
        create(ns, topologies, second, LB_KEY, HOSTNAME)
    finally:
        phalanx.start()

    def conflict() -> dict[str, Any] | None:
        conditions = status(ns, second).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Active" and c["status"] == "False"), None)

    active = wait_for(f"{second} Active=False", conflict, timeout=30)
    assert active["reason"] == "LabelConflict"
    assert f"nodeLabel '{LB_KEY}' is also a level of the older Topology '{first}'" in active["message"]
    first_active = next(c for c in status(ns, first)["conditions"] if c["type"] == "Active")
    assert first_active["status"] == "True"
    # Back up: the same pod is created gated.
    assert GATE in ns.create(labelled_pod("early", "slices-0"))["spec"]["schedulingGates"]
