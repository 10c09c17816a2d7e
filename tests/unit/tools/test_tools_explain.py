"""`phalanx explain`: the pure parts (what the status says, the engine's diagnosis per domain, every slice of
a sliced Job, the JSON shape, the table of kinds) on plain dicts."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from tools_testkit import (
    COMPOSITE_NAME,
    FIVE_BUSY,
    GROUP_NAME,
    JOB_UID,
    LB,
    NB,
    NS,
    UNSCHEDULABLE,
    composite,
    condition,
    fillers,
    indexed_pod,
    job_pod,
    managed_job,
    pod_group,
    seed_nodes,
    slice_group,
)

from phalanx.api.cluster_objects import node_info
from phalanx.api.naming import pod_group_label_value
from phalanx.api.trainjob import runtime_patches
from phalanx.placement import GroupRequest, PodRequest, diagnose, pod_requirements
from phalanx.tools.explain import domain_text, explain, format_amount, render, to_json
from phalanx.tools.targets import (
    JOB,
    JOBSET,
    LEADER_WORKER_SET,
    OWNER_KINDS,
    TRAINJOB,
    Facts,
    Target,
    parse_target,
    target_forms,
)
from phalanx.tools.topologies import ClusterTopology
from phalanx.tools.view import PodView, snapshot_of

JOB_TARGET = Target("job", "gang-4")


def facts(
    *,
    job: dict[str, Any] | None = None,
    group: dict[str, Any] | None = None,
    group_pods: list[dict[str, Any]] | None = None,
    busy: tuple[str, ...] = FIVE_BUSY,
    nodes: list[dict[str, Any]] | None = None,
    target: Target = JOB_TARGET,
    composites: tuple[dict[str, Any], ...] = (),
    groups: tuple[dict[str, Any], ...] | None = None,
    topologies: tuple[ClusterTopology, ...] = (),
) -> Facts:
    mine = group_pods if group_pods is not None else [job_pod("gang-4", i) for i in range(4)]
    live = [p for p in mine if p["status"]["phase"] not in ("Succeeded", "Failed")]
    return Facts(
        target=target,
        namespace=NS,
        owner_kind=JOB if job is not None else None,
        owner=job,
        composites=composites,
        groups=groups if groups is not None else ((group,) if group is not None else ()),
        target_pods=tuple(mine),
        nodes=tuple(nodes or seed_nodes()),
        pods=tuple(fillers(*busy) + live),
        topologies=topologies,
    )


def text_of(f: Facts) -> str:
    return render(explain(f))


def placement_lines(text: str) -> list[str]:
    return text.split("\n\n")[1].splitlines()[1:]


# ---------------------------------------------------------------------- the article's waiting gang


def test_a_waiting_gang_names_the_closest_domain_in_the_engines_words() -> None:
    text = text_of(facts(job=managed_job(), group=pod_group()))
    assert text.splitlines() == [
        f"job/gang-4 in namespace {NS}: waiting: no {NB} domain has room for 4 pods at once; "
        "the closest is nb-a, with room for 3",
        f"  PodGroup: {GROUP_NAME} (Gang, minCount 4, topology {NB})",
        "  Phase: Unschedulable",
        "  Pods: 4 (0 bound, 0 released, 4 held by phalanx.dev/admission)",
        f"  Admitted: False (Unschedulable): {UNSCHEDULABLE}",
        f"  PodGroupInitiallyScheduled: False (Unschedulable): {UNSCHEDULABLE}",
        "",
        "Placement now, computed from 8 nodes and the 5 pods holding capacity "
        "(each pod asks for nvidia.com/gpu 8):",
        "  nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)",
        "  nb-b: 0 of 4 pods fit (4 nodes: Insufficient nvidia.com/gpu)",
    ]


def test_each_domain_line_is_the_diagnosis_the_conditions_carry() -> None:
    """One phrasing: every domain line is `Diagnosis.summary()` of that domain, and together they are the
    summary the controller appends to the Admitted condition."""
    nodes = [node_info(n) for n in seed_nodes()]
    snapshot = snapshot_of(nodes, [PodView.of(p) for p in fillers(*FIVE_BUSY)])
    req = pod_requirements({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]})
    request = GroupRequest(f"{NS}/gang-4", tuple(PodRequest(f"{NS}/p{i}", req) for i in range(4)), 4, NB)
    diagnosis = diagnose(snapshot, request)
    lines = placement_lines(text_of(facts(job=managed_job(), group=pod_group())))
    assert lines == [f"  {domain_text(diagnosis, r)}" for r in diagnosis.domains]
    assert "; ".join(line.strip() for line in lines) == diagnosis.summary()


def test_the_same_gang_asked_of_a_podgroup_reads_the_same() -> None:
    by_group = text_of(facts(job=managed_job(), group=pod_group(), target=Target("podgroup", GROUP_NAME)))
    assert by_group.startswith(f"podgroup/{GROUP_NAME} in namespace {NS}: waiting: no {NB} domain")
    assert "  nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in by_group


def test_without_a_topology_key_the_whole_cluster_is_one_placement() -> None:
    text = text_of(facts(job=managed_job(key=None), group=pod_group(key=None)))
    assert "waiting: the cluster has room for 3 of the 4 pods the gang needs at once" in text
    assert "(Gang, minCount 4, no topology key)" in text
    assert placement_lines(text) == ["  all nodes: 3 of 4 pods fit (5 nodes: Insufficient nvidia.com/gpu)"]


def test_a_gang_bigger_than_any_domain_can_never_fit() -> None:
    text = text_of(facts(job=managed_job(key=LB), group=pod_group(key=LB), busy=("was-worker",)))
    assert text.splitlines()[0].endswith(
        "waiting: it can never fit in this cluster: "
        "with every node empty the largest domain holds 2 of the 4 pods"
    )
    assert placement_lines(text) == ["  lb-a2: 2 of 4 pods fit", "  lb-b1: 2 of 4 pods fit"]


def test_a_gang_that_fits_now_says_phalanx_admits_it_at_its_next_pass() -> None:
    text = text_of(facts(job=managed_job(), group=pod_group(), busy=("was-worker5",)))
    assert text.splitlines()[0] == (
        f"job/gang-4 in namespace {NS}: waiting: it fits now: 4 pods in {NB}=nb-a on "
        "was-worker, was-worker2, was-worker3, was-worker4; Phalanx admits it at its next scheduling pass "
        "(if it keeps waiting, check that `phalanx run` is running)"
    )
    assert "Placement now" not in text


# ---------------------------------------------------------------------- what the status says


def test_an_admitted_gang_says_admitted_with_its_domain_and_no_placement_section() -> None:
    pods = [job_pod("gang-4", i, gated=False, node=f"was-worker{i + 1}", phase="Running") for i in range(4)]
    pods[0]["spec"]["nodeName"] = "was-worker"
    group = pod_group(
        phase="Running",
        domain="nb-a",
        conditions=[
            condition("PodGroupInitiallyScheduled", "True", "Scheduled"),
            condition("Admitted", "True", "Admitted"),
        ],
    )
    result = explain(facts(job=managed_job(), group=group, group_pods=pods, busy=()))
    text = render(result)
    assert text.splitlines()[0] == f"job/gang-4 in namespace {NS}: admitted in {NB}=nb-a: 4 of 4 pods bound"
    assert "  Phase: Running, domain nb-a" in text
    assert "  Admitted: True (Admitted)" in text
    assert "  PodGroupInitiallyScheduled: True (Scheduled)" in text
    assert "Placement now" not in text
    assert result.state == "admitted" and result.placement is None


def test_an_admitted_gang_with_a_member_that_completed_counts_it() -> None:
    """Index 0 succeeded, 3 run: the gang of 4 is whole, and the summary says so (not "3 of 3")."""
    pods = [job_pod("gang-4", i, gated=False, node=f"was-worker{i + 1}", phase="Running") for i in range(4)]
    pods[0]["status"]["phase"] = "Succeeded"
    group = pod_group(phase="Running", domain="nb-a", conditions=[condition("Admitted", "True", "Admitted")])
    text = render(explain(facts(job=managed_job(), group=group, group_pods=pods, busy=())))
    assert text.splitlines()[0] == (
        f"job/gang-4 in namespace {NS}: admitted in {NB}=nb-a: 3 of 3 pods bound, 1 more succeeded (they "
        "count toward the gang)"
    )
    assert "  Pods: 3 (3 bound, 0 released, 0 held by phalanx.dev/admission, 1 succeeded)" in text


def test_released_pods_not_yet_bound_are_counted_as_released() -> None:
    pods = [job_pod("gang-4", i, gated=False) for i in range(2)]
    for pod, node in zip(pods, ("was-worker", "was-worker2"), strict=True):
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        pod["metadata"]["labels"]["phalanx.dev/pod-group"] = GROUP_NAME
    group = pod_group(2, phase="Admitted", conditions=[condition("Admitted", "True", "Admitted")])
    text = text_of(facts(job=managed_job(count=2), group=group, group_pods=pods, busy=()))
    assert ": admitted: 0 of 2 pods bound, 2 released to their nodes for kube-scheduler to bind" in text
    assert "  Pods: 2 (0 bound, 2 released, 0 held by phalanx.dev/admission)" in text


def test_a_job_without_the_label_is_not_managed() -> None:
    pods = [job_pod("gang-4", i, gated=False) for i in range(4)]
    result = explain(facts(job=managed_job(managed=False), group=None, group_pods=pods))
    text = render(result)
    assert text.splitlines()[0] == (
        f"job/gang-4 in namespace {NS}: not managed by Phalanx: the Job has no label "
        "phalanx.dev/managed=true, so kube-scheduler places its pods one by one "
        "(`kubectl describe pod` says why one waits)"
    )
    assert (
        "  Pods: 4 (0 bound, 0 released, 0 held by phalanx.dev/admission, 4 pending in kube-scheduler)"
        in text
    )
    assert "Placement now" not in text
    assert result.state == "not-managed"


def test_without_a_podgroup_yet_the_placement_comes_from_the_job_annotations() -> None:
    text = text_of(facts(job=managed_job(), group=None))
    assert text.splitlines()[0].startswith(f"job/gang-4 in namespace {NS}: waiting: no {NB} domain has room")
    assert f"  PodGroup: none yet (Gang, minCount 4, topology {NB})" in text
    assert "  nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in text


def test_too_few_pods_say_the_job_has_not_created_them() -> None:
    message = (
        "minCount (4) is not yet satisfied: 0 scheduled, 2 waiting; "
        "waiting for the Job to create the other pods"
    )
    group = pod_group(
        phase="WaitingForPods", conditions=[condition("Admitted", "False", "WaitingForPods", message)]
    )
    pods = [job_pod("gang-4", i) for i in range(2)]
    text = text_of(facts(job=managed_job(), group=group, group_pods=pods))
    assert text.splitlines()[0] == f"job/gang-4 in namespace {NS}: waiting (WaitingForPods): {message}"


def test_suspended_and_finished_jobs_hold_nothing() -> None:
    job = managed_job()
    job["spec"]["suspend"] = True
    group = pod_group(phase="Suspended", conditions=[condition("Admitted", "False", "Suspended", "")])
    text = text_of(facts(job=job, group=group, group_pods=[]))
    assert ": suspended: the Job is suspended (spec.suspend), so nothing is held for it" in text
    assert "Placement now" not in text

    done = managed_job()
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 4}
    pods = [job_pod("gang-4", i, gated=False, node="was-worker", phase="Succeeded") for i in range(4)]
    group = pod_group(phase="Finished", conditions=[condition("Admitted", "False", "Finished", "succeeded")])
    text = text_of(facts(job=done, group=group, group_pods=pods, busy=()))
    assert ": finished: the Job succeeded" in text
    assert "  Pods: 0 (0 bound, 0 released, 0 held by phalanx.dev/admission, 4 succeeded)" in text
    assert "(Gang, minCount 4, 1 now: the last pods, topology" in text


def test_other_controllers_gates_are_named() -> None:
    message = "minCount (4) is not yet satisfied: 4 pod(s) still carry scheduling gates of other controllers"
    group = pod_group(conditions=[condition("Admitted", "False", "WaitingForGates", message)])
    pods = [job_pod("gang-4", i, extra_gates=("example.com/quota",)) for i in range(4)]
    text = text_of(facts(job=managed_job(), group=group, group_pods=pods))
    assert f": waiting (WaitingForGates): {message}" in text
    assert "(4 also carry example.com/quota)" in text


def test_invalid_annotations_are_said() -> None:
    job = managed_job(**{"phalanx.dev/min-count": "abc"})
    result = explain(facts(job=job, group=None))
    assert result.state == "invalid"
    assert (
        ": Phalanx cannot schedule it: its annotations are invalid: "
        'metadata.annotations[phalanx.dev/min-count]: "abc" is not an integer' in render(result)
    )


def test_a_labelled_job_created_without_the_webhook_is_not_held() -> None:
    job = managed_job()
    job["spec"]["template"]["spec"] = {}
    pods = [job_pod("gang-4", i, gated=False, node="was-worker2", phase="Running") for i in range(4)]
    text = text_of(facts(job=job, group=None, group_pods=pods))
    assert text.splitlines()[0] == (
        f"job/gang-4 in namespace {NS}: not held by Phalanx: its pod template has no phalanx.dev/admission "
        "gate, so Phalanx's webhook did not see its creation (was `phalanx run` installed then?); "
        "kube-scheduler places its pods one by one"
    )
    assert "Placement now" not in text


# ---------------------------------------------------------------------- the engine's reasons, per domain


def nodes_with(**change: Any) -> list[dict[str, Any]]:
    nodes = seed_nodes()
    for node in nodes:
        edit = change.get(node["metadata"]["name"].replace("-", "_"))
        if edit:
            edit(node)
    return nodes


def test_not_ready_cordoned_and_tainted_nodes_in_kube_schedulers_words() -> None:
    def not_ready(n: dict[str, Any]) -> None:
        n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    def cordoned(n: dict[str, Any]) -> None:
        n["spec"]["unschedulable"] = True

    def tainted(n: dict[str, Any]) -> None:
        n["spec"]["taints"] = [{"key": "example.com/failed", "value": "true", "effect": "NoExecute"}]

    nodes = nodes_with(was_worker2=not_ready, was_worker3=cordoned, was_worker4=tainted)
    text = text_of(facts(job=managed_job(), group=pod_group(), nodes=nodes))
    assert placement_lines(text)[0] == (
        "  nb-a: 0 of 4 pods fit (2 nodes: not ready or unschedulable, 1 node: untolerated taint, "
        "1 node: Insufficient nvidia.com/gpu)"
    )
    assert f"no {NB} domain has room for 4 pods at once, nor for even one of them" in text


def test_a_selector_no_node_matches() -> None:
    pods = [job_pod("gang-4", i) for i in range(4)]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {"example.com/pool": "a"}
    text = text_of(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=()))
    assert "(each pod asks for nvidia.com/gpu 8, nodeSelector example.com/pool=a)" in text
    assert (
        placement_lines(text)[0]
        == "  nb-a: 0 of 4 pods fit (4 nodes: node(s) didn't match Pod's node affinity/selector)"
    )
    assert "it can never fit in this cluster" in text.splitlines()[0]


def test_a_resource_no_node_offers() -> None:
    pods = [job_pod("gang-4", i) for i in range(4)]
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/fpga": "1"}
    text = text_of(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=()))
    assert placement_lines(text)[0] == "  nb-a: 0 of 4 pods fit (4 nodes: Insufficient example.com/fpga)"


def test_pods_already_placed_pin_the_domain() -> None:
    pods = [job_pod("gang-4", 0, gated=False, node="was-worker2", phase="Running")]
    pods += [job_pod("gang-4", i) for i in range(1, 4)]
    group = pod_group(conditions=[condition("Admitted", "False", "Unschedulable", "x")])
    text = text_of(facts(job=managed_job(), group=group, group_pods=pods, busy=("was-worker", "was-worker3")))
    assert (
        f"waiting: its 1 placed pod hold it in {NB}=nb-a, which has room for 1 of the 3 more it needs" in text
    )
    assert placement_lines(text) == [
        "  1 pod of the gang already run in nb-a: only it is considered",
        "  nb-a: 1 of 3 pods fit (3 nodes: Insufficient nvidia.com/gpu)",
    ]


def test_a_key_no_node_has_is_the_engines_message() -> None:
    key = "topology.kubernetes.io/zone"
    text = text_of(facts(job=managed_job(key=key), group=pod_group(key=key), busy=()))
    assert text.splitlines()[0].endswith(
        f"waiting: pod group is unschedulable, 0/0 placements are available: no node has the label {key}"
    )


def test_a_field_the_engine_refuses_is_named_in_its_words() -> None:
    pods = [job_pod("gang-4", i) for i in range(4)]
    for pod in pods:
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    text = text_of(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=()))
    first = text.splitlines()[0]
    assert "waiting: pod group is unschedulable: pod" in first and "resourceClaims" in first


def test_with_a_topology_domains_are_paths_of_its_levels() -> None:
    """A Topology listing the key makes its domains paths (nb-a/lb-a1), as the scheduling loop does."""
    topology = ClusterTopology("oci", (NB, LB), True)
    text = text_of(
        facts(job=managed_job(key=LB), group=pod_group(key=LB), busy=("was-worker",), topologies=(topology,))
    )
    assert placement_lines(text) == ["  nb-a/lb-a2: 2 of 4 pods fit", "  nb-b/lb-b1: 2 of 4 pods fit"]
    ignored = ClusterTopology("oci", (NB, LB), False)  # its Active condition says another one owns a label
    text = text_of(
        facts(job=managed_job(key=LB), group=pod_group(key=LB), busy=("was-worker",), topologies=(ignored,))
    )
    assert placement_lines(text) == ["  lb-a2: 2 of 4 pods fit", "  lb-b1: 2 of 4 pods fit"]


# ---------------------------------------------------------------------- the topology mode, as the loop has it


OCI = ClusterTopology("oci", (NB, LB), True)


def moded(mode: str, *, on_group: bool = True, busy: tuple[str, ...] = ()) -> Facts:
    """A 3-pod gang keyed to the local block (2 nodes each: it can never fit one), in topology mode `mode`
    (kept on its PodGroup as Phalanx writes it, or, `on_group` False, only on the Job: no group yet)."""
    job = managed_job(key=LB, count=3)
    job["metadata"]["annotations"]["phalanx.dev/topology-mode"] = mode
    group = pod_group(3, key=LB)
    group["metadata"]["annotations"] = {"phalanx.dev/topology-mode": mode}
    return facts(
        job=job,
        group=group if on_group else None,
        group_pods=[job_pod("gang-4", i) for i in range(3)],
        busy=busy,
        topologies=(OCI,),
    )


def test_topology_mode_auto_is_decided_at_the_level_the_engine_chooses() -> None:
    """The review's case: required, the gang never fits a local block; auto, the loop admits it in a network
    block (plan/decide.py passes the group's mode). explain says what the loop does."""
    required = explain(moded("required"))
    assert required.summary.startswith("waiting: it can never fit in this cluster")
    result = explain(moded("auto"))
    assert result.placement is not None and result.placement.fits
    assert result.summary == (
        f"waiting: it fits now: 3 pods in {NB}=nb-a on was-worker, was-worker2, was-worker3 (auto: 3 pods "
        f"can never fit one domain of {LB} (at most 2 do), so one domain of {NB} with the fewest domains of "
        f"{LB}); Phalanx admits it at its next scheduling pass (if it keeps waiting, check that "
        "`phalanx run` is running)"
    )
    assert f"(Gang, minCount 3, topology {LB} (auto))" in render(result)
    assert to_json(result)["groups"][0]["topologyMode"] == "auto"
    # Waiting at that level: the diagnosis is of its domains, with auto's note.
    busy = explain(moded("auto", busy=("was-worker", "was-worker3", "was-worker5", "was-worker7")))
    closest = "the closest is nb-a, with room for 2"
    assert busy.summary == f"waiting: no {NB} domain has room for 3 pods at once; {closest}"
    assert busy.placement is not None and not busy.placement.never_fits
    assert busy.placement.notes[0].startswith(f"auto: 3 pods can never fit one domain of {LB}")
    assert [d.domain for d in busy.placement.domains] == ["nb-a", "nb-b"]


def test_topology_mode_preferred_climbs_to_a_wider_level() -> None:
    result = explain(moded("preferred"))
    assert result.placement is not None and result.placement.fits
    assert result.summary.startswith(
        f"waiting: it fits now: 3 pods in {NB}=nb-a on was-worker, was-worker2, was-worker3 (topology mode "
        f"preferred: no domain of {LB} has room for it); Phalanx admits it"
    )
    # Anywhere when no wider domain has room either.
    spread = explain(moded("preferred", busy=("was-worker", "was-worker3", "was-worker5", "was-worker7")))
    assert spread.placement is not None
    assert spread.placement.assignments == (
        ("ml/gang-4-0-x0", "was-worker2"),
        ("ml/gang-4-1-x1", "was-worker4"),
        ("ml/gang-4-2-x2", "was-worker6"),
    )
    # Nowhere: not "never fits" (the whole cluster could hold it), the whole cluster's room.
    full = explain(moded("preferred", busy=tuple(f"was-worker{i}" for i in ("", 2, 3, 4, 5, 6, 7))))
    assert full.placement is not None and not full.placement.never_fits
    assert full.summary == (
        f"waiting: no domain of {LB} has room for 3 pods at once, nor does a wider level: the whole cluster "
        "has room for 1 of them"
    )


def test_without_a_podgroup_yet_the_mode_is_the_jobs() -> None:
    result = explain(moded("preferred", on_group=False))
    assert result.state == "waiting" and result.placement is not None and result.placement.fits
    assert f"in {NB}=nb-a" in result.summary and "topology mode preferred" in result.summary
    assert f"PodGroup: none yet (Gang, minCount 3, topology {LB} (preferred))" in render(result)
    auto = explain(moded("auto", on_group=False))
    assert auto.placement is not None and auto.placement.fits and "(auto: " in auto.summary


def test_the_domain_a_group_had_is_tried_first_as_the_loop_does() -> None:
    """status.lastDomain (a gang whose pods were made anew) is the engine's preferred_domain."""
    group = pod_group()
    group["status"]["lastDomain"] = "nb-b"
    result = explain(facts(job=managed_job(), group=group, busy=()))
    assert result.placement is not None
    assert {node for _, node in result.placement.assignments} == {
        "was-worker5",
        "was-worker6",
        "was-worker7",
        "was-worker8",
    }
    assert f"in {NB}=nb-b" in result.summary


def test_a_leaderworkersets_group_is_decided_in_the_mode_the_lws_says() -> None:
    """kinds/lws.py: a group's tree takes the LeaderWorkerSet's mode (its PodGroup keeps none)."""
    group = pod_group(3, key=LB)
    group["metadata"]["ownerReferences"] = [
        {"kind": LEADER_WORKER_SET.kind, "name": "serve", "uid": JOB_UID, "controller": True}
    ]
    label = pod_group_label_value(GROUP_NAME)
    pods = [job_pod("serve", i) for i in range(3)]
    for pod in pods:
        pod["metadata"]["labels"]["phalanx.dev/pod-group"] = label
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": LEADER_WORKER_SET.kind,
        "metadata": {
            "name": "serve",
            "namespace": NS,
            "uid": JOB_UID,
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": {"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "auto"},
        },
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": {}}}},
    }
    f = dataclasses.replace(
        facts(group=group, group_pods=pods, busy=(), topologies=(OCI,)),
        target=Target("leaderworkerset", "serve"),
        owner_kind=LEADER_WORKER_SET,
        owner=lws,
    )
    result = explain(f)
    assert result.placement is not None and result.placement.fits
    assert f"in {NB}=nb-a" in result.summary and "(auto: " in result.summary


