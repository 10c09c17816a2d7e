"""Checks at creation that the webhooks share across kinds (pure functions of the body): what Phalanx would
otherwise let through and never keep its promise for.

- **Another scheduler.** Phalanx releases a gang's pods pinned to their nodes and a scheduler binds them.
  Only the names listed in `--scheduler-names` (default `default-scheduler`: kube-scheduler) are known to
  bind such pods; a gang whose pods name another `schedulerName` would be admitted and then wait for a
  scheduler that may not exist, holding its nodes. It is refused, naming the field, with what to do.
- **Phalanx keys on a pod template.** Phalanx reads its annotations from the owner's metadata (where
  Kueue's TAS annotations go on the pod template): a `phalanx.dev/` key on a template would be ignored.
- **DRA ResourceClaims on a gang's pods.** Device allocation is not modelled: such pods would never be
  released. Refused at creation, when `policy: basic` can still be chosen (issue 16 item 7, in part); an
  extended resource no node lists (one DRA serves, say) is said at creation.
- **Kueue's Topology-Aware Scheduling on a managed owner's templates** (one placement engine per owner), and
  **Kueue's partial admission below a gang's fixed min-count** (kinds/kueue.py says why).
- **Phalanx's gate taken off a managed owner's template in an edit** (a Job's or JobSet's): its pods made
  afterwards would be placed one by one, outside the gang (`removed_gate_problems`).
- **A slice key not finer than the Job's key** (refused where a Topology orders them, said where only the
  nodes show it), **scoring-only terms** Phalanx does not model (said), **a labelled owner outside
  --namespaces** that nothing gated (a Warning event), **a pod joining a PodGroup of another namespace**
  (refused; none anywhere yet: said).

Pure functions of the body, in api/ so that `phalanx convert` refuses what the webhooks would without the
controller (tools/convert.py). Pod specs are found wherever the kind keeps them (a Job's
`spec.template.spec`, a JobSet's replicated Jobs, a LeaderWorkerSet's leader and worker templates, a pod's
own `spec`): any object with a `containers` list.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from phalanx.api import keys
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import JobPolicyError, bounded_int, parse_job_policy
from phalanx.bodies import mapping
from phalanx.placement import NodeInfo, pod_requests

DEFAULT_SCHEDULER = "default-scheduler"


def _walk(
    value: Any, path: str, found: Callable[[Mapping[str, Any]], bool]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, object) of every mapping inside `value` that `found` accepts (not searched further)."""
    if isinstance(value, Mapping):
        if found(value):
            yield path, value
            return
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}", found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]", found)


def pod_specs(value: Any, path: str = "spec") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, pod spec) of every pod spec inside `value` (the body's spec)."""
    return _walk(value, path, lambda m: isinstance(m.get("containers"), list))


def pod_templates(value: Any, path: str = "spec") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, template) of every pod template (an object whose `spec` is a pod spec)."""
    return _walk(value, path, lambda m: isinstance(mapping(m.get("spec")).get("containers"), list))


def scheduler_problems(spec: Any, allowed: tuple[str, ...], *, root: str = "spec") -> list[str]:
    """Pod specs naming a scheduler that is not known to bind Phalanx's released pods."""
    problems = []
    for path, pod_spec in pod_specs(spec, root):
        name = pod_spec.get("schedulerName")
        if name is None or name == "" or name in allowed:
            continue
        problems.append(
            f"{path}.schedulerName: {str(name)!r} is not a scheduler Phalanx releases gangs to (it pins a "
            f"gang's pods to their nodes and {', '.join(allowed)} binds them; another scheduler would never "
            f"see them and the gang would hold its nodes for nothing); remove schedulerName, set "
            f"{keys.POLICY_ANNOTATION}: basic to leave the pods to that scheduler, or run Phalanx with "
            f"--scheduler-names={','.join((*allowed, str(name)))} if that scheduler binds pods pinned by "
            "nodeSelector"
        )
    return problems


def claim_problems(spec: Any, owner: str = "Job", *, root: str = "spec") -> list[str]:
    """Pod specs of a gang with DRA ResourceClaims: Phalanx does not model device allocation, so it would
    hold the gang for ever (placement/requests.py releases none of such pods); refused at creation, when
    the advice can still be followed (policy is immutable afterwards)."""
    # Only a Job has a policy annotation; other owners are gangs or not managed.
    basic = f"with {keys.POLICY_ANNOTATION}: basic to leave its pods to kube-scheduler one by one, or "
    advice = f"create the {owner} {basic if owner == 'Job' else ''}without the {keys.MANAGED_LABEL} label"
    return [
        f"{path}.resourceClaims: Phalanx does not model DRA device claims (DeviceClasses, ResourceSlices, "
        "allocated ResourceClaims), so it cannot know where kube-scheduler can allocate a gang's devices "
        f"and would release none of its pods; {advice}"
        for path, pod_spec in pod_specs(spec, root)
        if isinstance(pod_spec.get("resourceClaims"), list) and pod_spec.get("resourceClaims")
    ]


def pod_device_problems(
    spec: Any,
    group: str,
    listed: Collection[str],
    classes: Mapping[str, frozenset[str]],
) -> list[str]:
    """A hand-made pod joining gang PodGroup `group` with DRA ResourceClaims, or requesting an extended
    resource a DeviceClass serves and no node lists: Phalanx does not model device allocation, so the
    pod would stay gated and its gang held for ever. Refused at creation, with the advice for a pod.
    `listed`: the resource names some node lists (ClusterCache.listed_resources)."""
    advice = (
        f"let it join a PodGroup without a gang policy (kube-scheduler places such pods one by one, with "
        f"their devices), or create it without the {keys.POD_GROUP_LABEL} label"
    )
    problems = [
        f"spec.resourceClaims: Phalanx does not model DRA device claims (DeviceClasses, ResourceSlices, "
        f"allocated ResourceClaims), so it would never release this pod of gang PodGroup {group!r}; {advice}"
    ] * bool(isinstance(mapping(spec).get("resourceClaims"), list) and mapping(spec).get("resourceClaims"))
    by_resource = {r: name for name, served in sorted(classes.items()) for r in served}
    if not by_resource:
        return []  # no DeviceClass serves an extended resource: nothing to find (and no requests to parse)
    for resource, amount in sorted(pod_requests(mapping(spec)).items()):
        if amount > 0 and resource not in listed and resource in by_resource:
            problems.append(
                f"spec: requests {resource}, which no node lists in its allocatable and DeviceClass "
                f"{by_resource[resource]!r} serves through DRA; Phalanx does not model DRA device "
                f"allocation, so it would never release this pod of gang PodGroup {group!r}; {advice}"
            )
    return problems


def has_gate(pod_spec: Mapping[str, Any]) -> bool:
    """The pod spec carries Phalanx's gate `phalanx.dev/admission`."""
    gates = pod_spec.get("schedulingGates")
    return isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("name") == keys.ADMISSION_GATE for g in gates
    )


def removed_gate_problems(old: Any, new: Any, owner: str = "Job", *, root: str = "spec") -> list[str]:
    """Each pod template of a managed owner that carried Phalanx's gate before an edit and does not after
    it, naming its `schedulingGates` field. Phalanx holds a gang's pods behind that gate from their
    creation; pods its controller makes from a template without it are placed one by one by
    kube-scheduler, and the owner's unit says NotGated instead of admitting the gang."""
    held = {path for path, spec in pod_specs(old, root) if has_gate(spec)}
    return [
        f"{path}.schedulingGates: {keys.ADMISSION_GATE} cannot be removed while Phalanx manages the {owner}: "
        f"the {owner}'s pods are held behind it until Phalanx admits the whole gang, and pods made without "
        f"it would be placed one by one; keep it (remove the {keys.MANAGED_LABEL} label, or set it to "
        f"false, to take the {owner} out of Phalanx)"
        for path, spec in pod_specs(new, root)
        if path in held and not has_gate(spec)
    ]


