"""The article's two slice cases with hand-made objects, written once and run on both systems.

Upstream (`--mode upstream`): the article's objects as it wrote them — Workload and PodGroups in
`scheduling.k8s.io/v1beta1`, the CompositePodGroup in `scheduling.k8s.io/v1alpha3`, pods that join a
PodGroup with `spec.schedulingGroup.podGroupName`. Phalanx (stock cluster): the same objects in
`scheduling.phalanx.dev/v1beta1`, pods joining with the `phalanx.dev/pod-group` label (a stock apiserver has
no `spec.schedulingGroup`). `test_slices_upstream.py` runs them and asserts; `bench/comparison.py` runs them
for its slice rows of docs/comparison.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx.devcluster.cluster import ClusterState

from .kube import (
    GPU_KEY,
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    delete_namespace,
    hold,
    new_namespace,
    node_labels,
    wait_for,
)
from .scenarios import HOLD_SECONDS, Outcome, seconds

SLICES = ("slices-0", "slices-1")
BUSY = ("was-worker", "was-worker3", "was-worker5")  # one node in each of lb-a1, lb-a2, lb-b1
FREED = "was-worker5"  # frees lb-b1: then nb-b has room for a slice in each of its local blocks
RUNNING_TIMEOUT = 90.0
"""How long a scenario waits for the slices to run; not reaching it is an outcome, not a failure."""


@dataclass(frozen=True)
class SliceFlavor:
    """Where one system's objects live and how a pod joins a PodGroup."""

    name: str
    workload_api: str  # the Workload's and the PodGroups' group/version
    composite_api: str  # the CompositePodGroup's

    def group_path(self, plural: str, api: str | None = None) -> str:
        return f"/apis/{api or self.workload_api}/namespaces/{{ns}}/{plural}"

    def composite(self, ns: Namespace) -> dict[str, Any]:
        obj: dict[str, Any] = ns.get(self.group_path("compositepodgroups", self.composite_api) + "/slices")
        return obj

    def pod_group(self, ns: Namespace, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = ns.get(self.group_path("podgroups") + f"/{name}")
        return obj


UPSTREAM_SLICES = SliceFlavor("upstream", "scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3")
PHALANX_SLICES = SliceFlavor("phalanx", "scheduling.phalanx.dev/v1beta1", "scheduling.phalanx.dev/v1beta1")


def workload(api_version: str) -> dict[str, Any]:
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


def composite(api_version: str) -> dict[str, Any]:
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


def pod_group(name: str, api_version: str) -> dict[str, Any]:
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


def slice_pod(group: str, i: int, *, upstream: bool) -> dict[str, Any]:
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


def create_slices(ns: Namespace, flavor: SliceFlavor) -> float:
    """The article's objects, then its pods (two per slice); the monotonic time the last pod was created."""
    ns.create(workload(flavor.workload_api))
    ns.create(composite(flavor.composite_api))
    for g in SLICES:
        ns.create(pod_group(g, flavor.workload_api))
    for g in SLICES:
        for i in (0, 1):
            ns.create(slice_pod(g, i, upstream=flavor is UPSTREAM_SLICES))
    return time.monotonic()


def slice_pods(ns: Namespace) -> list[dict[str, Any]]:
    return ns.pods("app=slices")


def group_of(pod: dict[str, Any]) -> str:
    """The PodGroup a pod joined: upstream's spec.schedulingGroup, or Phalanx's label."""
    joined = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
    return str(joined or pod["metadata"]["labels"]["phalanx.dev/pod-group"])


def conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions(obj) if c["type"] == kind), None)


def said(obj: dict[str, Any]) -> str:
    """The conditions of a group as `type=status/reason`, or that it has none."""
    found = [f"{c['type']}={c['status']}/{c.get('reason', '')}" for c in conditions(obj)]
    return ", ".join(found) if found else "no condition"


def wait_running(ns: Namespace, since: float) -> float | None:
    """Seconds from `since` until all 4 slice pods are Running; None if not within RUNNING_TIMEOUT."""

    def probe() -> bool:
        pods = slice_pods(ns)
        return len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)

    try:
        left = max(since + RUNNING_TIMEOUT - time.monotonic(), 1.0)
        wait_for("all 4 slice pods Running", probe, timeout=left)
    except AssertionError:
        return None
    return time.monotonic() - since


def settled(flavor: SliceFlavor, ns: Namespace) -> dict[str, Any]:
    """The CompositePodGroup once its status caught up with its pods running: a system that writes a
    condition there gets HOLD_SECONDS to say it is placed (its status is written after the releases)."""

    def placed() -> dict[str, Any] | None:
        root = flavor.composite(ns)
        return root if any(c["status"] == "True" for c in conditions(root)) else None

    try:
        return wait_for("a True condition on the CompositePodGroup", placed, timeout=HOLD_SECONDS)
    except AssertionError:
        return flavor.composite(ns)