# ---------------------------------------------------------------------- a sliced Job: every slice


def sliced_job() -> dict[str, Any]:
    job = managed_job("sliced-8", 8, **{"phalanx.dev/slice-size": "4", "phalanx.dev/slice-topology-key": LB})
    job["spec"]["completionMode"] = "Indexed"
    return job


def test_a_sliced_job_explains_every_slice_with_the_engines_verdict() -> None:
    pods = [indexed_pod("sliced-8", i) for i in range(8)]
    slices = (slice_group(0, 2), slice_group(1, 2))
    f = facts(
        job=sliced_job(),
        target=Target("job", "sliced-8"),
        composites=(composite(2),),
        groups=slices,
        group_pods=pods[:4],
        busy=("was-worker", "was-worker3", "was-worker5", "was-worker7"),
    )
    result = explain(f)
    text = render(result)
    print(text)
    lines = text.splitlines()
    assert lines[0].startswith(
        f"job/sliced-8 in namespace {NS}: waiting: composite group is unschedulable: "
        f"2 of 2 child groups must fit in one domain of {NB}"
    )
    assert f"  CompositePodGroup: {COMPOSITE_NAME} (Gang, minGroupCount 2, topology {NB})" in lines
    for i in (0, 1):
        assert f"  PodGroup: {COMPOSITE_NAME}-{i} (Gang, minCount 2, topology {LB})" in lines
    # Every slice has its pods (index // slice size) and the engine's words for it now.
    assert [r.pods.live for r in result.groups if r.pods] == [2, 2]
    assert all(r.now for r in result.groups)
    # The root's verdict is the first line; each slice says what the engine found for it.
    assert sum(line.startswith("    Now: ") for line in lines) == 2
    assert sum(line.startswith("    Pods: 2 (0 bound, 0 released, 2 held") for line in lines) == 2


