"""The Workload, CompositePodGroup and PodGroups Phalanx creates for an owner other than a batch/v1 Job
(a JobSet: one tree of child-Job groups), as models ready to POST. Pure, like builders.py.

Every object carries `phalanx.dev/owner-kind`, `owner-name` and `owner-uid` labels, is controlled by its
owner (garbage-collected with it), and says whose gang it is in `phalanx.dev/owner` (`Kind/name`, as
builders.py writes it for a Job: the OWNER column of `kubectl get podgroups`, what `phalanx explain` takes).
For a JobSet that Kubeflow Trainer made for a TrainJob that is the TrainJob: the user made it, not the
JobSet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from phalanx.api.compositepodgroup import CompositePodGroup, CompositePodGroupSpec
from phalanx.api.job_layout import PREFERRED, REQUIRED
from phalanx.api.keys import (
    MANAGED_BY_ANNOTATION,
    MANAGED_BY_VALUE,
    OWNER_ANNOTATION,
    PREFIX,
    TOPOLOGY_MODE_ANNOTATION,
)
from phalanx.api.naming import pod_group_name, pod_group_template_name, workload_name
from phalanx.api.podgroup import PodGroup, PodGroupSpec
from phalanx.api.scheduling import (
    PREEMPT_LOWER_PRIORITY,
    CompositeGangSchedulingPolicy,
    CompositeSchedulingPolicy,
    ControllerRef,
    DisruptionMode,
    PreemptionPolicy,
    SchedulingConstraints,
    SchedulingPolicy,
    TopologyConstraint,
    WorkloadRef,
)
from phalanx.api.workload import CompositePodGroupTemplate, PodGroupTemplate, Workload, WorkloadSpec

OWNER_KIND_LABEL: Final = f"{PREFIX}/owner-kind"
OWNER_NAME_LABEL: Final = f"{PREFIX}/owner-name"
OWNER_UID_LABEL: Final = f"{PREFIX}/owner-uid"


@dataclass(frozen=True)
class Owner:
    """The object Phalanx makes groups for."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    shown: str = ""  # whose gang it is, `Kind/name` (default: this owner's own; a TrainJob for its JobSet)

    @property
    def owner_text(self) -> str:
        return self.shown or f"{self.kind}/{self.name}"

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Owner:
        meta = body.get("metadata") or {}
        name, uid = meta.get("name"), meta.get("uid")
        if not name or not uid:
            raise ValueError(
                "the owner needs metadata.name and metadata.uid (build from an object read from the API)"
            )
        return cls(
            str(body.get("apiVersion")),
            str(body.get("kind")),
            str(meta.get("namespace") or ""),
            str(name),
            str(uid),
        )


@dataclass(frozen=True)
class Leaf:
    """One PodGroup of the tree: its name suffix and gang size."""

    suffix: str  # the PodGroup is `<composite>-<suffix>`
    min_count: int
    template: str  # the Workload's PodGroupTemplate it comes from (a DNS label)


def root_name(owner: Owner, suffix: str, *, tree: bool) -> str:
    """The name of the root group `build_group` (tree False: its PodGroup) or `build_tree` (its
    CompositePodGroup) makes for the owner and `suffix` (one of several gangs of the owner: a LeaderWorkerSet
    group; `build_group` always has one)."""
    wl_name = workload_name(owner.name, owner.uid)
    if not tree:
        return f"{wl_name}-{suffix}"
    name = pod_group_name(wl_name, pod_group_template_name(owner.name))
    return f"{name}-{suffix}" if suffix else name  # one of several trees of the owner


