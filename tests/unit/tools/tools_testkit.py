"""Plain API dicts of the article's cluster for the CLI tools' unit tests (no apiserver)."""

from __future__ import annotations

from typing import Any

from phalanx.devcluster.tools import filler_pod
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY, seed_topology

NB = NETWORK_BLOCK_KEY
LB = LOCAL_BLOCK_KEY
NS = "ml"
JOB_UID = "0b7a4c2e-1f7e-4b6e-9d0a-3c1e2f4a5b6c"
GROUP_NAME = "gang-4-6cfb45bcb4-gang-4-pgt-0-7455fdbf5d"
FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
UNSCHEDULABLE = (
    "pod group is unschedulable, 0/2 placements are available, first placement status: "
    "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining"
)


def seed_nodes() -> list[dict[str, Any]]:
    """The dev cluster's 8 Ready GPU nodes, as the API returns them."""
    nodes = []
    for spec in seed_topology():
        node: dict[str, Any] = spec.manifest()
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes.append(node)
    return nodes


def fillers(*nodes: str, namespace: str = "default") -> list[dict[str, Any]]:
    pods = []
    for node in nodes:
        pod = filler_pod(node)
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return pods


def job_pod(
    job: str,
    index: int,
    *,
    gated: bool = True,
    node: str = "",
    phase: str = "Pending",
    gpus: str = "8",
    uid: str = JOB_UID,
    extra_gates: tuple[str, ...] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "worker", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
    }
    gates = [*(["phalanx.dev/admission"] if gated else []), *extra_gates]
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": f"{job}-{index}-x{index}",
            "namespace": NS,
            "labels": {"batch.kubernetes.io/controller-uid": uid, "job-name": job},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def managed_job(
    name: str = "gang-4",
    count: int = 4,
    *,
    key: str | None = NB,
    managed: bool = True,
    **annotations: str,
) -> dict[str, Any]:
    notes = dict(annotations)
    if key:
        notes["phalanx.dev/topology-key"] = key
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": JOB_UID,
            "labels": {"phalanx.dev/managed": "true"} if managed else {},
            "annotations": notes,
        },
        "spec": {
            "parallelism": count,
            "completions": count,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": JOB_UID}},
            "template": {"spec": {"schedulingGates": [{"name": "phalanx.dev/admission"}]}},
        },
        "status": {},
    }


def condition(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-10-26T16:21:31Z",
    }


def pod_group(
    min_count: int = 4,
    *,
    key: str | None = NB,
    phase: str = "Unschedulable",
    conditions: list[dict[str, Any]] | None = None,
    domain: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    status: dict[str, Any] = {"phase": phase, "policy": "Gang"}
    if conditions is None:
        conditions = [
            condition("PodGroupInitiallyScheduled", "False", "Unschedulable", UNSCHEDULABLE),
            condition("Admitted", "False", "Unschedulable", UNSCHEDULABLE),
        ]
    status["conditions"] = conditions
    if domain:
        status["domain"] = domain
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": GROUP_NAME,
            "namespace": NS,
            "labels": {"phalanx.dev/job-name": "gang-4", "phalanx.dev/job-uid": JOB_UID},
            "ownerReferences": [{"kind": "Job", "name": "gang-4", "uid": JOB_UID, "controller": True}],
        },
        "spec": spec,
        "status": status,
    }


COMPOSITE_NAME = "sliced-8-6cfb45bcb4-sliced-8-pgt-0-7455fdbf5d"


def composite(min_groups: int = 2, *, key: str | None = NB, reason: str = "Unschedulable") -> dict[str, Any]:
    """A sliced Job's CompositePodGroup, as Phalanx makes it (owned by the Job)."""
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
    }
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "CompositePodGroup",
        "metadata": {
            "name": COMPOSITE_NAME,
            "namespace": NS,
            "ownerReferences": [{"kind": "Job", "name": "sliced-8", "uid": JOB_UID, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": reason, "conditions": [condition("Admitted", "False", reason, "x")]},
    }


def slice_group(i: int, size: int = 4, *, key: str = LB, phase: str = "Unschedulable") -> dict[str, Any]:
    """Slice i of the sliced Job: a PodGroup under the composite, named <composite>-<i>."""
    group = pod_group(size, key=key, phase=phase)
    group["metadata"]["name"] = f"{COMPOSITE_NAME}-{i}"
    group["metadata"]["ownerReferences"][0]["name"] = "sliced-8"
    group["spec"]["parentCompositePodGroupName"] = COMPOSITE_NAME
    return group


def indexed_pod(job: str, index: int, **kwargs: Any) -> dict[str, Any]:
    pod = job_pod(job, index, **kwargs)
    pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
    return pod
