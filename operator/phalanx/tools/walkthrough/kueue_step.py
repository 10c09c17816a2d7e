"""The walk-through's Kueue step (docs/kueue.md): Kueue decides who may run, Phalanx decides where. With the
dev cluster's kueue addon up: a ClusterQueue with room for one gang of four, two gangs queued in it; the
first is admitted by Kueue and placed whole by Phalanx, the second waits in Kueue's queue with nothing held
for it, and runs once the first is gone. Without the addon the step says so and is skipped."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.topology import NETWORK_BLOCK_KEY
from phalanx.tools.walkthrough.demo import Demo, NotPlayableError
from phalanx.tools.walkthrough.facts import condition, job_manifest

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"


def kueue_served(api: RestClient) -> bool:
    """Whether Kueue's API is installed (the dev cluster's kueue addon, or any Kueue)."""
    try:
        api.get(KUEUE)
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return True


def queues(suffix: str, namespace: str, gpus: int) -> list[tuple[str, dict[str, Any]]]:
    """A ResourceFlavor, a ClusterQueue of `gpus` GPUs and the LocalQueue `lq` (path, object), in order."""
    flavor, cq = f"demo-gpu-{suffix}", f"demo-cq-{suffix}"
    version = "kueue.x-k8s.io/v1beta2"
    return [
        (
            f"{KUEUE}/resourceflavors",
            {"apiVersion": version, "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        ),
        (
            f"{KUEUE}/clusterqueues",
            {
                "apiVersion": version,
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {"name": flavor, "resources": [{"name": GPU, "nominalQuota": str(gpus)}]}
                            ],
                        }
                    ],
                },
            },
        ),
        (
            f"{KUEUE}/namespaces/{namespace}/localqueues",
            {
                "apiVersion": version,
                "kind": "LocalQueue",
                "metadata": {"name": "lq"},
                "spec": {"clusterQueue": cq},
            },
        ),
    ]


def queued(name: str, count: int) -> dict[str, Any]:
    job = job_manifest(name, count, key=NETWORK_BLOCK_KEY)
    job["metadata"]["labels"][QUEUE_NAME_LABEL] = "lq"
    return job


def _held(d: Demo, job: str) -> Mapping[str, Any] | None:
    cond = condition(d.group_of(job), "Admitted")
    return cond if cond and cond.get("reason") == "HeldByKueue" else None


def kueue(d: Demo) -> None:
    if not kueue_served(d.api):
        raise NotPlayableError(
            "Kueue is not installed on this cluster; start the dev cluster with it: "
            "phalanx dev-cluster up --addons kueue"
        )
    made = queues(uuid.uuid4().hex[:6], d.namespace, gpus=32)
    d.command(
        "kubectl apply -f queues.yaml   # a ResourceFlavor, a ClusterQueue of 32 GPUs, the LocalQueue lq"
    )
    try:
        for path, obj in made:
            d.api.request("POST", path, obj)
        cq = made[1][1]["metadata"]["name"]
        d.wait(
            f"ClusterQueue {cq} Active",
            lambda: condition(d.api.get(f"{KUEUE}/clusterqueues/{cq}"), "Active"),
        )
        d.create_job(queued("queue-a", 4))
        d.wait_bound("queue-a", 4, NETWORK_BLOCK_KEY)
        d.create_job(queued("queue-b", 4))
        held = d.wait("queue-b held by Kueue (Admitted=False HeldByKueue)", lambda: _held(d, "queue-b"))
        d.check(
            not d.job_pods("queue-b"), "queue-b has no pod: Kueue keeps it suspended", d.job_pods("queue-b")
        )
        d.show("queue-a admitted by Kueue and placed by Phalanx; queue-b in Kueue's queue")
        d.say(f"queue-b Admitted=False HeldByKueue: {held.get('message')}")
        d.delete_job("queue-a")
        d.wait_bound("queue-b", 4, NETWORK_BLOCK_KEY)
        d.show("queue-a deleted: Kueue admits queue-b and Phalanx places it")
        d.notice(
            "Kueue decides who may run, Phalanx decides where: the ClusterQueue's quota (32 GPUs) admits one "
            "gang of four at a time, and Phalanx places each admitted gang whole in one network block. While "
            "queue-b waited in Kueue's queue Phalanx held nothing for it; `phalanx explain job/queue-b` "
            "shows Kueue's Workload beside Phalanx's PodGroup."
        )
    finally:
        jobs = d.path("/apis/batch/v1/namespaces/{ns}/jobs")
        for name in ("queue-a", "queue-b"):  # the Jobs first: a ClusterQueue in use is kept until they go
            try:
                d.api.request("DELETE", f"{jobs}/{name}", {"propagationPolicy": "Background"})
            except ApiError as e:
                if e.status != 404:
                    raise
        for path, obj in reversed(made):
            try:
                d.api.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise
