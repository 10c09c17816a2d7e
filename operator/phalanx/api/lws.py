"""A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) as Phalanx reads it: each group (a leader and `size - 1`
workers) is one gang of `size` pods; with `subGroupPolicy` each subgroup is one slice of it.

LWS names group g's leader `<lws>-<g>` (worker index 0) and its workers `<lws>-<g>-<w>`; every pod carries
`leaderworkerset.sigs.k8s.io/name`, `group-index`, `worker-index` and `template-revision-hash`. With
`startupPolicy: LeaderReady` the workers are made only once the leader is Ready. LWS has no suspend: a group
is taken back by deleting its pods (LWS makes the whole group again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from phalanx.api.admission_checks import has_gate
from phalanx.api.job_layout import AUTO, PREFERRED, REQUIRED, TOPOLOGY_MODES, TopologyModeKind
from phalanx.api.job_policy import (
    JobPolicyError,
    PolicyProblem,
    key_problems,
    node_label_problem,
    priority_class_problem,
)
from phalanx.api.jobset import gated_pod_spec
from phalanx.api.keys import (
    ADMISSION_GATE,
    PREEMPTION_POLICY_ANNOTATION,
    SLICE_TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
)
from phalanx.api.scheduling import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER, PreemptionPolicy
from phalanx.bodies import items, mapping

API_GROUP: Final = "leaderworkerset.x-k8s.io"
API_VERSION: Final = f"{API_GROUP}/v1"
KIND: Final = "LeaderWorkerSet"
NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
REVISION_LABEL: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"
SUBGROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/subgroup-index"
EXCLUSIVE_TOPOLOGY_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_ANNOTATIONS: Final = (
    TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
    SLICE_TOPOLOGY_KEY_ANNOTATION,
    PREEMPTION_POLICY_ANNOTATION,
)
LEADER_EXCLUDED: Final = "LeaderExcluded"


@dataclass(frozen=True, slots=True)
class LeaderSet:
    """What Phalanx reads of an LWS's leader StatefulSet: the groups LWS wants now.

    LWS makes one StatefulSet named as itself, owned by it, labelled with `NAME_LABEL` and no
    `GROUP_INDEX_LABEL` (a group's workers' StatefulSets carry both), whose pods are the groups' leaders.
    Its `spec.replicas` is the LWS's `spec.replicas`, plus maxSurge while a rolling update surges: the
    groups LWS has. The LWS's own `status.replicas` is that StatefulSet's *status*.replicas, which dips
    while a leader is being made again (its pod deleted, not yet made), so it cannot tell a surge group
    being remade from one scaled away."""

    # The LWS's uid (the set's controller ownerReference): the set of an earlier LWS of that name is not its.
    owner_uid: str
    replicas: int


def leader_set(body: Mapping[str, Any]) -> LeaderSet | None:
    """The LWS leader StatefulSet `body` is, or None for any other StatefulSet."""
    meta = mapping(body.get("metadata"))
    labels = mapping(meta.get("labels"))
    if labels.get(NAME_LABEL) != meta.get("name") or GROUP_INDEX_LABEL in labels:
        return None
    owner = next(
        (
            ref
            for ref in items(meta.get("ownerReferences"))
            if isinstance(ref, Mapping)
            and ref.get("controller")
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/")
        ),
        None,
    )
    replicas = mapping(body.get("spec")).get("replicas", 1)
    if owner is None or not isinstance(replicas, int) or isinstance(replicas, bool):
        return None
    return LeaderSet(str(owner.get("uid", "")), max(replicas, 0))


@dataclass(frozen=True)
class LwsPolicy:
    size: int  # pods of one group, the leader included
    replicas: int
    topology_key: str | None
    slice_topology_key: str | None  # each subgroup in one domain of it
    topology_mode: TopologyModeKind
    preemption_policy: PreemptionPolicy | None
    priority_class_name: str | None
    leader_ready: bool  # startupPolicy LeaderReady: the workers come once the leader is Ready
    subgroup_size: int | None
    leader_excluded: bool  # subGroupPolicyType LeaderExcluded: the leader is in no subgroup
    leader_spec: Mapping[str, Any]  # what a leader pod asks for
    worker_spec: Mapping[str, Any]  # what a worker pod asks for

    def subgroups(self) -> list[tuple[int, list[int]]]:
        """(subgroup index, the worker indexes in it); one subgroup of every pod without a policy."""
        if self.subgroup_size is None:
            return [(0, list(range(self.size)))]
        workers = list(range(1, self.size)) if self.leader_excluded else list(range(self.size))
        out = [
            (i, workers[start : start + self.subgroup_size])
            for i, start in enumerate(range(0, len(workers), self.subgroup_size))
        ]
        if self.leader_excluded:
            out.insert(0, (len(out), [0]))  # the leader alone (LWS gives it no subgroup index)
        return out


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def parse_lws_policy(body: Mapping[str, Any]) -> LwsPolicy:
    """The gang each group of an LWS is; raises JobPolicyError naming every field at fault."""
    meta, spec = mapping(body.get("metadata")), mapping(body.get("spec"))
    annotations = mapping(meta.get("annotations"))
    template = mapping(spec.get("leaderWorkerTemplate"))
    problems: list[PolicyProblem] = []
    size = _int(template.get("size"), 1)
    replicas = _int(spec.get("replicas"), 1)
    if size < 1:
        problems.append(PolicyProblem("spec.leaderWorkerTemplate.size", "must be at least 1", "field"))
    if replicas < 0:
        problems.append(PolicyProblem("spec.replicas", "must not be negative", "field"))
    key = _text(annotations, TOPOLOGY_KEY_ANNOTATION)
    slice_key = _text(annotations, SLICE_TOPOLOGY_KEY_ANNOTATION)
    for name, value in ((TOPOLOGY_KEY_ANNOTATION, key), (SLICE_TOPOLOGY_KEY_ANNOTATION, slice_key)):
        bad_key = None if value is None else node_label_problem(name, value)
        if bad_key is not None:
            problems.append(bad_key)
    mode = _text(annotations, TOPOLOGY_MODE_ANNOTATION) or REQUIRED
    if mode not in TOPOLOGY_MODES:
        problems.append(
            PolicyProblem(TOPOLOGY_MODE_ANNOTATION, f"{mode!r} is not one of {', '.join(TOPOLOGY_MODES)}")
        )
    preemption = _text(annotations, PREEMPTION_POLICY_ANNOTATION)
    if preemption is not None and preemption not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        problems.append(
            PolicyProblem(
                PREEMPTION_POLICY_ANNOTATION, f"{preemption!r} is not one of PreemptLowerPriority, Never"
            )
        )
    subgroup = mapping(template.get("subGroupPolicy"))
    subgroup_size = _int(subgroup.get("subGroupSize"), 0) if subgroup else None
    if subgroup_size is not None and subgroup_size < 1:
        problems.append(
            PolicyProblem(
                "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize", "must be at least 1", "field"
            )
        )
    if slice_key is not None and subgroup_size is None:
        problems.append(
            PolicyProblem(
                SLICE_TOPOLOGY_KEY_ANNOTATION,
                "needs spec.leaderWorkerTemplate.subGroupPolicy: the slices of a group are its subgroups",
            )
        )
    if EXCLUSIVE_TOPOLOGY_ANNOTATION in annotations and key is not None:
        problems.append(
            PolicyProblem(
                EXCLUSIVE_TOPOLOGY_ANNOTATION,
                f"LWS's exclusive placement and Phalanx's {TOPOLOGY_KEY_ANNOTATION} both place the pods: "
                "use one of them",
            )
        )
    for part in ("leaderTemplate", "workerTemplate"):
        pod_spec = mapping(mapping(template.get(part)).get("spec"))
        field = f"spec.leaderWorkerTemplate.{part}.spec.priorityClassName"
        system = priority_class_problem(pod_spec.get("priorityClassName"), field, KIND)
        if system is not None:
            problems.append(system)
    if problems:
        raise JobPolicyError.of(problems)
    worker = mapping(mapping(template.get("workerTemplate")).get("spec"))
    leader = mapping(mapping(template.get("leaderTemplate")).get("spec")) or worker
    classes = sorted({str(leader.get("priorityClassName") or ""), str(worker.get("priorityClassName") or "")})
    return LwsPolicy(
        size=size,
        replicas=replicas,
        topology_key=key,
        slice_topology_key=slice_key,
        topology_mode=PREFERRED if mode == PREFERRED else AUTO if mode == AUTO else REQUIRED,
        preemption_policy=None
        if preemption is None
        else PREEMPT_NEVER
        if preemption == PREEMPT_NEVER
        else PREEMPT_LOWER_PRIORITY,
        priority_class_name=next((c for c in classes if c), None),
        leader_ready=spec.get("startupPolicy") == "LeaderReady",
        subgroup_size=subgroup_size,
        leader_excluded=subgroup.get("subGroupPolicyType") == LEADER_EXCLUDED,
        leader_spec=leader,
        worker_spec=worker,
    )


def _text(annotations: Mapping[str, Any], key: str) -> str | None:
    value = annotations.get(key)
    # Annotation values are strings; surrounding whitespace is a YAML accident, not a choice (as a Job's).
    return None if value is None else str(value).strip()


def admit_create(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """A labelled LWS at creation: its leader and worker templates with Phalanx's gate (None: they have it
    already); raises JobPolicyError naming every field at fault."""
    problems = key_problems(body, annotations=LWS_ANNOTATIONS)
    try:
        parse_lws_policy(body)
    except JobPolicyError as e:
        problems.extend(e.problems)
    template = mapping(mapping(body.get("spec")).get("leaderWorkerTemplate"))
    for part in ("leaderTemplate", "workerTemplate"):
        if mapping(mapping(template.get(part)).get("spec")).get("nodeName"):
            problems.append(
                PolicyProblem(
                    f"spec.leaderWorkerTemplate.{part}.spec.nodeName", "must not be set for a gang", "field"
                )
            )
    if problems:
        raise JobPolicyError.of(problems)
    patched: dict[str, Any] = {}
    for part in ("leaderTemplate", "workerTemplate"):
        pod_template = template.get(part)
        if pod_template is None:
            continue
        pod_template = dict(mapping(pod_template))
        spec, changed = gated_pod_spec(mapping(pod_template.get("spec")), ADMISSION_GATE)
        if changed:
            patched[part] = {**pod_template, "spec": spec}
    return {"leaderWorkerTemplate": patched} if patched else None


def _templates(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The LWS's pod templates by part (leaderTemplate, when it has one, and workerTemplate)."""
    template = mapping(mapping(body.get("spec")).get("leaderWorkerTemplate"))
    parts = ("leaderTemplate", "workerTemplate")
    return {part: mapping(template[part]) for part in parts if template.get(part)}