def template_key_problems(spec: Any, owner: str = "Job", *, root: str = "spec") -> list[str]:
    """`phalanx.dev/` keys on pod templates: Phalanx reads them on the owner's own metadata only."""
    problems = []
    for path, template in pod_templates(spec, root):
        meta = mapping(template.get("metadata"))
        for place in ("annotations", "labels"):
            for key in mapping(meta.get(place)):
                if str(key).startswith(f"{keys.PREFIX}/"):
                    problems.append(
                        f"{path}.metadata.{place}[{key}]: Phalanx reads its keys from the {owner}'s own "
                        f"metadata, not from its pod template, where it would be ignored; move it to "
                        f"metadata.{place} of the {owner}"
                    )
    return problems


def slice_key_problem(
    job_key: str | None, slice_key: str | None, levels: tuple[str, ...] | None
) -> str | None:
    """A slice key a Topology lists at the Job's key's level or above: slices would be no smaller than the
    whole Job's domain (Kueue refuses the same). `levels`: the Topology listing the Job's key."""
    if not job_key or not slice_key or not levels or job_key not in levels or slice_key not in levels:
        return None
    if levels.index(slice_key) > levels.index(job_key):
        return None
    return (
        f"metadata.annotations[{keys.SLICE_TOPOLOGY_KEY_ANNOTATION}]: {slice_key!r} is not finer than "
        f"{keys.TOPOLOGY_KEY_ANNOTATION} {job_key!r}: their Topology lists it at level "
        f"{levels.index(slice_key)}, the Job's key at level {levels.index(job_key)} (coarse to fine), so a "
        "slice would be no smaller than the whole Job's domain; use a level below the Job's key"
    )


def slice_key_warning(job_key: str | None, slice_key: str | None, nodes: Iterable[NodeInfo]) -> str | None:
    """Without a Topology ordering the two keys: on the nodes now, every domain of the Job's key lies inside
    one domain of the slice key (slices no smaller than the Job's domain). Said, not refused: a small or
    growing cluster may show that by chance."""
    if not job_key or not slice_key:
        return None
    inside: dict[str, set[str]] = {}
    for node in nodes:
        if job_key in node.labels and slice_key in node.labels:
            inside.setdefault(node.labels[job_key], set()).add(node.labels[slice_key])
    if not inside or any(len(values) > 1 for values in inside.values()):
        return None
    return (
        f"metadata.annotations[{keys.SLICE_TOPOLOGY_KEY_ANNOTATION}]: on the nodes now, each domain of "
        f"{job_key!r} lies inside one domain of {slice_key!r}, so a slice is no smaller than the Job's "
        "domain; "
        "a slice key should be a finer level (list both in a Topology to have this checked)"
    )


def dra_resource_problems(
    spec: Any,
    listed: Collection[str],
    classes: Mapping[str, frozenset[str]],
    owner: str = "Job",
    *,
    root: str = "spec",
) -> list[str]:
    """Extended resources a gang's pods request that no node lists in its allocatable and a DRA DeviceClass
    serves (model/dra.py): kube-scheduler would allocate them from ResourceSlices, which Phalanx does not
    model, so the gang would wait for ever. Refused at creation, while the advice can still be followed.
    `listed`: the resource names some node lists (ClusterCache.listed_resources)."""
    by_resource = {r: name for name, served in sorted(classes.items()) for r in served}
    if not by_resource:
        return []  # no DeviceClass serves an extended resource: nothing to find (and no requests to parse)
    basic = f"with {keys.POLICY_ANNOTATION}: basic (kube-scheduler allocates the devices pod by pod), or "
    advice = f"create the {owner} {basic if owner == 'Job' else ''}without the {keys.MANAGED_LABEL} label"
    out = []
    for path, pod_spec in pod_specs(spec, root):
        served = sorted(
            r for r, n in pod_requests(pod_spec).items() if n > 0 and r not in listed and r in by_resource
        )
        for r in served:
            out.append(
                f"{path}: requests {r}, which no node lists in its allocatable and DeviceClass "
                f"{by_resource[r]!r} serves through DRA (kube-scheduler allocates it from ResourceSlices); "
                "Phalanx does not model DRA device allocation, so it would never admit the gang; "
                f"{advice}"
            )
    return out