def test_a_sliced_job_that_fits_now_says_so() -> None:
    pods = [indexed_pod("sliced-8", i) for i in range(4)]
    result = explain(
        facts(
            job=sliced_job(),
            target=Target("job", "sliced-8"),
            composites=(composite(2),),
            groups=(slice_group(0, 2), slice_group(1, 2)),
            group_pods=pods,
            busy=(),
        )
    )
    assert result.placement is not None and result.placement.fits
    assert result.summary.startswith(f"waiting: it fits now: 4 pods of 2 groups in {NB}=nb-")
    assert len(result.placement.assignments) == 4
    assert all(r.now and r.now.startswith("fits") for r in (*result.composites, *result.groups))


def test_a_tree_goes_back_to_the_domain_it_had_as_the_loop_does() -> None:
    """The root's status.lastDomain is the tree's preferred domain (plan/decide.py _composite_request)."""
    pods = [indexed_pod("sliced-8", i) for i in range(4)]
    root = composite(2)
    root["status"]["lastDomain"] = "nb-b"
    result = explain(
        facts(
            job=sliced_job(),
            target=Target("job", "sliced-8"),
            composites=(root,),
            groups=(slice_group(0, 2), slice_group(1, 2)),
            group_pods=pods,
            busy=(),
        )
    )
    assert result.summary.startswith(f"waiting: it fits now: 4 pods of 2 groups in {NB}=nb-b")


