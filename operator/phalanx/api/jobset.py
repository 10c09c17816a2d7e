"""A JobSet (jobset.x-k8s.io/v1alpha2) as Phalanx reads it: its gang shape from the spec and its Phalanx
annotations, validated with messages that name the field.

A managed JobSet is one tree: all its child Jobs together (all or nothing), each child Job one PodGroup whose
minCount is the pods the Job runs at once (its parallelism, or its completions if fewer).
`phalanx.dev/topology-key` (+ `topology-mode`) keeps every pod in one domain; `phalanx.dev/slice-topology-key`
keeps each child Job's pods in one domain of a finer level.
The shape comes from `spec.replicatedJobs` (later child Jobs may not exist yet), never from the pods seen.
Child Job i of replicated Job r is named `<jobset>-<r>-<i>` (JobSet's placement.GenJobName); its pods carry
`jobset.sigs.k8s.io/replicatedjob-name`, `job-index` and `job-global-index` labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from phalanx.api.admission_checks import removed_gate_problems
from phalanx.api.job_layout import PREFERRED, REQUIRED, TopologyModeKind
from phalanx.api.job_policy import (
    JobPolicyError,
    PolicyProblem,
    key_problems,
    node_label_problem,
    priority_class_problem,
)
from phalanx.api.keys import (
    ADMISSION_GATE,
    MANAGED_LABEL,
    PREEMPTION_POLICY_ANNOTATION,
    REQUEUED_ANNOTATION,
    SLICE_TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
)
from phalanx.api.scheduling import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER, PreemptionPolicy
from phalanx.api.workload import MAX_TEMPLATES
from phalanx.bodies import items, mapping

API_GROUP: Final = "jobset.x-k8s.io"
API_VERSION: Final = f"{API_GROUP}/v1alpha2"
KIND: Final = "JobSet"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT_LABEL: Final = "jobset.sigs.k8s.io/restart-attempt"
EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# The Phalanx annotations a JobSet takes (requeued is written by Phalanx).
JOBSET_ANNOTATIONS: Final = (
    TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
    SLICE_TOPOLOGY_KEY_ANNOTATION,
    PREEMPTION_POLICY_ANNOTATION,
    REQUEUED_ANNOTATION,
)
TOPOLOGY_MODES: Final = (REQUIRED, PREFERRED)


@dataclass(frozen=True)
class ReplicatedJob:
    """One entry of `spec.replicatedJobs`: `replicas` child Jobs of `parallelism` pods each."""

    name: str
    replicas: int
    parallelism: int
    pod_spec: Mapping[str, Any]  # the pods' spec (what a pod not created yet will ask for)
    depends_on: tuple[str, ...] = ()
    completions: int | None = None  # None: the child Job completes with its first pod that succeeds


@dataclass(frozen=True)
class ChildJob:
    """A child Job the JobSet makes (or will): its PodGroup has `at_once` as minCount."""

    name: str  # <jobset>-<replicated job>-<index>
    replicated_job: str
    index: int
    global_index: int
    parallelism: int
    completions: int | None = None

    @property
    def at_once(self) -> int:
        """The pods the child Job runs at once: its parallelism, or its completions if fewer (the Job
        controller never runs more pods than it has completions to make), at least 1 (as a Job's gang)."""
        if self.completions is None:
            return self.parallelism
        return max(1, min(self.parallelism, self.completions))

    def done(self, succeeded: int, live: int) -> bool:
        """Whether it ran to completion (the Job controller's rule): its completions succeeded, or without
        completions a pod succeeded and none is left running."""
        return succeeded >= self.completions if self.completions else succeeded > 0 and live == 0


@dataclass(frozen=True)
class JobSetPolicy:
    topology_key: str | None
    slice_topology_key: str | None
    topology_mode: TopologyModeKind
    preemption_policy: PreemptionPolicy | None  # None: the PriorityClass's
    priority_class_name: str | None
    replicated_jobs: tuple[ReplicatedJob, ...]
    in_order: bool  # startupPolicyOrder InOrder: replicated Jobs are created one after the other

    def child_jobs(self, jobset: str) -> list[ChildJob]:
        out: list[ChildJob] = []
        for rjob in self.replicated_jobs:
            for index in range(rjob.replicas):
                name = f"{jobset}-{rjob.name}-{index}"
                out.append(ChildJob(name, rjob.name, index, len(out), rjob.parallelism, rjob.completions))
        return out

    @property
    def pods(self) -> int:
        return sum(r.replicas * r.parallelism for r in self.replicated_jobs)


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _text(annotations: Mapping[str, Any], key: str) -> str | None:
    value = annotations.get(key)
    # Annotation values are strings; surrounding whitespace is a YAML accident, not a choice (as a Job's).
    return None if value is None else str(value).strip()


def annotation_problems(annotations: Mapping[str, Any]) -> list[PolicyProblem]:
    """What is wrong with a JobSet's Phalanx annotations (a TrainJob's too: they reach its JobSet)."""
    problems: list[PolicyProblem] = []

    def text(key: str) -> str | None:
        return _text(annotations, key)

    key, slice_key = text(TOPOLOGY_KEY_ANNOTATION), text(SLICE_TOPOLOGY_KEY_ANNOTATION)
    for name, value in ((TOPOLOGY_KEY_ANNOTATION, key), (SLICE_TOPOLOGY_KEY_ANNOTATION, slice_key)):
        bad_key = None if value is None else node_label_problem(name, value)
        if bad_key is not None:
            problems.append(bad_key)
    if key is not None and key == slice_key:
        problems.append(
            PolicyProblem(SLICE_TOPOLOGY_KEY_ANNOTATION, f"must be finer than {key}, not the same")
        )
    mode = text(TOPOLOGY_MODE_ANNOTATION) or REQUIRED
    if mode not in TOPOLOGY_MODES:
        problems.append(
            PolicyProblem(TOPOLOGY_MODE_ANNOTATION, f"{mode!r} is not one of required, preferred")
        )
    elif mode == PREFERRED and key is None:
        problems.append(PolicyProblem(TOPOLOGY_MODE_ANNOTATION, f"preferred needs {TOPOLOGY_KEY_ANNOTATION}"))
    preemption = text(PREEMPTION_POLICY_ANNOTATION)
    if preemption is not None and preemption not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        problems.append(
            PolicyProblem(
                PREEMPTION_POLICY_ANNOTATION, f"{preemption!r} is not one of PreemptLowerPriority, Never"
            )
        )
    if EXCLUSIVE_TOPOLOGY_ANNOTATION in annotations and (key is not None or slice_key is not None):
        problems.append(
            PolicyProblem(
                EXCLUSIVE_TOPOLOGY_ANNOTATION,
                f"JobSet's exclusive placement and Phalanx's {TOPOLOGY_KEY_ANNOTATION} both place the pods: "
                "use one of them (remove this annotation to let Phalanx place the gang)",
            )
        )
    return problems


def parse_jobset_policy(body: Mapping[str, Any]) -> JobSetPolicy:
    """The gang a JobSet asks for; raises JobPolicyError naming every field at fault."""
    meta, spec = mapping(body.get("metadata")), mapping(body.get("spec"))
    annotations = mapping(meta.get("annotations"))
    problems = annotation_problems(annotations)
    key = _text(annotations, TOPOLOGY_KEY_ANNOTATION)
    slice_key = _text(annotations, SLICE_TOPOLOGY_KEY_ANNOTATION)
    mode = _text(annotations, TOPOLOGY_MODE_ANNOTATION) or REQUIRED
    preemption = _text(annotations, PREEMPTION_POLICY_ANNOTATION)
    rjobs = _replicated_jobs(spec, problems)
    if problems:
        raise JobPolicyError.of(problems)
    classes = {str(mapping(r.pod_spec).get("priorityClassName") or "") for r in rjobs}
    startup = mapping(spec.get("startupPolicy")).get("startupPolicyOrder")
    return JobSetPolicy(
        topology_key=key,
        slice_topology_key=slice_key,
        topology_mode=PREFERRED if mode == PREFERRED else REQUIRED,
        preemption_policy=PREEMPT_NEVER
        if preemption == PREEMPT_NEVER
        else None
        if preemption is None
        else PREEMPT_LOWER_PRIORITY,
        priority_class_name=next(iter(sorted(classes)), "") or None,
        replicated_jobs=tuple(rjobs),
        in_order=startup == "InOrder",
    )


def _replicated_jobs(spec: Mapping[str, Any], problems: list[PolicyProblem]) -> list[ReplicatedJob]:
    out = []
    raw = items(spec.get("replicatedJobs"))
    if not raw:
        problems.append(
            PolicyProblem("spec.replicatedJobs", "a JobSet needs at least one replicated Job", "field")
        )
    elif len(raw) > MAX_TEMPLATES:
        problems.append(
            PolicyProblem(
                "spec.replicatedJobs",
                f"has {len(raw)} replicated Jobs, more than Phalanx can place as one gang: each is a "
                f"PodGroupTemplate of the JobSet's Workload, which holds at most {MAX_TEMPLATES} (as "
                "upstream's); merge replicated Jobs that share a pod template (as replicas of one), or "
                f"create the JobSet without the {MANAGED_LABEL} label",
                "field",
            )
        )
    for i, entry in enumerate(raw):
        entry = mapping(entry)
        job_spec = mapping(mapping(entry.get("template")).get("spec"))
        replicas = _int(entry.get("replicas"), 1)
        parallelism = _int(job_spec.get("parallelism"), 1)
        where = f"spec.replicatedJobs[{i}]"
        if replicas < 1:
            problems.append(
                PolicyProblem(f"{where}.replicas", "must be a whole number of at least 1", "field")
            )
        if parallelism < 1:
            problems.append(
                PolicyProblem(
                    f"{where}.template.spec.parallelism",
                    "must be at least 1 for a gang (a child Job of parallelism 0 can never be placed)",
                    "field",
                )
            )
        depends = tuple(str(mapping(d).get("name") or "") for d in items(entry.get("dependsOn")))
        pod_spec = mapping(mapping(job_spec.get("template")).get("spec"))
        field = f"{where}.template.spec.template.spec.priorityClassName"
        system = priority_class_problem(pod_spec.get("priorityClassName"), field, KIND)
        if system is not None:
            problems.append(system)
        completions = job_spec.get("completions")
        out.append(
            ReplicatedJob(
                str(entry.get("name") or ""),
                replicas,
                parallelism,
                pod_spec,
                depends,
                completions if isinstance(completions, int) and not isinstance(completions, bool) else None,
            )
        )
    return out


def gated_pod_spec(pod_spec: Mapping[str, Any], gate: str) -> tuple[dict[str, Any], bool]:
    """A pod spec with `gate` among its scheduling gates, and whether it had to be added."""
    spec = dict(pod_spec)
    gates = [g for g in items(spec.get("schedulingGates")) if isinstance(g, Mapping)]
    if any(g.get("name") == gate for g in gates):
        return spec, False
    spec["schedulingGates"] = [*gates, {"name": gate}]
    return spec, True


def gated_replicated_jobs(spec: Mapping[str, Any], gate: str) -> list[dict[str, Any]] | None:
    """`spec.replicatedJobs` with `gate` added to each pod template (None: every one has it already)."""
    changed = False
    out: list[dict[str, Any]] = []
    for entry in items(spec.get("replicatedJobs")):
        entry = dict(mapping(entry))
        template = dict(mapping(entry.get("template")))
        job_spec = dict(mapping(template.get("spec")))
        pod_template = dict(mapping(job_spec.get("template")))
        pod_spec, added = gated_pod_spec(mapping(pod_template.get("spec")), gate)
        changed = changed or added
        pod_template["spec"], job_spec["template"], template["spec"] = pod_spec, pod_template, job_spec
        entry["template"] = template
        out.append(entry)
    return out if changed else None


def rank_of(labels: Mapping[str, str]) -> tuple[int, int]:
    """A JobSet pod's rank: its child Job's global index, then its completion index."""
    return (
        _label_int(labels, JOB_GLOBAL_INDEX_LABEL),
        _label_int(labels, "batch.kubernetes.io/job-completion-index"),
    )


def _label_int(labels: Mapping[str, str], key: str) -> int:
    value = str(labels.get(key) or "")
    return int(value) if value.isascii() and value.isdigit() else 1 << 31


def child_job_of(labels: Mapping[str, str], jobset: str) -> str:
    """The name of the child Job a pod belongs to ("" if it carries no JobSet labels)."""
    rjob, index = labels.get(REPLICATED_JOB_LABEL), labels.get(JOB_INDEX_LABEL)
    if not rjob or index is None:
        return ""
    return f"{jobset}-{rjob}-{index}"


def admit_create(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """What the gate webhook does with a labelled JobSet at creation: its replicated Jobs with Phalanx's gate
    in every pod template (None: nothing to add); raises JobPolicyError naming every field at fault."""
    problems = key_problems(body, annotations=JOBSET_ANNOTATIONS)
    spec = mapping(body.get("spec"))
    for i, entry in enumerate(items(spec.get("replicatedJobs"))):
        template = mapping(mapping(entry).get("template"))
        if MANAGED_LABEL in mapping(mapping(template.get("metadata")).get("labels")):
            problems.append(
                PolicyProblem(
                    f"spec.replicatedJobs[{i}].template.metadata.labels[{MANAGED_LABEL}]",
                    "label the JobSet, not its Jobs: Phalanx admits a managed JobSet whole, and its child "
                    "Jobs must not be admitted on their own",
                    "field",
                )
            )
        pod_spec = mapping(mapping(mapping(template.get("spec")).get("template")).get("spec"))
        if pod_spec.get("nodeName"):
            problems.append(
                PolicyProblem(
                    f"spec.replicatedJobs[{i}].template.spec.template.spec.nodeName",
                    "must not be set: pods bound by hand cannot be gang-admitted",
                    "field",
                )
            )
        if not isinstance(pod_spec.get("schedulingGates") or [], list):
            problems.append(
                PolicyProblem(
                    f"spec.replicatedJobs[{i}].template.spec.template.spec.schedulingGates",
                    "must be a list",
                    "field",
                )
            )
    try:
        parse_jobset_policy(body)
    except JobPolicyError as e:
        problems.extend(e.problems)
    if problems:
        raise JobPolicyError.of(problems)
    return gated_replicated_jobs(spec, ADMISSION_GATE)


def update_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What the update webhook refuses of a managed JobSet: Phalanx annotations changed after creation (the
    JobSet's groups were made from them), unknown keys the edit adds, and Phalanx's gate taken off a
    replicated Job's pod template (refused, not put back: as a Job's, a JobSet's templates change only
    while it is suspended, by whoever suspended it, and Kueue too mutates a JobSet only at creation and
    validates its edits; see watch/registry.py)."""
    known = {str(p) for p in key_problems(old, creating=False, annotations=JOBSET_ANNOTATIONS)}
    problems = [
        str(p)
        for p in key_problems(new, creating=False, annotations=JOBSET_ANNOTATIONS)
        if str(p) not in known
    ]
    before = mapping(mapping(old.get("metadata")).get("annotations"))
    after = mapping(mapping(new.get("metadata")).get("annotations"))
    for key in JOBSET_ANNOTATIONS:
        if key != REQUEUED_ANNOTATION and before.get(key) != after.get(key):
            problems.append(
                f"metadata.annotations[{key}]: cannot change from {before.get(key)!r} to {after.get(key)!r} "
                "after creation (recreate the JobSet to change it)"
            )
    problems += removed_gate_problems(old.get("spec"), new.get("spec"), KIND)
    return problems
