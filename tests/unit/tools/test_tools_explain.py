"""`phalanx explain`: the pure parts (verdict, placement per domain, what blocks each node) on plain dicts."""

from __future__ import annotations

from typing import Any

import pytest
from tools_testkit import (
    FIVE_BUSY,
    GROUP_NAME,
    LB,
    NB,
    NS,
    UNSCHEDULABLE,
    condition,
    fillers,
    job_pod,
    managed_job,
    pod_group,
    seed_nodes,
)

from phalanx.api.cluster_objects import node_info
from phalanx.placement import GroupRequest, PodRequest, pod_requirements
from phalanx.tools.explain import (
    MAX_DOMAINS,
    Facts,
    Target,
    analyze,
    explain,
    format_amount,
    parse_target,
    verdict,
)
from phalanx.tools.view import PodView, snapshot_of

JOB = Target("job", "gang-4")


def facts(
    *,
    job: dict[str, Any] | None = None,
    group: dict[str, Any] | None = None,
    group_pods: list[dict[str, Any]] | None = None,
    busy: tuple[str, ...] = FIVE_BUSY,
    nodes: list[dict[str, Any]] | None = None,
    target: Target = JOB,
) -> Facts:
    mine = group_pods if group_pods is not None else [job_pod("gang-4", i) for i in range(4)]
    others = fillers(*busy)
    live = [p for p in mine if p["status"]["phase"] not in ("Succeeded", "Failed")]
    return Facts(target, NS, job, group, mine, nodes or seed_nodes(), others + live)


# ---------------------------------------------------------------------- the article's waiting gang


def test_a_waiting_gang_names_the_closest_domain_and_the_resource_that_blocks() -> None:
    text = explain(facts(job=managed_job(), group=pod_group()))
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
        "  nb-a: 3 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free",
        "  nb-b: 0 of 4 pods fit; was-worker5, was-worker6, was-worker7 and was-worker8 have "
        "0 of 8 nvidia.com/gpu free",
    ]


def test_the_same_gang_asked_of_a_podgroup_reads_the_same() -> None:
    by_group = explain(facts(job=managed_job(), group=pod_group(), target=Target("podgroup", GROUP_NAME)))
    assert by_group.startswith(f"podgroup/{GROUP_NAME} in namespace {NS}: waiting: no {NB} domain")
    assert "  nb-a: 3 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free" in by_group


def test_without_a_topology_key_the_whole_cluster_is_one_placement() -> None:
    text = explain(facts(job=managed_job(key=None), group=pod_group(key=None)))
    assert "waiting: the cluster has room for 3 of the 4 pods the gang needs at once" in text
    assert "(Gang, minCount 4, no topology key)" in text
    assert (
        "  all nodes: 3 of 4 pods fit; was-worker, was-worker5, was-worker6, was-worker7 and was-worker8 "
        "have 0 of 8 nvidia.com/gpu free"
    ) in text


def test_local_blocks_are_ranked_by_pods_that_fit_then_name() -> None:
    text = explain(facts(job=managed_job(key=LB), group=pod_group(key=LB), busy=("was-worker",)))
    placement = text.split("\n\n")[1].splitlines()[1:]
    assert placement == [
        "  lb-a2: 2 of 4 pods fit",
        "  lb-b1: 2 of 4 pods fit",
        "  lb-b2: 2 of 4 pods fit",
        "  lb-a1: 1 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free",
    ]
    assert f"no {LB} domain has room for 4 pods at once; the closest is lb-a2, with room for 2" in text


def test_a_gang_that_fits_now_says_phalanx_admits_it_at_its_next_pass() -> None:
    text = explain(facts(job=managed_job(), group=pod_group(), busy=("was-worker5",)))
    first = text.splitlines()[0]
    assert first.startswith(
        f"job/gang-4 in namespace {NS}: waiting: it fits now: 4 pods in {NB}=nb-a on "
        "was-worker, was-worker2, was-worker3, was-worker4; Phalanx admits it at its next scheduling pass"
    )
    assert "  nb-a: 4 of 4 pods fit" in text
    assert "  nb-b: 3 of 4 pods fit; was-worker5 has 0 of 8 nvidia.com/gpu free" in text


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
    text = explain(facts(job=managed_job(), group=group, group_pods=pods, busy=()))
    assert text.splitlines()[0] == f"job/gang-4 in namespace {NS}: admitted in {NB}=nb-a: 4 of 4 pods bound"
    assert "  Phase: Running, domain nb-a" in text
    assert "  Admitted: True (Admitted)" in text
    assert "  PodGroupInitiallyScheduled: True (Scheduled)" in text
    assert "Placement now" not in text