def test_slices_are_assigned_by_label_first_then_by_completion_index() -> None:
    slices = (slice_group(1, 2), slice_group(0, 2))  # any order: ranks come from the names
    labelled = indexed_pod("sliced-8", 0)
    labelled["metadata"]["labels"]["phalanx.dev/pod-group"] = f"{COMPOSITE_NAME}-1"
    views = [PodView.of(labelled), *(PodView.of(indexed_pod("sliced-8", i)) for i in (1, 2, 3, 9))]
    members = JOB.members(slices, views)
    assert {k: [p.name for p in v] for k, v in members.items()} == {
        f"{COMPOSITE_NAME}-1": ["sliced-8-0-x0", "sliced-8-2-x2", "sliced-8-3-x3"],
        f"{COMPOSITE_NAME}-0": ["sliced-8-1-x1"],
    }


# ---------------------------------------------------------------------- -o json


def test_the_json_shape_is_stable_and_complete() -> None:
    result = explain(facts(job=managed_job(), group=pod_group()))
    body = to_json(result)
    assert json.loads(json.dumps(body)) == body
    assert set(body) == {
        "kind",
        "version",
        "target",
        "state",
        "summary",
        "owner",
        "composites",
        "groups",
        "pods",
        "unassignedPods",
        "kueue",
        "otherGangs",
        "placement",
    }
    assert (body["kind"], body["version"], body["state"]) == ("Explanation", 1, "waiting")
    assert body["target"] == {"kind": "job", "name": "gang-4", "namespace": NS}
    assert body["owner"] == {"kind": "Job", "name": "gang-4", "managed": True}
    (group,) = body["groups"]
    assert group["name"] == GROUP_NAME and group["minCount"] == 4 and group["topologyKey"] == NB
    assert group["pods"]["gated"] == 4
    placement = body["placement"]
    assert placement["fits"] is False and placement["need"] == 4
    assert placement["domains"][0] == {
        "domain": "nb-a",
        "fit": 3,
        "reasons": [{"reason": "Insufficient nvidia.com/gpu", "nodes": 1}],
        "summary": "nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)",
    }
    admitted = explain(
        facts(
            job=managed_job(),
            group=pod_group(phase="Running", conditions=[condition("Admitted", "True", "Admitted")]),
        )
    )
    assert to_json(admitted)["placement"] is None