def unlisted_resource_warnings(spec: Any, listed: Collection[str], *, root: str = "spec") -> list[str]:
    """Extended resources a gang's pods request that no node lists in its allocatable now: Phalanx places
    by the nodes' allocatable only, so such a gang waits until a node lists it. One DRA serves through a
    DeviceClass's `extendedResourceName` is never listed there (not modelled): said at creation, while the
    Job can still be made `basic` (issue 16 item 7). Said, not refused: a node may come that lists it.
    `listed`: the resource names some node lists (ClusterCache.listed_resources)."""
    out = []
    for path, pod_spec in pod_specs(spec, root):
        missing = sorted(
            r for r, n in pod_requests(pod_spec).items() if "/" in r and n > 0 and r not in listed
        )
        if missing:
            out.append(
                f"{path}: requests {', '.join(missing)}, which no node lists in its allocatable now; Phalanx "
                "places a gang by the nodes' allocatable only (a DRA DeviceClass serving it as its "
                "extendedResourceName is not modelled), so the gang waits until a node lists it; if DRA "
                f"serves it, create the Job with {keys.POLICY_ANNOTATION}: basic"
            )
    return out


def preferred_affinity_warnings(spec: Any, *, root: str = "spec") -> list[str]:
    """Preferred (scoring-only) terms Phalanx does not model: it chooses the nodes itself and pins them, so
    kube-scheduler's scores never apply to a gang's pods. Said at creation, not refused."""
    out = []
    for path, pod_spec in pod_specs(spec, root):
        affinity = mapping(pod_spec.get("affinity"))
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            if mapping(affinity.get(kind)).get("preferredDuringSchedulingIgnoredDuringExecution"):
                out.append(
                    f"{path}.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution: ignored for a "
                    "gang (Phalanx chooses and pins its nodes; it models kube-scheduler's filters, none of "
                    "its scores); use a required term, or phalanx.dev/topology-key to keep the pods together"
                )
        if any(
            mapping(c).get("whenUnsatisfiable") == "ScheduleAnyway"
            for c in pod_spec.get("topologySpreadConstraints") or []
        ):
            out.append(
                f"{path}.topologySpreadConstraints: ScheduleAnyway constraints are ignored for a gang "
                "(a score; Phalanx models DoNotSchedule ones)"
            )
    return out


def unmanaged_here(body: Mapping[str, Any], namespace: str, namespaces: tuple[str, ...]) -> str | None:
    """A Job (or other owner) labelled phalanx.dev/managed=true in a namespace outside --namespaces that no
    Phalanx gated (no pod template carries the gate: another instance managing that namespace would have
    put it there): nothing will ever hold or admit its pods as a gang. The message of the Warning."""
    labels = mapping(mapping(body.get("metadata")).get("labels"))
    if labels.get(keys.MANAGED_LABEL) != keys.MANAGED_VALUE:
        return None
    for _, pod_spec in pod_specs(body.get("spec")):
        if any(mapping(g).get("name") == keys.ADMISSION_GATE for g in pod_spec.get("schedulingGates") or []):
            return None
    return (
        f"labelled {keys.MANAGED_LABEL}=true in namespace {namespace}, which is not among this Phalanx's "
        f"--namespaces ({', '.join(namespaces)}): its pods are not held as a gang (kube-scheduler places "
        "them "
        "one by one); create it in one of those namespaces, or add this one to --namespaces"
    )


