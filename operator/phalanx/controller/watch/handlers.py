"""Thin Kopf handlers: the Job admission webhook, and watches that feed the cache.

No handler here writes to the objects it watches (no finalizers, no Kopf annotations on Jobs or
Pods: only `on.event` and admission handlers are used); decisions belong to the scheduling loop.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from phalanx.api import keys as names
from phalanx.api.formats import dns_subdomain_problems
from phalanx.api.group import COMPOSITE_POD_GROUPS, GROUP, TOPOLOGIES, VERSION
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import JobPolicyError, key_problems, parse_job_policy
from phalanx.api.workload import workload_problems
from phalanx.bodies import mapping
from phalanx.controller.model.topology import label_conflicts
from phalanx.controller.process.runtime import Runtime
from phalanx.controller.process.runtime import login as runtime_login

log = logging.getLogger("phalanx.handlers")
WEBHOOK_ID = "gate-job"  # a DNS-1123 path segment: Kopf serves each handler at /<id>
VALIDATE_ID = "validate-job"
VALIDATE_POD_GROUP_ID = "validate-podgroup"
VALIDATE_WORKLOAD_ID = "validate-workload"
GATE_POD_ID = "gate-pod"
VALIDATE_TOPOLOGY_ID = "validate-topology"
JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
runtime = Runtime()


# ---------------------------------------------------------------------- admission
# The handlers are plain functions of the request body: whatever the body holds, they accept it, patch
# it or refuse it with a message naming the field; they never raise anything else (fuzzed in the tests).
@kopf.on.mutate(
    "batch",
    "v1",
    "jobs",
    id=WEBHOOK_ID,
    operations=["CREATE"],
    # Any value, not only "true": a misspelt value ("True", "yes") is refused instead of silently opting out.
    labels={names.MANAGED_LABEL: kopf.PRESENT},
    persistent=True,  # keep the configuration when the operator stops: no labelled Job slips through ungated
    ignore_failures=False,  # failurePolicy: Fail
    side_effects=False,
)
def gate_job(body: kopf.Body, patch: kopf.Patch, warnings: list[str] | None = None, **_: Any) -> None:
    """Validate the policy annotations and hold every pod of a gang Job behind the gate."""
    meta = mapping(body.get("metadata"))
    if not runtime.settings.watches(str(meta.get("namespace") or "")):
        return  # another operator's namespace (--namespaces): no gate nobody would remove
    if mapping(meta.get("labels")).get(names.MANAGED_LABEL) == names.UNMANAGED_VALUE:
        return  # opted out in so many words: left alone
    try:
        policy = parse_job_policy(body)
        parse_job_layout(body, policy)  # topology mode and slices
    except JobPolicyError as e:
        raise kopf.AdmissionError(str(e), code=422) from e
    pod_spec = mapping(mapping(mapping(body.get("spec")).get("template")).get("spec"))
    if policy.is_gang and pod_spec.get("nodeName"):
        # Such pods bypass scheduling and cannot carry a scheduling gate: the Job would never start.
        raise kopf.AdmissionError(
            "spec.template.spec.nodeName: must not be set for a gang: pods bound by hand cannot be "
            f"gang-admitted; remove it, or set {names.POLICY_ANNOTATION}: basic",
            code=422,
        )
    if warnings is not None:
        warnings.extend(_priority_class_warnings(policy.priority_class_name))
    # The managed label is not copied into the pod template: a Job whose only label it is would get
    # it back from the template when a user removes it (Job defaulting), and opting out would undo itself.
    if policy.is_gang:
        raw_gates = pod_spec.get("schedulingGates") or []
        if not isinstance(raw_gates, list):
            # The apiserver decodes a Job before calling webhooks, so only a hand-made review gets here.
            raise kopf.AdmissionError("spec.template.spec.schedulingGates: must be a list", code=422)
        gates = [g for g in raw_gates if isinstance(g, Mapping)]
        if not any(g.get("name") == names.ADMISSION_GATE for g in gates):
            gates.append({"name": names.ADMISSION_GATE})
        patch.spec["template"] = {"spec": {"schedulingGates": gates}}


def _priority_class_warnings(name: str | None) -> list[str]:
    """A PriorityClass that does not exist (yet) is no reason to refuse the Job — it may be created next —
    but the Job controller cannot create a single pod until it does: say so now (kubectl prints it)."""
    if not name or not runtime.health.cache_primed or name in runtime.cache.priority_classes:
        return []
    return [
        f"spec.template.spec.priorityClassName: PriorityClass {name!r} does not exist: the Job controller "
        "cannot create the Job's pods until it does (the Priority admission plugin refuses them)"
    ]


@kopf.on.validate(
    "batch",
    "v1",
    "jobs",
    id=VALIDATE_ID,
    operations=["UPDATE"],
    labels={names.MANAGED_LABEL: "true"},
    persistent=True,
    # Fail open: an operator outage must not block suspend, scale or label edits of running Jobs;
    # the loop reports a bad edit with an event if one slips through.
    ignore_failures=True,
    side_effects=False,
)
def validate_job_update(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
    """Edited annotations get the same checks as at creation; as upstream, only the gang size may change.

    Only what the edit adds is refused: a Job that was already wrong (created around the webhook, or
    before a check existed) still takes Phalanx's own writes (suspend, resume) and the user's fixes.
    """
    known = {str(p) for p in key_problems(old, creating=False)} if old is not None else set()
    added = [str(p) for p in key_problems(body, creating=False) if str(p) not in known]
    if added:
        raise kopf.AdmissionError("; ".join(added), code=422)
    labels = mapping(mapping(body.get("metadata")).get("labels"))
    if labels.get(names.MANAGED_LABEL) != names.MANAGED_VALUE:
        return  # released from Phalanx: its annotations no longer matter
    old_policy = old_layout = None
    old_problems: set[str] = set()
    if old is not None:
        try:
            old_policy = parse_job_policy(old, running=True)
            old_layout = parse_job_layout(old, old_policy)
        except JobPolicyError as e:
            old_problems = {str(p) for p in e.problems}
    try:
        new_policy = parse_job_policy(body, running=True)
        new_layout = parse_job_layout(body, new_policy)
    except JobPolicyError as e:
        new = [str(p) for p in e.problems if str(p) not in old_problems]
        if new or old is None:
            raise kopf.AdmissionError("; ".join(new or [str(e)]), code=422) from e
        return  # it was invalid in the same way before: let the user fix it
    if old_policy is None or old_layout is None:
        return
    # Slices and the topology mode are fixed too: Phalanx built the Job's groups from them at creation.
    changed = [
        f"metadata.annotations[{annotation}]: cannot change from {before!r} to {after!r} after creation"
        for annotation, before, after in (
            (names.POLICY_ANNOTATION, old_policy.policy, new_policy.policy),
            (names.TOPOLOGY_KEY_ANNOTATION, old_policy.topology_key, new_policy.topology_key),
            (names.DISRUPTION_MODE_ANNOTATION, old_policy.disruption_mode, new_policy.disruption_mode),
            (names.PREEMPTION_POLICY_ANNOTATION, old_policy.preemption_policy, new_policy.preemption_policy),
            (names.SLICE_SIZE_ANNOTATION, _text(old_layout.slice_size), _text(new_layout.slice_size)),
            (
                names.SLICE_TOPOLOGY_KEY_ANNOTATION,
                old_layout.slice_topology_key,
                new_layout.slice_topology_key,
            ),
            (names.TOPOLOGY_MODE_ANNOTATION, old_layout.topology_mode, new_layout.topology_mode),
        )
        if before != after
    ]
    if old_layout.sliced and new_policy.parallelism != old_policy.parallelism:
        changed.append(
            f"spec.parallelism: cannot change from {old_policy.parallelism} to {new_policy.parallelism} on a "
            f"sliced Job: its slices ({names.SLICE_SIZE_ANNOTATION}) were made for parallelism "
            f"{old_policy.parallelism} at creation"
        )
    if changed:
        raise kopf.AdmissionError("; ".join(changed), code=422)


@kopf.on.validate(
    GROUP,
    VERSION,
    "podgroups",
    id=VALIDATE_POD_GROUP_ID,
    operations=["UPDATE"],
    labels={names.JOB_UID_LABEL: kopf.PRESENT},  # groups made for Jobs; hand-made ones stay editable
    persistent=True,
    # Fail open, as for Jobs: with Phalanx away, garbage collection's metadata updates must not block;
    # the loop puts the Job's gang size back before it decides anything.
    ignore_failures=True,
    side_effects=False,
)
def validate_pod_group_update(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
    """A Job-owned PodGroup's spec follows its Job: the one change allowed is minCount becoming the Job's."""
    new_spec, old_spec = mapping(body.get("spec")), mapping(old.get("spec") if old is not None else None)
    if old is None or dict(new_spec) == dict(old_spec):
        return
    meta = mapping(body.get("metadata"))
    labels = mapping(meta.get("labels"))
    job_uid = str(labels.get(names.JOB_UID_LABEL) or "")
    job_name = str(labels.get(names.JOB_NAME_LABEL) or job_uid)
    job = runtime.cache.jobs.get(job_uid)
    wanted = job.policy.min_count if job is not None and job.policy is not None else None
    if wanted is not None and _only_min_count_changed(old_spec, new_spec, wanted):
        return
    raise kopf.AdmissionError(
        f"spec: PodGroup {meta.get('name')} follows its Job {job_name}: set the Job's "
        f"{names.MIN_COUNT_ANNOTATION} annotation (or its parallelism) to change the gang size; the other "
        "settings are fixed at the Job's creation (PodGroups made by hand, without a Job, stay editable)",
        code=422,
    )


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def _only_min_count_changed(old: Mapping[str, Any], new: Mapping[str, Any], wanted: int) -> bool:
    gang = mapping(mapping(new.get("schedulingPolicy")).get("gang"))
    if gang.get("minCount") != wanted:
        return False
    expected = copy.deepcopy(dict(old))
    old_gang = mapping(expected.get("schedulingPolicy")).get("gang")
    if not isinstance(old_gang, dict):
        return False
    old_gang["minCount"] = wanted
    return bool(expected == dict(new))


@kopf.on.validate(
    GROUP,
    VERSION,
    "workloads",
    id=VALIDATE_WORKLOAD_ID,
    operations=["CREATE", "UPDATE"],
    persistent=True,
    # Fail open: the CRD schema already refuses all but the rules it cannot express (names unique across
    # the template tree, one priority for all templates), and Phalanx's own Workloads keep them.
    ignore_failures=True,
    side_effects=False,
)
def validate_workload(body: kopf.Body, **_: Any) -> None:
    """The Workload rules a CRD schema cannot express, each problem naming its field."""
    problems = workload_problems(body.get("spec"))
    if problems:
        raise kopf.AdmissionError("; ".join(problems), code=422)


@kopf.on.mutate(
    "",
    "v1",
    "pods",
    id=GATE_POD_ID,
    operations=["CREATE"],
    # Pods that join a PodGroup by label. A Job's pods are not: they are held through their Job's template,
    # and Phalanx writes this label on them itself.
    labels={names.POD_GROUP_LABEL: kopf.PRESENT, JOB_CONTROLLER_UID_LABEL: kopf.ABSENT},
    persistent=True,  # as for Jobs: no labelled pod slips through ungated while the operator is away
    ignore_failures=False,  # failurePolicy: Fail
    side_effects=False,
)
def gate_pod(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Hold a pod that joins a PodGroup by label behind the gate until its group is admitted."""
    meta = body.get("metadata", {}) or {}
    namespace = str(meta.get("namespace") or "")
    if namespace == "kube-system" or not runtime.settings.watches(namespace):
        return  # the chart's namespaceSelector skips these; Kopf's own configuration (dev) has none
    if any(o.get("kind") == "Job" and o.get("controller") for o in meta.get("ownerReferences") or []):
        return  # a Job's pod (see the label selector above)
    group = str((meta.get("labels") or {}).get(names.POD_GROUP_LABEL) or "")
    problems = dns_subdomain_problems(group)
    if problems:
        raise kopf.AdmissionError(
            f"label {names.POD_GROUP_LABEL}: {group!r} is not a PodGroup name: {'; '.join(problems)}",
            code=422,
        )
    spec = body.get("spec", {}) or {}
    if spec.get("nodeName"):
        # A bound pod bypasses scheduling and cannot carry a scheduling gate.
        raise kopf.AdmissionError(
            f"spec.nodeName is set: a pod bound by hand cannot join PodGroup {group!r}; remove nodeName, "
            f"or the {names.POD_GROUP_LABEL} label",
            code=422,
        )
    gates = list(spec.get("schedulingGates") or [])
    if not any(g.get("name") == names.ADMISSION_GATE for g in gates):
        gates.append({"name": names.ADMISSION_GATE})
        patch.spec["schedulingGates"] = gates


