"""Kubeflow Trainer's TrainJob (trainer.kubeflow.org/v1alpha1): opted in with the managed label (and the
JobSet annotations) on the TrainJob. Trainer always materialises a TrainJob as a JobSet, but copies only its
runtime's labels to it, so at the TrainJob's creation Phalanx adds a `runtimePatches` entry of its own
(api/trainjob.py) carrying the label and annotations into the JobSet's template: the JobSet is then gated
and placed as any managed JobSet (kinds/jobset.py), and its unit names the TrainJob as its owner —
events go to it, and it is requeued by suspending the TrainJob (Trainer keeps the JobSet's suspend in step
with the TrainJob's, so suspending the JobSet alone would be undone).

A TrainJob has no units of its own: its JobSet's unit is its gang.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys as names
from phalanx.api.job_policy import JobPolicyError, key_problems, managed_by_label
from phalanx.api.jobset import JOBSET_ANNOTATIONS, annotation_problems
from phalanx.api.trainjob import (
    API_VERSION,
    KIND,
    PATCH_MANAGER,
    finished_how,
    phalanx_patch,
    runtime_patches,
)
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import ClusterView, OwnerState, Resource, Unit, dependents_first
from phalanx.controller.model.records import PodRecord, meta_of, parse_time
from phalanx.controller.model.refs import ObjectRef

RESOURCE = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs")


@dataclass(frozen=True, slots=True)
class TrainJobRecord:
    uid: str
    namespace: str
    name: str
    managed: bool
    suspended: bool
    finished: bool
    finished_how: str
    requeued: str
    created: dt.datetime | None
    resource_version: str = field(default="", compare=False)
    managed_problem: str = ""  # its managed label has a value the webhooks refuse (api managed_by_label)
    deleting: bool = False  # metadata.deletionTimestamp is set (kinds/base.OwnerRecord)
    dependents_first: bool = False  # deleted in the foreground (kinds/base.dependents_first)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, KIND, self.namespace, self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> TrainJobRecord:
        meta, spec, status = meta_of(body), body.get("spec") or {}, body.get("status") or {}
        how = finished_how(status)
        managed, managed_problem = managed_by_label(meta.get("labels") or {})
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            managed=managed,
            managed_problem=managed_problem,
            suspended=bool(spec.get("suspend")),
            finished=bool(how),
            finished_how=how,
            requeued=str((meta.get("annotations") or {}).get(names.REQUEUED_ANNOTATION) or ""),
            created=parse_time(meta.get("creationTimestamp")),
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            dependents_first=dependents_first(meta),
        )


class TrainJobKind:
    """TrainJobs labelled `phalanx.dev/managed=true` (implements kinds.base.AdmittingKind)."""

    name = KIND
    resource = RESOURCE
    suspends = True  # requeued whole through spec.suspend (else: its pods deleted)
    owns_groups = False  # its groups are its JobSet's (owned by the JobSet, which Trainer owns)
    read_by_other_kinds = True  # its JobSet's unit reads it (kinds/jobset.py owner_of)

    def parse(self, body: Mapping[str, Any]) -> TrainJobRecord:
        return TrainJobRecord.from_body(body)

    def worth_keeping(self, owner: TrainJobRecord, has_objects: bool) -> bool:
        return owner.managed

    def index_key(self, owner: TrainJobRecord) -> str:
        return owner.uid

    def pod_owner(self, pod: PodRecord) -> str:
        return ""  # its pods are its JobSet's

    def admit_create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        problems = key_problems(body, annotations=JOBSET_ANNOTATIONS)
        problems += annotation_problems(mapping(mapping(body.get("metadata")).get("annotations")))
        if problems:
            raise JobPolicyError.of(problems)
        patches = runtime_patches(body)
        return None if patches is None else {"runtimePatches": patches}

    regates_on_update = False  # its pods' templates are its JobSet's

    def regated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def update_problems(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        before = mapping(mapping(old.get("metadata")).get("annotations"))
        after = mapping(mapping(new.get("metadata")).get("annotations"))
        problems = [
            f"metadata.annotations[{key}]: cannot change from {before.get(key)!r} to {after.get(key)!r} "
            "after creation (its JobSet was made with it; recreate the TrainJob to change it)"
            for key in JOBSET_ANNOTATIONS
            if key != names.REQUEUED_ANNOTATION and before.get(key) != after.get(key)
        ]
        # Its gate, in effect: the entry that makes its JobSet managed (and so gated). Trainer applies the
        # TrainJob's runtimePatches to the JobSet while suspended; without the entry the JobSet would lose
        # the label and be let go while the TrainJob still says it is managed.
        ours = phalanx_patch(old)
        if ours is not None and phalanx_patch(new) != ours:
            problems.append(
                f"spec.runtimePatches: the entry of manager {PATCH_MANAGER} cannot be removed or changed "
                "while Phalanx manages the TrainJob: it carries the managed label and Phalanx's annotations "
                f"to its JobSet; remove the {names.MANAGED_LABEL} label, or set it to false, to take the "
                "TrainJob out of Phalanx"
            )
        return problems

    def units(self, view: ClusterView) -> Iterable[Unit]:
        return ()  # its JobSet's unit is its gang (kinds/jobset.py)

    def owner_units(self, state: OwnerState, view: ClusterView) -> Iterable[Unit]:
        return ()
