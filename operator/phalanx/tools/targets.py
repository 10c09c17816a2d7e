"""What `phalanx explain` can be asked about: one table of kinds, and the reading of one target's objects.

A target is an owner of pods (a workload kind: batch/v1 Job, JobSet, TrainJob, LeaderWorkerSet) or one of
Phalanx's own groups (`podgroup/NAME`, `compositepodgroup/NAME`). For every owner kind the groups are found
the same way: the PodGroups and CompositePodGroups it controls (Phalanx writes `ownerReferences` with
`controller: true`) or that name it as their owner (`phalanx.dev/owner: Kind/name`: a TrainJob's groups are
its JobSet's), with the whole tree when there is a CompositePodGroup (a sliced Job's slices, a JobSet's
child Jobs). What differs per kind is a row of `OWNER_KINDS`: how the kind is spelt, where its object lives,
which pods are its members and which group each belongs to, what its spec says about the gang before
Phalanx made a PodGroup, and the pods a staged one has still to make (the loop's slots). An owner with
several gangs (a LeaderWorkerSet: one per group) is explained by the first of them that is not running, the
others listed. `gather` does the reading (GETs only); the rest is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api import jobset as js
from phalanx.api import keys, lws
from phalanx.api import trainjob as tj
from phalanx.api.group import API_VERSION, COMPOSITE_POD_GROUPS, GROUP, POD_GROUPS
from phalanx.api.job_layout import REQUIRED, TopologyModeKind, parse_job_layout
from phalanx.api.job_policy import JobPolicyError, managed_by_label, parse_job_policy
from phalanx.api.naming import pod_group_label_value
from phalanx.bodies import mapping
from phalanx.tools.kube import KubeError, NotFoundError, Reader
from phalanx.tools.kueue_view import owned_by as workloads_owned_by
from phalanx.tools.kueue_view import read_workloads
from phalanx.tools.topologies import ClusterTopology, read_topologies
from phalanx.tools.view import PodView

Body = Mapping[str, Any]


@dataclass(frozen=True)
class Gang:
    """What a spec says of a gang before (or beside) its PodGroup."""

    gang: bool
    min_count: int | None
    """None: not known yet (a TrainJob's before Kubeflow Trainer made its JobSet: its runtime sizes it)."""
    topology_key: str | None
    topology_mode: TopologyModeKind = REQUIRED
    """How strictly the key holds (`phalanx.dev/topology-mode`): the engine's `GroupRequest.mode`."""


@dataclass(frozen=True)
class OwnerKind:
    """A workload kind whose pods Phalanx gangs: one row of `OWNER_KINDS`."""

    word: str
    """The target's kind, as `explain` prints it (job/NAME)."""
    kind: str
    """Its `kind` (as in ownerReferences)."""
    api_version: str
    plural: str
    aliases: frozenset[str]
    pod_selector: Callable[[Body], str]
    """The label selector of its pods."""
    managed: Callable[[Body], bool]
    """Whether it asks Phalanx to gang its pods."""
    state: Callable[[Body], str]
    """'suspended', 'succeeded', 'failed' or '' (running or waiting)."""
    held: Callable[[Body], bool]
    """Whether its new pods come behind Phalanx's gate (the webhook saw its creation)."""
    gang: Callable[[Body], Gang | str]
    """The gang its spec asks for, or why its spec is invalid."""
    remaining: Callable[[Body], int | None]
    """Pods it has left to run (a gang near the end shrinks to them), None when unbounded."""
    members: Callable[[Sequence[Body], Sequence[PodView]], dict[str, list[PodView]]]
    """Its pods per leaf PodGroup of its tree (leaves in tree order)."""
    several: bool = False
    """It has several gangs (a LeaderWorkerSet: one per group): one of them is explained."""
    mode_from_owner: bool = False
    """The scheduling loop decides its gang in the topology mode its spec says now (a LeaderWorkerSet's),
    not the one its PodGroup keeps in `phalanx.dev/topology-mode` (a Job's, as at the group's creation)."""
    slots: Callable[[Facts, Mapping[str, Sequence[PodView]]], dict[str, list[PodView]]] = (
        lambda facts, members: {}
    )
    """A staged owner's pods still to come, by leaf (a JobSet's later replicated Jobs, a LeaderReady
    group's workers): the loop decides its whole tree with a placeholder, a *slot*, for each of them
    (controller/plan/staging.py), so explain does too. none for an owner that makes its pods at once."""

    def path(self, namespace: str, name: str | None = None) -> str:
        return _api_path(self.api_version, namespace, self.plural, name)


def _api_path(api_version: str, namespace: str, plural: str, name: str | None = None) -> str:
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


def _meta(obj: Body | None) -> Mapping[str, Any]:
    return mapping((obj or {}).get("metadata"))


def _spec(obj: Body | None) -> Mapping[str, Any]:
    return mapping((obj or {}).get("spec"))


# ---------------------------------------------------------------------- batch/v1 Job


def _job_pods(job: Body) -> str:
    match = mapping(mapping(_spec(job).get("selector")).get("matchLabels"))
    if match:
        return ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    return f"batch.kubernetes.io/controller-uid={_meta(job).get('uid')}"


def _job_managed(job: Body) -> bool:
    """As the controller reads it (a value the webhooks refuse keeps an owner managed)."""
    return managed_by_label(mapping(_meta(job).get("labels")))[0]


def _job_state(job: Body) -> str:
    for cond in mapping(job.get("status")).get("conditions") or []:
        if mapping(cond).get("status") == "True" and mapping(cond).get("type") == "Complete":
            return "succeeded"
        if mapping(cond).get("status") == "True" and mapping(cond).get("type") == "Failed":
            return "failed"
    return "suspended" if _spec(job).get("suspend") else ""


def _job_held(job: Body) -> bool:
    template = mapping(mapping(_spec(job).get("template")).get("spec"))
    return any(mapping(g).get("name") == keys.ADMISSION_GATE for g in template.get("schedulingGates") or [])


def _job_gang(job: Body) -> Gang | str:
    try:
        policy = parse_job_policy(job, running=True)
        layout = parse_job_layout(job, policy)
    except JobPolicyError as e:
        return f"its annotations are invalid: {e}"
    return Gang(policy.is_gang, policy.min_count or 1, policy.topology_key, layout.topology_mode)


def _job_remaining(job: Body) -> int | None:
    completions = _spec(job).get("completions")
    if not isinstance(completions, int) or isinstance(completions, bool):
        return None
    return max(0, completions - int(mapping(job.get("status")).get("succeeded") or 0))


def _job_members(leaves: Sequence[Body], pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    """One PodGroup: all the Job's pods. Slices: a pod's PodGroup label, else its completion index
    (index i belongs to slice i // slice-size, slices in rank order), as the controller assigns them."""
    names = [str(_meta(g).get("name", "")) for g in leaves]
    if len(names) == 1:
        return {names[0]: list(pods)}
    out: dict[str, list[PodView]] = {name: [] for name in names}
    by_label = {pod_group_label_value(name): name for name in names}
    ranked = sorted(leaves, key=lambda g: _rank(str(_meta(g).get("name", ""))))
    for pod in pods:
        leaf = by_label.get(pod.pod_group)
        if leaf is None and pod.completion_index is not None and ranked:
            size = min_count_of(ranked[0]) or 1
            slot = pod.completion_index // size
            leaf = str(_meta(ranked[slot]).get("name", "")) if slot < len(ranked) else None
        if leaf is not None:
            out[leaf].append(pod)
    return out


def _rank(name: str) -> tuple[int, str]:
    """A slice's rank from its name (`<composite>-<i>`); other names after, by name."""
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isascii() and tail.isdigit() else (1 << 31, name)


JOB = OwnerKind(
    word="job",
    kind="Job",
    api_version="batch/v1",
    plural="jobs",
    aliases=frozenset({"job", "jobs", "job.batch", "jobs.batch"}),
    pod_selector=_job_pods,
    managed=_job_managed,
    state=_job_state,
    held=_job_held,
    gang=_job_gang,
    remaining=_job_remaining,
    members=_job_members,
)


# ---------------------------------------------------------------------- JobSet, TrainJob, LeaderWorkerSet


def _aliases(singular: str, plural: str, group: str, *short: str) -> frozenset[str]:
    return frozenset({singular, plural, f"{singular}.{group}", f"{plural}.{group}", *short})


def _conditions_state(obj: Body, complete: str) -> str:
    for cond in mapping(obj.get("status")).get("conditions") or []:
        cond = mapping(cond)
        if cond.get("status") == "True" and cond.get("type") in (complete, "Failed"):
            return "succeeded" if cond.get("type") == complete else "failed"
    return "suspended" if _spec(obj).get("suspend") else ""


def _gated(pod_spec: Body) -> bool:
    return any(mapping(g).get("name") == keys.ADMISSION_GATE for g in pod_spec.get("schedulingGates") or [])


def _jobset_held(obj: Body) -> bool:
    rjobs = [mapping(r) for r in _spec(obj).get("replicatedJobs") or []]
    specs = [
        mapping(mapping(mapping(mapping(r.get("template")).get("spec")).get("template")).get("spec"))
        for r in rjobs
    ]
    return bool(specs) and all(_gated(spec) for spec in specs)


def _jobset_gang(obj: Body) -> Gang | str:
    """As the controller makes its tree (kinds/jobset.py): the pods every child Job runs at once."""
    try:
        policy = js.parse_jobset_policy(obj)
    except JobPolicyError as e:
        return f"its annotations are invalid: {e}"
    size = sum(child.at_once for child in policy.child_jobs(name_of(obj)))
    return Gang(True, size, policy.topology_key, policy.topology_mode)


def _jobset_members(leaves: Sequence[Body], pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    """By the PodGroup label Phalanx puts on every pod, else by child Job (`<composite>-<rjob>-<index>`)."""
    out = members_by_label(leaves, pods)
    names = set(out)
    for pod in pods:
        if any(pod in members for members in out.values()):
            continue
        rjob, index = pod.labels.get(js.REPLICATED_JOB_LABEL), pod.labels.get(js.JOB_INDEX_LABEL)
        for leaf in leaves:
            if f"{parent_of(leaf)}-{rjob}-{index}" == name_of(leaf) and name_of(leaf) in names:
                out[name_of(leaf)].append(pod)
    return out


def _slots(leaf: str, namespace: str, pod_spec: Body, ranks: Iterable[int]) -> list[PodView]:
    """Placeholders for a staged owner's pods still to come, as the loop makes them (controller/plan/
    staging.py): one a rank, named by its slot (`<PodGroup>-slot-<rank>`), shaped like `pod_spec`, gated."""
    spec = {**pod_spec, "schedulingGates": [{"name": keys.ADMISSION_GATE}]}
    return [
        PodView.of({"metadata": {"namespace": namespace, "name": f"{leaf}-slot-{rank}"}, "spec": spec})
        for rank in ranks
    ]


def _jobset_slots(facts: Facts, members: Mapping[str, Sequence[PodView]]) -> dict[str, list[PodView]]:
    """A staged JobSet's pods still to come (InOrder, dependsOn: its controller makes a replicated Job once
    the one before is Ready or Complete), by leaf: the loop decides the whole tree with a placeholder, a
    *slot*, for each of them, shaped like its replicated Job's pod template, so explain does too
    (controller/plan/staging.py). None for a JobSet that is not staged (its pods are all made at once) or
    for a child Job that ran to completion."""
    jobset, leaves = facts.jobset, facts.groups
    if jobset is None:
        return {}
    try:
        policy = js.parse_jobset_policy(jobset)
    except JobPolicyError:
        return {}
    if not policy.in_order and not any(r.depends_on for r in policy.replicated_jobs):
        return {}
    rjobs = {r.name: r for r in policy.replicated_jobs}
    namespace = str(_meta(jobset).get("namespace") or "")
    out: dict[str, list[PodView]] = {}
    for child in policy.child_jobs(name_of(jobset)):
        suffix = f"{child.replicated_job}-{child.index}"  # its PodGroup: <root>-<replicated job>-<index>
        leaf = next((g for g in leaves if name_of(g) == f"{parent_of(g)}-{suffix}"), None)
        if leaf is None:
            continue
        pods = members.get(name_of(leaf), ())
        kept = [p for p in pods if (p.phase == "Succeeded" or not p.terminal) and not p.deleting]
        live = sum(1 for p in pods if not p.terminal and not p.deleting)
        if child.done(sum(1 for p in pods if p.phase == "Succeeded"), live):
            continue
        present = {p.completion_index for p in kept}
        ranks = [rank for rank in range(child.at_once) if rank not in present]
        out[name_of(leaf)] = _slots(name_of(leaf), namespace, rjobs[child.replicated_job].pod_spec, ranks)
    return out


JOBSET = OwnerKind(
    word="jobset",
    kind=js.KIND,
    api_version=js.API_VERSION,
    plural="jobsets",
    aliases=_aliases("jobset", "jobsets", js.API_GROUP, "js"),
    pod_selector=lambda obj: f"{js.JOBSET_UID_LABEL}={_meta(obj).get('uid')}",
    managed=_job_managed,
    state=lambda obj: _conditions_state(obj, "Completed"),
    held=_jobset_held,
    gang=_jobset_gang,
    remaining=lambda obj: None,
    members=_jobset_members,
    slots=_jobset_slots,
)


def _trainjob_gang(obj: Body) -> Gang | str:
    """Before its JobSet is made: a gang of a size not known yet. The controller sizes it from the JobSet
    (`Facts.jobset`, then read instead), whose replicated Jobs Trainer makes from the runtime, which explain
    does not read: `numNodes` is not it (an MPI launcher of its own is one more pod, an initializer too)."""
    key = mapping(_meta(obj).get("annotations")).get(keys.TOPOLOGY_KEY_ANNOTATION)
    return Gang(True, None, str(key) if key else None)


TRAINJOB = OwnerKind(
    word="trainjob",
    kind=tj.KIND,
    api_version=tj.API_VERSION,
    plural="trainjobs",
    aliases=_aliases("trainjob", "trainjobs", tj.API_GROUP),
    # Trainer names the JobSet as the TrainJob; its pods are the JobSet's.
    pod_selector=lambda obj: f"{js.JOBSET_NAME_LABEL}={_meta(obj).get('name')}",
    managed=_job_managed,
    state=lambda obj: _conditions_state(obj, "Complete"),
    held=lambda obj: tj.phalanx_patch(obj) is not None,
    gang=_trainjob_gang,
    remaining=lambda obj: None,
    members=_jobset_members,
    slots=_jobset_slots,
)


def _lws_template(obj: Body) -> Body:
    return mapping(_spec(obj).get("leaderWorkerTemplate"))


def _lws_held(obj: Body) -> bool:
    template = _lws_template(obj)
    parts = [mapping(template.get(p)) for p in ("leaderTemplate", "workerTemplate") if template.get(p)]
    return bool(parts) and all(_gated(mapping(part.get("spec"))) for part in parts)


def _lws_slots(facts: Facts, members: Mapping[str, Sequence[PodView]]) -> dict[str, list[PodView]]:
    """A LeaderReady group's workers still to come (LWS makes them once the leader is Ready), by leaf: the
    loop decides the whole group with the leader, a slot for each of them, shaped like the worker template
    (kinds/lws.py), in its PodGroup, or with subgroups in the PodGroup of its subgroup (`<root>-s<i>`)."""
    try:
        policy = lws.parse_lws_policy(facts.owner or {})
    except JobPolicyError:
        return {}
    if not policy.leader_ready:
        return {}
    if policy.subgroup_size is None:
        ranked = [(g, list(range(policy.size))) for g in facts.groups if parent_of(g) is None]
    else:
        ranked = [
            (g, workers)
            for i, workers in policy.subgroups()
            for g in facts.groups
            if name_of(g) == f"{parent_of(g)}-s{i}"
        ]
    namespace = str(_meta(facts.owner).get("namespace") or "")
    out: dict[str, list[PodView]] = {}
    for leaf, workers in ranked:
        live = (p for p in members.get(name_of(leaf), ()) if not p.terminal and not p.deleting)
        present = {p.labels.get(lws.WORKER_INDEX_LABEL) for p in live}
        ranks = [rank for rank in workers if str(rank) not in present]
        out[name_of(leaf)] = _slots(name_of(leaf), namespace, policy.worker_spec, ranks)
    return out


def _lws_gang(obj: Body) -> Gang | str:
    try:
        policy = lws.parse_lws_policy(obj)
    except JobPolicyError as e:
        return f"its annotations are invalid: {e}"
    return Gang(True, policy.size, policy.topology_key, policy.topology_mode)


LEADER_WORKER_SET = OwnerKind(
    word="leaderworkerset",
    kind=lws.KIND,
    api_version=lws.API_VERSION,
    plural="leaderworkersets",
    aliases=_aliases("leaderworkerset", "leaderworkersets", lws.API_GROUP, "lws"),
    pod_selector=lambda obj: f"{lws.NAME_LABEL}={_meta(obj).get('name')}",
    managed=_job_managed,
    state=lambda obj: "",  # it serves: never suspended nor finished
    held=_lws_held,
    gang=_lws_gang,
    remaining=lambda obj: None,
    members=lambda leaves, pods: members_by_label(leaves, pods),  # Phalanx labels each pod with its group
    several=True,
    mode_from_owner=True,  # kinds/lws.py: a group's tree takes the LeaderWorkerSet's mode
    slots=_lws_slots,
)

OWNER_KINDS: tuple[OwnerKind, ...] = (JOB, JOBSET, TRAINJOB, LEADER_WORKER_SET)
"""The workload kinds `explain` knows. A new kind is a new row."""


@dataclass(frozen=True)
class GroupKind:
    word: str
    plural: str
    aliases: frozenset[str]


POD_GROUP = GroupKind(
    "podgroup",
    POD_GROUPS,
    frozenset({"podgroup", "podgroups", "pg", f"podgroup.{GROUP}", f"podgroups.{GROUP}"}),
)
COMPOSITE = GroupKind(
    "compositepodgroup",
    COMPOSITE_POD_GROUPS,
    frozenset(
        {
            "compositepodgroup",
            "compositepodgroups",
            "cpg",
            f"compositepodgroup.{GROUP}",
            f"compositepodgroups.{GROUP}",
        }
    ),
)
GROUP_KINDS: tuple[GroupKind, ...] = (POD_GROUP, COMPOSITE)


# ---------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    kind: str
    """A row's word: job, podgroup, compositepodgroup, ..."""
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def target_forms() -> str:
    """`job/NAME, podgroup/NAME or compositepodgroup/NAME` (every kind of the tables)."""
    rows: list[OwnerKind | GroupKind] = [*OWNER_KINDS, *GROUP_KINDS]
    words = [f"{k.word}/NAME" for k in rows]
    return ", ".join(words[:-1]) + " or " + words[-1]


def parse_target(text: str) -> Target:
    """`KIND/NAME`, the kind spelt as kubectl does (job, jobs, job.batch, pg, podgroups.<group>, ...)."""
    kind, sep, name = text.partition("/")
    if not sep or not name or "/" in name:
        raise ValueError(f"{text!r}: say {target_forms()}")
    word = kind.lower()
    rows: list[OwnerKind | GroupKind] = [*OWNER_KINDS, *GROUP_KINDS]
    for row in rows:
        if word in row.aliases:
            return Target(row.word, name)
    raise ValueError(f"{text!r}: {kind} is not a kind phalanx explain knows; say {target_forms()}")


def owner_kind(word: str) -> OwnerKind | None:
    return next((k for k in OWNER_KINDS if k.word == word), None)


# ---------------------------------------------------------------------- a target's objects


@dataclass(frozen=True)
class Facts:
    """Everything `explain` reads, as the API returned it."""

    target: Target
    namespace: str
    owner_kind: OwnerKind | None
    owner: Body | None
    composites: tuple[Body, ...]
    """The CompositePodGroups of the target's tree, root first (empty: a single PodGroup)."""
    groups: tuple[Body, ...]
    """The PodGroups: the target's one, or the tree's leaves in tree order (empty: none made yet)."""
    target_pods: tuple[Body, ...]
    """The owner's pods (or the pods labelled with the groups), terminal ones too."""
    nodes: tuple[Body, ...]
    pods: tuple[Body, ...]
    """Every pod of the cluster that is not Succeeded or Failed."""
    topologies: tuple[ClusterTopology, ...] = ()
    kueue_workloads: tuple[Body, ...] = ()
    """The Kueue Workloads that own the owner (kueue_view.py), when Kueue runs."""
    kueue_error: str = ""
    """Why Kueue's Workloads could not be read ("" when they were, or Kueue is not installed)."""
    others: tuple[tuple[str, str], ...] = ()
    """An owner with several gangs (a LeaderWorkerSet): (root group, phase) of those not explained."""
    jobset: Body | None = None
    """The JobSet whose tree it is (the target, a TrainJob's, or the one that owns the group asked about):
    its spec sizes the gang (a TrainJob's too), and a staged one's shapes the pods it has still to make
    (`OwnerKind.slots`)."""


def name_of(obj: Body | None) -> str:
    return str(_meta(obj).get("name", ""))


def parent_of(obj: Body) -> str | None:
    parent = _spec(obj).get("parentCompositePodGroupName")
    return str(parent) if parent else None


def min_count_of(group: Body) -> int | None:
    gang = mapping(_spec(group).get("schedulingPolicy")).get("gang")
    if not isinstance(gang, Mapping):
        return None
    value = gang.get("minCount", gang.get("minGroupCount"))
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def owned_by(obj: Body, row: OwnerKind, owner: Body) -> bool:
    """Whether the group was made for `owner`: controlled by it, or naming it as whose gang it is (a
    TrainJob's groups are controlled by its JobSet and say `phalanx.dev/owner: TrainJob/<name>`)."""
    uid = str(_meta(owner).get("uid") or "")
    shown = mapping(_meta(obj).get("annotations")).get(keys.OWNER_ANNOTATION)
    return (bool(uid) and controller_uid(obj) == uid) or shown == f"{row.kind}/{name_of(owner)}"


def _waiting_first(objs: Sequence[Body]) -> list[Body]:
    """Gangs in name order, the first one not running first (the one worth explaining)."""
    ordered = sorted(objs, key=lambda o: _rank(name_of(o)))
    running = [o for o in ordered if mapping(o.get("status")).get("phase") == "Running"]
    return [o for o in ordered if o not in running] + running


def controller_uid(obj: Body) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if mapping(ref).get("controller"):
            return str(mapping(ref).get("uid") or "") or None
    return None


def tree_of(
    root: str, composites: Sequence[Body], groups: Sequence[Body]
) -> tuple[tuple[Body, ...], tuple[Body, ...]]:
    """The composites (root first, depth first) and leaves (in the same order) under the composite `root`."""
    by_name = {name_of(c): c for c in composites}
    out_c: list[Body] = []
    out_g: list[Body] = []

    def walk(name: str, seen: frozenset[str]) -> None:
        if name in seen or name not in by_name:
            return
        out_c.append(by_name[name])
        leaves = sorted((g for g in groups if parent_of(g) == name), key=lambda g: _rank(name_of(g)))
        out_g.extend(leaves)
        for child in sorted((c for c in composites if parent_of(c) == name), key=name_of):
            walk(name_of(child), seen | {name})

    walk(root, frozenset())
    return tuple(out_c), tuple(out_g)


def root_of(name: str, composites: Sequence[Body]) -> str:
    """The root of the tree the composite `name` belongs to (a broken chain stops where it breaks)."""
    by_name = {name_of(c): c for c in composites}
    seen = {name}
    while (parent := parent_of(by_name[name]) if name in by_name else None) and parent not in seen:
        if parent not in by_name:
            break
        seen.add(parent)
        name = parent
    return name


def members_by_label(leaves: Sequence[Body], pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    """Pods that joined a hand-made PodGroup by its label."""
    names = {pod_group_label_value(name_of(g)): name_of(g) for g in leaves}
    out: dict[str, list[PodView]] = {name_of(g): [] for g in leaves}
    for pod in pods:
        if pod.pod_group in names:
            out[names[pod.pod_group]].append(pod)
    return out


async def _phalanx_objects(reader: Reader, ns: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The namespace's PodGroups and CompositePodGroups (none when the CRDs are not installed)."""
    found: list[list[dict[str, Any]]] = []
    for plural in (POD_GROUPS, COMPOSITE_POD_GROUPS):
        try:
            found.append(await reader.list(f"/apis/{API_VERSION}/namespaces/{ns}/{plural}"))
        except NotFoundError:
            found.append([])
    return found[0], found[1]


async def _owner_of(reader: Reader, obj: Body, ns: str) -> tuple[OwnerKind | None, dict[str, Any] | None]:
    for ref in _meta(obj).get("ownerReferences") or []:
        ref = mapping(ref)
        if not ref.get("controller"):
            continue
        row = next(
            (
                k
                for k in OWNER_KINDS
                if k.kind == ref.get("kind")
                and k.api_version.split("/")[0] == str(ref.get("apiVersion")).split("/")[0]
            ),
            None,
        )
        if row is None:
            return None, None
        try:
            return row, await reader.get(row.path(ns, str(ref.get("name"))))
        except NotFoundError:
            return row, None
    return None, None


async def gather(reader: Reader, target: Target, namespace: str) -> Facts:
    """Read what `explain` needs from the cluster (GETs only)."""
    ns = namespace
    groups_all, composites_all = await _phalanx_objects(reader, ns)
    row = owner_kind(target.kind)
    owner: dict[str, Any] | None = None
    composites: tuple[Body, ...] = ()
    groups: tuple[Body, ...] = ()
    others: tuple[Body, ...] = ()
    if row is not None:
        try:
            owner = await reader.get(row.path(ns, target.name))
        except NotFoundError as e:
            raise KubeError(f"{target.kind} {target.name} not found in namespace {ns}") from e
        roots = [c for c in composites_all if owned_by(c, row, owner) and parent_of(c) is None]
        if roots:
            first, *rest = _waiting_first(roots) if row.several else roots
            composites, groups = tree_of(name_of(first), composites_all, groups_all)
            others = tuple(rest) if row.several else ()
        else:
            groups = tuple(sorted((g for g in groups_all if owned_by(g, row, owner)), key=name_of))
            if row.several and len(groups) > 1:
                first, *rest = _waiting_first(groups)
                groups, others = (first,), tuple(rest)
    else:
        plural = POD_GROUPS if target.kind == POD_GROUP.word else COMPOSITE_POD_GROUPS
        by_name = {name_of(g): g for g in (groups_all if plural == POD_GROUPS else composites_all)}
        if target.name not in by_name:
            try:  # the list may lag; the object may also exist where the CRD was just installed
                by_name[target.name] = await reader.get(
                    f"/apis/{API_VERSION}/namespaces/{ns}/{plural}/{target.name}"
                )
            except NotFoundError as e:
                what = "podgroup" if plural == POD_GROUPS else "compositepodgroup"
                raise KubeError(
                    f"{what} {target.name} not found in namespace {ns} (or Phalanx's CRDs are not installed)"
                ) from e
        obj = by_name[target.name]
        parent = parent_of(obj) if plural == POD_GROUPS else target.name
        if parent is not None:
            composites, groups = tree_of(root_of(parent, composites_all), composites_all, groups_all)
            if plural == POD_GROUPS and obj not in groups:
                groups = (obj,)  # its parent is gone: explain it alone
        else:
            groups = (obj,)
        row, owner = await _owner_of(reader, obj, ns)
    jobset = owner if row is JOBSET else None
    if row is TRAINJOB and owner is not None:
        try:  # its gang and its groups' tree are its JobSet's, which Trainer names as the TrainJob
            made: dict[str, Any] | None = await reader.get(JOBSET.path(ns, name_of(owner)))
        except NotFoundError:
            made = None
        uid = str(_meta(owner).get("uid") or "")
        jobset = made if made is not None and controller_uid(made) == uid else None
    if row is not None and owner is not None:
        selector = row.pod_selector(owner)
    else:
        values = sorted(pod_group_label_value(name_of(g)) for g in groups) or [
            pod_group_label_value(target.name)
        ]
        selector = f"{keys.POD_GROUP_LABEL} in ({','.join(values)})"
    target_pods = await reader.list(f"/api/v1/namespaces/{ns}/pods", {"labelSelector": selector})
    if others:  # one of the owner's gangs is explained: its pods only (they carry its group's label)
        mine = {pod_group_label_value(name_of(g)) for g in groups}
        target_pods = [
            p for p in target_pods if mapping(_meta(p).get("labels")).get(keys.POD_GROUP_LABEL) in mine
        ]
    nodes = await reader.list("/api/v1/nodes")
    pods = await reader.list(
        "/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
    )
    topologies = await read_topologies(reader)
    kueue: tuple[Body, ...] = ()
    kueue_error = ""
    if owner is not None:  # Kueue's view beside Phalanx's (kueue_view.py)
        found, kueue_error = await read_workloads(reader, ns)
        kueue = tuple(workloads_owned_by(found, str(_meta(owner).get("uid") or "")))
    return Facts(
        target,
        ns,
        row,
        owner,
        composites,
        groups,
        tuple(target_pods),
        tuple(nodes),
        tuple(pods),
        tuple(topologies),
        kueue,
        kueue_error,
        tuple((name_of(o), str(mapping(o.get("status")).get("phase") or "")) for o in others),
        jobset,
    )