@kopf.on.validate(
    GROUP,
    VERSION,
    TOPOLOGIES,
    id=VALIDATE_TOPOLOGY_ID,
    operations=["CREATE", "UPDATE"],
    persistent=True,
    # Fail open: with Phalanx away, Topologies stay editable; a second one listing a label then is not
    # used, and its Active condition says why (controller/topology.py).
    ignore_failures=True,
    side_effects=False,
)
async def validate_topology(body: kopf.Body, **_: Any) -> None:
    """At most one Topology may list a given node label (the CRD checks each Topology alone)."""
    name = str((body.get("metadata") or {}).get("name") or "")
    levels = [str(level.get("nodeLabel") or "") for level in (body.get("spec") or {}).get("levels") or []]
    if runtime.kube is not None:
        # Read live: two Topologies applied together must not both pass a cache that has seen neither.
        items = await runtime.kube.list_cluster_objects(TOPOLOGIES)
        others = [
            (
                str(item["metadata"]["name"]),
                [str(x.get("nodeLabel") or "") for x in (item.get("spec") or {}).get("levels") or []],
            )
            for item in items
        ]
    else:
        others = [(t.name, list(t.levels)) for t in runtime.cache.topologies.values()]
    problems = label_conflicts(name, levels, others)
    if problems:
        raise kopf.AdmissionError(f"Topology {name}: " + "; ".join(problems), code=422)


