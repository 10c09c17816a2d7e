"""DRA ResourceClaims on a gang (issue 16 item 7, in part), through the webhooks: refused at creation with
advice that can still be followed (a Job's policy is immutable later; a JobSet has none: not managed), for a
Job and a JobSet; a basic Job with claims passes (kube-scheduler allocates its devices pod by pod). An
extended resource no node lists (what DRA serves through a DeviceClass) is said at creation."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from test_controller_schedulers import hooks, job, refusal
from testkit import NODES, StaticContext, jobset_body, node_body

from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.jobset import JobSetKind
from phalanx.controller.watch.webhooks import Webhooks

CLAIMS: dict[str, Any] = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}


def test_a_gang_with_resource_claims_is_refused_at_creation_with_advice_it_can_follow() -> None:
    message = refusal(lambda: hooks().gate_job(body=job(**CLAIMS), patch=kopf.Patch()))
    assert message.startswith("spec.template.spec.resourceClaims: Phalanx does not model DRA device claims")
    assert "create the Job with phalanx.dev/policy: basic" in message

    patch = kopf.Patch()
    hooks().gate_job(body=job({"phalanx.dev/policy": "basic"}, **CLAIMS), patch=patch)
    assert "template" not in patch.spec  # basic: no gate, kube-scheduler places its pods


def test_a_jobsets_claims_are_refused_too() -> None:
    body = jobset_body(gated=False)
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(CLAIMS)
    message = refusal(lambda: hooks().gate_owner(JobSetKind())(body=kopf.Body(body), patch=kopf.Patch()))
    assert message.startswith("spec.replicatedJobs[0].template.spec.template.spec.resourceClaims: Phalanx")
    assert message.endswith("; create the JobSet without the phalanx.dev/managed label")


def test_an_extended_resource_no_node_lists_is_said_at_creation() -> None:
    """A DRA-backed extended resource (a DeviceClass's extendedResourceName) is never in a node's
    allocatable: the gang would wait; said while the Job can still be made basic. A listed one is not."""
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    hooks = Webhooks(StaticContext(cache=cache, cache_primed=True))
    dra = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"example.com/dra-gpu": "1"}}}]}
    hooks.gate_job(body=job(**dra), patch=kopf.Patch(), warnings=(said := []))
    (warning,) = said
    assert warning.startswith("spec.template.spec: requests example.com/dra-gpu, which no node lists")
    assert warning.endswith("if DRA serves it, create the Job with phalanx.dev/policy: basic")
    listed = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    hooks.gate_job(body=job(**listed), patch=kopf.Patch(), warnings=(fine := []))
    assert fine == []


def device_class(name: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_an_extended_resource_a_device_class_serves_is_refused_on_a_gang_with_advice() -> None:
    """kube-scheduler v1.37 (DRAExtendedResource, GA) allocates it from ResourceSlices, which Phalanx does
    not model: the gang would never be admitted. Refused (explicit and implicit names), a basic Job passes,
    and a class deleted again leaves the warning only."""
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    cache.upsert("DeviceClass", device_class("gpu.example.com", "example.com/dra-gpu"))
    hooks = Webhooks(StaticContext(cache=cache, cache_primed=True))
    for resource in ("example.com/dra-gpu", "deviceclass.resource.kubernetes.io/gpu.example.com"):
        dra = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {resource: "1"}}}]}
        body = job(**dra)
        message = refusal(lambda: hooks.gate_job(body=body, patch=kopf.Patch()))  # noqa: B023
        assert message == (
            f"spec.template.spec: requests {resource}, which no node lists in its allocatable and "
            "DeviceClass 'gpu.example.com' serves through DRA (kube-scheduler allocates it from "
            "ResourceSlices); Phalanx does not model DRA device allocation, so it would never admit the "
            "gang; create the Job with "
            "phalanx.dev/policy: basic (kube-scheduler allocates the devices pod by pod), or without the "
            "phalanx.dev/managed label"
        ), message
        patch = kopf.Patch()
        hooks.gate_job(body=job({"phalanx.dev/policy": "basic"}, **dra), patch=patch, warnings=[])
        assert "template" not in patch.spec  # basic: no gate, kube-scheduler places its pods

    cache.delete("DeviceClass", device_class("gpu.example.com"))
    dra = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"example.com/dra-gpu": "1"}}}]}
    hooks.gate_job(body=job(**dra), patch=kopf.Patch(), warnings=(said := []))
    assert len(said) == 1 and said[0].startswith("spec.template.spec: requests example.com/dra-gpu")


def hand_made_group(name: str, gang: bool) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": 2}} if gang else {"basic": {}}
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "generation": 1},
        "spec": {"schedulingPolicy": policy},
    }


def hand_made_pod(group: str, **spec: Any) -> kopf.Body:
    pod_spec = {"containers": [{"name": "w", "image": "x"}], **spec}
    return kopf.Body(
        {
            "metadata": {"name": "p", "namespace": "ml", "labels": {"phalanx.dev/pod-group": group}},
            "spec": pod_spec,
        }
    )


def test_a_hand_made_pod_with_devices_joining_a_gang_is_refused_and_joining_a_basic_group_passes() -> None:
    """The pod webhook refuses what the Job webhook refuses (claims, DRA-served extended resources), for a
    gang group or one not created yet; a basic group's pods are never held, so they pass."""
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    cache.upsert("DeviceClass", device_class("gpu.example.com", "example.com/dra-gpu"))
    cache.upsert("PodGroup", hand_made_group("gang", gang=True))
    cache.upsert("PodGroup", hand_made_group("loose", gang=False))
    hooks = Webhooks(StaticContext(cache=cache, cache_primed=True))
    dra = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"example.com/dra-gpu": "1"}}}]}
    for group in ("gang", "not-yet"):
        message = refusal(lambda: hooks.gate_pod(body=hand_made_pod(group, **CLAIMS), patch=kopf.Patch()))  # noqa: B023
        assert message.startswith("spec.resourceClaims: Phalanx does not model DRA device claims")
        assert f"gang PodGroup {group!r}" in message and "without the phalanx.dev/pod-group label" in message
        message = refusal(lambda: hooks.gate_pod(body=hand_made_pod(group, **dra), patch=kopf.Patch()))  # noqa: B023
        assert message.startswith("spec: requests example.com/dra-gpu, which no node lists")
    for spec in (CLAIMS, dra):
        patch = kopf.Patch()
        hooks.gate_pod(body=hand_made_pod("loose", **spec), patch=patch)
        assert patch.spec["schedulingGates"] == [{"name": "phalanx.dev/admission"}]
    patch = kopf.Patch()
    hooks.gate_pod(body=hand_made_pod("gang"), patch=patch)  # no devices: gated as always
    assert patch.spec["schedulingGates"] == [{"name": "phalanx.dev/admission"}]


