"""DRA-backed extended resources (issue 16 item 7), on the dev cluster with ResourceSlices published for
simulated nodes: a DeviceClass serves `example.com/dra-gpu` (its `extendedResourceName`; v1.37's
DRAExtendedResource is GA and on), and two kwok nodes publish two devices each. Phalanx does not model DRA
device allocation, so a gang Job requesting the resource is refused at creation with advice; the advice
can be followed: the same Job with `phalanx.dev/policy: basic` is accepted and kube-scheduler allocates
the devices from the slices and binds its pods to the nodes that publish them (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kube import Namespace, bound, node_labels, wait_for
from .test_phalanx_admission import managed_job
from .test_silent_ignores import eventually_refused

pytestmark = pytest.mark.integration

DRIVER = "gpu.example.com"
RESOURCE = "example.com/dra-gpu"
RESOURCE_API = "/apis/resource.k8s.io/v1"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
            "extendedResourceName": RESOURCE,
        },
    }


def resource_slice(node: str) -> dict[str, Any]:
    """What a DRA driver's kubelet plugin would publish for `node`: one pool of two devices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        },
    }


@pytest.fixture
def published(ns: Namespace) -> Iterator[list[str]]:
    """The DeviceClass and the slices of two nodes, removed after the test (they are cluster-scoped)."""
    nodes = sorted(node_labels(ns.api))[:2]
    ns.api.request("POST", f"{RESOURCE_API}/deviceclasses", device_class())
    try:
        for node in nodes:
            ns.api.request("POST", f"{RESOURCE_API}/resourceslices", resource_slice(node))
        yield nodes
    finally:
        for node in nodes:
            try:
                ns.api.request("DELETE", f"{RESOURCE_API}/resourceslices/{node}-{DRIVER}")
            except ApiError as e:  # a slice that was never made
                print(f"slice of {node}: {e}")
        ns.api.request("DELETE", f"{RESOURCE_API}/deviceclasses/{DRIVER}")


def dra_job(name: str, count: int, **annotations: str) -> dict[str, Any]:
    body = managed_job(name, count, **annotations)
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {RESOURCE: "1"}}
    return body


def test_a_gang_requesting_a_dra_extended_resource_is_refused_and_the_advice_works(
    ns: Namespace, published: list[str]
) -> None:
    message = eventually_refused(ns, lambda: dra_job("gang", 2), f"/apis/batch/v1/namespaces/{ns.name}/jobs")
    assert message.startswith("admission webhook "), message
    assert (
        f"spec.template.spec: requests {RESOURCE}, which no node lists in its allocatable and DeviceClass "
        f"'{DRIVER}' serves through DRA (kube-scheduler allocates it from ResourceSlices); Phalanx does not "
        "model DRA device allocation, so it would never admit the gang; create the Job with "
        "phalanx.dev/policy: basic (kube-scheduler allocates the devices pod by pod), or without the "
        "phalanx.dev/managed label"
    ) in message

    # The advice: policy basic. kube-scheduler allocates a device of the class from the slices for each pod
    # and binds it to a node that publishes one.
    ns.create(dra_job("basic", 2, **{"phalanx.dev/policy": "basic"}))
    pods = wait_for(
        "the basic Job's 2 pods bound", lambda: p if len(p := bound(ns.job_pods("basic"))) == 2 else None, 120
    )
    print(ns.where("job-name=basic"))
    assert {p["spec"]["nodeName"] for p in pods} <= set(published)
    claims = ns.get(f"{RESOURCE_API}/namespaces/{{ns}}/resourceclaims")["items"]
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == 2, [c.get("status") for c in claims]


def hand_made_group(name: str, gang: bool) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}} if gang else {"basic": {}}},
    }


def dra_pod(name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"phalanx.dev/pod-group": group}},
        "spec": {
            "containers": [{"name": "w", "image": "busybox", "resources": {"limits": {RESOURCE: "1"}}}],
            "restartPolicy": "Never",
        },
    }


def test_a_hand_made_pod_requesting_it_is_refused_in_a_gang_and_placed_in_a_basic_group(
    ns: Namespace, published: list[str]
) -> None:
    ns.create(hand_made_group("gang", gang=True))
    ns.create(hand_made_group("loose", gang=False))
    message = eventually_refused(ns, lambda: dra_pod("in-gang", "gang"), f"/api/v1/namespaces/{ns.name}/pods")
    assert (
        f"spec: requests {RESOURCE}, which no node lists in its allocatable and DeviceClass '{DRIVER}' "
        "serves through DRA; Phalanx does not model DRA device allocation, so it would never release this "
        "pod of gang PodGroup 'gang'; let it join a PodGroup without a gang policy"
    ) in message

    ns.create(dra_pod("in-basic", "loose"))  # never held: kube-scheduler allocates and binds it
    pod = wait_for(
        "the basic group's pod bound",
        lambda: p if (p := ns.get("/api/v1/namespaces/{ns}/pods/in-basic"))["spec"].get("nodeName") else None,
        120,
    )
    assert pod["spec"]["nodeName"] in published