def regated(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The spec patch that puts Phalanx's gate back into an edited LWS whose templates all carried it: in
    every template the edit left without it (a leader template the edit adds included). None: nothing to
    put back, or the LWS was never gated (labelled after its creation: its unit says NotGated)."""
    before = _templates(old)
    if not before or not all(has_gate(mapping(t.get("spec"))) for t in before.values()):
        return None
    patched: dict[str, Any] = {}
    for part, template in _templates(new).items():
        spec, added = gated_pod_spec(mapping(template.get("spec")), ADMISSION_GATE)
        if added:
            patched[part] = {"spec": {"schedulingGates": spec["schedulingGates"]}}
    return {"leaderWorkerTemplate": patched} if patched else None


def update_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A managed LWS keeps its Phalanx annotations and its group size (each group is a gang of that size;
    change them by recreating it)."""
    known = {str(p) for p in key_problems(old, creating=False, annotations=LWS_ANNOTATIONS)}
    problems = [
        str(p) for p in key_problems(new, creating=False, annotations=LWS_ANNOTATIONS) if str(p) not in known
    ]
    before = mapping(mapping(old.get("metadata")).get("annotations"))
    after = mapping(mapping(new.get("metadata")).get("annotations"))
    for key in LWS_ANNOTATIONS:
        if before.get(key) != after.get(key):
            problems.append(
                f"metadata.annotations[{key}]: cannot change from {before.get(key)!r} to {after.get(key)!r} "
                "after creation (recreate the LeaderWorkerSet to change it)"
            )
    if _size(old) != _size(new):
        problems.append(
            f"spec.leaderWorkerTemplate.size: cannot change from {_size(old)} to {_size(new)} while "
            "Phalanx manages the LeaderWorkerSet: each group is a gang of that size"
        )
    return problems


def _size(body: Mapping[str, Any]) -> Any:
    return mapping(mapping(body.get("spec")).get("leaderWorkerTemplate")).get("size")