# ---------------------------------------------------------------------- words and targets


@pytest.mark.parametrize(
    ("resource", "amount", "text"),
    [
        ("cpu", 112000, "112"),
        ("cpu", 500, "500m"),
        ("memory", 2 * 2**40, "2Ti"),
        ("memory", 3 * 2**29, "1.5Gi"),
        ("memory", 512, "512"),
        ("hugepages-2Mi", 2**21, "2Mi"),
        ("nvidia.com/gpu", 8, "8"),
        ("pods", 110, "110"),
    ],
)
def test_amounts_read_as_written(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text


@pytest.mark.parametrize(
    ("text", "kind", "name"),
    [
        ("job/gang-4", "job", "gang-4"),
        ("jobs/gang-4", "job", "gang-4"),
        ("job.batch/gang-4", "job", "gang-4"),
        ("Job/gang-4", "job", "gang-4"),
        ("podgroup/pg-1", "podgroup", "pg-1"),
        ("pg/pg-1", "podgroup", "pg-1"),
        ("podgroups.scheduling.phalanx.dev/pg-1", "podgroup", "pg-1"),
        ("cpg/c-1", "compositepodgroup", "c-1"),
        ("compositepodgroups.scheduling.phalanx.dev/c-1", "compositepodgroup", "c-1"),
        ("jobset/train", "jobset", "train"),
        ("jobsets.jobset.x-k8s.io/train", "jobset", "train"),
        ("trainjob/llm", "trainjob", "llm"),
        ("trainjobs.trainer.kubeflow.org/llm", "trainjob", "llm"),
        ("lws/serve", "leaderworkerset", "serve"),
        ("leaderworkerset.leaderworkerset.x-k8s.io/serve", "leaderworkerset", "serve"),
    ],
)
def test_targets(text: str, kind: str, name: str) -> None:
    target = parse_target(text)
    assert (target.kind, target.name) == (kind, name)
    assert str(target) == f"{kind}/{name}"


@pytest.mark.parametrize("text", ["gang-4", "job/", "pod/x", "job/a/b", "podgroups.scheduling.k8s.io/x"])
def test_bad_targets_say_what_to_write(text: str) -> None:
    forms = (
        "job/NAME, jobset/NAME, trainjob/NAME, leaderworkerset/NAME, podgroup/NAME or compositepodgroup/NAME"
    )
    with pytest.raises(ValueError, match=forms):
        parse_target(text)


def test_every_owner_kind_is_a_complete_row() -> None:
    """The table the next kinds (TrainJob, JobSet, LeaderWorkerSet) are added to."""
    assert target_forms().startswith("job/NAME")
    words = [k.word for k in OWNER_KINDS]
    assert len(set(words)) == len(words)
    for row in OWNER_KINDS:
        assert row.word in row.aliases
        assert row.path("ml", "x").endswith(f"/namespaces/ml/{row.plural}/x")
    assert JOB.path("ml", "x") == "/apis/batch/v1/namespaces/ml/jobs/x"


# ---------------------------------------------------------------------- a reservation
def test_a_reservation_is_said_under_the_group_at_the_end_of_the_verdict_and_in_json() -> None:
    group = pod_group()
    group["status"]["reservation"] = {
        "domain": "nb-a",
        "nodes": ["was-worker", "was-worker2", "was-worker3", "was-worker4"],
        "victims": [],
        "reservedAt": "2026-11-30T12:01:00Z",
        "expiresAt": "2026-11-30T12:03:00Z",
        "cause": "BoundedWaiting",
        "waitingSince": "2026-11-30T12:00:00Z",
    }
    result = explain(facts(job=managed_job(), group=group))
    assert result.summary.endswith(
        "; a reservation holds room for it: 4 nodes in nb-a (was-worker, was-worker2, was-worker3, "
        "was-worker4) held for it (bounded waiting: it has waited since 2026-11-30T12:00:00Z, longer than "
        "--starvation-age); no later gang is placed on them until it is admitted"
    ), result.summary
    assert "  Reservation (BoundedWaiting): 4 nodes in nb-a" in render(result)
    (body,) = to_json(result)["groups"]
    assert body["reservation"] == {
        "cause": "BoundedWaiting",
        "domain": "nb-a",
        "nodes": ["was-worker", "was-worker2", "was-worker3", "was-worker4"],
        "victims": 0,
        "since": "2026-11-30T12:00:00Z",
        "until": "2026-11-30T12:03:00Z",
    }
    group["status"]["reservation"].update(cause=None, victims=["ns/low-0", "ns/low-1"])
    preempting = render(explain(facts(job=managed_job(), group=group)))
    assert "Reservation (Preemption): 4 nodes in nb-a" in preempting
    assert "being freed for it by preempting 2 pods, held until 2026-11-30T12:03:00Z" in preempting
    assert to_json(explain(facts(job=managed_job(), group=pod_group())))["groups"][0]["reservation"] is None


def test_a_trainjob_whose_jobset_trainer_has_not_made_points_at_the_trainjobs_events() -> None:
    """A managed TrainJob with no JobSet yet (Trainer's creation of it refused: Kueue TAS put in its runtime
    after the TrainJob's creation, say): no group and no pod; the reason is in Trainer's event on the
    TrainJob, not in Phalanx, so explain says where to look instead of blaming `phalanx run` only."""
    from phalanx.api.trainjob import runtime_patches
    from phalanx.tools.targets import TRAINJOB

    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "late",
            "namespace": NS,
            "uid": "uid-tj",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": {"phalanx.dev/topology-key": NB},
        },
        "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 4}},
    }
    body["spec"]["runtimePatches"] = runtime_patches(body)
    f = dataclasses.replace(
        facts(group_pods=[]), target=Target("trainjob", "late"), owner_kind=TRAINJOB, owner=body
    )
    assert text_of(f).splitlines()[0] == (
        f"trainjob/late in namespace {NS}: no PodGroup yet: Phalanx makes the TrainJob's groups once "
        "Kubeflow Trainer has made its JobSet; if Trainer cannot make it, the TrainJob's events say why "
        "(`kubectl describe trainjob late`: TrainJobResourcesCreationFailed); else check that `phalanx run` "
        "is running"
    )