def pod_group_namespace_problem(
    group: str, namespace: str, groups: Iterable[tuple[str, str]]
) -> tuple[str | None, str | None]:
    """(refusal, warning) for a pod joining PodGroup `group` (its label value) in `namespace`, given every
    (namespace, label value) of the groups the cache knows: a group of that name only in other namespaces is
    refused (a pod joins a group of its own namespace: it would stay gated for ever); none anywhere yet is
    said (the group may be created next)."""
    elsewhere = sorted({ns for ns, value in groups if value == group and ns != namespace})
    if any(ns == namespace and value == group for ns, value in groups):
        return None, None
    if elsewhere:
        return (
            f"label {keys.POD_GROUP_LABEL}: PodGroup {group!r} is in namespace {', '.join(elsewhere)}, not "
            f"{namespace}: a pod joins a PodGroup of its own namespace; create the pod there, or the "
            "PodGroup "
            "here",
            None,
        )
    return None, (
        f"label {keys.POD_GROUP_LABEL}: no PodGroup {group!r} exists in namespace {namespace} yet; the pod "
        "stays "
        "gated until one does"
    )


# ---------------------------------------------------------------------- Kueue (kinds/kueue.py)

# Kueue's Topology-Aware Scheduling annotations on a pod template (apis/kueue/v1beta2/topology_types.go).
TAS_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
    "kueue.x-k8s.io/podset-group-name",
)
# Kueue writes this one itself into the pod templates of an object it admits with a ResourceFlavor that has a
# topologyName and that asks for no topology ("implicit TAS", pkg/podset FromAssignment): an edit that adds
# it may be Kueue's admission, which refusing would block (kinds/kueue.py warns of such a flavor instead).
KUEUE_WRITTEN_TAS = "kueue.x-k8s.io/podset-unconstrained-topology"
# What an edit may not add (the webhooks' UPDATE handlers): every TAS annotation but Kueue's own.
TAS_ANNOTATIONS_OF_USERS = tuple(key for key in TAS_ANNOTATIONS if key != KUEUE_WRITTEN_TAS)
# Partial admission (pkg/controller/jobs/job): Kueue may lower parallelism down to this at admission.
JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"


def _annotation_field(path: str, key: str) -> str:
    return f"{path}.metadata.annotations[{key}]"


def _tas_template_problems(
    template: Any,
    path: str,
    remedy: Callable[[str], str] | None = None,
    field: Callable[[str, str], str] = _annotation_field,
    checked: Sequence[str] = TAS_ANNOTATIONS,
) -> list[str]:
    """Each Kueue TAS annotation (of `checked`) on the pod template at `path`. `field(path, key)`: how the
    message names where it is; `remedy(key)`: what to do (default: remove it, or the managed label)."""
    annotations = mapping(mapping(mapping(template).get("metadata")).get("annotations"))
    out = []
    for key in checked:
        if key not in annotations:
            continue
        advice = (
            remedy(key)
            if remedy
            else f"remove {key}, or the label {keys.MANAGED_LABEL} to let Kueue place it"
        )
        out.append(
            f"{field(path, key)}: Kueue's Topology-Aware Scheduling and Phalanx would both place these "
            f"pods; a Phalanx-managed object ({keys.MANAGED_LABEL}=true) takes its topology from "
            f"{keys.TOPOLOGY_KEY_ANNOTATION} (and Phalanx's Topology levels), and Kueue keeps quota and "
            f"queueing: {advice}"
        )
    return out


def _replicated_jobs_tas(
    jobset_spec: Any,
    path: str,
    remedy: Callable[[str], str] | None = None,
    field: Callable[[str, str], str] = _annotation_field,
    checked: Sequence[str] = TAS_ANNOTATIONS,
) -> list[str]:
    """Kueue TAS annotations on the pod templates of a JobSet spec's replicated Jobs (a JobSet's, a Trainer
    runtime's template, a TrainJob's runtime patch); `path` is where that spec is."""
    out = []
    for i, rjob in enumerate(mapping(jobset_spec).get("replicatedJobs") or []):
        job_spec = mapping(mapping(mapping(rjob).get("template")).get("spec"))
        at = f"{path}.replicatedJobs[{i}].template.spec.template"
        out += _tas_template_problems(job_spec.get("template"), at, remedy, field, checked)
    return out