def test_released_pods_not_yet_bound_are_counted_as_released() -> None:
    pods = [job_pod("gang-4", i, gated=False) for i in range(2)]
    for pod, node in zip(pods, ("was-worker", "was-worker2"), strict=True):
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        pod["metadata"]["labels"]["phalanx.dev/pod-group"] = GROUP_NAME
    group = pod_group(2, phase="Admitted", conditions=[condition("Admitted", "True", "Admitted")])
    text = explain(facts(job=managed_job(count=2), group=group, group_pods=pods, busy=()))
    assert ": admitted: 0 of 2 pods bound, 2 released to their nodes for kube-scheduler to bind" in text
    assert "  Pods: 2 (0 bound, 2 released, 0 held by phalanx.dev/admission)" in text


def test_a_job_without_the_label_is_not_managed() -> None:
    pods = [job_pod("gang-4", i, gated=False) for i in range(4)]
    text = explain(facts(job=managed_job(managed=False), group=None, group_pods=pods))
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


def test_without_a_podgroup_yet_the_placement_comes_from_the_job_annotations() -> None:
    text = explain(facts(job=managed_job(), group=None))
    assert text.splitlines()[0].startswith(f"job/gang-4 in namespace {NS}: waiting: no {NB} domain has room")
    assert f"  PodGroup: none yet (Gang, minCount 4, topology {NB})" in text
    assert "  nb-a: 3 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free" in text


def test_too_few_pods_say_the_job_has_not_created_them() -> None:
    message = (
        "minCount (4) is not yet satisfied: 0 scheduled, 2 waiting; "
        "waiting for the Job to create the other pods"
    )
    group = pod_group(
        phase="WaitingForPods", conditions=[condition("Admitted", "False", "WaitingForPods", message)]
    )
    pods = [job_pod("gang-4", i) for i in range(2)]
    text = explain(facts(job=managed_job(), group=group, group_pods=pods))
    assert text.splitlines()[0] == f"job/gang-4 in namespace {NS}: waiting (WaitingForPods): {message}"


def test_suspended_and_finished_jobs_hold_nothing() -> None:
    job = managed_job()
    job["spec"]["suspend"] = True
    group = pod_group(phase="Suspended", conditions=[condition("Admitted", "False", "Suspended", "")])
    text = explain(facts(job=job, group=group, group_pods=[]))
    assert ": suspended: the Job is suspended (spec.suspend), so nothing is held for it" in text
    assert "Placement now" not in text

    done = managed_job()
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 4}
    pods = [job_pod("gang-4", i, gated=False, node="was-worker", phase="Succeeded") for i in range(4)]
    group = pod_group(phase="Finished", conditions=[condition("Admitted", "False", "Finished", "succeeded")])
    text = explain(facts(job=done, group=group, group_pods=pods, busy=()))
    assert ": finished: the Job succeeded" in text
    assert "  Pods: 0 (0 bound, 0 released, 0 held by phalanx.dev/admission, 4 succeeded)" in text
    assert "(Gang, minCount 4, 1 now: the Job's last pods, topology" in text


def test_other_controllers_gates_are_named() -> None:
    message = "minCount (4) is not yet satisfied: 4 pod(s) still carry scheduling gates of other controllers"
    group = pod_group(conditions=[condition("Admitted", "False", "WaitingForGates", message)])
    pods = [job_pod("gang-4", i, extra_gates=("example.com/quota",)) for i in range(4)]
    text = explain(facts(job=managed_job(), group=group, group_pods=pods))
    assert f": waiting (WaitingForGates): {message}" in text
    assert "(4 also carry example.com/quota)" in text


