"""Test-side helpers for the JobSet, TrainJob and LeaderWorkerSet kinds on the dev cluster with the real
controllers (the `addons_cluster`): their manifests in the article's shape (pods of 8 GPUs, a whole node
each), reading their pods and Phalanx's groups, and a watch of every pod that fails the test if a gang is
ever bound in part (bench/scale_watch.py's Recorder, keyed by the kind's gang instead of a Job's name).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from phalanx.controller.apply.events import COMPONENT
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import GPU_KEY, NB_KEY, Namespace, bound, domains_of, node_labels, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale_watch import Gang, PodWatch, Recorder

PAUSE = "registry.k8s.io/pause:3.10"
MANAGED = {"phalanx.dev/managed": "true"}
PHALANX_API = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
LWSS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"
RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
GATE = "phalanx.dev/admission"
SETTLE = 5.0
"""Seconds a gang may be bound in part while kube-scheduler binds its released pods one by one."""


# ---------------------------------------------------------------------- manifests
def gpu_pod_spec(priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "w", "image": PAUSE, "resources": {"limits": {GPU_KEY: "8"}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def replicated_job(
    name: str,
    replicas: int,
    parallelism: int,
    *,
    priority_class: str | None = None,
    depends_on: str | None = None,
    complete_after: str | None = None,
    backoff_limit: int = 0,
    ignore_disruptions: bool = False,
) -> dict[str, Any]:
    """`replicas` child Jobs of `parallelism` pods (Indexed), each failing at its first failed pod unless
    `backoff_limit` says more; `complete_after` makes kwok end its pods; `ignore_disruptions`: a pod that
    was a disruption target (evicted) counts as no failure (its podFailurePolicy)."""
    template: dict[str, Any] = {"spec": gpu_pod_spec(priority_class)}
    if complete_after:
        template["metadata"] = {"annotations": {"sim.phalanx.dev/complete-after": complete_after}}
    entry: dict[str, Any] = {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "completionMode": "Indexed",
                "backoffLimit": backoff_limit,
                "template": template,
            }
        },
    }
    if depends_on:
        entry["dependsOn"] = [{"name": depends_on, "status": "Complete"}]
    if ignore_disruptions:
        entry["template"]["spec"]["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
    return entry


def jobset(
    name: str,
    *rjobs: dict[str, Any],
    annotations: dict[str, str] | None = None,
    in_order: bool = False,
    max_restarts: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicatedJobs": list(rjobs)}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}  # a failed child Job restarts the JobSet
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": dict(MANAGED), "annotations": dict(annotations or {})},
        "spec": spec,
    }


def lws(
    name: str,
    size: int,
    *,
    replicas: int = 1,
    annotations: dict[str, str] | None = None,
    leader_ready: bool = False,
    subgroup_size: int | None = None,
    restart_policy: str | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "size": size,
        "workerTemplate": {"spec": gpu_pod_spec(priority_class) | {"restartPolicy": "Always"}},
    }
    if subgroup_size is not None:
        template["subGroupPolicy"] = {"subGroupSize": subgroup_size}
    if restart_policy:
        template["restartPolicy"] = restart_policy
    spec: dict[str, Any] = {"replicas": replicas, "leaderWorkerTemplate": template}
    if leader_ready:
        spec["startupPolicy"] = "LeaderReady"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": dict(MANAGED), "annotations": dict(annotations or {})},
        "spec": spec,
    }


def torch_runtime(name: str, nodes: int) -> dict[str, Any]:
    """A ClusterTrainingRuntime of the shape of Trainer's torch-distributed (manifests/base/runtimes):
    one replicated Job `node`, `numNodes` of them, the trainer container asking for 8 GPUs a node."""
    container = {"name": "node", "image": PAUSE, "resources": {"limits": {GPU_KEY: "8"}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": nodes, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                                },
                                "spec": {"template": {"spec": {"containers": [container]}}},
                            },
                        }
                    ]
                }
            },
        },
    }


def initializer_runtime(name: str, nodes: int, complete_after: str = "2s") -> dict[str, Any]:
    """A ClusterTrainingRuntime of the shape of Trainer v2.2.0's fine-tuning runtimes (manifests/base/
    runtimes/torchtune/*.yaml, data-cache/torch_distributed_with_cache.yaml): a `dataset-initializer` and a
    `model-initializer` replicated Job (one CPU pod each, ended by kwok after `complete_after`) and the
    trainer step `node` (`numNodes` pods of 8 GPUs) that `dependsOn` both Complete, so JobSet makes its Job
    only once both initializers succeeded (a staged JobSet). The shipped ones also share a ReadWriteOnce
    volume (volumeClaimPolicies), which the dev cluster has no provisioner for: left out."""
    runtime = torch_runtime(name, nodes)
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    node["dependsOn"] = [
        {"name": "dataset-initializer", "status": "Complete"},
        {"name": "model-initializer", "status": "Complete"},
    ]

    def initializer(step: str) -> dict[str, Any]:
        container = {"name": step, "image": PAUSE, "resources": {"requests": {"cpu": "1"}}}
        return {
            "name": step,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
                "spec": {
                    "template": {
                        "metadata": {"annotations": {"sim.phalanx.dev/complete-after": complete_after}},
                        "spec": {"containers": [container]},
                    }
                },
            },
        }

    runtime["spec"]["template"]["spec"]["replicatedJobs"] = [
        initializer("dataset-initializer"),
        initializer("model-initializer"),
        node,
    ]
    return runtime


LAUNCHER_CPU = "1"
"""A launcher that is not a node asks for CPU only: it runs mpirun, which ssh-es to the nodes."""


def mpi_runtime(name: str, *, launcher_as_node: bool, launcher_after_nodes: bool = False) -> dict[str, Any]:
    """A ClusterTrainingRuntime of the shape of Trainer v2.2.0's MPI runtimes (manifests/base/runtimes/
    deepspeed_distributed.yaml, mlx_distributed.yaml): mlPolicy `mpi` (OpenMPI, an ssh Secret and a hostfile
    ConfigMap made by Trainer's MPI plugin), the JobSet's network publishing not-ready addresses and its
    successPolicy the launcher's; a replicated Job `launcher` (the trainer step: container `node`, one pod)
    and a replicated Job `node` (sshd, 8 GPUs a pod, a readiness probe on its port).

    The runtime's numNodes stays 1, as in the shipped ones: the TrainJob says how many (`spec.trainer.
    numNodes`, `trainjob(..., num_nodes=)`). Trainer v2.2.0 sizes the trainer step's replicated Job, the
    launcher here, from the runtime's numNodes (tried: a runtime of numNodes 4 made a launcher Job of
    parallelism 4), and only the `node` Job from the TrainJob's.

    `launcher_as_node` (runLauncherAsNode): the launcher is one of the nodes, with 8 GPUs like them, and
    Trainer makes numNodes-1 node pods; else a CPU-only launcher and numNodes node pods.
    `launcher_after_nodes`: `node` listed first and the launcher `dependsOn` it Ready (JobSet makes the
    launcher's Job once every node pod is Ready: a staged JobSet)."""
    gpus = {"limits": {GPU_KEY: "8"}}
    launcher: dict[str, Any] = {
        "name": "launcher",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "node",
                                "image": PAUSE,
                                "command": ["mpirun"],
                                "resources": gpus
                                if launcher_as_node
                                else {"requests": {"cpu": LAUNCHER_CPU}},
                            }
                        ]
                    }
                }
            },
        },
    }
    node = {
        "name": "node",
        "template": {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "node",
                                "image": PAUSE,
                                "command": ["/usr/sbin/sshd"],
                                "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
                                "readinessProbe": {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 5},
                                "resources": gpus,
                            }
                        ]
                    }
                }
            }
        },
    }
    rjobs = [launcher, node]
    if launcher_after_nodes:
        launcher["dependsOn"] = [{"name": "node", "status": "Ready"}]
        rjobs = [node, launcher]  # JobSet: the first replicated Job cannot depend on another
    mpi = {
        "numProcPerNode": 1,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": "/home/mpiuser/.ssh",
        "runLauncherAsNode": launcher_as_node,
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "deepspeed"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": mpi},
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": rjobs,
                }
            },
        },
    }


TAS = "kueue.x-k8s.io/podset-required-topology"


def tas_runtime(name: str) -> dict[str, Any]:
    """torch_runtime's four 8-GPU nodes, their pods asking Kueue's Topology-Aware Scheduling for one network
    block (as a runtime written for Kueue-only TAS does): Phalanx refuses a managed TrainJob of it."""
    runtime = torch_runtime(name, 4)
    rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    rjob["template"]["spec"]["template"]["metadata"] = {"annotations": {TAS: NB_KEY}}
    return runtime


def runtime_annotations(ns: Namespace, name: str, annotations: dict[str, str] | None) -> None:
    """Give runtime `name`'s pod template these annotations (None: none), as its owner would edit it."""
    runtime = ns.get(f"{RUNTIMES}/{name}")
    rjobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    rjobs[0]["template"]["spec"]["template"]["metadata"] = {"annotations": annotations} if annotations else {}
    ns.api.request(
        "PATCH",
        f"{RUNTIMES}/{name}",
        {"spec": {"template": {"spec": {"replicatedJobs": rjobs}}}},
        "application/merge-patch+json",
    )


def delete_runtime(ns: Namespace, name: str) -> None:
    try:
        ns.api.request("DELETE", f"{RUNTIMES}/{name}")
    except ApiError as e:
        if e.status != 404:
            raise


def trainjob(
    name: str, runtime: str, annotations: dict[str, str] | None = None, *, num_nodes: int | None = None
) -> dict[str, Any]:
    """A managed TrainJob of `runtime`; `num_nodes`: its spec.trainer.numNodes (None: the runtime's)."""
    spec: dict[str, Any] = {"runtimeRef": {"name": runtime}}
    if num_nodes is not None:
        spec["trainer"] = {"numNodes": num_nodes}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": dict(MANAGED), "annotations": dict(annotations or {})},
        "spec": spec,
    }


def ensure(ns: Namespace, path: str, obj: dict[str, Any]) -> None:
    """Create a cluster-scoped object unless it exists (PriorityClasses, runtimes: shared by tests)."""
    try:
        ns.api.request("POST", path, obj)
    except ApiError as e:
        if e.status != 409:
            raise


def priority_classes(ns: Namespace) -> None:
    """The article's classes, low (100) and high (1000)."""
    for name, value in (("low", 100), ("high", 1000)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        ensure(ns, "/apis/scheduling.k8s.io/v1/priorityclasses", body | {"value": value})


# ---------------------------------------------------------------------- reading
def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in live(pods) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def gated(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if any(g.get("name") == GATE for g in p["spec"].get("schedulingGates") or [])]


def jobset_pods(ns: Namespace, name: str) -> list[dict[str, Any]]:
    return running(ns.pods(f"{JOBSET_NAME}={name}"))


def lws_pods(ns: Namespace, name: str) -> list[dict[str, Any]]:
    return running(ns.pods(f"{LWS_NAME}={name}"))


def wait_bound(ns: Namespace, what: str, pods: Any, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    """`count` live pods, all bound (`pods()` reads them)."""
    return wait_for(
        f"{count} {what} pods bound",
        lambda: ps if len(ps := pods()) == count and len(bound(ps)) == count else None,
        timeout=timeout,
    )


def groups(ns: Namespace, plural: str = "podgroups") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get(f"{PHALANX_API}/{plural}")["items"]
    return items


def owned(ns: Namespace, owner: str, plural: str = "podgroups") -> list[dict[str, Any]]:
    """Phalanx's groups that name `owner` (`Kind/name`) as whose gang they are."""
    return [
        g
        for g in groups(ns, plural)
        if g["metadata"].get("annotations", {}).get("phalanx.dev/owner") == owner
    ]


def condition(obj: dict[str, Any] | None, kind: str = "Admitted") -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def wait_unschedulable(ns: Namespace, owner: str, plural: str = "compositepodgroups") -> dict[str, Any]:
    """The root group of `owner` tried whole and refused (Admitted=False Unschedulable)."""
    return wait_for(
        f"{owner}: Admitted=False Unschedulable",
        lambda: next(
            (g for g in owned(ns, owner, plural) if condition(g).get("reason") == "Unschedulable"), None
        ),
        timeout=60,
    )


def label_of(node: str, key: str, labels: dict[str, dict[str, str]]) -> str:
    return labels[node].get(key, "-")


def events_of(ns: Namespace, kind: str, name: str) -> list[dict[str, Any]]:
    return [e for e in ns.events(f"involvedObject.name={name}") if e["involvedObject"]["kind"] == kind]


def reasons_of(ns: Namespace, kind: str, name: str) -> set[str]:
    """The reasons of the events on an object (posted after the write they tell of: wait for them)."""
    return {str(e["reason"]) for e in events_of(ns, kind, name)}


def kubectl(ns: Namespace, *args: str) -> str:
    """The real kubectl of the dev cluster (its table is what a user reads)."""
    result = subprocess.run(
        [str(ns.cluster.kubectl), "--kubeconfig", str(ns.cluster.kubeconfig), "-n", ns.name, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def explain(ns: Namespace, target: str) -> str:
    """`phalanx explain TARGET` as a user runs it (the console entry point, this checkout's code)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "phalanx.cli",
            "explain",
            target,
            "-n",
            ns.name,
            "--kubeconfig",
            str(ns.cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def diagnose_lws(ns: Namespace, name: str) -> None:
    """What the cluster looked like when a wait for LWS `name` timed out: the pods, the events, Phalanx's
    groups."""
    print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
    print(ns.where())
    for e in ns.events():
        obj = e["involvedObject"]
        print(f"event {obj['kind']}/{obj['name']} {e['reason']}: {e.get('message')}")
    for group in groups(ns):
        print(group["metadata"]["name"], json.dumps(group.get("status"))[:2000])


def worker_node(pods: list[dict[str, Any]]) -> str:
    """The node of a worker (not the leader: losing the leader, LWS makes the whole group again itself, its
    workers' StatefulSet being the leader pod's)."""
    return sorted(p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"].get(LWS_WORKER) != "0")[0]


# ---------------------------------------------------------------------- no partial gang, ever
def jobset_gang(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(JOBSET_NAME, ""))


def lws_gang(pod: dict[str, Any]) -> str:
    labels = pod["metadata"].get("labels") or {}
    return f"{labels.get(LWS_NAME, '')}/{labels.get(LWS_GROUP, '')}" if labels.get(LWS_NAME) else ""


def _settled(recorder: Recorder) -> bool:
    """No gang bound in part as the watch sees it (or already reported as partial)."""
    recorder.check_all(time.monotonic())
    with recorder.lock:
        return all(g.partial or not 0 < len(g.bound_live()) < g.size for g in recorder.gangs.values())


@contextmanager
def whole_gangs(ns: Namespace, sizes: dict[str, int], gang_of: Any) -> Iterator[Recorder]:
    """Watch every pod of the namespace for the block: a gang (`gang_of(pod)`, `sizes[gang]` pods) bound in
    part for more than SETTLE seconds, or when the block ends, fails the test."""
    with _watched(ns, Recorder(sizes, SETTLE, gang_of=gang_of)) as recorder:
        yield recorder


def lws_revision_gang(pod: dict[str, Any]) -> str:
    """An LWS group of one template revision: `<lws>/<group index>/<revision>` (a rolling update or a
    scale makes groups whose revision or index no test knows before they appear)."""
    labels = pod["metadata"].get("labels") or {}
    if not labels.get(LWS_NAME):
        return ""
    return f"{labels[LWS_NAME]}/{labels.get(LWS_GROUP, '')}/{labels.get(LWS_REVISION, '')}"


class LwsGroups(Recorder):
    """A Recorder of every group of one LWS (`size` pods each), one gang per group index and template
    revision, each learnt when its first pod appears; with `domain` (node -> domain of the LWS's
    topology-key), a group whose live pods sit in two domains at once is reported too. A pod being deleted
    counts as gone: LWS tears a group down (a rolling update, a scale down, a group restart) by deleting its
    leader, and the garbage collector takes the workers a moment later; that is LWS ending a group, not a
    group placed in part."""

    def __init__(
        self, name: str, size: int, domain: dict[str, str] | None = None, settle: float = SETTLE
    ) -> None:
        super().__init__({}, settle, domain=domain, gang_of=lws_revision_gang)
        self.name, self.size = name, size

    def on_pod(self, kind: str, pod: dict[str, Any], now: float) -> None:
        gang = lws_revision_gang(pod)
        if gang.startswith(f"{self.name}/"):
            with self.lock:
                self.gangs.setdefault(gang, Gang(gang, self.size))
        deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        super().on_pod("DELETED" if deleting else kind, pod, now)


@contextmanager
def whole_lws_groups(
    ns: Namespace, name: str, size: int, domain_key: str | None = None, settle: float = SETTLE
) -> Iterator[Recorder]:
    """whole_gangs for every group of LWS `name`, of any revision and index: each bound whole or not at all
    (and, with `domain_key`, never in two domains of it at once). `settle`: how long a group may be bound
    in part (longer for startupPolicy LeaderReady, whose leader runs before LWS makes its workers)."""
    domain = None
    if domain_key is not None:
        domain = {node: labels.get(domain_key, "-") for node, labels in node_labels(ns.api).items()}
    with _watched(ns, LwsGroups(name, size, domain, settle), settle) as recorder:
        yield recorder
    assert not recorder.split_gangs(), recorder.split_gangs()


class ThroughFailure(Recorder):
    """whole_gangs' rule with a node failure in the middle (`failure()`, called just before the node fails,
    once the watch saw the gang whole: `whole`). A failure leaves the gang short, which no scheduler can
    prevent; what must not happen is the gang running in part on purpose. So from the failure on, the pods
    bound before it (what the failure left running) may run short of the gang until they are gone, but
    no pod bound after it may ever run beside them: that would be the gang placed again in part, or
    split. Once none of them runs, a gang placed again is held to whole_gangs' rule (whole within SETTLE
    seconds, and whole when the block ends).

    With `domain` (node -> domain of the gang's topology-key) the gang may instead be *completed in its
    domain*: a pod bound after the failure beside the ones it left is their replacement, allowed while every
    live pod of the gang is in one domain (live pods in two domains at once are reported: `split_gangs`);
    the gang must be whole again when the block ends."""

    def __init__(self, sizes: dict[str, int], gang_of: Any, domain: dict[str, str] | None = None) -> None:
        super().__init__(sizes, SETTLE, domain=domain, gang_of=gang_of)
        self.failed_at: float | None = None

    def whole(self, gang: str) -> bool:
        """The watch sees all of the gang's pods bound (every bind it had happened before this)."""
        with self.lock:
            g = self.gangs[gang]
            return len(g.bound_live()) == g.size

    def failure(self) -> None:
        with self.lock:
            self.failed_at = time.monotonic()

    def _check(self, gang: Gang, now: float, final: bool) -> None:
        failed_at = self.failed_at
        if failed_at is not None and not gang.partial and not final:
            live = gang.bound_live()
            left = [p for p in live if p.bound is not None and p.bound < failed_at]
            if left:
                newer = sorted(p.name for p in live if p not in left)
                if newer and not self.domain:
                    gang.partial = (
                        f"{gang.job}: {newer} bound beside {len(left)} pod(s) the node failure left running"
                    )
                gang.partial_since = None
                return
        super()._check(gang, now, final)


@contextmanager
def whole_gangs_through_a_failure(
    ns: Namespace, sizes: dict[str, int], gang_of: Any, completed_in: str | None = None
) -> Iterator[ThroughFailure]:
    """whole_gangs, for a block in which a node fails under a gang (ThroughFailure's rule); with
    `completed_in` (the gangs' topology-key), the gang may be completed in its domain of that key instead
    of being requeued whole, and never runs in two of its domains at once."""
    domain = None
    if completed_in is not None:
        domain = {node: labels.get(completed_in, "-") for node, labels in node_labels(ns.api).items()}
    recorder = ThroughFailure(sizes, gang_of, domain)
    with _watched(ns, recorder):
        yield recorder
    assert not recorder.split_gangs(), recorder.split_gangs()


@contextmanager
def _watched(ns: Namespace, recorder: Recorder, settle: float = SETTLE) -> Iterator[Recorder]:
    watch = PodWatch(ns.cluster, ns.name, recorder.on_pod)
    watch.start()
    try:
        yield recorder
        # What the block saw through the API, the watch may see a moment later: let it catch up (a gang
        # that stays bound in part is still reported, after SETTLE).
        wait_for("the pod watch to see no gang bound in part", lambda: _settled(recorder), timeout=3 * settle)
        assert watch.thread.is_alive(), f"the pod watch stopped before the block ended: {watch.errors}"
    finally:
        watch.stop()
    recorder.check_all(time.monotonic(), final=True)
    assert not recorder.partial_gangs(), recorder.partial_gangs()
    assert recorder.events > 0, "the pod watch saw nothing"


# ---------------------------------------------------------------------- histories (listed, then watched)
REQUEUED = "phalanx.dev/requeued"


def changes(values: list[Any]) -> list[Any]:
    """The values a sequence went through, each change once."""
    out: list[Any] = []
    for value in values:
        if not out or out[-1] != value:
            out.append(value)
    return out


class SuspendWatch:
    """Every version of a Job's spec.suspend, listed then watched (bench/scale_watch.py's PodWatch on Jobs),
    so a suspend fight shows as a True among them however briefly it lasts; `notes` has each version's
    (spec.suspend, Phalanx's requeue note phalanx.dev/requeued or ""), so a suspension by Phalanx shows
    as one with the note. JobSetSuspendWatch and TrainJobSuspendWatch watch those kinds."""

    collection = "apis/batch/v1/jobs"

    def __init__(self, ns: Namespace, name: str) -> None:
        self.job = name
        self.seen: list[tuple[float, bool]] = []
        self.notes: list[tuple[bool, str]] = []
        self._watch = PodWatch(ns.cluster, ns.name, self._see, collection=self.collection)
        self._watch.start()

    def _see(self, _kind: str, obj: dict[str, Any], now: float) -> None:
        if obj["metadata"]["name"] == self.job:
            suspended = bool(obj["spec"].get("suspend"))
            self.seen.append((now, suspended))
            self.notes.append((suspended, str((obj["metadata"].get("annotations") or {}).get(REQUEUED, ""))))

    def stop(self) -> list[tuple[float, bool]]:
        self._watch.stop()
        return self.seen


class JobSetSuspendWatch(SuspendWatch):
    """Every version of a JobSet's spec.suspend (listed, then watched)."""

    collection = "apis/jobset.x-k8s.io/v1alpha2/jobsets"


class TrainJobSuspendWatch(SuspendWatch):
    """Every version of a TrainJob's spec.suspend (listed, then watched)."""

    collection = "apis/trainer.kubeflow.org/v1alpha1/trainjobs"


def suspend_flips(seen: list[tuple[float, bool]]) -> list[bool]:
    """The values spec.suspend went through, each change once."""
    return changes([value for _, value in seen])


class GroupSays:
    """Every (reason, message) of the Admitted condition of the compositepodgroups of `owner` (`Kind/name`),
    listed then watched: what Phalanx told of the gang as it went."""

    def __init__(self, ns: Namespace, owner: str) -> None:
        self.owner = owner
        self.seen: list[tuple[str, str]] = []
        self._watch = PodWatch(
            ns.cluster,
            ns.name,
            self._see,
            collection="apis/scheduling.phalanx.dev/v1beta1/compositepodgroups",
        )
        self._watch.start()

    def _see(self, _kind: str, group: dict[str, Any], _now: float) -> None:
        if (group["metadata"].get("annotations") or {}).get("phalanx.dev/owner") == self.owner:
            cond = condition(group)
            self.seen.append((str(cond.get("reason", "")), str(cond.get("message", ""))))

    def stop(self) -> list[tuple[str, str]]:
        self._watch.stop()
        return self.seen


class FirstSeen:
    """The order in which pods of JobSets first appear (listed, then watched), and marks the test sets in
    between: a pod seen before a mark was made before the mark was set."""

    def __init__(self, ns: Namespace) -> None:
        self.order: list[str] = []  # "mark:<name>" or "<jobset>/<pod>"
        self.born_ungated: list[str] = []  # pods first seen without Phalanx's gate
        self._watch = PodWatch(ns.cluster, ns.name, self._see)
        self._watch.start()

    def _see(self, _kind: str, pod: dict[str, Any], _now: float) -> None:
        jobset = (pod["metadata"].get("labels") or {}).get(JOBSET_NAME)
        seen = f"{jobset}/{pod['metadata']['name']}"
        if jobset and seen not in self.order:
            self.order.append(seen)
            if not gated([pod]):
                self.born_ungated.append(seen)

    def mark(self, name: str) -> None:
        self.order.append(f"mark:{name}")

    def pods_before(self, mark: str, jobset: str) -> list[str]:
        before = self.order[: self.order.index(f"mark:{mark}")]
        return [p for p in before if p.startswith(f"{jobset}/")]

    def stop(self) -> None:
        self._watch.stop()


# ---------------------------------------------------------------------- Phalanx's objects, made once
PHALANX_PLURALS = ("workloads", "compositepodgroups", "podgroups")


def phalanx_objects(ns: Namespace, owner: str) -> dict[str, list[str]]:
    """The uids of the Workloads and groups Phalanx made for `owner` (`Kind/name`), by plural."""
    return {
        plural: sorted(g["metadata"]["uid"] for g in owned(ns, owner, plural)) for plural in PHALANX_PLURALS
    }


@contextmanager
def objects_made(ns: Namespace, owner: str) -> Iterator[dict[str, set[str]]]:
    """Every Workload, CompositePodGroup and PodGroup naming `owner` that the block saw (listed, then
    watched: one made and deleted again at once is seen too), their uids by plural."""
    seen: dict[str, set[str]] = {plural: set() for plural in PHALANX_PLURALS}
    watches = []

    def see(plural: str) -> Any:
        def handle(_kind: str, obj: dict[str, Any], _now: float) -> None:
            if (obj["metadata"].get("annotations") or {}).get("phalanx.dev/owner") == owner:
                seen[plural].add(str(obj["metadata"]["uid"]))

        return handle

    try:
        for plural in PHALANX_PLURALS:
            watch = PodWatch(
                ns.cluster, ns.name, see(plural), f"apis/scheduling.phalanx.dev/v1beta1/{plural}"
            )
            watch.start()
            watches.append(watch)
        yield seen
    finally:
        for watch in watches:
            watch.stop()


def garbage_collector_knows_podgroups(ns: Namespace) -> None:
    """Wait until the garbage collector watches Phalanx's kinds: it learns new CRDs (installed by the
    operator at its start) only at its next resync, and until then deletes no Workload or group of a
    deleted owner. A ConfigMap owning a probe PodGroup is deleted, and the PodGroup must go with it."""
    probe = f"gc-probe-{uuid.uuid4().hex[:6]}"
    owner = ns.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": probe}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": probe, "uid": owner["metadata"]["uid"]}
    group = {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": probe, "ownerReferences": [ref]},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }
    ns.create(group)
    ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}/configmaps/{probe}")

    def gone() -> bool:
        try:
            ns.get(f"{PHALANX_API}/podgroups/{probe}")
        except ApiError as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for("the garbage collector to delete a PodGroup whose owner is gone", gone, timeout=120)


# ---------------------------------------------------------------------- failures
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def fail_pod(ns: Namespace, pod: dict[str, Any]) -> None:
    """Ask the simulated kubelet to end a running pod with exit code 1 (kwok stage pod-complete)."""
    notes = {"sim.phalanx.dev/complete-after": "1s", "sim.phalanx.dev/exit-code": "1"}
    ns.api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns.name}/pods/{pod['metadata']['name']}",
        {"metadata": {"annotations": notes}},
        "application/merge-patch+json",
    )


# ---------------------------------------------------------------------- a node failure under a running gang
def jobset_block(ns: Namespace, name: str, count: int) -> str | None:
    """The network block all `count` live pods of JobSet `name` (a TrainJob's is named after it) are bound
    in, or None."""
    pods = jobset_pods(ns, name)
    if len(pods) != count or len(bound(pods)) != count:
        return None
    blocks = domains_of(ns.api, pods, NB_KEY)
    return next(iter(blocks)) if len(blocks) == 1 else None


def requeues_of(ns: Namespace, kind: str, name: str) -> list[dict[str, Any]]:
    """Phalanx's Requeued events on the object."""
    return [
        e
        for e in events_of(ns, kind, name)
        if e["reason"] == "Requeued" and e.get("reportingComponent") == COMPONENT
    ]


@dataclass(frozen=True)
class FailedOver:
    """What `requeued_after_a_node_failure` saw."""

    blocks: tuple[str, str]  # the network block the gang ran in, then the one it runs in after the requeue
    victim: str  # the node that failed
    lost: dict[str, Any]  # its pod, as it ran there
    old: set[str]  # the names of the pods that ran before the failure
    children: dict[str, str]  # the child Jobs before the failure: name -> uid
    pods: list[dict[str, Any]]  # the live pods at the end
    requeued: list[dict[str, Any]]  # Phalanx's Requeued events on the owner
    # (spec.suspend, requeue note) of the owner (and of a TrainJob's JobSet) by kind, each change once
    notes: dict[str, list[tuple[bool, str]]]
    said: list[tuple[str, str]]  # the root group's Admitted condition (reason, message), each change once
    born_ungated: list[str]  # the gang's pods first seen without Phalanx's gate

    def moved_whole(self) -> str:
        """What every such requeue must show: the gang runs in another block, with none of its old pods
        and none of its new ones born ungated, after one requeue that says how many pods the failure
        left and in which block. Its why."""
        first, again = self.blocks
        assert again != first, self.blocks
        assert not self.old & {p["metadata"]["name"] for p in self.pods}
        assert not self.born_ungated, self.born_ungated
        (why,) = {e["message"] for e in self.requeued}
        assert why.startswith(
            f"below its minCount: {len(self.old) - 1} pod(s) of the tree were left in {first}"
        ), why
        return why


def requeued_after_a_node_failure(ns: Namespace, owner: str, body: dict[str, Any], size: int) -> FailedOver:
    """A node failure under a running JobSet or TrainJob (`owner`, `Kind/name`, created from `body`; its
    JobSet is named `name` too) of `size` 8-GPU pods, one network block, the size of a block. Once it runs
    whole, its first node by name fails (a NoExecute taint: the taint manager evicts its pod) and its
    block has no other node, so Phalanx requeues it whole: waited for, its Requeued event on the owner,
    every pod from before gone, then the gang whole again in one block. Checked throughout: no pod placed
    beside the ones the failure left, the gang whole within SETTLE once placed again
    (`whole_gangs_through_a_failure`). Watched meanwhile: every version of the owner's (and a TrainJob's
    JobSet's) spec.suspend and requeue note, what its root group said, whether each pod was born gated.
    The failed node is healed at the end, whatever happened."""
    kind, name = owner.split("/")
    watches = {kind: TrainJobSuspendWatch(ns, name) if kind == "TrainJob" else JobSetSuspendWatch(ns, name)}
    if kind == "TrainJob":
        watches["JobSet"] = JobSetSuspendWatch(ns, name)
    says = GroupSays(ns, owner)
    born = FirstSeen(ns)
    victim = ""
    try:
        with whole_gangs_through_a_failure(ns, {name: size}, jobset_gang) as gangs:
            ns.create(body)
            first = wait_for(f"{owner} whole in one block", lambda: jobset_block(ns, name, size), timeout=180)
            before = jobset_pods(ns, name)
            children = {
                j["metadata"]["name"]: j["metadata"]["uid"]
                for j in ns.get("/apis/batch/v1/namespaces/{ns}/jobs")["items"]
                if (j["metadata"].get("labels") or {}).get(JOBSET_NAME) == name
            }
            wait_for("the pod watch to see it whole", lambda: gangs.whole(name), timeout=30)
            lost = min(before, key=lambda p: str(p["spec"]["nodeName"]))
            victim = lost["spec"]["nodeName"]
            gangs.failure()
            fail_node(ns.api, victim, how="taint")
            requeued = wait_for(
                f"Phalanx's Requeued event on {owner}", lambda: requeues_of(ns, kind, name), timeout=120
            )
            old = {p["metadata"]["name"] for p in before}
            wait_for(
                f"every pod of {owner} from before the failure gone",
                lambda: not old & {p["metadata"]["name"] for p in ns.pods(f"{JOBSET_NAME}={name}")},
                timeout=120,
            )
            again = wait_for(f"{owner} whole again", lambda: jobset_block(ns, name, size), timeout=180)
    finally:
        notes = {what: _notes(w) for what, w in watches.items()}
        said = changes(says.stop())
        born.stop()
        if victim:
            heal_node(ns.api, victim)
    pods = jobset_pods(ns, name)
    print(ns.where(f"{JOBSET_NAME}={name}"), f"{owner} ran in {first}, then {again}; {victim} failed")
    print("Requeued:", [e["message"] for e in requeued])
    print("suspend, requeue note:", notes)
    for step in said:
        print("root group says:", step)
    return FailedOver(
        (first, again),
        victim,
        lost,
        old,
        children,
        pods,
        requeued,
        notes,
        said,
        [p for p in born.born_ungated if p.startswith(f"{name}/")],
    )


def _notes(watch: SuspendWatch) -> list[tuple[bool, str]]:
    watch.stop()
    return changes(watch.notes)


# ---------------------------------------------------------------------- Kueue beside Phalanx (test_kueue*.py)
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_GATES = ("kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")
GPUS = 6  # a Kueue test's pod's GPUs: one pod a node, and room for a small filler beside it


def kueue_pod_spec(restart: str | None = "Never") -> dict[str, Any]:
    """A pod of 6 GPUs (`restart`: None for a LeaderWorkerSet, whose StatefulSets take Always only)."""
    spec: dict[str, Any] = {"restartPolicy": restart} if restart else {}
    return spec | {
        "containers": [
            {
                "name": "worker",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {GPU_KEY: str(GPUS)}},
            }
        ],
    }


def queued_job(
    name: str, count: int, *, priority: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A gang of `count` pods, one network block, queued in Kueue's `lq`. Its podFailurePolicy ignores pods
    that were disruption targets (a taint's eviction, Phalanx's requeue), so none counts as a failure."""
    pod_spec = kueue_pod_spec()
    if priority:
        pod_spec["priorityClassName"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"phalanx.dev/managed": "true", "kueue.x-k8s.io/queue-name": "lq"},
            "annotations": {"phalanx.dev/topology-key": NB_KEY, **(annotations or {})},
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {"spec": pod_spec},
        },
    }


def kueue_workloads(ns: Namespace) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get(f"{KUEUE}/namespaces/{{ns}}/workloads")["items"]
    return items


def workload_of(ns: Namespace, job: str) -> dict[str, Any] | None:
    return next(
        (
            w
            for w in kueue_workloads(ns)
            if any(o["name"] == job for o in w["metadata"].get("ownerReferences", []))
        ),
        None,
    )


def kueue_condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next(
        (c for c in (workload or {}).get("status", {}).get("conditions", []) if c["type"] == kind), {}
    )


def whole_in_one_block(ns: Namespace, job: str, count: int) -> str | None:
    """The network block the Job's `count` pods are all bound in, or None."""
    pods = ns.job_pods(job)
    if len(pods) != count or len(bound(pods)) != count:
        return None
    blocks = domains_of(ns.api, pods, NB_KEY)
    return next(iter(blocks)) if len(blocks) == 1 else None


def cq_counts(api: RestClient, name: str) -> dict[str, Any]:
    """What the ClusterQueue counts: reserved and used quota by (flavor, resource), and its Workloads."""
    status = api.get(f"{KUEUE}/clusterqueues/{name}").get("status", {})

    def totals(key: str) -> dict[tuple[str, str], str]:
        return {
            (f["name"], r["name"]): str(r.get("total"))
            for f in status.get(key) or []
            for r in f.get("resources") or []
        }

    return {
        "reserved": totals("flavorsReservation"),
        "used": totals("flavorsUsage"),
        "reserving": status.get("reservingWorkloads", 0),
        "admitted": status.get("admittedWorkloads", 0),
    }


@dataclass(frozen=True)
class WorkloadVersion:
    """One version of a Kueue Workload as a watch saw it."""

    uid: str
    active: bool  # spec.active
    note: str  # Phalanx's requeue note (phalanx.dev/requeued), "" without
    status: dict[str, str]  # its conditions: type -> status
    reasons: dict[str, str]  # type -> reason

    def true(self, kind: str) -> bool:
        return self.status.get(kind) == "True"

    @property
    def phase(self) -> str:
        """Where it is, in the words of a requeue through Kueue: queued (no quota yet), admitted;
        deactivated by Phalanx (inactive, its note on it), evicted by Kueue for it, its quota released."""
        if self.active and not self.note:
            return "admitted" if self.true("Admitted") else "queued"
        if self.active or not self.note:
            return f"active={self.active} note={self.note!r}"  # neither Phalanx's nor Kueue's step
        if not self.true("Evicted"):
            return "deactivated"
        return "evicted" if self.true("QuotaReserved") else "released"


class WorkloadWatch:
    """Every version of the Kueue Workloads owned by `owner` (listed, then watched), so an eviction or a
    readmission shows however briefly it lasts."""

    def __init__(self, ns: Namespace, owner: str) -> None:
        self.owner = owner
        self.seen: list[WorkloadVersion] = []
        self._watch = PodWatch(ns.cluster, ns.name, self._see, collection=f"{KUEUE[1:]}/workloads")
        self._watch.start()

    def _see(self, _kind: str, workload: dict[str, Any], _now: float) -> None:
        meta = workload["metadata"]
        if any(o["name"] == self.owner for o in meta.get("ownerReferences") or []):
            conditions = (workload.get("status") or {}).get("conditions") or []
            self.seen.append(
                WorkloadVersion(
                    meta["uid"],
                    workload["spec"].get("active") is not False,
                    (meta.get("annotations") or {}).get("phalanx.dev/requeued", ""),
                    {c["type"]: c["status"] for c in conditions},
                    {c["type"]: c.get("reason", "") for c in conditions},
                )
            )

    def stop(self) -> list[WorkloadVersion]:
        self._watch.stop()
        return self.seen


class GateWatch:
    """Every version of the pods labelled `label=value` (bench/scale_watch.py's PodWatch lists, then watches,
    so Kueue's gate is seen however briefly it stays on): a pod seen released by Phalanx (its gate gone) while
    still carrying one of Kueue's gates would be Phalanx not waiting for Kueue. `kueue_gated`: the uids of
    the pods seen behind one of Kueue's gates (a pod made again under its old name is another pod)."""

    def __init__(self, ns: Namespace, label: str, value: str) -> None:
        self.label, self.value = label, value
        self.early: list[str] = []
        self.kueue_gated: set[str] = set()
        self._watch = PodWatch(ns.cluster, ns.name, self._see)
        self._watch.start()

    def _see(self, _kind: str, pod: dict[str, Any], _now: float) -> None:
        if (pod["metadata"].get("labels") or {}).get(self.label) != self.value:
            return
        gates = {g["name"] for g in pod["spec"].get("schedulingGates") or []}
        name = pod["metadata"]["name"]
        if gates & set(KUEUE_GATES):
            self.kueue_gated.add(pod["metadata"]["uid"])
            if "phalanx.dev/admission" not in gates:
                self.early.append(name)

    def stop(self) -> None:
        self._watch.stop()


REQUEUE_WRITES = ("DeactivateKueueWorkload", "ActivateKueueWorkload", "DeletePod")


def requeue_writes(operator: OperatorProcess) -> dict[str, int]:
    """How many of the writes that requeue a Kueue-managed owner Phalanx made so far (its
    phalanx_writes_total, by action), and how many requeues it counted (phalanx_requeues_total)."""
    out = dict.fromkeys((*REQUEUE_WRITES, "requeues"), 0)
    for family in text_string_to_metric_families(operator.scrape()):
        for s in family.samples:
            if s.name == "phalanx_writes_total" and s.labels.get("action") in REQUEUE_WRITES:
                out[s.labels["action"]] += int(s.value)
            elif s.name == "phalanx_requeues_total":
                out["requeues"] += int(s.value)
    return out