def placement(ns: Namespace) -> tuple[dict[str, set[str]], set[str]]:
    """The local blocks of each slice and the network blocks of all of them."""
    labels = node_labels(ns.api)
    blocks: dict[str, set[str]] = {}
    networks: set[str] = set()
    for pod in bound(slice_pods(ns)):
        node = labels[pod["spec"]["nodeName"]]
        blocks.setdefault(group_of(pod), set()).add(node.get(LB_KEY, "-"))
        networks.add(node.get(NB_KEY, "-"))
    return blocks, networks


def where_placed(blocks: dict[str, set[str]], networks: set[str]) -> str:
    each = ", ".join(f"{g} in {'+'.join(sorted(blocks.get(g, {'-'})))}" for g in SLICES)
    return f"{each}, both in {'+'.join(sorted(networks))}"


def empty_cluster(flavor: SliceFlavor, ns: Namespace) -> Outcome:
    """Two slices of two 8-GPU pods on an empty cluster."""
    created = create_slices(ns, flavor)
    took = wait_running(ns, created)
    if took is None:
        return Outcome(f"not all Running within {RUNNING_TIMEOUT:.0f} s", facts={"seconds": None})
    blocks, networks = placement(ns)
    root = settled(flavor, ns)
    line = (
        f"{where_placed(blocks, networks)}; all 4 Running {seconds(took)} after the last pod was created; "
        f"CompositePodGroup: {said(root)}"
    )
    facts = {"blocks": blocks, "networks": networks, "seconds": took, "composite": conditions(root)}
    return Outcome(line, [networks], facts)


def busy_case(flavor: SliceFlavor, ns: Namespace) -> Outcome:
    """One busy node in each of lb-a1, lb-a2 and lb-b1: only lb-b2 has room for a whole slice, so the
    whole job must wait; then lb-b1 is freed and nb-b has room for both."""
    ns.fill(*BUSY)
    created = create_slices(ns, flavor)

    def unschedulable() -> dict[str, dict[str, Any]] | None:
        found = {}
        for g in SLICES:
            initial = condition(flavor.pod_group(ns, g), "PodGroupInitiallyScheduled")
            if not initial or initial["status"] != "False" or initial.get("reason") != "Unschedulable":
                return None
            found[g] = initial
        return found

    why = wait_for("both PodGroups PodGroupInitiallyScheduled=False/Unschedulable", unschedulable, timeout=90)
    hold("no slice pod bound", lambda: not bound(slice_pods(ns)), seconds=HOLD_SECONDS)
    # Read after the hold: a condition that comes later than the PodGroups' would be seen here.
    root = flavor.composite(ns)
    first = why[SLICES[0]]
    line = (
        f"0 bound; PodGroup {SLICES[0]}: PodGroupInitiallyScheduled={first['status']}/{first['reason']}: "
        f"{first['message']}"
    )
    admitted = condition(root, "Admitted")
    if admitted is not None:
        reason = f"{admitted['status']}/{admitted['reason']}"
        line += f"; CompositePodGroup: Admitted={reason}: {admitted['message']}"
    else:
        line += f"; CompositePodGroup: {said(root)}"
    freed = time.monotonic()
    ns.unfill(FREED)
    took = wait_running(ns, freed)
    if took is None:
        line += f"; after freeing lb-b1: not all Running within {RUNNING_TIMEOUT:.0f} s"
        networks: set[str] = set()
    else:
        _, networks = placement(ns)
        line += f"; after freeing lb-b1: all 4 Running in {'+'.join(sorted(networks))} {seconds(took)} later"
    facts = {
        "pod_groups": why,
        "composite": conditions(root),
        "composite_admitted": admitted,
        "seconds": took,
        "networks": networks,
        "created": created,
    }
    return Outcome(line, [networks], facts)


@dataclass(frozen=True)
class SliceScenario:
    id: str
    title: str
    run: Callable[[SliceFlavor, Namespace], Outcome]


SLICE_SCENARIOS: list[SliceScenario] = [
    SliceScenario(
        "slices-empty",
        "slices (hand-made CompositePodGroup of 2 slices of 2 pods, slice in a local block, both in one "
        "network block), empty cluster",
        empty_cluster,
    ),
    SliceScenario(
        "slices-busy",
        "the same slices, one busy node in each of lb-a1, lb-a2, lb-b1; then lb-b1 freed",
        busy_case,
    ),
]


def run_slices_in(cluster: ClusterState, flavor: SliceFlavor, scenario: SliceScenario) -> Outcome:
    """Run one slice scenario in a fresh namespace, deleted (and its pods gone) afterwards."""
    ns = new_namespace(cluster, f"{flavor.name}-{scenario.id}")
    try:
        outcome = scenario.run(flavor, ns)
        print(ns.where())
    finally:
        delete_namespace(ns)
    print(f"[{flavor.name}] {scenario.title}: {outcome.line}")
    return outcome
