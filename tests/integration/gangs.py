"""The gangs of a namespace, of every kind Phalanx admits, read straight from the API for the soaks' checks
(invariants.py): which pods form one gang and how many it must run at once, counted from the kind's own spec
with no Phalanx code, so that the checks do not take the operator's word for what a whole gang is.

- a batch/v1 Job labelled `phalanx.dev/managed` (not a JobSet's child Job): its pods (`job-name`), its
  `parallelism` pods;
- a JobSet: every pod labelled `jobset.sigs.k8s.io/jobset-name` = its name, the sum over `spec.replicatedJobs`
  of `replicas` x min(`parallelism`, `completions`) pods (a Job runs no more pods than completions are left;
  parallelism 1 when unset); with `phalanx.dev/slice-topology-key` each child Job (`<jobset>-<replicated
  Job>-<i>`, its pods' `job-name`) is a part that must sit in one domain of that key;
- a TrainJob: the JobSet Trainer makes for it (named as the TrainJob), counted as above; that count must be
  the TrainJob's `spec.trainer.numNodes` (else its runtime's `mlPolicy.numNodes`); the Phalanx keys are the
  TrainJob's;
- a LeaderWorkerSet: one gang per group index 0..`spec.replicas`-1, the pods labelled
  `leaderworkerset.sigs.k8s.io/name` = its name and `group-index` = the index, of
  `spec.leaderWorkerTemplate.size` pods; with `subGroupPolicy` (type LeaderWorker) and
  `phalanx.dev/slice-topology-key`, each run of `subGroupSize` worker indexes (the leader is 0) is a part.

Staged kinds make their later pods only once the first ones run: a JobSet with `startupPolicyOrder: InOrder`
makes a replicated Job once the one before is Ready, an LWS with `startupPolicy: LeaderReady` a group's
workers once its leader is Ready. Such a gang waits with only its first stage's pods (`first`: the first
replicated Job's, or the leader), and is admitted once all `size` run.

Each gang also carries `holder`, the group Phalanx records the gang's decision on (a Job's PodGroup, a
JobSet's root CompositePodGroup, an LWS group's root PodGroup), found through the `phalanx.dev/owner`
annotation Phalanx documents on every group it makes (docs/integrations.md), for the checks that the gang
runs where its decision says and for the room held for a waiting gang (bounded waiting).

The kinds' controllers make their pods gradually (a JobSet's child Jobs, then their pods; an LWS's leaders,
then each leader's workers): a gang with fewer live pods than its size is neither admitted nor waiting, and
`pending` says so; the soak waits for it (with a timeout) before judging.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from phalanx.devcluster.http import ApiError, RestClient

GATE = "phalanx.dev/admission"
GROUP_LABEL = "phalanx.dev/pod-group"
MANAGED = "phalanx.dev/managed"
KEY_ANNOTATION = "phalanx.dev/topology-key"
SLICE_KEY_ANNOTATION = "phalanx.dev/slice-topology-key"
OWNER_ANNOTATION = "phalanx.dev/owner"
REQUEUED_ANNOTATION = "phalanx.dev/requeued"
JOB_GROUP_LABEL = "phalanx.dev/job-name"
HOSTNAME = "kubernetes.io/hostname"
JOB_NAME = "job-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"

PHALANX = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}"
PATHS = {  # the collection of each owner kind in a namespace
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
    "TrainJob": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs",
    "LeaderWorkerSet": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
}
RUNTIMES = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_SUFFIX["Ti"] = 2**40


# ---------------------------------------------------------------------- pods
def quantity(text: str | int, resource: str) -> int:
    """A resource quantity as an integer: millicores for cpu, bytes or counts otherwise."""
    value = str(text)
    match = re.fullmatch(r"([0-9.]+)(m|[kMGT]i?|)", value)
    if match is None:
        raise ValueError(f"quantity {value!r} of {resource} not understood by the checker")
    number, suffix = float(match.group(1)), match.group(2)
    scale = 1000 if resource == "cpu" else 1
    if suffix == "m":
        return round(number * scale / 1000)
    return round(number * _SUFFIX[suffix] * scale)


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Sum over the containers (init containers are not used by the soaks); limits stand for requests."""
    total: dict[str, int] = defaultdict(int)
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, amount in wanted.items():
            total[resource] += quantity(amount, resource)
    total["pods"] += 1
    return dict(total)


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def terminal(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def usage_node(pod: dict[str, Any]) -> str:
    """The node whose room the pod takes: bound, or released by Phalanx (ungated, pinned, labelled)."""
    if terminal(pod):
        return ""
    if pod["spec"].get("nodeName"):
        return str(pod["spec"]["nodeName"])
    pinned = (pod["spec"].get("nodeSelector") or {}).get(HOSTNAME, "")
    if pinned and not gated(pod) and pod["metadata"].get("labels", {}).get(GROUP_LABEL):
        return str(pinned)
    return ""


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


# ---------------------------------------------------------------------- gangs
@dataclass
class Part:
    """A piece of a gang that must sit in one domain of the gang's slice key (a JobSet's child Job)."""

    name: str
    size: int
    pods: list[dict[str, Any]]


@dataclass
class Gang:
    kind: str  # the kind the user wrote: Job, JobSet, TrainJob, LeaderWorkerSet
    name: str  # unique in the namespace: the owner's name, an LWS group's `<name>/<index>`
    owner: dict[str, Any]  # the object the user wrote
    size: int  # pods it runs at once, from the owner's spec
    pods: list[dict[str, Any]]
    holder: dict[str, Any] | None  # the group holding its decision, if Phalanx made it yet
    key: str | None = None
    slice_key: str | None = None
    parts: list[Part] = field(default_factory=list)  # with slice_key: each in one domain of it
    suspended: bool = False  # its owner (or a TrainJob's JobSet) says spec.suspend
    pending: str = ""  # why its pods cannot be judged yet (its JobSet not made, pods still to come)
    first: int = 0  # a staged gang's pods before its decision (its first stage); 0: all `size`
    problems: list[str] = field(default_factory=list)  # the kind's own counts disagree

    @property
    def owner_name(self) -> str:
        return str(self.owner["metadata"]["name"])

    @property
    def live(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if not terminal(p)]

    @property
    def placed(self) -> list[dict[str, Any]]:
        return [p for p in self.live if usage_node(p)]

    @property
    def admitted(self) -> bool:
        live = self.live
        return len(live) == self.size and all(p["spec"].get("nodeName") for p in live)

    @property
    def waiting(self) -> bool:
        """Fully gated: all its pods (a staged gang: those of its first stage, or more) made, none placed."""
        live = self.live
        made = self.first <= len(live) <= self.size if self.first else len(live) == self.size
        return made and all(gated(p) and not usage_node(p) for p in live)

    @property
    def made_first(self) -> int:
        """The pods that exist before it can be decided: its first stage's, or all of them."""
        return self.first or self.size

    @property
    def holding(self) -> bool:
        """Its holder records room held for it because it waited too long (bounded waiting)."""
        return (self.reservation or {}).get("cause") == "BoundedWaiting"

    @property
    def reservation(self) -> dict[str, Any] | None:
        reservation: dict[str, Any] | None = ((self.holder or {}).get("status") or {}).get("reservation")
        return reservation

    @property
    def admission(self) -> dict[str, Any] | None:
        admission: dict[str, Any] | None = ((self.holder or {}).get("status") or {}).get("admission")
        return admission

    @property
    def priority(self) -> int:
        """Its pods' priority (the apiserver's Priority admission writes their PriorityClass's value into
        `spec.priority`); the highest if they differ, 0 without pods."""
        return max((int(p["spec"].get("priority") or 0) for p in self.pods), default=0)

    @property
    def running(self) -> list[dict[str, Any]]:
        """Its pods that hold a node and are not going (bound or released, not terminating)."""
        return [p for p in self.placed if not p["metadata"].get("deletionTimestamp")]

    @property
    def requeued(self) -> bool:
        """Phalanx's requeue note on the owner (a Job, JobSet or TrainJob it suspended to requeue)."""
        return bool(_annotations(self.owner).get(REQUEUED_ANNOTATION))

    def request(self) -> dict[str, int]:
        """What one pod asks for: the most any of its pods asks, resource by resource (the soaks give a
        gang's pods one shape; with several this is the safe side for 'it would fit')."""
        out: dict[str, int] = {}
        for pod in self.pods:
            for resource, amount in pod_requests(pod).items():
                out[resource] = max(out.get(resource, 0), amount)
        return out


# ---------------------------------------------------------------------- reading
@dataclass
class Objects:
    """One listing of what the readers need, in one namespace (pods: of every namespace)."""

    pods: list[dict[str, Any]]
    owners: dict[str, list[dict[str, Any]]]  # kind -> objects, not being deleted
    roots: list[dict[str, Any]]  # Phalanx's groups without a parent: PodGroups and CompositePodGroups
    runtimes: dict[str, dict[str, Any]]  # ClusterTrainingRuntimes by name

    @classmethod
    def read(cls, api: RestClient, namespace: str, kinds: bool) -> Objects:
        def items(path: str) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = api.get(path.replace("{ns}", namespace))["items"]
            return found

        owners: dict[str, list[dict[str, Any]]] = {kind: [] for kind in PATHS}
        owners["Job"] = items(PATHS["Job"])
        roots = [g for g in items(f"{PHALANX}/podgroups") if not g["spec"].get("parentCompositePodGroupName")]
        runtimes: dict[str, dict[str, Any]] = {}
        if kinds:
            for kind in ("JobSet", "TrainJob", "LeaderWorkerSet"):
                owners[kind] = items(PATHS[kind])
            roots += [
                g
                for g in items(f"{PHALANX}/compositepodgroups")
                if not g["spec"].get("parentCompositePodGroupName")
            ]
            runtimes = {r["metadata"]["name"]: r for r in items(RUNTIMES)}
        for kind, objects in owners.items():
            owners[kind] = [o for o in objects if not o["metadata"].get("deletionTimestamp")]
        pods = api.get("/api/v1/pods")["items"]
        return cls(pods, owners, roots, runtimes)


def read_gangs(objects: Objects, namespace: str) -> dict[str, Gang]:
    """Every gang of the namespace's owners, by name."""
    pods = [p for p in objects.pods if p["metadata"]["namespace"] == namespace]
    by_label: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        for label in (JOB_NAME, JOBSET_NAME, LWS_NAME):
            if value := _labels(pod).get(label):
                by_label[label, value].append(pod)
    roots: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for group in objects.roots:
        if owner := _annotations(group).get(OWNER_ANNOTATION):
            roots[owner].append(group)
        elif job := _labels(group).get(JOB_GROUP_LABEL):
            roots[f"Job/{job}"].append(group)
    gangs: list[Gang] = []
    gangs += [_job(job, by_label, roots) for job in objects.owners["Job"] if _plain_job(job)]
    jobsets = {j["metadata"]["name"]: j for j in objects.owners["JobSet"]}
    for jobset in jobsets.values():
        if not any(ref.get("kind") == "TrainJob" for ref in jobset["metadata"].get("ownerReferences") or []):
            gangs.append(_jobset("JobSet", jobset, jobset, by_label, roots))
    for trainjob in objects.owners["TrainJob"]:
        gangs.append(_trainjob(trainjob, jobsets.get(trainjob["metadata"]["name"]), objects, by_label, roots))
    for lws in objects.owners["LeaderWorkerSet"]:
        gangs += _lws_groups(lws, by_label, roots)
    return {g.name: g for g in gangs}


def _plain_job(job: dict[str, Any]) -> bool:
    """A gang Job of its own: labelled for Phalanx, not a JobSet's child Job."""
    refs = job["metadata"].get("ownerReferences") or []
    return _labels(job).get(MANAGED) == "true" and not any(r.get("kind") == "JobSet" for r in refs)


Pods = dict[tuple[str, str], list[dict[str, Any]]]
Roots = dict[str, list[dict[str, Any]]]


def _job(job: dict[str, Any], by_label: Pods, roots: Roots) -> Gang:
    name = job["metadata"]["name"]
    holder = next(iter(roots.get(f"Job/{name}") or []), None)
    return Gang(
        "Job",
        name,
        job,
        int(job["spec"].get("parallelism") or 1),
        by_label.get((JOB_NAME, name), []),
        holder,
        key=_annotations(job).get(KEY_ANNOTATION) or None,
        suspended=bool(job["spec"].get("suspend")),
    )


def child_jobs(jobset: dict[str, Any]) -> list[list[tuple[str, int]]]:
    """A JobSet's child Jobs as its controller names them, with the pods each runs at once, by replicated
    Job."""
    out = []
    name = jobset["metadata"]["name"]
    for rjob in jobset["spec"].get("replicatedJobs") or []:
        spec = (rjob.get("template") or {}).get("spec") or {}
        parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
        completions = spec.get("completions")
        at_once = parallelism if completions is None else min(parallelism, int(completions))
        out.append([(f"{name}-{rjob['name']}-{i}", at_once) for i in range(int(rjob.get("replicas") or 1))])
    return out


def _jobset(kind: str, owner: dict[str, Any], jobset: dict[str, Any], by_label: Pods, roots: Roots) -> Gang:
    """The gang of `jobset`, whose owner (the object the user wrote, with the Phalanx keys) is `owner`."""
    name = jobset["metadata"]["name"]
    pods = by_label.get((JOBSET_NAME, name), [])
    by_rjob = child_jobs(jobset)
    children = [child for rjob in by_rjob for child in rjob]
    in_order = (jobset["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    notes = _annotations(owner)
    slice_key = notes.get(SLICE_KEY_ANNOTATION) or None
    parts = []
    if slice_key:
        parts = [
            Part(child, size, [p for p in pods if _labels(p).get(JOB_NAME) == child])
            for child, size in children
        ]
    holder = next(iter(roots.get(f"{kind}/{owner['metadata']['name']}") or []), None)
    return Gang(
        kind,
        owner["metadata"]["name"],
        owner,
        sum(size for _, size in children),
        pods,
        holder,
        key=notes.get(KEY_ANNOTATION) or None,
        slice_key=slice_key,
        parts=parts,
        suspended=bool(owner["spec"].get("suspend") or jobset["spec"].get("suspend")),
        first=sum(size for _, size in by_rjob[0]) if in_order and len(by_rjob) > 1 else 0,
    )


def num_nodes(trainjob: dict[str, Any], runtimes: dict[str, dict[str, Any]]) -> int | None:
    """The TrainJob's nodes: its own `spec.trainer.numNodes`, else its ClusterTrainingRuntime's."""
    nodes = ((trainjob["spec"].get("trainer") or {}).get("numNodes")) or None
    if nodes is None:
        runtime = runtimes.get(trainjob["spec"]["runtimeRef"]["name"]) or {}
        nodes = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("numNodes")
    return int(nodes) if nodes is not None else None


def _trainjob(
    trainjob: dict[str, Any], jobset: dict[str, Any] | None, objects: Objects, by_label: Pods, roots: Roots
) -> Gang:
    name = trainjob["metadata"]["name"]
    nodes = num_nodes(trainjob, objects.runtimes)
    if jobset is None:
        gang = Gang(
            "TrainJob", name, trainjob, nodes or 0, [], None, pending=f"{name}: its JobSet not made yet"
        )
        gang.suspended = bool(trainjob["spec"].get("suspend"))
        return gang
    gang = _jobset("TrainJob", trainjob, jobset, by_label, roots)
    if nodes is not None and gang.size != nodes:
        gang.problems.append(f"{name}: its JobSet runs {gang.size} pods at once, its numNodes is {nodes}")
    return gang


def _lws_groups(lws: dict[str, Any], by_label: Pods, roots: Roots) -> list[Gang]:
    name = lws["metadata"]["name"]
    template = lws["spec"].get("leaderWorkerTemplate") or {}
    size = int(template.get("size") or 1)
    pods = by_label.get((LWS_NAME, name), [])
    notes = _annotations(lws)
    slice_key = notes.get(SLICE_KEY_ANNOTATION) or None
    subgroup = int((template.get("subGroupPolicy") or {}).get("subGroupSize") or 0)
    leader_ready = lws["spec"].get("startupPolicy") == "LeaderReady"
    gangs = []
    for index in range(int(lws["spec"].get("replicas") if lws["spec"].get("replicas") is not None else 1)):
        members = [p for p in pods if _labels(p).get(LWS_GROUP) == str(index)]
        revisions = {_labels(p).get(LWS_REVISION, "") for p in members}
        # Phalanx names an LWS group's root `...-<index>-<revision>` (docs/integrations.md: keyed by the LWS,
        # the group index and the template revision); the soaks never roll an LWS, so one revision.
        ends = {f"-{index}-{r}" if r else f"-{index}" for r in revisions}
        holders = [
            g for g in roots.get(f"LeaderWorkerSet/{name}", []) if g["metadata"]["name"].endswith(tuple(ends))
        ]
        gang = Gang(
            "LeaderWorkerSet",
            f"{name}/{index}",
            lws,
            size,
            members,
            holders[0] if len(holders) == 1 else None,
            key=notes.get(KEY_ANNOTATION) or None,
            first=1 if leader_ready and size > 1 else 0,
        )
        if slice_key and subgroup:
            gang.slice_key = slice_key
            gang.parts = [
                Part(
                    f"{gang.name}/subgroup-{start // subgroup}",
                    len(range(start, min(size, start + subgroup))),
                    [p for p in members if start <= int(_labels(p).get(LWS_WORKER, -1)) < start + subgroup],
                )
                for start in range(0, size, subgroup)
            ]
        if len(revisions) > 1:
            gang.problems.append(
                f"{gang.name}: pods of {len(revisions)} template revisions: {sorted(revisions)}"
            )
        gangs.append(gang)
    return gangs


def delete_owner(api: RestClient, namespace: str, kind: str, name: str) -> None:
    """Delete the object a user wrote (its pods go with it, through the garbage collector); gone is fine."""
    try:
        api.request(
            "DELETE", f"{PATHS[kind].replace('{ns}', namespace)}/{name}", {"propagationPolicy": "Background"}
        )
    except ApiError as e:
        if e.status != 404:
            raise