# ---------------------------------------------------------------------- a staged JobSet (InOrder, dependsOn)
STAGED = "staged-6cfb45bcb4-staged-pgt-0-7455fdbf5d"
JOBSET_UID = "9a1c5e7b-0d2f-4c3a-8b6e-1f2a3b4c5d6e"


def _gpu_rjob(name: str, pods: int, **extra: Any) -> dict[str, Any]:
    spec = {
        "schedulingGates": [{"name": "phalanx.dev/admission"}],
        "containers": [{"name": "node", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    }
    job = {"parallelism": pods, "completions": pods, "template": {"spec": spec}}
    return {"name": name, "replicas": 1, "template": {"spec": job}, **extra}


def _mpi_jobset(launcher: dict[str, Any], *, in_order: bool = False) -> dict[str, Any]:
    """An MPI TrainJob's JobSet (runLauncherAsNode): three 8-GPU node pods, then an 8-GPU launcher."""
    spec: dict[str, Any] = {"replicatedJobs": [_gpu_rjob("node", 3), _gpu_rjob("launcher", 1, **launcher)]}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "staged",
            "namespace": NS,
            "uid": JOBSET_UID,
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": {"phalanx.dev/topology-key": NB},
        },
        "spec": spec,
    }


def _node_pod(index: int) -> dict[str, Any]:
    pod = indexed_pod("staged-node-0", index)
    pod["metadata"]["labels"].update(
        {
            "jobset.sigs.k8s.io/jobset-uid": JOBSET_UID,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
        }
    )
    return pod


def _staged_tree() -> tuple[dict[str, Any], tuple[dict[str, Any], ...]]:
    root = composite(2)
    root["metadata"]["name"] = STAGED
    root["metadata"]["ownerReferences"] = [
        {"kind": "JobSet", "name": "staged", "uid": JOBSET_UID, "controller": True}
    ]
    leaves = []
    for suffix, size in (("node-0", 3), ("launcher-0", 1)):
        leaf = pod_group(size, key=None)
        leaf["metadata"]["name"] = f"{STAGED}-{suffix}"
        leaf["metadata"]["ownerReferences"] = root["metadata"]["ownerReferences"]
        leaf["spec"]["parentCompositePodGroupName"] = STAGED
        leaves.append(leaf)
    return root, tuple(leaves)


@pytest.mark.parametrize(
    ("launcher", "in_order", "verdict", "launcher_now"),
    [
        pytest.param(
            {"dependsOn": [{"name": "node", "status": "Ready"}]},
            False,
            "1 of 2 child groups fit in nb-a",
            "0 of 1 pods fit (4 nodes: Insufficient nvidia.com/gpu)",
            id="dependsOn: the launcher's slot, as the loop decides it",
        ),
        pytest.param(
            {},
            True,
            "1 of 2 child groups fit in nb-a",
            "0 of 1 pods fit (4 nodes: Insufficient nvidia.com/gpu)",
            id="InOrder: the same",
        ),
        pytest.param(
            {},
            False,
            f"(too few pods in {STAGED}-launcher-0)",
            "not tried",
            id="not staged: its pods are all made at once, so a missing one is not made yet",
        ),
    ],
)
def test_a_staged_jobsets_later_stage_is_explained_by_its_slot_as_the_loop_places_it(
    launcher: dict[str, Any], in_order: bool, verdict: str, launcher_now: str
) -> None:
    """A staged JobSet (its launcher made once its three node pods are Ready, or InOrder) waits with only
    its first stage made: the loop decides the whole tree with a slot for each pod to come, shaped like its
    template (controller/plan/staging.py), and so does explain: it says the launcher's 8 GPUs fit nowhere
    beside the node pods (nb-a has three free nodes), as the groups' conditions do, not that pods are
    missing."""
    root, leaves = _staged_tree()
    body = _mpi_jobset(launcher, in_order=in_order)
    f = dataclasses.replace(
        facts(group_pods=[_node_pod(i) for i in range(3)], composites=(root,), groups=leaves),
        target=Target("jobset", "staged"),
        owner_kind=JOBSET,
        owner=body,
        jobset=body,
    )
    result = explain(f)
    print(render(result))
    assert result.summary.startswith(
        f"waiting: composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NB}"
    )
    assert verdict in result.summary
    now = {r.name.removeprefix(f"{STAGED}-"): r.now for r in result.groups}
    assert now["launcher-0"] == launcher_now
    assert [r.pods.live for r in result.groups if r.pods] == [3, 0]  # the slot is no pod of its counts