def made_for_trainjob(body: Mapping[str, Any]) -> str | None:
    """The name of the TrainJob that controls this object (a JobSet Kubeflow Trainer made), if any."""
    for ref in mapping(body.get("metadata")).get("ownerReferences") or []:
        ref = mapping(ref)
        if ref.get("controller") and ref.get("kind") == "TrainJob":
            return str(ref.get("name") or "")
    return None


def tas_problems(kind: str, body: Mapping[str, Any], checked: Sequence[str] = TAS_ANNOTATIONS) -> list[str]:
    """Kueue TAS annotations (of `checked`) on the pod templates of a Job, JobSet or LeaderWorkerSet, or in a
    TrainJob's `spec.runtimePatches` (its runtime: `runtime_tas_problems`), each naming its field."""
    spec = mapping(body.get("spec"))
    if kind == "Job":
        return _tas_template_problems(spec.get("template"), "spec.template", checked=checked)
    if kind == "JobSet":
        trainjob = made_for_trainjob(body)
        if trainjob is None:
            return _replicated_jobs_tas(spec, "spec", checked=checked)
        # Trainer's JobSet (the TrainJob's webhook checked both; a runtime edited since, say): the user wrote
        # neither the JobSet nor its field, and reads this in the TrainJob's events (Trainer's
        # TrainJobResourcesCreationFailed), so it says where the annotation came from.
        return _replicated_jobs_tas(
            spec,
            "spec",
            lambda key: (
                f"this JobSet is Kubeflow Trainer's for TrainJob {trainjob}, made from its runtime "
                f"(spec.runtimeRef) and spec.runtimePatches: remove {key} there, or the label "
                f"{keys.MANAGED_LABEL} from the TrainJob to let Kueue place it"
            ),
            checked=checked,
        )
    if kind == "LeaderWorkerSet":
        lwt = mapping(spec.get("leaderWorkerTemplate"))
        path = "spec.leaderWorkerTemplate"
        out = _tas_template_problems(lwt.get("leaderTemplate"), f"{path}.leaderTemplate", checked=checked)
        return out + _tas_template_problems(
            lwt.get("workerTemplate"), f"{path}.workerTemplate", checked=checked
        )
    if kind == "TrainJob":
        # Trainer merges each entry's replicated Job templates into its runtime's (a strategic merge patch):
        # an annotation an entry sets reaches the pods of the JobSet Trainer makes.
        out = []
        for i, entry in enumerate(spec.get("runtimePatches") or []):
            entry = mapping(entry)
            manager = entry.get("manager")
            template = mapping(mapping(entry.get("trainingRuntimeSpec")).get("template"))
            out += _replicated_jobs_tas(
                template.get("spec"),
                f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec",
                _patch_remedy(manager),
                checked=checked,
            )
        return out
    return []


def _patch_remedy(manager: Any) -> Callable[[str], str]:
    return lambda key: (
        f"remove {key} from this runtime patch (manager {manager}), or the label {keys.MANAGED_LABEL} to let "
        "Kueue place it"
    )


def runtime_tas_problems(runtime: Mapping[str, Any]) -> list[str]:
    """Kueue TAS annotations on the pod templates of the Trainer runtime (a ClusterTrainingRuntime or
    TrainingRuntime) a TrainJob refers to: Trainer copies its JobSet template, annotations and all, into the
    TrainJob's JobSet. Each names the TrainJob's `spec.runtimeRef`, the runtime and the runtime's field."""
    kind = str(runtime.get("kind") or "runtime")
    name = str(mapping(runtime.get("metadata")).get("name") or "")
    template = mapping(mapping(runtime.get("spec")).get("template"))
    return _replicated_jobs_tas(
        template.get("spec"),
        "spec.template.spec",
        lambda key: (
            f"refer to a runtime without {key} (or remove it from {kind} {name}), or remove the label "
            f"{keys.MANAGED_LABEL} from the TrainJob to let Kueue place it"
        ),
        lambda at, key: (
            f"spec.runtimeRef: {kind} {name} has {at}.metadata.annotations[{key}], which Kubeflow Trainer "
            "puts on this TrainJob's pods"
        ),
    )


