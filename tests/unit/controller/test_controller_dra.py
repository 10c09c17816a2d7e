"""DRA ResourceClaims on a gang (issue 16 item 7, in part), through the webhooks: refused at creation with
advice that can still be followed (a Job's policy is immutable later; a JobSet has none: not managed), for a
Job and a JobSet; a basic Job with claims passes (kube-scheduler allocates its devices pod by pod). An
extended resource no node lists (what DRA serves through a DeviceClass) is said at creation."""

from __future__ import annotations

from typing import Any

import kopf
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