def test_invalid_annotations_are_said() -> None:
    job = managed_job(**{"phalanx.dev/min-count": "abc"})
    text = explain(facts(job=job, group=None))
    assert (
        ": Phalanx cannot schedule it: its annotations are invalid: "
        'metadata.annotations[phalanx.dev/min-count]: "abc" is not an integer' in text
    )


# ---------------------------------------------------------------------- why a node takes no pod


def nodes_with(change: dict[str, Any]) -> list[dict[str, Any]]:
    """Seed nodes; `change` maps a node name to a function that edits its dict."""
    nodes = seed_nodes()
    for node in nodes:
        edit = change.get(node["metadata"]["name"])
        if edit:
            edit(node)
    return nodes


def placement_lines(text: str) -> list[str]:
    return text.split("\n\n")[1].splitlines()[1:]


def test_not_ready_cordoned_and_tainted_nodes_say_so() -> None:
    def not_ready(n: dict[str, Any]) -> None:
        n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    def cordoned(n: dict[str, Any]) -> None:
        n["spec"]["unschedulable"] = True

    def tainted(n: dict[str, Any]) -> None:
        n["spec"]["taints"] = [{"key": "example.com/failed", "value": "true", "effect": "NoExecute"}]

    nodes = nodes_with({"was-worker2": not_ready, "was-worker3": cordoned, "was-worker4": tainted})
    text = explain(facts(job=managed_job(), group=pod_group(), busy=FIVE_BUSY, nodes=nodes))
    line = placement_lines(text)[0]
    assert "was-worker2 is not Ready" in line
    assert "was-worker3 is cordoned" in line
    assert line.endswith("; 1 more node takes none for other reasons")  # 3 reasons at most per domain
    assert f"no {NB} domain has room for 4 pods at once, nor for even one of them" in text


def test_an_untolerated_taint_and_a_selector_mismatch() -> None:
    def tainted(n: dict[str, Any]) -> None:
        n["spec"]["taints"] = [{"key": "example.com/failed", "value": "true", "effect": "NoExecute"}]

    nodes = nodes_with({"was-worker2": tainted})
    pods = [job_pod("gang-4", i) for i in range(4)]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {"example.com/pool": "a"}
    text = explain(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=(), nodes=nodes))
    assert "(each pod asks for nvidia.com/gpu 8, nodeSelector example.com/pool=a)" in text
    lines = placement_lines(text)
    assert lines[0] == (
        "  nb-a: 0 of 4 pods fit; was-worker, was-worker3 and was-worker4 do not match nodeSelector "
        "example.com/pool=a; was-worker2 has the taint example.com/failed=true:NoExecute, not tolerated; "
        "does not match nodeSelector example.com/pool=a"
    )


def test_a_resource_no_node_offers() -> None:
    pods = [job_pod("gang-4", i) for i in range(4)]
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/fpga": "1"}
    text = explain(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=()))
    assert placement_lines(text)[0] == (
        "  nb-a: 0 of 4 pods fit; was-worker, was-worker2, was-worker3 and was-worker4 "
        "have no example.com/fpga"
    )


def test_pods_already_placed_pin_the_domain() -> None:
    pods = [job_pod("gang-4", 0, gated=False, node="was-worker2", phase="Running")]
    pods += [job_pod("gang-4", i) for i in range(1, 4)]
    group = pod_group(conditions=[condition("Admitted", "False", "Unschedulable", "x")])
    text = explain(facts(job=managed_job(), group=group, group_pods=pods, busy=("was-worker", "was-worker3")))
    assert (
        f"waiting: its 1 placed pod hold it in {NB}=nb-a, which has room for 1 of the 3 more it needs" in text
    )
    assert placement_lines(text) == [
        "  1 pod of the gang already run in nb-a: only it is considered",
        "  nb-a: 1 of 3 pods fit; was-worker, was-worker2 and was-worker3 have 0 of 8 nvidia.com/gpu free",
    ]


def test_a_key_no_node_has() -> None:
    key = "topology.kubernetes.io/zone"
    text = explain(facts(job=managed_job(key=key), group=pod_group(key=key), busy=()))
    assert f"waiting: no node has the label {key}, so there is no domain to place the gang in" in text


