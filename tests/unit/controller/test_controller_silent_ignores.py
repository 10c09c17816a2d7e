"""No silent ignores (issue 16, item 6), the pure rules and the webhooks as plain functions: a slice key not
finer than the Job's key, scoring-only terms, a labelled Job outside --namespaces that nothing gated, a pod
joining a PodGroup of another namespace. (Phalanx keys on the pod template: test_controller_schedulers.)"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from testkit import NB, StaticContext, group_of, job_body, node_body

from phalanx.api.admission_checks import (
    pod_group_namespace_problem,
    preferred_affinity_warnings,
    slice_key_problem,
    slice_key_warning,
    unmanaged_here,
)
from phalanx.api.cluster_objects import node_info
from phalanx.controller.watch.webhooks import Webhooks

LB = "oci.oraclecloud.com/rdma.local_block_id"
LEVELS = (NB, LB, "kubernetes.io/hostname")
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODES = [node_info(node_body(i)) for i in range(1, 9)]


def sliced(job_key: str, slice_key: str) -> kopf.Body:
    body = job_body(
        count=4,
        indexed=True,
        annotations={
            "phalanx.dev/topology-key": job_key,
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": slice_key,
        },
    )
    body["spec"]["template"]["spec"].pop("schedulingGates")
    return kopf.Body(body)


# ---------------------------------------------------------------------- slice keys
def test_a_slice_key_a_topology_lists_above_the_jobs_key_is_refused() -> None:
    problem = slice_key_problem(LB, NB, LEVELS)
    assert problem is not None and problem.startswith(
        f"metadata.annotations[phalanx.dev/slice-topology-key]: {NB!r} is not finer than "
        f"phalanx.dev/topology-key {LB!r}: their Topology lists it at level 0, the Job's key at level 1"
    )
    assert slice_key_problem(NB, LB, LEVELS) is None  # finer: fine
    assert slice_key_problem(NB, LB, None) is None  # no Topology: the nodes decide (a warning)
    assert slice_key_problem(NB, "example.com/rack", LEVELS) is None  # not in that Topology


def test_without_a_topology_the_nodes_show_a_slice_key_no_finer_than_the_jobs() -> None:
    assert slice_key_warning(NB, LB, NODES) is None  # each block holds two local blocks
    said = slice_key_warning(LB, NB, NODES)
    assert said is not None and "each domain of" in said and "lies inside one domain of" in said
    assert slice_key_warning(LB, "example.com/none", NODES) is None  # no node carries both


def test_the_job_webhook_refuses_by_the_topology_and_warns_by_the_nodes() -> None:
    context = StaticContext(cache_primed=True)
    for i in range(1, 9):
        context.cache.upsert("Node", node_body(i))
    context.cache.upsert(
        "Topology",
        {
            "metadata": {"name": "oci", "uid": "t", "generation": 1},
            "spec": {"levels": [{"nodeLabel": label} for label in LEVELS]},
        },
    )
    hooks = Webhooks(context)
    with pytest.raises(kopf.AdmissionError) as refused:
        hooks.gate_job(body=sliced(LB, NB), patch=kopf.Patch(), warnings=[])
    assert "is not finer than phalanx.dev/topology-key" in str(refused.value)
    hooks.gate_job(body=sliced(NB, LB), patch=kopf.Patch(), warnings=(fine := []))
    assert fine == []
    bare = Webhooks(StaticContext(cache=context.cache.__class__(), cache_primed=True))
    for i in range(1, 9):
        bare.ctx.cache.upsert("Node", node_body(i))
    bare.gate_job(body=sliced(LB, NB), patch=kopf.Patch(), warnings=(said := []))
    assert len(said) == 1 and "a slice key should be a finer level" in said[0]


# ---------------------------------------------------------------------- scores
def test_preferred_terms_are_said_to_be_ignored_naming_the_field() -> None:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "containers": [{"name": "c"}],
                "affinity": {
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}
                },
                "topologySpreadConstraints": [{"whenUnsatisfiable": "ScheduleAnyway", "maxSkew": 1}],
            }
        }
    }
    said = preferred_affinity_warnings(spec)
    assert said[0].startswith(f"spec.template.spec.affinity.nodeAffinity.{PREFERRED}: ignored for a gang")
    assert said[1].startswith("spec.template.spec.topologySpreadConstraints: ScheduleAnyway")


# ---------------------------------------------------------------------- --namespaces
def test_a_labelled_job_outside_the_namespaces_that_nothing_gated_is_said() -> None:
    job = job_body(labelled_late=True)  # no gate in its template
    said = unmanaged_here(job, "ml", ("team-a",))
    assert said is not None and said.startswith(
        "labelled phalanx.dev/managed=true in namespace ml, which is not among this Phalanx's --namespaces "
        "(team-a)"
    )
    assert unmanaged_here(job_body(), "ml", ("team-a",)) is None  # gated: another Phalanx holds it
    assert unmanaged_here(job_body(labelled_late=True, managed=False), "ml", ("team-a",)) is None


# ---------------------------------------------------------------------- a PodGroup of another namespace
def test_a_pod_joining_a_pod_group_of_another_namespace_is_refused() -> None:
    refusal, said = pod_group_namespace_problem("g", "ml", [("other", "g"), ("ml", "h")])
    assert refusal is not None and refusal.startswith(
        "label phalanx.dev/pod-group: PodGroup 'g' is in namespace other, not ml"
    )
    assert pod_group_namespace_problem("g", "ml", [("other", "g"), ("ml", "g")]) == (None, None)
    refusal, said = pod_group_namespace_problem("g", "ml", [])
    assert refusal is None and said is not None and "stays gated until one does" in said


def test_the_pod_webhook_refuses_a_pod_of_another_namespaces_group() -> None:
    context = StaticContext(cache_primed=True)
    group = group_of(job_body("train"))
    context.cache.pod_groups.put(
        group.__class__(
            **{**{f: getattr(group, f) for f in group.__slots__}, "namespace": "other", "owner_uid": ""}
        )
    )
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"phalanx.dev/pod-group": group.name}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    with pytest.raises(kopf.AdmissionError) as refused:
        Webhooks(context).gate_pod(body=kopf.Body(pod), patch=kopf.Patch(), warnings=[])
    assert f"PodGroup {group.name!r} is in namespace other, not ml" in str(refused.value)


@pytest.mark.parametrize(
    ("live", "gated"),
    [
        (200, True),  # the group was created in ml just now: the cache has not seen it yet
        (404, False),  # ml has no such group: the cache's refusal stands
        (500, False),  # the API cannot say: the cache's refusal stands
    ],
)
async def test_a_refusal_for_a_group_known_only_elsewhere_is_confirmed_live(live: int, gated: bool) -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from phalanx.controller.apply.kube import Kube
    from phalanx.kubeclient import ApiClient, Credentials

    context = StaticContext(cache_primed=True)
    group = group_of(job_body("train"))
    context.cache.pod_groups.put(
        group.__class__(
            **{**{f: getattr(group, f) for f in group.__slots__}, "namespace": "other", "owner_uid": ""}
        )
    )
    asked: list[str] = []

    async def list_pod_groups(request: web.Request) -> web.Response:
        asked.append(request.path)
        if live == 500:
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        items = [{"metadata": {"name": group.name, "namespace": "ml"}}] if live == 200 else []
        return web.json_response({"kind": "PodGroupList", "items": items})

    app = web.Application()
    app.router.add_get("/apis/scheduling.phalanx.dev/v1beta1/namespaces/ml/podgroups", list_pod_groups)
    server = TestServer(app)
    await server.start_server()
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"phalanx.dev/pod-group": group.name}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    patch = kopf.Patch()
    try:
        async with ApiClient(Credentials(server=str(server.make_url("")).rstrip("/"), source="test")) as api:
            context.kube = Kube(api)
            if gated:
                await Webhooks(context).gate_pod_confirmed(body=kopf.Body(pod), patch=patch, warnings=[])
            else:
                with pytest.raises(kopf.AdmissionError, match="is in namespace other, not ml"):
                    await Webhooks(context).gate_pod_confirmed(body=kopf.Body(pod), patch=patch, warnings=[])
    finally:
        await server.close()
    assert asked == ["/apis/scheduling.phalanx.dev/v1beta1/namespaces/ml/podgroups"]
    assert (patch.get("spec", {}).get("schedulingGates") == [{"name": "phalanx.dev/admission"}]) is gated


# ---------------------------------------------------------------------- a gate removed by someone else
def test_a_pod_that_lost_phalanxs_gate_to_someone_else_is_reported_once() -> None:
    from testkit import NOW, cluster, only, pod_body

    from phalanx.controller.model.actions import PostEvent, RememberAnnounced
    from phalanx.controller.plan import plan

    job = job_body("train", 4)
    pods = [pod_body("train", i) for i in range(3)]
    pods.append(pod_body("train", 3, gated=False, node="n8", phase="Running"))  # ungated, unpinned: not ours
    result = plan(cluster([(job, group_of(job), pods)]), NOW)
    (said,) = [e for e in only(result.actions, PostEvent) if e.reason == "GateRemoved"]
    assert said.involved.kind == "Job" and said.type == "Warning"
    assert said.message.startswith(
        "1 pod(s) of the Job's gang lost the phalanx.dev/admission scheduling gate to someone else before "
        "Phalanx admitted them (train-3)"
    )
    (note,) = only(result.actions, RememberAnnounced)
    again = plan(cluster([(job, group_of(job), pods)], announced={note.key: note.message}), NOW)
    assert not [e for e in only(again.actions, PostEvent) if e.reason == "GateRemoved"]
    released = [pod_body("train", i, gated=False, released_to=f"n{i + 1}", group="x") for i in range(4)]
    fine = plan(cluster([(job, group_of(job), released)]), NOW)
    assert not [e for e in only(fine.actions, PostEvent) if e.reason == "GateRemoved"]
