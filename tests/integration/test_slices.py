"""Slices on a stock cluster: the article's hand-made Workload, CompositePodGroup and PodGroups (Phalanx's
group; pods join with the phalanx.dev/pod-group label), placed whole by Phalanx."""

from __future__ import annotations

from typing import Any

import pytest

from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, bound, domains_of, hold, node_labels, wait_for

pytestmark = pytest.mark.integration

PHALANX_API = "scheduling.phalanx.dev/v1beta1"
SLICES = ("slices-0", "slices-1")


def workload(api_version: str = PHALANX_API) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": {"name": "slices"},
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "job",
                    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                    "schedulingConstraints": {"topology": [{"key": NB_KEY}]},
                    "podGroupTemplates": [
                        {
                            "name": "slice",
                            "schedulingPolicy": {"gang": {"minCount": 2}},
                            "schedulingConstraints": {"topology": [{"key": LB_KEY}]},
                        }
                    ],
                }
            ]
        },
    }


def composite(api_version: str = PHALANX_API) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "CompositePodGroup",
        "metadata": {"name": "slices"},
        "spec": {
            "workloadRef": {"workloadName": "slices", "templateName": "job"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "schedulingConstraints": {"topology": [{"key": NB_KEY}]},
        },
    }


def pod_group(name: str, api_version: str = PHALANX_API) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "parentCompositePodGroupName": "slices",
            "workloadRef": {"workloadName": "slices", "templateName": "slice"},
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": LB_KEY}]},
        },
    }


def slice_pod(group: str, i: int, *, upstream: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "worker", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU_KEY: "8"}}}
        ]
    }
    labels = {"app": "slices"}
    if upstream:
        spec["schedulingGroup"] = {"podGroupName": group}
    else:
        labels["phalanx.dev/pod-group"] = group
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{i}", "labels": labels},
        "spec": spec,
    }


def create_slices(ns: Namespace, *, upstream_api: str | None = None) -> None:
    """The article's objects, then its pods (two per slice)."""
    if upstream_api is None:
        for obj in (workload(), composite(), *(pod_group(g) for g in SLICES)):
            ns.create(obj)
    else:
        wl, cpg = upstream_api.split(",")
        ns.create(workload(wl))
        ns.create(composite(cpg))
        for g in SLICES:
            ns.create(pod_group(g, wl))
    for g in SLICES:
        for i in (0, 1):
            ns.create(slice_pod(g, i, upstream=upstream_api is not None))


def group(ns: Namespace, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = ns.get(f"/apis/{PHALANX_API}/namespaces/{{ns}}/{plural}/{name}")
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def wait_admitted_reason(ns: Namespace, plural: str, name: str, status: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        cond = condition(group(ns, plural, name), "Admitted")
        return cond if cond and (cond["status"], cond["reason"]) == (status, reason) else None

    return wait_for(f"{plural}/{name} Admitted={status} {reason}", probe, timeout=60)


def slice_pods(ns: Namespace) -> list[dict[str, Any]]:
    return ns.pods("app=slices")


def test_empty_cluster_each_slice_in_its_own_local_block_both_in_one_network_block(ns: Namespace) -> None:
    create_slices(ns)
    pods = wait_for("4 slice pods bound", lambda: ps if len(bound(ps := slice_pods(ns))) == 4 else None)
    print(ns.where("app=slices"))
    labels = node_labels(ns.api)
    by_group: dict[str, set[str]] = {}
    for p in pods:
        g = p["metadata"]["labels"]["phalanx.dev/pod-group"]
        by_group.setdefault(g, set()).add(labels[p["spec"]["nodeName"]][LB_KEY])
    assert all(len(blocks) == 1 for blocks in by_group.values()), by_group
    assert by_group["slices-0"] != by_group["slices-1"], by_group
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    cpg = wait_admitted_reason(ns, "compositepodgroups", "slices", "True", "Admitted")
    print(cpg["message"])
    root = group(ns, "compositepodgroups", "slices")
    assert root["status"]["admission"]["domain"] in {"nb-a", "nb-b"}
    assert len(root["status"]["admission"]["assignments"]) == 4  # the tree's decision, recorded whole
    initial = condition(root, "CompositePodGroupInitiallyScheduled")
    assert initial is not None and initial["status"] == "True"
    for g in SLICES:
        wait_admitted_reason(ns, "podgroups", g, "True", "Admitted")
        leaf = group(ns, "podgroups", g)
        assert leaf["status"]["domain"] in by_group[g]


def test_one_busy_node_in_three_local_blocks_the_whole_job_waits_with_the_reason_on_every_group(
    ns: Namespace,
) -> None:
    ns.fill("was-worker", "was-worker3", "was-worker5")  # lb-a1, lb-a2, lb-b1
    create_slices(ns)
    cpg = wait_admitted_reason(ns, "compositepodgroups", "slices", "False", "Unschedulable")
    print("CompositePodGroup/slices:", cpg["message"])
    assert cpg["message"].startswith(
        f"composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NB_KEY}"
    )
    assert "slices-0:" in cpg["message"] and "slices-1:" in cpg["message"]
    for g in SLICES:
        cond = wait_admitted_reason(ns, "podgroups", g, "False", "Unschedulable")
        print(f"PodGroup/{g}:", cond["message"])
        assert cond["message"].startswith(
            "pod group is unschedulable: CompositePodGroup slices cannot be placed whole"
        )
        assert f"{g}:" in cond["message"]
        upstream = condition(group(ns, "podgroups", g), "PodGroupInitiallyScheduled")
        assert upstream is not None and upstream["status"] == "False"
    hold("no slice pod bound", lambda: not bound(slice_pods(ns)), seconds=3)
    print(ns.where())
    warnings = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in ns.events()
        if e["type"] == "Warning" and e["reason"] == "Unschedulable"
    }
    assert ("CompositePodGroup", "slices") in warnings
    # Room in lb-b1 again: nb-b now holds a slice in each of its local blocks, and the whole tree goes.
    ns.unfill("was-worker5")
    pods = wait_for("4 slice pods bound", lambda: ps if len(bound(ps := slice_pods(ns))) == 4 else None)
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}
    print(ns.where("app=slices"))