def test_pods_of_different_shapes_are_counted_by_the_engine_per_domain() -> None:
    pods = [job_pod("gang-4", 0, gpus="8"), job_pod("gang-4", 1, gpus="8"), job_pod("gang-4", 2, gpus="4")]
    pods.append(job_pod("gang-4", 3, gpus="4"))
    text = explain(facts(job=managed_job(), group=pod_group(), group_pods=pods, busy=FIVE_BUSY))
    assert "(each pod asks for 2 × nvidia.com/gpu 8; 2 × nvidia.com/gpu 4)" in text
    assert placement_lines(text) == [
        "  nb-a: 4 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free",
        "  nb-b: 0 of 4 pods fit; was-worker5, was-worker6, was-worker7 and was-worker8 have "
        "0 of 8 nvidia.com/gpu free",
    ]
    assert ": waiting: it fits now: 4 pods in" in text


def test_many_domains_are_cut_to_the_best_ones() -> None:
    nodes = seed_nodes()
    for i, node in enumerate(nodes):
        node["metadata"]["labels"]["rack"] = f"r{i}"
    text = explain(
        facts(job=managed_job(key="rack"), group=pod_group(key="rack"), nodes=nodes, busy=FIVE_BUSY)
    )
    lines = placement_lines(text)
    assert len(lines) == MAX_DOMAINS
    assert lines[:3] == ["  r1: 1 of 4 pods fit", "  r2: 1 of 4 pods fit", "  r3: 1 of 4 pods fit"]


def test_the_verdict_of_the_engine_matches_its_decision() -> None:
    nodes = [node_info(n) for n in seed_nodes()]
    snapshot = snapshot_of(nodes, [PodView.of(p) for p in fillers(*FIVE_BUSY)])
    req = pod_requirements({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]})
    group = GroupRequest("ml/g", tuple(PodRequest(f"p{i}", req) for i in range(4)), 4, NB)
    analysis = analyze(snapshot, group)
    assert [(d.domain, d.fit) for d in analysis.domains] == [("nb-a", 3), ("nb-b", 0)]
    assert analysis.decision.scheduled == 3  # type: ignore[union-attr]
    assert (
        verdict(analysis)
        == f"no {NB} domain has room for 4 pods at once; the closest is nb-a, with room for 3"
    )


# ---------------------------------------------------------------------- words


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
        ("podgroup/pg-1", "podgroup", "pg-1"),
        ("pg/pg-1", "podgroup", "pg-1"),
        ("podgroups.scheduling.phalanx.dev/pg-1", "podgroup", "pg-1"),
    ],
)
def test_targets(text: str, kind: str, name: str) -> None:
    target = parse_target(text)
    assert (target.kind, target.name) == (kind, name)
    assert str(target) == f"{kind}/{name}"


@pytest.mark.parametrize("text", ["gang-4", "job/", "pod/x", "job/a/b"])
def test_bad_targets_say_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match="job/NAME or podgroup/NAME"):
        parse_target(text)


def test_a_labelled_job_created_without_the_webhook_is_not_held() -> None:
    job = managed_job()
    job["spec"]["template"]["spec"] = {}
    pods = [job_pod("gang-4", i, gated=False, node="was-worker2", phase="Running") for i in range(4)]
    text = explain(facts(job=job, group=None, group_pods=pods))
    assert text.splitlines()[0] == (
        f"job/gang-4 in namespace {NS}: not held by Phalanx: its pod template has no phalanx.dev/admission "
        "gate, so Phalanx's webhook did not see its creation (was `phalanx run` installed then?); "
        "kube-scheduler places its pods one by one"
    )
    assert "Placement now" not in text


def test_a_field_the_engine_refuses_is_named_in_the_verdict() -> None:
    nodes = [node_info(n) for n in seed_nodes()]
    snapshot = snapshot_of(nodes, [])
    spec = {"containers": [{"name": "w"}], "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}
    req = pod_requirements(spec)
    group = GroupRequest("ml/g", tuple(PodRequest(f"p{i}", req) for i in range(2)), 2, NB)
    analysis = analyze(snapshot, group)
    assert analysis.decision.reason == "Unsupported"  # type: ignore[union-attr]
    assert "resourceClaims" in verdict(analysis)
