"""The admission webhooks' handlers: plain functions of the request body (and what the cache knows), made
into Kopf handlers by registry.py. Whatever the body holds, they accept it, patch it, or refuse it with a
message naming the field; they never raise anything else (fuzzed in the tests)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import kopf

from phalanx.api import keys as names
from phalanx.api.admission_checks import (
    TAS_ANNOTATIONS_OF_USERS,
    claim_problems,
    dra_resource_problems,
    job_node_name_problems,
    partial_admission_problems,
    pod_device_problems,
    pod_group_namespace_problem,
    preferred_affinity_warnings,
    removed_gate_problems,
    scheduler_problems,
    slice_key_problem,
    slice_key_warning,
    tas_problems,
    template_key_problems,
    unlisted_resource_warnings,
)
from phalanx.api.formats import dns_subdomain_problems
from phalanx.api.group import POD_GROUPS, TOPOLOGIES
from phalanx.api.job_layout import JobLayout, parse_job_layout
from phalanx.api.job_policy import (
    JobPolicy,
    JobPolicyError,
    key_problems,
    managed_by_label,
    managed_label_problem,
    parse_job_policy,
)
from phalanx.api.naming import pod_group_label_value
from phalanx.api.owned import OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_UID_LABEL
from phalanx.api.workload import workload_problems
from phalanx.bodies import mapping
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.base import AdmittingKind
from phalanx.controller.kinds.job_quota import creation_refusal
from phalanx.controller.kinds.job_record import KIND as JOB_KIND
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.model.topology import label_conflicts

log = logging.getLogger("phalanx.webhooks")


class WatchContext(Protocol):
    """What the handlers read of the process around them (process/runtime.py is one)."""

    @property
    def cache(self) -> ClusterCache: ...
    @property
    def kube(self) -> Kube | None: ...
    @property
    def cache_primed(self) -> bool: ...
    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """The schedulers that bind Phalanx's released pods (--scheduler-names)."""
        ...

    def watches(self, namespace: str) -> bool:
        """Whether Phalanx manages owners in `namespace` (--namespaces)."""
        ...

    def listed(self, kind: str) -> None:
        """A handler got an object of `kind` from one of Kopf's listings, which miss deletions."""
        ...

    async def outside(self, kind: str, body: Mapping[str, Any]) -> None:
        """An owner in a namespace this Phalanx does not manage (--namespaces) was seen: one Warning if it
        asks for Phalanx and nothing gated it (admission_checks.unmanaged_here)."""
        ...


class GroupElsewhereError(kopf.AdmissionError):
    """A pod's PodGroup is known only in other namespaces (by the cache)."""

    def __init__(self, message: str, namespace: str, group: str) -> None:
        super().__init__(message, code=422)
        self.namespace = namespace
        self.group = group


class GroupUnseenError(GroupElsewhereError):
    """A pod refused as one of a gang (devices Phalanx does not model) because the cache has not seen its
    PodGroup in its namespace, and a group not created yet counts as a gang."""


