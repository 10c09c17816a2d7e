"""What the walk-through submits and reads: the article's Jobs in the Phalanx form, and facts about plain
API dicts (bound pods, domains, conditions, partial gangs). Pure: no cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY

GPU = "nvidia.com/gpu"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SEED_NODES = tuple(["was-worker", *(f"was-worker{i}" for i in range(2, 9))])
PLACEMENTS_TRIED = "placements are available"
"""In a PodGroup condition: the group was tried whole (not an early status before all its pods exist)."""


def job_manifest(
    name: str,
    count: int,
    *,
    policy: str = "gang",
    key: str | None = None,
    priority_class: str | None = None,
    disruption_mode: str | None = None,
) -> dict[str, Any]:
    """The article's Job (Indexed, `count` pods of 8 GPUs each) in the Phalanx form: label + annotations."""
    annotations: dict[str, str] = {}
    if policy != "gang":
        annotations[keys.POLICY_ANNOTATION] = policy
    if key:
        annotations[keys.TOPOLOGY_KEY_ANNOTATION] = key
    if disruption_mode:
        annotations[keys.DISRUPTION_MODE_ANNOTATION] = disruption_mode
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "worker", "image": PAUSE_IMAGE, "resources": {"limits": {GPU: "8"}}}],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {keys.MANAGED_LABEL: keys.MANAGED_VALUE},
            "annotations": annotations,
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "template": {"spec": pod_spec},
        },
    }


def describe_job(job: Mapping[str, Any]) -> str:
    """One line saying what a Job asks for, the way a reader of the article would write it."""
    meta = job["metadata"]
    count = job["spec"]["parallelism"]
    notes = meta.get("annotations") or {}
    parts = [f"{count} pods x 8 GPUs", f"label {keys.MANAGED_LABEL}=true"]
    parts += [f"{k}={v}" for k, v in sorted(notes.items())]
    priority = job["spec"]["template"]["spec"].get("priorityClassName")
    if priority:
        parts.append(f"priorityClassName {priority}")
    return f"{meta['name']}: " + ", ".join(parts)


def live(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods not being deleted."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def bound(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in live(pods) if p["spec"].get("nodeName")]


def gated(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in live(pods)
        if any(g.get("name") == keys.ADMISSION_GATE for g in p["spec"].get("schedulingGates") or [])
    ]


def phases(pods: Iterable[Mapping[str, Any]]) -> Counter[str]:
    return Counter(str(p.get("status", {}).get("phase") or "-") for p in live(pods))


def domains(
    pods: Iterable[Mapping[str, Any]], node_labels: Mapping[str, Mapping[str, str]], key: str
) -> set[str]:
    """The `key` label values of the nodes the pods are bound to."""
    return {node_labels.get(p["spec"]["nodeName"], {}).get(key, "-") for p in bound(pods)}


def condition(group: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if not group:
        return None
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == kind), None)


def partial_gangs(groups: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Gang PodGroups with some but fewer than minCount pods bound: what Phalanx must never admit. A pod is
    a group's member by its phalanx.dev/pod-group label (hand-made groups, released Job pods) or, for a
    group made for a Job, by the Job's job-name label."""
    placed = bound(pods)
    found = []
    for group in groups:
        gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
        if gang is None:
            continue
        name = str(group["metadata"].get("name", ""))
        job = (group["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL)
        have = sum(
            1
            for p in placed
            if (labels := p["metadata"].get("labels") or {}).get(keys.POD_GROUP_LABEL) == name
            or (job and labels.get("job-name") == job)
        )
        need = int(gang.get("minCount") or 0)
        if 0 < have < need:
            found.append(f"{job or name}: {have} of {need} pods bound")
    return found


def brief(value: object, limit: int = 400) -> str:
    """A value for a failure message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def level(key: str) -> str:
    return {NETWORK_BLOCK_KEY: "network block", LOCAL_BLOCK_KEY: "local block"}.get(key, key)


def requests_gpus(pod: Mapping[str, Any]) -> bool:
    containers = [*(pod["spec"].get("containers") or []), *(pod["spec"].get("initContainers") or [])]
    return any(
        GPU in ((c.get("resources") or {}).get(kind) or {})
        for c in containers
        for kind in ("limits", "requests")
    )