# ---------------------------------------------------------------------- a LeaderWorkerSet's LeaderReady group
LWS_UID = "5d2e8f1a-3b4c-4d6e-9f0a-1b2c3d4e5f6a"
SERVE = "serve-7d9f8c6b5a-serve-pgt-0-7455fdbf5d-0"
GPU_SPEC = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
CPU_SPEC = {"containers": [{"name": "l", "resources": {"requests": {"cpu": "1"}}}]}


def _lws(
    size: int, *, leader_ready: bool, leader: dict[str, Any] | None, subgroup: int | None
) -> dict[str, Any]:
    template: dict[str, Any] = {"size": size, "workerTemplate": {"spec": GPU_SPEC}}
    if leader is not None:
        template["leaderTemplate"] = {"spec": leader}
    annotations = {"phalanx.dev/topology-key": NB}
    if subgroup is not None:
        template["subGroupPolicy"] = {"subGroupSize": subgroup}
        annotations["phalanx.dev/slice-topology-key"] = LB
    spec: dict[str, Any] = {"replicas": 1, "leaderWorkerTemplate": template}
    if leader_ready:
        spec["startupPolicy"] = "LeaderReady"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": LEADER_WORKER_SET.kind,
        "metadata": {
            "name": "serve",
            "namespace": NS,
            "uid": LWS_UID,
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": annotations,
        },
        "spec": spec,
    }