def metadata(owner: Owner, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": {OWNER_KIND_LABEL: owner.kind, OWNER_NAME_LABEL: owner.name, OWNER_UID_LABEL: owner.uid},
        "annotations": {MANAGED_BY_ANNOTATION: MANAGED_BY_VALUE, OWNER_ANNOTATION: owner.owner_text},
        "ownerReferences": [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def _constraints(key: str | None) -> SchedulingConstraints | None:
    return SchedulingConstraints(topology=[TopologyConstraint(key=key)]) if key else None


def build_tree(
    owner: Owner,
    leaves: list[Leaf],
    *,
    topology_key: str | None,
    leaf_topology_key: str | None,
    priority_class_name: str | None,
    priority: int | None,
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY,
    suffix: str = "",
    topology_mode: str = REQUIRED,
) -> tuple[Workload, CompositePodGroup, list[PodGroup]]:
    """One Workload with one composite template (a PodGroupTemplate per distinct leaf template), its
    CompositePodGroup (all leaves together: minGroupCount = the number of leaves) and one PodGroup per
    leaf. A `preferred` topology mode is kept on the CompositePodGroup (`phalanx.dev/topology-mode`), as a
    Job's on its PodGroup: what the plan reads, fixed at creation."""
    templates: dict[str, PodGroupTemplate] = {}
    for leaf in leaves:
        templates.setdefault(
            leaf.template,
            PodGroupTemplate(
                name=leaf.template,
                scheduling_policy=SchedulingPolicy.of_gang(leaf.min_count),
                scheduling_constraints=_constraints(leaf_topology_key),
                disruption_mode=DisruptionMode.of_single(),
                priority_class_name=priority_class_name,
                priority=priority,
                preemption_policy=preemption_policy,
            ),
        )
    root = CompositePodGroupTemplate(
        name=pod_group_template_name(owner.name),
        scheduling_policy=CompositeSchedulingPolicy(
            gang=CompositeGangSchedulingPolicy(min_group_count=len(leaves))
        ),
        scheduling_constraints=_constraints(topology_key),
        disruption_mode=DisruptionMode.of_all(),
        priority_class_name=priority_class_name,
        priority=priority,
        preemption_policy=preemption_policy,
        pod_group_templates=list(templates.values()),
    )
    wl_name = workload_name(owner.name, owner.uid)
    workload = Workload(
        metadata=metadata(owner, wl_name),
        spec=WorkloadSpec(
            controller_ref=ControllerRef(api_group=owner.group, kind=owner.kind, name=owner.name),
            composite_pod_group_templates=[root],
        ),
    )
    composite_name = root_name(owner, suffix, tree=True)
    composite_meta = metadata(owner, composite_name)
    if topology_mode == PREFERRED and topology_key:
        composite_meta["annotations"][TOPOLOGY_MODE_ANNOTATION] = PREFERRED
    composite = CompositePodGroup(
        metadata=composite_meta,
        spec=CompositePodGroupSpec(
            workload_ref=WorkloadRef(workload_name=wl_name, template_name=root.name),
            scheduling_policy=root.scheduling_policy,
            scheduling_constraints=root.scheduling_constraints,
            disruption_mode=DisruptionMode.of_all(),
            priority_class_name=priority_class_name,
            priority=priority,
            preemption_policy=preemption_policy,
        ),
    )
    groups = []
    for leaf in leaves:
        template = templates[leaf.template]
        groups.append(
            PodGroup(
                metadata=metadata(owner, f"{composite_name}-{leaf.suffix}"),
                spec=PodGroupSpec(
                    parent_composite_pod_group_name=composite_name,
                    workload_ref=WorkloadRef(workload_name=wl_name, template_name=template.name),
                    scheduling_policy=SchedulingPolicy.of_gang(leaf.min_count),
                    scheduling_constraints=template.scheduling_constraints,
                    disruption_mode=DisruptionMode.of_single(),
                    priority_class_name=priority_class_name,
                    priority=priority,
                    preemption_policy=preemption_policy,
                ),
            )
        )
    return workload, composite, groups


def build_group(
    owner: Owner,
    suffix: str,
    min_count: int,
    *,
    topology_key: str | None,
    priority_class_name: str | None,
    priority: int | None,
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY,
    template: str = "group",
) -> tuple[Workload, PodGroup]:
    """One Workload of one PodGroupTemplate (a gang of `min_count`), and the PodGroup `<workload>-<suffix>`:
    one of the owner's several gangs (a LeaderWorkerSet group)."""
    group_template = PodGroupTemplate(
        name=template,
        scheduling_policy=SchedulingPolicy.of_gang(min_count),
        scheduling_constraints=_constraints(topology_key),
        disruption_mode=DisruptionMode.of_all(),
        priority_class_name=priority_class_name,
        priority=priority,
        preemption_policy=preemption_policy,
    )
    wl_name = workload_name(owner.name, owner.uid)
    workload = Workload(
        metadata=metadata(owner, wl_name),
        spec=WorkloadSpec(
            controller_ref=ControllerRef(api_group=owner.group, kind=owner.kind, name=owner.name),
            pod_group_templates=[group_template],
        ),
    )
    group = PodGroup(
        metadata=metadata(owner, root_name(owner, suffix, tree=False)),
        spec=PodGroupSpec(
            workload_ref=WorkloadRef(workload_name=wl_name, template_name=template),
            scheduling_policy=group_template.scheduling_policy,
            scheduling_constraints=group_template.scheduling_constraints,
            disruption_mode=DisruptionMode.of_all(),
            priority_class_name=priority_class_name,
            priority=priority,
            preemption_policy=preemption_policy,
        ),
    )
    return workload, group