class Webhooks:
    """The admission handlers, over one process's context."""

    def __init__(self, ctx: WatchContext) -> None:
        self.ctx = ctx
        # (node labels generation, Job key, slice key) -> slice_key_warning's answer: it reads every node,
        # and sliced Jobs of a burst ask the same of the same nodes.
        self._slice_warnings: dict[tuple[int, str | None, str | None], str | None] = {}

    def _slice_key_warning(self, job_key: str | None, slice_key: str | None) -> str | None:
        if not job_key or not slice_key:
            return None
        cache = self.ctx.cache
        key = (cache.node_labels_generation, job_key, slice_key)
        if key not in self._slice_warnings:
            if len(self._slice_warnings) > 64:
                self._slice_warnings.clear()
            self._slice_warnings[key] = slice_key_warning(job_key, slice_key, cache.nodes.values())
        return self._slice_warnings[key]

    def gate_owner(self, kind: AdmittingKind) -> Callable[..., None]:
        """The CREATE handler of an owner kind with a webhook of its own (a JobSet): its annotations checked,
        its pods held behind Phalanx's gate through its templates."""

        def gate(body: kopf.Body, patch: kopf.Patch, runtime_problems: Sequence[str] = (), **_: Any) -> None:
            if not self.gated_here(body):
                return
            # One placement engine per object (api/admission_checks.py); `runtime_problems`: the same found
            # in a TrainJob's runtime (trainjob_gate.py).
            kueue = tas_problems(kind.name, body) + list(runtime_problems)
            if kueue:
                raise kopf.AdmissionError("; ".join(kueue), code=422)
            try:
                spec = kind.admit_create(body)
            except JobPolicyError as e:
                raise kopf.AdmissionError(str(e), code=422) from e
            # Whether or not the templates still need the gate: YAML re-applied from `kubectl get -o yaml`
            # carries it already, and its pods are held all the same.
            problems = scheduler_problems(body.get("spec"), self.ctx.scheduler_names)
            # A pod template's `phalanx.dev/pod-group` label would make its pods join a hand-made group too.
            problems += template_key_problems(body.get("spec"), kind.name)
            problems += claim_problems(body.get("spec"), str(body.get("kind") or "object"))
            problems += self._dra_problems(body, str(body.get("kind") or "object"))
            if problems:
                raise kopf.AdmissionError("; ".join(problems), code=422)
            if spec is not None:
                patch.spec.update(spec)

        return gate

    def gated_here(self, body: kopf.Body) -> bool:
        """An owner's creation the owner gates check: in a namespace Phalanx manages, not opted out."""
        meta = mapping(body.get("metadata"))
        if not self.ctx.watches(str(meta.get("namespace") or "")):
            return False  # another operator's namespace (--namespaces)
        return mapping(meta.get("labels")).get(names.MANAGED_LABEL) != names.UNMANAGED_VALUE  # else opted out

    def regate_owner(self, kind: AdmittingKind) -> Callable[..., None]:
        """The mutating UPDATE handler of an owner kind whose templates may change at any time (a
        LeaderWorkerSet): Phalanx's gate put back into the templates of a managed object that had it."""

        def regate(body: kopf.Body, patch: kopf.Patch, old: kopf.Body | None = None, **_: Any) -> None:
            meta = mapping(body.get("metadata"))
            if old is None or not self.ctx.watches(str(meta.get("namespace") or "")):
                return
            if not managed_by_label(mapping(meta.get("labels")))[0]:
                return  # leaving Phalanx: nothing to hold (a refused value made around the validator is
                # still managed by the controller, so its gate is put back too)
            spec = kind.regated(old, body)
            if spec is not None:
                patch.spec.update(spec)

        return regate

    def validate_owner(self, kind: AdmittingKind) -> Callable[..., None]:
        """The UPDATE handler of an owner kind: what an edit of a managed object may not change."""

        def validate(body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
            _refuse_a_bad_managed_value(old, body)
            if old is None:
                return
            labels = mapping(mapping(body.get("metadata")).get("labels"))
            if not managed_by_label(labels)[0]:
                return  # released from Phalanx (false): its annotations no longer matter
            problems = _added_tas(kind.name, old, body) + kind.update_problems(old, body)
            if problems:
                raise kopf.AdmissionError("; ".join(problems), code=422)

        return validate

    def gate_job(
        self, body: kopf.Body, patch: kopf.Patch, warnings: list[str] | None = None, **_: Any
    ) -> None:
        """Validate the policy annotations and hold every pod of a gang Job behind the gate. What it refuses
        that the Job alone shows is api/admission_checks.job_creation_problems too (`phalanx convert`)."""
        meta = mapping(body.get("metadata"))
        if not self.ctx.watches(str(meta.get("namespace") or "")):
            return  # another operator's namespace (--namespaces): no gate nobody would remove
        if mapping(meta.get("labels")).get(names.MANAGED_LABEL) == names.UNMANAGED_VALUE:
            return  # opted out in so many words: left alone
        try:
            policy = parse_job_policy(body)
            layout = parse_job_layout(body, policy)  # topology mode and slices
        except JobPolicyError as e:
            raise kopf.AdmissionError(str(e), code=422) from e
        # Kueue TAS or partial admission against the gang, template keys, schedulers, claims (api/).
        problems = tas_problems(JOB_KIND, body) + partial_admission_problems(body, layout.sliced)
        problems += template_key_problems(body.get("spec"))
        if policy.is_gang:
            problems += scheduler_problems(body.get("spec"), self.ctx.scheduler_names)
            problems += claim_problems(body.get("spec"))
            problems += self._dra_problems(body)
        if problems:
            raise kopf.AdmissionError("; ".join(problems), code=422)
        self._refuse_what_would_wait_forever(body, policy, layout)
        pod_spec = mapping(mapping(mapping(body.get("spec")).get("template")).get("spec"))
        hand_bound = job_node_name_problems(body.get("spec")) if policy.is_gang else []
        if hand_bound:
            raise kopf.AdmissionError("; ".join(hand_bound), code=422)
        if warnings is not None:
            warnings.extend(self._priority_class_warnings(policy.priority_class_name))
            if policy.is_gang:
                warnings.extend(preferred_affinity_warnings(body.get("spec")))
            if self.ctx.cache_primed:
                if policy.is_gang:
                    listed = self.ctx.cache.listed_resources
                    warnings.extend(unlisted_resource_warnings(body.get("spec"), listed))
                said = self._slice_key_warning(policy.topology_key, layout.slice_topology_key)
                warnings.extend([said] if said else [])
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

    def _refuse_what_would_wait_forever(self, body: kopf.Body, policy: JobPolicy, layout: JobLayout) -> None:
        """What the cache shows a gang could never get: slices no smaller than the whole Job's domain (by the
        Topology listing its key), a namespace quota too small for the whole gang."""
        cache = self.ctx.cache
        key = policy.topology_key
        levels = cache.topology_index.levels_for(key) if key else None
        problem = slice_key_problem(key, layout.slice_topology_key, levels)
        if problem:
            raise kopf.AdmissionError(problem, code=422)
        if not policy.is_gang or not self.ctx.cache_primed:
            return
        namespace = str(mapping(body.get("metadata")).get("namespace") or "")
        size = policy.parallelism if layout.sliced else (policy.min_count or 1)
        refusal = creation_refusal(body, size, self.ctx.cache.resource_quotas(namespace))
        if refusal:
            raise kopf.AdmissionError(refusal, code=422)

    def _joins_basic_group(self, namespace: str, group: str) -> bool | None:
        """The pod's PodGroup is known and has no gang policy: its pods are never held (placed one by one
        by kube-scheduler, devices included). None: the cache has not seen it (a group not created yet
        counts as a gang; gate_pod_confirmed asks the API)."""
        for record in self.ctx.cache.pod_groups.items.values():
            if record.namespace == namespace and pod_group_label_value(record.name) == group:
                return record.gang_min_count is None
        return None

    def _dra_problems(self, body: kopf.Body, owner: str = "Job") -> list[str]:
        """A gang's requests of extended resources a DRA DeviceClass serves (admission_checks.py)."""
        if not self.ctx.cache_primed:
            return []
        cache = self.ctx.cache
        return dra_resource_problems(body.get("spec"), cache.listed_resources, cache.device_classes, owner)

    def _priority_class_warnings(self, name: str | None) -> list[str]:
        """A PriorityClass that does not exist (yet) is no reason to refuse the Job — it may be created next —
        but the Job controller cannot create a single pod until it does: say so now (kubectl prints it)."""
        if not name or not self.ctx.cache_primed or name in self.ctx.cache.priority_classes:
            return []
        return [
            f"spec.template.spec.priorityClassName: PriorityClass {name!r} does not exist: the Job "
            "controller cannot create the Job's pods until it does (the Priority admission plugin refuses "
            "them)"
        ]

    def validate_job_update(self, body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
        """Edited annotations get the same checks as at creation; as upstream, only the gang size may change.

        Only what the edit adds is refused: a Job that was already wrong (created around the webhook, or
        before a check existed) still takes Phalanx's own writes (suspend, resume) and the user's fixes.
        """
        _refuse_a_bad_managed_value(old, body)
        labels = mapping(mapping(body.get("metadata")).get("labels"))
        if not managed_by_label(labels)[0]:
            return  # released from Phalanx (false): its annotations no longer matter
        known = {str(p) for p in key_problems(old, creating=False)} if old is not None else set()
        added = [str(p) for p in key_problems(body, creating=False) if str(p) not in known]
        added += _added_tas(JOB_KIND, old, body)
        if added:
            raise kopf.AdmissionError("; ".join(added), code=422)
        # Phalanx's gate taken off the template (possible only while the Job is suspended and was never
        # started): refused, not put back. A Job's template is fixed but for that window, in which Kueue
        # changes it too, and Kueue mutates a Job only at its creation and validates its edits; an edit
        # there is deliberate, and a refusal naming the field says what it would break.
        removed = removed_gate_problems(old.get("spec"), body.get("spec")) if old is not None else []
        if removed:
            raise kopf.AdmissionError("; ".join(removed), code=422)
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
                (
                    names.PREEMPTION_POLICY_ANNOTATION,
                    old_policy.preemption_policy,
                    new_policy.preemption_policy,
                ),
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
                f"spec.parallelism: cannot change from {old_policy.parallelism} to {new_policy.parallelism} "
                f"on a sliced Job: its slices ({names.SLICE_SIZE_ANNOTATION}) were made for parallelism "
                f"{old_policy.parallelism} at creation"
            )
        if changed:
            raise kopf.AdmissionError("; ".join(changed), code=422)

    def validate_pod_group_update(self, body: kopf.Body, old: kopf.Body | None = None, **_: Any) -> None:
        """The spec of a PodGroup Phalanx made follows its owner, whatever the owner's kind. A plain Job's
        PodGroup may only have its minCount become the Job's (upstream's one mutable field, which Phalanx
        keeps in step with the Job); a sliced Job's slices are fixed at its creation; the groups of a
        JobSet, LeaderWorkerSet or TrainJob take their gang sizes from the owner's spec, fixed while
        Phalanx manages it, so no spec change passes. PodGroups made by hand (without the labels) stay
        editable."""
        new_spec, old_spec = mapping(body.get("spec")), mapping(old.get("spec") if old is not None else None)
        if old is None or dict(new_spec) == dict(old_spec):
            return
        # Phalanx's labels as it made them: an edit that also drops them is still an edit of its group.
        labels = {**mapping(mapping(body.get("metadata")).get("labels"))}
        labels.update(mapping(mapping(old.get("metadata")).get("labels")))
        job_uid = str(labels.get(names.JOB_UID_LABEL) or "")
        owner_uid = str(labels.get(OWNER_UID_LABEL) or "")
        if not job_uid and not owner_uid:
            return  # made by hand
        meta = mapping(body.get("metadata"))
        fields = ", ".join(_changed_fields(old.get("spec"), body.get("spec"), "spec"))
        if job_uid:
            job_name = str(labels.get(names.JOB_NAME_LABEL) or job_uid)
            if old_spec.get("parentCompositePodGroupName") or new_spec.get("parentCompositePodGroupName"):
                # A slice of a sliced Job: its minCount is the slice size, which the plan reads back from
                # the slices (job_slices.kept_slices), never the Job's min-count; nothing in it may change.
                raise kopf.AdmissionError(
                    f"{fields}: PodGroup {meta.get('name')} is a slice of the sliced Job {job_name}: its "
                    f"size (the Job's {names.SLICE_SIZE_ANNOTATION}) and the rest of its spec are fixed at "
                    "the Job's creation; recreate the Job to change its slices",
                    code=422,
                )
            job = self.ctx.cache.owners[JOB_KIND].get(job_uid)
            wanted = job.policy.min_count if job is not None and job.policy is not None else None
            if wanted is not None and _only_min_count_changed(old_spec, new_spec, wanted):
                return
            raise kopf.AdmissionError(
                f"{fields}: PodGroup {meta.get('name')} follows its Job {job_name}: set the Job's "
                f"{names.MIN_COUNT_ANNOTATION} annotation (or its parallelism) to change the gang size; "
                "the other settings are fixed at the Job's creation (PodGroups made by hand, without a Job, "
                "stay editable)",
                code=422,
            )
        annotations = mapping(meta.get("annotations"))
        kind = str(labels.get(OWNER_KIND_LABEL) or "owner")
        owner = str(annotations.get(names.OWNER_ANNOTATION) or f"{kind}/{labels.get(OWNER_NAME_LABEL)}")
        shown = owner.partition("/")[0] or kind
        raise kopf.AdmissionError(
            f"{fields}: PodGroup {meta.get('name')} was made by Phalanx for {owner} and follows it: its "
            f"gang size comes from the {shown}'s spec and, with the rest of its spec, is fixed while "
            f"Phalanx manages the {shown}; recreate the {shown} to change it (PodGroups made by hand stay "
            "editable)",
            code=422,
        )

    def validate_workload(self, body: kopf.Body, **_: Any) -> None:
        """The Workload rules a CRD schema cannot express, each problem naming its field."""
        problems = workload_problems(body.get("spec"))
        if problems:
            raise kopf.AdmissionError("; ".join(problems), code=422)

    async def gate_pod_confirmed(
        self, body: kopf.Body, patch: kopf.Patch, warnings: list[str] | None = None, **_: Any
    ) -> None:
        """`gate_pod`, with its refusals that rest on the cache alone confirmed live. A PodGroup created just
        before its pods may not have reached the cache yet: while one of the same name elsewhere has (a name
        reused in a new namespace, the old one still being deleted), that pod is gated, not refused; and a
        pod asking for DRA devices that joins it is refused only if it is a gang's (a basic group's pods are
        never held). Only on those paths: the rest needs no request."""
        seen_live, basic_live = False, False
        items: list[dict[str, Any]] | None = None
        while True:
            said: list[str] = []  # this try's warnings: only the last try's are the answer's
            try:
                self.gate_pod(
                    body=body,
                    patch=patch,
                    warnings=said,
                    group_seen_live=seen_live,
                    basic_seen_live=basic_live,
                )
                if warnings is not None:
                    warnings.extend(said)
                return
            except GroupElsewhereError as refusal:
                if self.ctx.kube is None:
                    raise
                if items is None:
                    items = await self._groups_live(refusal.namespace, refusal.group)
                live = next(
                    (
                        i
                        for i in items or ()
                        if pod_group_label_value(str(i["metadata"]["name"])) == refusal.group
                    ),
                    None,
                )
                if live is None:
                    raise
                if isinstance(refusal, GroupUnseenError):
                    if basic_live or PodGroupRecord.from_body(live).gang_min_count is not None:
                        raise
                    basic_live = seen_live = True  # there, in its namespace: no "not created yet" warning
                elif seen_live:
                    raise
                else:
                    seen_live = True

    async def _groups_live(self, namespace: str, group: str) -> list[dict[str, Any]] | None:
        """The PodGroups the API has in `namespace` now (None: it did not answer, and the cache's answer
        stands)."""
        assert self.ctx.kube is not None
        try:
            return await self.ctx.kube.list_objects(POD_GROUPS, namespace)
        except Exception as e:  # the API's failure: the cache's refusal stands
            log.warning("could not confirm PodGroup %s/%s live: %s", namespace, group, e)
            return None

    def gate_pod(
        self,
        body: kopf.Body,
        patch: kopf.Patch,
        warnings: list[str] | None = None,
        group_seen_live: bool = False,
        basic_seen_live: bool = False,
        **_: Any,
    ) -> None:
        """Hold a pod that joins a PodGroup by label behind the gate until its group is admitted.
        `group_seen_live`, `basic_seen_live`: the API showed its group in its namespace, a basic one."""
        meta = body.get("metadata", {}) or {}
        namespace = str(meta.get("namespace") or "")
        if namespace == "kube-system" or not self.ctx.watches(namespace):
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
        problems = scheduler_problems(spec, self.ctx.scheduler_names)
        if problems:
            raise kopf.AdmissionError("; ".join(problems), code=422)
        if self.ctx.cache_primed and not group_seen_live:
            groups = self.ctx.cache.pod_groups.items.values()
            refusal, said = pod_group_namespace_problem(
                group, namespace, [(g.namespace, pod_group_label_value(g.name)) for g in groups]
            )
            if refusal:
                raise GroupElsewhereError(refusal, namespace, group)
            if said and warnings is not None:
                warnings.append(said)
        basic = self._joins_basic_group(namespace, group)
        if self.ctx.cache_primed and not basic and not basic_seen_live:
            problems = pod_device_problems(
                spec, group, self.ctx.cache.listed_resources, self.ctx.cache.device_classes
            )
            if problems and basic is None:
                raise GroupUnseenError("; ".join(problems), namespace, group)
            if problems:
                raise kopf.AdmissionError("; ".join(problems), code=422)
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

    async def validate_topology(self, body: kopf.Body, **_: Any) -> None:
        """At most one Topology may list a given node label (the CRD checks each Topology alone)."""
        name = str((body.get("metadata") or {}).get("name") or "")
        levels = [str(level.get("nodeLabel") or "") for level in (body.get("spec") or {}).get("levels") or []]
        if self.ctx.kube is not None:
            # Read live: two Topologies applied together must not both pass a cache that has seen neither.
            items = await self.ctx.kube.list_cluster_objects(TOPOLOGIES)
            others = [
                (
                    str(item["metadata"]["name"]),
                    [str(x.get("nodeLabel") or "") for x in (item.get("spec") or {}).get("levels") or []],
                )
                for item in items
            ]
        else:
            others = [(t.name, list(t.levels)) for t in self.ctx.cache.topologies.values()]
        problems = label_conflicts(name, levels, others)
        if problems:
            raise kopf.AdmissionError(f"Topology {name}: " + "; ".join(problems), code=422)


def _added_tas(kind: str, old: kopf.Body | None, new: kopf.Body) -> list[str]:
    """Kueue TAS annotations an edit adds to a managed owner's pod templates (a suspended Job's or JobSet's,
    which Kueue lets change; an LWS's, any time; Trainer's JobSet made again from a runtime edited since its
    TrainJob's creation) or to a TrainJob's runtime patches: refused as at creation, naming the field (one
    placement engine per owner). Those it had already are left: an edit does not fail for what it keeps;
    nor is the one Kueue writes itself at an admission with a topology flavor (KUEUE_WRITTEN_TAS: the
    controller warns of that flavor, kinds/kueue.py)."""
    known = set(tas_problems(kind, old, TAS_ANNOTATIONS_OF_USERS)) if old is not None else set()
    return [p for p in tas_problems(kind, new, TAS_ANNOTATIONS_OF_USERS) if p not in known]


def _refuse_a_bad_managed_value(old: kopf.Body | None, new: kopf.Body) -> None:
    """An edit setting the managed label to anything but true or false is refused, as at creation: plan()
    would read "True" or "yes" as not managed and let go of the gang mid-admission (its pods ungated, its
    PodGroup deleted). Removing the label, or false, is how an owner leaves Phalanx, and stays allowed."""
    problem = managed_label_problem(old, new)
    if problem:
        raise kopf.AdmissionError(problem, code=422)


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


_ABSENT = object()


def _changed_fields(old: Any, new: Any, path: str) -> list[str]:
    """The paths at which `new` differs from `old` (`spec.schedulingPolicy.gang.minCount`), objects walked
    key by key (a key added or removed, with any value, is a change), anything else (a list included)
    compared whole; `path` itself when nothing finer names the change."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = [*old, *(k for k in new if k not in old)]
        changed = [
            f for k in keys for f in _changed_fields(old.get(k, _ABSENT), new.get(k, _ABSENT), f"{path}.{k}")
        ]
        return changed or ([] if dict(old) == dict(new) else [path])
    return [] if old == new else [path]


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