# ---------------------------------------------------------------------- watches → cache
@kopf.on.event("", "v1", "nodes")
async def node_event(event: kopf.RawEvent, **_: Any) -> None:
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed("nodes")
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_node(body["metadata"]["name"])
    else:
        runtime.cache.upsert_node(body)


@kopf.on.event("", "v1", "pods")
async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed("pods")
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_pod(meta["namespace"], meta["name"], meta.get("uid", ""))
    else:
        runtime.cache.upsert_pod(body)


@kopf.on.event("batch", "v1", "jobs")
async def job_event(event: kopf.RawEvent, **_: Any) -> None:
    """Every Job, not only labelled ones: a Job whose label was removed must be seen to be released."""
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed("jobs")
    body = event["object"]
    if not runtime.settings.watches(str(body["metadata"].get("namespace") or "")):
        return
    if event["type"] == "DELETED":
        runtime.cache.delete_job(body["metadata"]["uid"])
    else:
        runtime.cache.upsert_job(body)


@kopf.on.event(GROUP, VERSION, "podgroups")
async def pod_group_event(event: kopf.RawEvent, **_: Any) -> None:
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed("podgroups")
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_pod_group(meta["namespace"], meta["name"])
    else:
        runtime.cache.upsert_pod_group(body)