def _lws_pod(worker: int, group: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Group 0's pod of worker index `worker` (0: the leader), gated, labelled with its PodGroup, with the
    tolerations the apiserver adds to every pod (DefaultTolerationSeconds), not to a template."""
    pod = job_pod("serve", worker)
    tolerations = [
        {
            "key": f"node.kubernetes.io/{t}",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
        for t in ("not-ready", "unreachable")
    ]
    pod["spec"] = {**spec, "tolerations": tolerations, "schedulingGates": [{"name": "phalanx.dev/admission"}]}
    pod["metadata"]["labels"] = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "phalanx.dev/pod-group": pod_group_label_value(group),
    }
    return pod


def _lws_groups(
    size: int, subgroup: int | None
) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """Group 0's PodGroup (composites none), or with subgroups its CompositePodGroup over one per subgroup."""
    owners = [{"kind": LEADER_WORKER_SET.kind, "name": "serve", "uid": LWS_UID, "controller": True}]
    if subgroup is None:
        group = pod_group(size)
        group["metadata"].update(name=SERVE, labels={}, ownerReferences=owners)
        return (), (group,)
    root = composite(size // subgroup)
    root["metadata"].update(name=SERVE, ownerReferences=owners)
    leaves = []
    for i in range(size // subgroup):
        leaf = pod_group(subgroup, key=LB)
        leaf["metadata"].update(name=f"{SERVE}-s{i}", labels={}, ownerReferences=owners)
        leaf["spec"]["parentCompositePodGroupName"] = SERVE
        leaves.append(leaf)
    return (root,), tuple(leaves)


@pytest.mark.parametrize(
    ("size", "leader_ready", "leader", "subgroup", "workers", "verdict", "lines", "target"),
    [
        *(
            pytest.param(
                4,
                True,
                None,
                None,
                (),
                f"no {NB} domain has room for 4 pods at once; the closest is nb-a, with room for 3",
                [
                    "(each pod asks for nvidia.com/gpu 8):\n  nb-a: 3 of 4 pods fit (1 node: Insufficient "
                    "nvidia.com/gpu)"
                ],
                target,
                id=why,
            )
            for target, why in (
                (
                    "leaderworkerset/serve",
                    "LeaderReady: the leader and its workers' slots, as the loop decides",
                ),
                (f"podgroup/{SERVE}", "the same, asked of its PodGroup"),
            )
        ),
        pytest.param(
            5,
            True,
            CPU_SPEC,
            None,
            (),
            f"no {NB} domain has room for 5 pods at once; the closest is nb-a, with room for 4",
            ["  nb-a: 4 of 5 pods fit\n  nb-b: 1 of 5 pods fit"],
            "leaderworkerset/serve",
            id="a CPU leader: the slots are shaped like the worker template (8 GPUs each)",
        ),
        pytest.param(
            5,
            True,
            CPU_SPEC,
            None,
            (1,),
            f"no {NB} domain has room for 5 pods at once; the closest is nb-a, with room for 4",
            ["(each pod asks for 1 × cpu 1; 4 × nvidia.com/gpu 8)"],
            "leaderworkerset/serve",
            id="a worker made already: slots for the three still to come",
        ),
        pytest.param(
            4,
            True,
            None,
            2,
            (),
            f"composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NB}; 1 of 2 "
            "child groups fit in nb-a",
            [
                # The leader and its slot go to lb-a2 (not the closest, lb-a1, with one free node); the
                # other subgroup finds no room left beside them.
                "    Now: fits in lb-a2, waits for the rest of the tree",
                "    Now: lb-a1: 1 of 2 pods fit (1 node: Insufficient nvidia.com/gpu); "
                "lb-a2: 0 of 2 pods fit (2 nodes: Insufficient nvidia.com/gpu)",
            ],
            "leaderworkerset/serve",
            id="subgroups: a slot in each PodGroup for its workers to come (leader and worker 1; 2 and 3)",
        ),
        pytest.param(
            4,
            False,
            None,
            None,
            (),
            "only 1 of its 4 pods exist (0 placed, 1 waiting); the gang starts when the rest have been "
            "created",
            [],
            "leaderworkerset/serve",
            id="not LeaderReady: LWS makes all its pods at once, so a missing one is not made yet",
        ),
    ],
)
def test_a_leader_ready_group_is_explained_with_its_workers_slots_as_the_loop_places_it(
    size: int,
    leader_ready: bool,
    leader: dict[str, Any] | None,
    subgroup: int | None,
    workers: tuple[int, ...],
    verdict: str,
    lines: list[str],
    target: str,
) -> None:
    """startupPolicy LeaderReady: LWS makes a group's workers once its leader is Ready, and the loop decides
    the whole group with the leader, a slot for each worker to come, shaped like the worker template
    (kinds/lws.py, controller/plan/staging.py); explain does too, so it says where the group does not fit
    (nb-a has three free 8-GPU nodes), as the group's condition does, not that pods are missing."""
    composites, groups = _lws_groups(size, subgroup)
    leaf_of = [g["metadata"]["name"] for g in groups for _ in range(subgroup or size)]
    pods = [
        _lws_pod(0, leaf_of[0], leader or GPU_SPEC),
        *(_lws_pod(w, leaf_of[w], GPU_SPEC) for w in workers),
    ]
    f = dataclasses.replace(
        facts(group_pods=pods, composites=composites, groups=groups),
        target=parse_target(target),
        owner_kind=LEADER_WORKER_SET,
        owner=_lws(size, leader_ready=leader_ready, leader=leader, subgroup=subgroup),
    )
    result = explain(f)
    text = render(result)
    print(text)
    assert result.summary.startswith(f"waiting: {verdict}")
    assert [line for line in lines if line not in text] == []
    assert result.pods.live == 1 + len(workers)  # the slots are no pods of its counts


# ---------------------------------------------------------------------- a TrainJob before its groups exist
def _trainjob(num_nodes: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "llm",
            "namespace": NS,
            "uid": "uid-tj",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": {"phalanx.dev/topology-key": NB},
        },
        "spec": {"runtimeRef": {"name": "mpi"}, "trainer": {"numNodes": num_nodes}},
    }
    body["spec"]["runtimePatches"] = runtime_patches(body)
    return body


def _trainjobs_jobset(rjobs: dict[str, int]) -> dict[str, Any]:
    """The JobSet Trainer made of the TrainJob (named as it, controlled by it), its replicated Jobs' pods
    as its runtime and `numNodes` size them."""
    body = _mpi_jobset({})
    body["metadata"].update(
        name="llm", ownerReferences=[{"kind": "TrainJob", "name": "llm", "uid": "uid-tj", "controller": True}]
    )
    body["spec"] = {"replicatedJobs": [_gpu_rjob(name, pods) for name, pods in rjobs.items()]}
    return body


NO_GROUP_YET = "no PodGroup yet: Phalanx creates one at its first pass after the creation"


@pytest.mark.parametrize(
    ("rjobs", "made", "summary", "spec"),
    [
        pytest.param(
            None,
            False,
            "no PodGroup yet: Phalanx makes the TrainJob's groups once Kubeflow Trainer has made its JobSet",
            "minCount not known until Kubeflow Trainer makes its JobSet (its runtime sizes it)",
            id="no JobSet yet: the runtime sizes it, so the size is not said",
        ),
        pytest.param(
            {"launcher": 1, "node": 4},
            False,
            NO_GROUP_YET,
            "minCount 5",
            id="an MPI runtime's launcher apart from its 4 nodes: 5 pods",
        ),
        pytest.param(
            {"launcher": 1, "node": 3},
            False,
            NO_GROUP_YET,
            "minCount 4",
            id="runLauncherAsNode: the launcher is one of the 4 nodes",
        ),
        pytest.param(
            {"dataset-initializer": 1, "model-initializer": 1, "node": 4},
            False,
            NO_GROUP_YET,
            "minCount 6",
            id="a runtime's other replicated Jobs (initializers) count too",
        ),
        pytest.param(
            {"launcher": 1, "node": 4},
            True,
            f"waiting: no {NB} domain has room for 5 pods at once; the closest is nb-a, with room for 4",
            "minCount 5",
            id="its pods made (a CPU launcher), no group yet: the engine runs for all 5, as the loop will",
        ),
    ],
)
def test_a_trainjob_before_its_groups_exist_counts_what_the_controller_will(
    rjobs: dict[str, int] | None, made: bool, summary: str, spec: str
) -> None:
    """A TrainJob of numNodes 4 with no PodGroup yet: the controller sizes its gang from the JobSet Trainer
    makes (every replicated Job's pods, an MPI launcher of its own included: numNodes + 1), not from
    numNodes; so does explain once the JobSet is there (with numNodes it said a 5-pod gang fits on four),
    and before that it says the size is not known."""
    jobset = None if rjobs is None else _trainjobs_jobset(rjobs)
    pods = [indexed_pod("llm-node-0", i) for i in range(4)] if made else []
    if made:  # nb-a has room for it beside three nodes: 4 of the 5 pods fit there
        pods.append(indexed_pod("llm-launcher-0", 0, gpus="0"))
    f = dataclasses.replace(
        facts(group_pods=pods),
        target=Target("trainjob", "llm"),
        owner_kind=TRAINJOB,
        owner=_trainjob(4),
        jobset=jobset,
    )
    text = text_of(f)
    print(text)
    assert text.splitlines()[0].startswith(f"trainjob/llm in namespace {NS}: {summary}")
    assert f"  PodGroup: none yet (Gang, {spec}, topology {NB})" in text.splitlines()


def test_an_admitted_leader_ready_group_says_how_many_of_its_pods_are_still_to_come() -> None:
    """The loop decided the group with its leader and holds its workers' room in slots (status.admission
    names the leader and three slots) until LWS makes them, once the leader is Ready: the group is
    admitted, and explain says so with the pods still to come — not "1 of 1 pods bound", which reads as if
    the gang were one pod."""
    _, (group,) = _lws_groups(4, None)
    leader = _lws_pod(0, SERVE, GPU_SPEC)
    leader["spec"].pop("schedulingGates")
    leader["spec"]["nodeName"] = "was-worker"
    leader["status"]["phase"] = "Running"
    group["status"] = {
        "phase": "Admitted",
        "policy": "Gang",
        "domain": "nb-a",
        "conditions": [
            condition(
                "Admitted", "True", "Admitted", "4 pod(s) admitted in nb-a (3 still to come, their room held)"
            )
        ],
        "admission": {
            "domain": "nb-a",
            "admittedAt": "2026-12-07T10:00:00Z",
            "assignments": [
                {"pod": "serve-0", "node": "was-worker"},
                *({"pod": f"{SERVE}-slot-{r}", "node": f"was-worker{r + 1}"} for r in (1, 2, 3)),
            ],
        },
    }
    f = dataclasses.replace(
        facts(group_pods=[leader], groups=(group,), busy=()),
        target=parse_target("leaderworkerset/serve"),
        owner_kind=LEADER_WORKER_SET,
        owner=_lws(4, leader_ready=True, leader=None, subgroup=None),
    )
    result = explain(f)
    assert result.state == "admitted"
    assert (
        result.summary == f"admitted in {NB}=nb-a: 1 of 1 pods bound, 3 more still to come (their room held)"
    )
    assert to_json(result)["groups"][0]["toCome"] == 3
