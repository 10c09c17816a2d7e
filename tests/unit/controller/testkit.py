"""The controller's testkit: the article's cluster and builders for Jobs, pods and groups, fed through the
real cache (`ClusterCache`) and the loop's `plan_input`, so a test plans exactly what a pass would.

The seed topology: 8 nodes of 8 GPUs, n1-n4 in nb-a (lb-a1: n1 n2, lb-a2: n3 n4), n5-n8 in nb-b (lb-b1:
n5 n6, lb-b2: n7 n8).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from phalanx.api.builders import build_pod_group
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import parse_job_policy
from phalanx.api.status import GroupStatus, PodGroupStatus
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.loop.incremental import UnitMemo
from phalanx.controller.loop.scheduler import plan_input
from phalanx.controller.model.actions import Action, PatchStatus, status_write
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, WorkloadRecord
from phalanx.controller.plan import Plan, PlanInput

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
NB = "oci.oraclecloud.com/rdma.network_block_id"
LB = "oci.oraclecloud.com/rdma.local_block_id"
RACK = "example.com/rack"
GATE = {"name": "phalanx.dev/admission"}
NODES = [f"n{i}" for i in range(1, 9)]
LOCAL = {1: "lb-a1", 2: "lb-a1", 3: "lb-a2", 4: "lb-a2", 5: "lb-b1", 6: "lb-b1", 7: "lb-b2", 8: "lb-b2"}
TOPOLOGY = {"phalanx.dev/topology-key": NB}
Group = PodGroupRecord | CompositePodGroupRecord


def node_body(name: str | int) -> dict[str, Any]:
    i = int(str(name).removeprefix("n"))
    labels = {"kubernetes.io/hostname": f"n{i}", NB: "nb-a" if i <= 4 else "nb-b", LB: LOCAL[i]}
    return {
        "metadata": {"name": f"n{i}", "labels": labels},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "112", "memory": "2Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def job_body(
    name: str = "train",
    count: int = 4,
    *,
    annotations: dict[str, str] | None = None,
    suspend: bool = False,
    finished: bool = False,
    completions: int | None = None,
    succeeded: int = 0,
    created: str = "2026-11-30T11:00:00Z",
    priority_class: str | None = None,
    labelled_late: bool = False,
    managed: bool = True,
    indexed: bool = False,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "w", "image": "x"}]}
    if not labelled_late and (annotations or {}).get("phalanx.dev/policy") != "basic":
        pod_spec["schedulingGates"] = [GATE]  # what the webhook adds at creation
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    status: dict[str, Any] = {"succeeded": succeeded}
    if finished:
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    spec: dict[str, Any] = {
        "parallelism": count,
        "completions": count if completions is None else completions,
        "suspend": suspend,
        "template": {"spec": pod_spec},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "labels": {"phalanx.dev/managed": "true"} if managed else {},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": status,
    }


def pod_body(
    job: str,
    index: int,
    *,
    gpus: int = 8,
    node: str = "",
    released_to: str = "",
    gated: bool = True,
    group: str = "",
    phase: str = "Pending",
    priority: int = 0,
    completion_index: int | None = None,
) -> dict[str, Any]:
    """A pod of Job `job` (its Job controller's labels)."""
    labels = {"batch.kubernetes.io/controller-uid": f"uid-{job}", "job-name": job}
    if group:
        labels["phalanx.dev/pod-group"] = group
    if completion_index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(completion_index)
    spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        "priority": priority,
    }
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [GATE]
    if released_to:
        spec["nodeSelector"] = {"kubernetes.io/hostname": released_to}
    return {
        "metadata": {
            "name": f"{job}-{index}",
            "namespace": "ml",
            "uid": f"uid-{job}-{index}",
            "labels": labels,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def member(name: str, group: str, *, gpus: int = 8, node: str = "", released_to: str = "") -> dict[str, Any]:
    """A pod made by hand that joins the PodGroup `group` by label ("" for none)."""
    spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    elif released_to:
        spec["nodeSelector"] = {"kubernetes.io/hostname": released_to}
    else:
        spec["schedulingGates"] = [GATE]
    labels = {"phalanx.dev/pod-group": group} if group else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def filler(node: str) -> dict[str, Any]:
    """A pod of someone else taking all 8 GPUs of a node."""
    body = pod_body("other", int(node.removeprefix("n")), node=node, gated=False, phase="Running")
    body["metadata"]["labels"] = {}
    body["metadata"]["name"] = f"filler-{node}"
    return body


def group_of(job: dict[str, Any], status: PodGroupStatus | None = None) -> PodGroupRecord:
    """The PodGroup Phalanx made for a plain Job (with its Workload `<job>-wl`)."""
    policy = parse_job_policy(job, running=True)  # an existing Job (it may carry phalanx.dev/requeued)
    layout = parse_job_layout(job, policy)  # its topology mode is kept on the PodGroup
    body = build_pod_group(
        job, f"{job['metadata']['name']}-wl", policy, None, workload_uid="wl-uid", layout=layout
    )
    # made right after its Job, so as old as it (a group in the cache has a creationTimestamp)
    created = job["metadata"].get("creationTimestamp")
    body["metadata"].update(uid=f"pg-{job['metadata']['name']}", generation=1, creationTimestamp=created)
    if status is not None:
        body["status"] = status.to_api()
    return PodGroupRecord.from_body(body)


def with_status(group: Group, status: GroupStatus) -> Group:
    return dataclasses.replace(group, status=status)  # type: ignore[type-var]


def waiting_status(since: dt.datetime, reason: str = "Unschedulable") -> PodGroupStatus:
    """A group's status when it has not been admitted since `since` (its Admitted condition False)."""
    from phalanx.api.conditions import Condition

    admitted = Condition(
        type="Admitted",
        status="False",
        reason=reason,
        message="waiting",
        last_transition_time=since,
        observed_generation=1,
    )
    return PodGroupStatus(conditions=[admitted])


def running(job: str, index: int, node: str, group: str = "", **kw: Any) -> dict[str, Any]:
    """A pod of Job `job` bound to `node` and running."""
    return pod_body(job, index, gated=False, node=node, phase="Running", group=group, **kw)


def cluster(
    jobs: Sequence[tuple[dict[str, Any], Group | Sequence[Group] | None, Sequence[dict[str, Any]]]] = (),
    *,
    groups: Iterable[Group] = (),
    pods: Iterable[dict[str, Any]] = (),
    others: Iterable[dict[str, Any]] = (),
    nodes: Iterable[dict[str, Any]] | None = None,
    busy: Iterable[int | str] = (),
    backing_off: frozenset[str] = frozenset(),
    failing: frozenset[str] = frozenset(),
    announced: dict[str, str] | None = None,
    priority_classes: Iterable[dict[str, Any]] = (),
    levels: dict[str, tuple[str, ...]] | None = None,
    node_failure_grace: float = 30.0,
    owners: Sequence[tuple[str, dict[str, Any]]] = (),
    starvation_age: float = 60.0,
    objects: Sequence[tuple[str, dict[str, Any]]] = (),
) -> PlanInput:
    """A cache filled with these objects, and what a pass would plan from it.

    `jobs`: (Job body, the groups Phalanx made for it — a PodGroup, or a CompositePodGroup and its slices —
    or None, its pods). `groups` and `pods`: hand-made groups and the pods that join them; `others`: more
    pods (fillers, victims); `busy`: nodes a filler takes whole; `objects`: any other watched kind, as
    (kind, body), put in first (ResourceQuotas, DeviceClasses)."""
    cache = ClusterCache()
    for kind, body in objects:
        cache.upsert(kind, body)
    for body in nodes if nodes is not None else (node_body(n) for n in NODES):
        cache.upsert("Node", body)
    for body in priority_classes:
        cache.upsert("PriorityClass", body)
    for job, made, job_pods in jobs:
        records = [] if made is None else [made] if isinstance(made, Group) else list(made)
        for record in records:
            _put(cache, record)
        if records:
            name = job["metadata"]["name"]
            workload = WorkloadRecord("wl-uid", "ml", f"{name}-wl", f"uid-{name}", owner_kind="Job")
            cache.workloads.put(workload)
        for body in job_pods:
            cache.upsert("Pod", body)
    for record in groups:
        _put(cache, record)
    for body in [*pods, *others, *(filler(f"n{str(n).removeprefix('n')}") for n in busy)]:
        cache.upsert("Pod", body)
    for job, _, _ in jobs:  # after our objects: a Job is kept while objects of ours exist for it
        cache.upsert("Job", job)
    for kind, body in owners:  # owners of other kinds (JobSets, LeaderWorkerSets), as (kind, body)
        cache.upsert(kind, body)
    cache.announced.update(announced or {})
    state = plan_input(cache, backing_off, node_failure_grace, starvation_age=starvation_age, failing=failing)
    if levels is not None:
        state = dataclasses.replace(state, levels=levels)
    return state


def _put(cache: ClusterCache, record: Group) -> None:
    if isinstance(record, CompositePodGroupRecord):
        cache.composite_pod_groups.put(record)
    else:
        cache.pod_groups.put(record)


def kinds(actions: Sequence[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def only(actions: Sequence[Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def written_statuses(result: Plan) -> dict[str, Any]:
    """Group name -> the status the plan writes for it: a PatchStatus, or the whole status a RecordAdmission
    carries (an admission's status goes with its decision, in one write)."""
    writes = (status_write(a) for a in result.actions)
    return {ref.name: status for ref, status in (w for w in writes if w is not None)}


def status_of(result: Plan) -> PodGroupStatus:
    """The one status a plan writes (of its one group)."""
    (status,) = written_statuses(result).values()
    return status  # type: ignore[no-any-return]


def job_key(name: str, namespace: str = "ml") -> str:
    """The unit key of a Job."""
    return f"Job/{namespace}/{name}"


@dataclasses.dataclass
class StaticContext:
    """The watch room's context (watch/webhooks.py WatchContext) without a process: a cache of the test's,
    the namespaces Phalanx manages (all by default), no API client."""

    cache: ClusterCache = dataclasses.field(default_factory=ClusterCache)
    kube: Any = None
    cache_primed: bool = False
    namespaces: tuple[str, ...] = ()
    relisted: list[str] = dataclasses.field(default_factory=list)
    scheduler_names: tuple[str, ...] = ("default-scheduler",)

    def watches(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    def listed(self, kind: str) -> None:
        self.relisted.append(kind)

    async def outside(self, kind: str, body: Any) -> None:
        self.relisted.append(f"outside:{kind}")


# ---------------------------------------------------------------------- JobSets
def jobset_body(
    name: str = "train",
    replicated: Sequence[tuple[str, int, int]] = (("workers", 2, 2),),
    *,
    annotations: dict[str, str] | None = None,
    suspend: bool = False,
    managed: bool = True,
    gated: bool = True,
    gpus: int = 8,
    created: str = "2026-11-30T11:00:00Z",
    in_order: bool = False,
) -> dict[str, Any]:
    """A JobSet: `replicated` is (name, replicas, parallelism) per replicated Job; gated as the webhook
    leaves it."""
    pod_spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if gated:
        pod_spec["schedulingGates"] = [GATE]
    spec: dict[str, Any] = {
        "suspend": suspend,
        "replicatedJobs": [
            {
                "name": rjob,
                "replicas": replicas,
                "template": {
                    "spec": {
                        "parallelism": parallelism,
                        "completions": parallelism,
                        "template": {"spec": dict(pod_spec)},
                    }
                },
            }
            for rjob, replicas, parallelism in replicated
        ],
    }
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-js-{name}",
            "creationTimestamp": created,
            "labels": {"phalanx.dev/managed": "true"} if managed else {},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def child_job(jobset: str, rjob: str, job_index: int, *, deleting: bool = False) -> dict[str, Any]:
    """The child Job `<jobset>-<rjob>-<job_index>` the JobSet controller makes (controlled by the JobSet)."""
    name = f"{jobset}-{rjob}-{job_index}"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "uid": f"uid-job-{name}",
        "ownerReferences": [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": jobset,
                "uid": f"uid-js-{jobset}",
                "controller": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"spec": {}}}}


def jobset_pod(
    jobset: str,
    rjob: str,
    job_index: int,
    index: int,
    *,
    global_index: int = 0,
    gpus: int = 8,
    node: str = "",
    released_to: str = "",
    gated: bool = True,
    priority: int = 0,
) -> dict[str, Any]:
    """A pod of child Job `<jobset>-<rjob>-<job_index>`, completion index `index`, as JobSet labels it."""
    child = f"{jobset}-{rjob}-{job_index}"
    body = pod_body(
        child,
        index,
        gpus=gpus,
        node=node,
        released_to=released_to,
        gated=gated,
        priority=priority,
        completion_index=index,
    )
    body["metadata"]["labels"].update(
        {
            "jobset.sigs.k8s.io/jobset-name": jobset,
            "jobset.sigs.k8s.io/jobset-uid": f"uid-js-{jobset}",
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "jobset.sigs.k8s.io/job-index": str(job_index),
            "jobset.sigs.k8s.io/job-global-index": str(global_index),
        }
    )
    return body


def jobset_cluster(
    jobsets: Sequence[dict[str, Any]],
    pods: Iterable[dict[str, Any]] = (),
    *,
    groups: Iterable[Group] = (),
    busy: Iterable[int | str] = (),
    others: Iterable[dict[str, Any]] = (),
    jobs: Sequence[tuple[dict[str, Any], Group | Sequence[Group] | None, Sequence[dict[str, Any]]]] = (),
    memo: UnitMemo | None = None,
) -> PlanInput:
    """JobSets (and their pods, groups made for them) through the real cache, as a pass would plan (with
    `memo`, as an incremental pass makes the units)."""
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    for record in groups:
        _put(cache, record)
    for body in [*pods, *others, *(filler(f"n{str(n).removeprefix('n')}") for n in busy)]:
        cache.upsert("Pod", body)
    for job, made, job_pods in jobs:
        for record in [] if made is None else [made] if isinstance(made, Group) else list(made):
            _put(cache, record)
        for body in job_pods:
            cache.upsert("Pod", body)
        cache.upsert("Job", job)
    for body in jobsets:
        cache.upsert("JobSet", body)
    return plan_input(cache, memo=memo)


# ---------------------------------------------------------------------- LeaderWorkerSets
def lws_body(
    name: str = "serve",
    *,
    replicas: int = 1,
    size: int = 4,
    annotations: dict[str, str] | None = None,
    leader_ready: bool = False,
    subgroup_size: int | None = None,
    managed: bool = True,
    gated: bool = True,
    gpus: int = 8,
    created: str = "2026-11-30T11:00:00Z",
    groups_made: int | None = None,
) -> dict[str, Any]:
    """`groups_made`: its status.replicas, the groups LWS has made (surge groups of a rollout included)."""
    pod_spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if gated:
        pod_spec["schedulingGates"] = [GATE]
    template: dict[str, Any] = {"size": size, "workerTemplate": {"spec": pod_spec}}
    if subgroup_size is not None:
        template["subGroupPolicy"] = {"subGroupSize": subgroup_size}
    spec: dict[str, Any] = {"replicas": replicas, "leaderWorkerTemplate": template}
    if leader_ready:
        spec["startupPolicy"] = "LeaderReady"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-lws-{name}",
            "creationTimestamp": created,
            "labels": {"phalanx.dev/managed": "true"} if managed else {},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        **({"status": {"replicas": groups_made}} if groups_made is not None else {}),
    }


def leader_statefulset(
    lws: str, replicas: int, *, owner_uid: str | None = None, group_index: int | None = None
) -> dict[str, Any]:
    """The StatefulSet LWS `lws` (lws_body) makes for its leaders, as LWS v0.8 labels and owns it:
    `replicas` is its spec.replicas (the LWS's, plus maxSurge in a surging rollout). `owner_uid`: another
    LWS of that name's; `group_index`: a group's workers' StatefulSet instead (named `<lws>-<index>`)."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/template-revision-hash": "r1",
    }
    if group_index is not None:
        labels["leaderworkerset.sigs.k8s.io/group-index"] = str(group_index)
    owner = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": lws,
        "uid": owner_uid or f"uid-lws-{lws}",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": lws if group_index is None else f"{lws}-{group_index}",
            "namespace": "ml",
            "uid": f"uid-sts-{lws}-{group_index}",
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas},
    }


def lws_pod(
    lws: str,
    group: int,
    worker: int,
    *,
    revision: str = "r1",
    gpus: int = 8,
    node: str = "",
    released_to: str = "",
    gated: bool = True,
    phase: str = "Pending",
    pod_group: str = "",
) -> dict[str, Any]:
    """Group `group`'s pod of worker index `worker` (0: the leader), as LWS names and labels it."""
    name = f"{lws}-{group}" if worker == 0 else f"{lws}-{group}-{worker}"
    body = member(name, "", gpus=gpus, node=node, released_to=released_to)
    if not gated:
        body["spec"].pop("schedulingGates", None)
    body["status"]["phase"] = phase if not node else "Running"
    body["metadata"]["labels"] = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
    }
    if pod_group:  # released by Phalanx: it carries its PodGroup's name
        from phalanx.api.naming import pod_group_label_value

        body["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(pod_group)
    return body


def owner_cluster(
    owners: Sequence[tuple[str, dict[str, Any]]],
    pods: Iterable[dict[str, Any]] = (),
    *,
    groups: Iterable[Group] = (),
    busy: Iterable[int | str] = (),
    others: Iterable[dict[str, Any]] = (),
) -> PlanInput:
    """Owners of any kind, as (kind, body), with their pods and the groups made for them. `owners` may hold
    other objects the cache reads beside them, as (kind, body): an LWS's leader StatefulSet."""
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    for record in groups:
        _put(cache, record)
    for body in [*pods, *others, *(filler(f"n{str(n).removeprefix('n')}") for n in busy)]:
        cache.upsert("Pod", body)
    for kind, body in owners:
        cache.upsert(kind, body)
    return plan_input(cache)


def made_groups(result: Plan, created: dt.datetime = NOW) -> list[Group]:
    """The groups a plan creates, as the cache holds them once created at `created` (and with the status it
    wrote)."""
    from phalanx.controller.model.actions import CreateCompositePodGroup, CreatePodGroup

    out: list[Group] = []
    stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    for a in result.actions:
        if isinstance(a, CreateCompositePodGroup):
            body = a.group.to_api()
            body["metadata"].update(uid=f"cpg-{body['metadata']['name']}", creationTimestamp=stamp)
            out.append(CompositePodGroupRecord.from_body(body))
        elif isinstance(a, CreatePodGroup):
            body = a.pod_group.to_api()
            body["metadata"].update(uid=f"pg-{body['metadata']['name']}", creationTimestamp=stamp)
            out.append(PodGroupRecord.from_body(body))
    return written(result, out)


def written(result: Plan, groups: Iterable[Group]) -> list[Group]:
    """`groups` with the statuses (and recorded decisions) the plan wrote, as the next pass reads them."""
    from phalanx.controller.model.actions import RecordAdmission

    by_name = {g.name: g for g in groups}
    for a in result.actions:
        if isinstance(a, RecordAdmission) and a.group.name in by_name:
            g = by_name[a.group.name]
            status = a.status or g.status.model_copy(update={"admission": a.admission})
            by_name[g.name] = with_status(g, status)
        elif isinstance(a, PatchStatus) and a.group.name in by_name:
            by_name[a.group.name] = with_status(by_name[a.group.name], a.status)
    return list(by_name.values())