@kopf.on.event(GROUP, VERSION, COMPOSITE_POD_GROUPS)
async def composite_pod_group_event(event: kopf.RawEvent, **_: Any) -> None:
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed(COMPOSITE_POD_GROUPS)
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_composite_pod_group(meta["namespace"], meta["name"])
    else:
        runtime.cache.upsert_composite_pod_group(body)


@kopf.on.event(GROUP, VERSION, "workloads")
async def workload_event(event: kopf.RawEvent, **_: Any) -> None:
    if event["type"] is None:  # from a listing: it misses deletions
        runtime.listed("workloads")
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_workload(meta["namespace"], meta["name"])
    else:
        runtime.cache.upsert_workload(body)


@kopf.on.event(GROUP, VERSION, TOPOLOGIES)
async def topology_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_topology(body["metadata"]["name"])
    else:
        runtime.cache.upsert_topology(body)


@kopf.on.event("scheduling.k8s.io", "v1", "priorityclasses")
async def priority_class_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_priority_class(body["metadata"]["name"])
    else:
        runtime.cache.upsert_priority_class(body)


# Volumes: kube-scheduler's volume filters read claims, volumes and classes, so the engine does too.
@kopf.on.event("", "v1", "persistentvolumeclaims")
async def claim_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_claim(meta["namespace"], meta["name"])
    else:
        runtime.cache.upsert_claim(body)


@kopf.on.event("", "v1", "persistentvolumes")
async def volume_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_volume(body["metadata"]["name"])
    else:
        runtime.cache.upsert_volume(body)


@kopf.on.event("storage.k8s.io", "v1", "storageclasses")
async def storage_class_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_storage_class(body["metadata"]["name"])
    else:
        runtime.cache.upsert_storage_class(body)


# CSI: attach limits per node (NodeVolumeLimits) and storage capacity (VolumeBinding).
@kopf.on.event("storage.k8s.io", "v1", "csinodes")
async def csi_node_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_csi_node(body["metadata"]["name"])
    else:
        runtime.cache.upsert_csi_node(body)


@kopf.on.event("storage.k8s.io", "v1", "volumeattachments")
async def volume_attachment_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_volume_attachment(body["metadata"]["name"])
    else:
        runtime.cache.upsert_volume_attachment(body)


@kopf.on.event("storage.k8s.io", "v1", "csidrivers")
async def csi_driver_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    if event["type"] == "DELETED":
        runtime.cache.delete_csi_driver(body["metadata"]["name"])
    else:
        runtime.cache.upsert_csi_driver(body)


@kopf.on.event("storage.k8s.io", "v1", "csistoragecapacities")
async def storage_capacity_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event["object"]
    meta = body["metadata"]
    if event["type"] == "DELETED":
        runtime.cache.delete_storage_capacity(meta["namespace"], meta["name"])
    else:
        runtime.cache.upsert_storage_capacity(body)


# ---------------------------------------------------------------------- lifecycle
@kopf.on.login()
async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return await runtime_login(runtime.settings, **kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    await runtime.start(settings)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await runtime.stop()