@pytest.mark.parametrize(
    ("live", "passes"),
    [
        ("basic", True),  # created just now as a basic group: the cache has not seen it yet
        ("gang", False),  # a gang's pod: refused
        ("none", False),  # no such group yet: it counts as a gang's
        ("error", False),  # the API cannot say: the cache's refusal stands
    ],
)
async def test_a_device_refusal_for_a_group_the_cache_has_not_seen_is_confirmed_live(
    live: str, passes: bool
) -> None:
    """A pod with devices joining a PodGroup created just before it: the webhook's cache may not have it
    yet, and a group it does not know counts as a gang's — so the pod was refused although its group is
    basic (seen in CI: test_dra.py created `loose`, then its pod, at once). The refusal is confirmed with
    the API first."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from phalanx.controller.apply.kube import Kube
    from phalanx.kubeclient import ApiClient, Credentials

    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    cache.upsert("DeviceClass", device_class("gpu.example.com", "example.com/dra-gpu"))
    context = StaticContext(cache=cache, cache_primed=True)
    asked: list[str] = []

    async def list_pod_groups(request: web.Request) -> web.Response:
        asked.append(request.path)
        if live == "error":
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        items = [] if live == "none" else [hand_made_group("fresh", gang=live == "gang")]
        return web.json_response({"kind": "PodGroupList", "items": items})

    app = web.Application()
    app.router.add_get("/apis/scheduling.phalanx.dev/v1beta1/namespaces/ml/podgroups", list_pod_groups)
    server = TestServer(app)
    await server.start_server()
    dra = {"containers": [{"name": "w", "image": "x", "resources": {"limits": {"example.com/dra-gpu": "1"}}}]}
    patch = kopf.Patch()
    try:
        async with ApiClient(Credentials(server=str(server.make_url("")).rstrip("/"), source="test")) as api:
            context.kube = Kube(api)
            said: list[str] = []
            pod = hand_made_pod("fresh", **dra)
            confirmed = Webhooks(context).gate_pod_confirmed(body=pod, patch=patch, warnings=said)
            if passes:
                await confirmed
                assert said == [], "the API showed the group: no 'not created yet' warning, once or twice"
            else:
                with pytest.raises(
                    kopf.AdmissionError, match=r"which no node lists .* gang PodGroup 'fresh'"
                ):
                    await confirmed
    finally:
        await server.close()
    assert asked == ["/apis/scheduling.phalanx.dev/v1beta1/namespaces/ml/podgroups"]
    assert (patch.get("spec", {}).get("schedulingGates") == [{"name": "phalanx.dev/admission"}]) is passes