def partial_admission_problems(body: Mapping[str, Any], sliced: bool) -> list[str]:
    """Kueue's partial admission may lower a Job's parallelism to `kueue.x-k8s.io/job-min-parallelism`:
    a gang's minCount follows the parallelism Kueue admits, unless `phalanx.dev/min-count` fixes it, which
    must then not be above the lowest; a sliced Job's slices are fixed at creation, so not at all."""
    annotations = mapping(mapping(body.get("metadata")).get("annotations"))
    raw = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return []
    field = f"metadata.annotations[{JOB_MIN_PARALLELISM_ANNOTATION}]"
    if sliced:
        return [
            f"{field}: Kueue's partial admission would change the parallelism of a sliced Job, whose slices "
            f"({keys.SLICE_SIZE_ANNOTATION}) Phalanx makes at creation; remove it, or the slices"
        ]
    try:  # read as the policy reads min-count (no whitespace; zeros in front, but not thousands of digits)
        lowest = bounded_int(str(raw).strip())
        fixed = bounded_int(str(annotations.get(keys.MIN_COUNT_ANNOTATION)).strip())
    except ValueError:
        return []  # none fixed (minCount follows parallelism), or a value the policy check refuses
    if lowest is None or fixed is None:
        return []  # a value the policy check (or Kueue's) refuses
    if lowest < fixed:
        return [
            f"{field}: Kueue may admit as few as {lowest} pods, fewer than the gang's "
            f"{keys.MIN_COUNT_ANNOTATION} {fixed}, and such a gang would never start; set it to at least "
            f"{fixed}, or leave {keys.MIN_COUNT_ANNOTATION} out so that minCount follows the parallelism "
            "Kueue admits"
        ]
    return []


# ---------------------------------------------------------------------- a Job, all of it


def job_node_name_problems(spec: Any) -> list[str]:
    """A gang Job whose pod template sets nodeName: such pods bypass scheduling and cannot carry a
    scheduling gate, so the gang would never start."""
    pod_spec = mapping(mapping(mapping(spec).get("template")).get("spec"))
    if not pod_spec.get("nodeName"):
        return []
    return [
        "spec.template.spec.nodeName: must not be set for a gang: pods bound by hand cannot be "
        f"gang-admitted; remove it, or set {keys.POLICY_ANNOTATION}: basic"
    ]


def job_creation_problems(body: Mapping[str, Any]) -> list[str]:
    """What the Job webhook (controller/watch/webhooks.py gate_job) refuses in a Phalanx-managed Job that the
    Job alone shows, each naming its field: its annotations (`parse_job_policy`, `parse_job_layout`; when they
    are wrong, only they are said, as the webhook does), Kueue's TAS annotations and partial admission,
    `phalanx.dev/` keys on its pod template and, for a gang, DRA ResourceClaims and a nodeName. Not what
    depends on the installation or the cluster: `--scheduler-names`, DeviceClasses, Topologies, quotas."""
    try:
        policy = parse_job_policy(body)
        layout = parse_job_layout(body, policy)
    except JobPolicyError as e:
        return [str(p) for p in e.problems]
    spec = body.get("spec")
    problems = tas_problems("Job", body) + partial_admission_problems(body, layout.sliced)
    problems += template_key_problems(spec)
    if policy.is_gang:
        problems += claim_problems(spec)
        problems += job_node_name_problems(spec)
    return problems
