"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): each group of a labelled LWS — its leader and `size - 1`
workers, of one template revision — is one unit, a gang of `size` pods (with `subGroupPolicy`, a tree of
one PodGroup per subgroup, each in one domain of `phalanx.dev/slice-topology-key`). Keyed by the LWS, the
group index and the revision, so a rolling update yields fresh gangs. Pods are gated through the leader and
worker templates at the LWS's creation (the webhook). LWS has no suspend: a group is requeued by deleting
its pods, which LWS makes again (gated). With `startupPolicy: LeaderReady` the workers come only once the
leader runs, so the group is a staged unit: its whole placement is decided when the leader arrives, the
workers' room is held, and they are released into it as they come.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys as names
from phalanx.api.job_policy import JobPolicyError, managed_by_label
from phalanx.api.lws import (
    API_VERSION,
    GROUP_INDEX_LABEL,
    KIND,
    NAME_LABEL,
    REVISION_LABEL,
    WORKER_INDEX_LABEL,
    LwsPolicy,
    admit_create,
    parse_lws_policy,
    regated,
    update_problems,
)
from phalanx.api.owned import Leaf as LeafShape
from phalanx.api.owned import Owner as OwnerIdentity
from phalanx.api.owned import build_group, build_tree, root_name
from phalanx.api.status import PodGroupStatus
from phalanx.controller.kinds.base import (
    ClusterView,
    Leaf,
    Owner,
    OwnerState,
    PodTemplate,
    Resource,
    Tree,
    Unit,
    dependents_first,
)
from phalanx.controller.kinds.common import (
    announce_once,
    kept_gang_size,
    let_go,
    owners_units,
    preemption_policy_of,
    priority_class_of,
    unit_priority,
)
from phalanx.controller.kinds.kueue import kueue_owner, kueue_setup, owner_view
from phalanx.controller.model.actions import (
    Action,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    DeleteObject,
    PostEvent,
)
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    PodGroupRecord,
    PodRecord,
    meta_of,
    parse_time,
)
from phalanx.controller.model.refs import ObjectRef

RESOURCE = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


@dataclass(frozen=True, slots=True)
class LwsRecord:
    uid: str
    namespace: str
    name: str
    managed: bool
    gated_template: bool
    policy: LwsPolicy | None
    policy_error: str
    created: dt.datetime | None
    body: Mapping[str, Any] = field(compare=False, hash=False)
    resource_version: str = field(default="", compare=False)
    suspended: bool = False  # LWS has none (kinds/base.OwnerRecord)
    requeued: str = ""
    managed_problem: str = ""  # its managed label has a value the webhooks refuse (api managed_by_label)
    deleting: bool = False  # metadata.deletionTimestamp is set (kinds/base.OwnerRecord)
    dependents_first: bool = False  # deleted in the foreground (kinds/base.dependents_first)
    # status.replicas: the groups LWS has made (its leader StatefulSet's status), which a rolling update with
    # maxSurge takes beyond spec.replicas (surge groups) until it scales them away; it dips while a leader
    # is made again. What the leader StatefulSet's spec says is exact (_being_remade); this stands in.
    groups_made: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, KIND, self.namespace, self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> LwsRecord:
        meta, spec = meta_of(body), body.get("spec") or {}
        policy: LwsPolicy | None
        try:
            policy, error = parse_lws_policy(body), ""
        except JobPolicyError as e:
            policy, error = None, str(e)
        template = spec.get("leaderWorkerTemplate") or {}
        parts = [template.get("workerTemplate") or {}]
        if template.get("leaderTemplate"):
            parts.append(template["leaderTemplate"])
        gated = all(names.ADMISSION_GATE in _gates(part) for part in parts)
        slim = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "labels", "annotations")},
        }
        managed, managed_problem = managed_by_label(meta.get("labels") or {})
        made = (body.get("status") or {}).get("replicas")
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            managed=managed,
            managed_problem=managed_problem,
            gated_template=gated,
            policy=policy,
            policy_error=error,
            created=parse_time(meta.get("creationTimestamp")),
            body=slim,
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            dependents_first=dependents_first(meta),
            groups_made=made if isinstance(made, int) and not isinstance(made, bool) and made > 0 else 0,
        )


def _gates(pod_template: Mapping[str, Any]) -> list[str]:
    spec = pod_template.get("spec") or {}
    return [str(g.get("name")) for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping)]


class LwsKind:
    """LeaderWorkerSets labelled `phalanx.dev/managed=true` (implements kinds.base.AdmittingKind)."""

    name = KIND
    resource = RESOURCE
    suspends = False  # requeued whole through spec.suspend (else: its pods deleted)
    owns_groups = True  # Phalanx's groups for it are owned by it (blockOwnerDeletion)
    read_by_other_kinds = False

    def parse(self, body: Mapping[str, Any]) -> LwsRecord:
        return LwsRecord.from_body(body)

    def worth_keeping(self, owner: LwsRecord, has_objects: bool) -> bool:
        return owner.managed or has_objects or owner.gated_template

    def index_key(self, owner: LwsRecord) -> str:
        return f"{owner.namespace}/{owner.name}"

    def pod_owner(self, pod: PodRecord) -> str:
        """LWS pods carry the set's name, not its uid."""
        if not pod.label(NAME_LABEL) or not pod.label(GROUP_INDEX_LABEL):
            return ""
        return f"{pod.namespace}/{pod.label(NAME_LABEL)}"

    def admit_create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return admit_create(body)

    def update_problems(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        return update_problems(old, new)

    # Put back, not refused: an LWS's templates change at any time (a rolling update), often by replacing
    # the whole object from a manifest, or by a controller above it, that never had the gate; refusing
    # would block those updates. Kueue's own LWS webhook defaults its templates on UPDATE for that reason.
    regates_on_update = True

    def regated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
        return regated(old, new)

    def units(self, view: ClusterView) -> Iterable[Unit]:
        return owners_units(self, view)

    def owner_units(self, state: OwnerState, view: ClusterView) -> Iterable[Unit]:
        lws: LwsRecord = state.owner
        if not lws.managed:
            actions = let_go(state, KIND)
            if actions:
                yield Unit(
                    unit_key(KIND, lws.namespace, lws.name),
                    None,
                    None,
                    tuple(actions),
                    created=lws.created,
                )
            return
        yield from lws_units(state, view)


def owner_of(lws: LwsRecord) -> Owner:
    policy = lws.policy
    return Owner(
        kind=KIND,
        ref=lws.ref,
        created=lws.created,
        gated_template=lws.gated_template,
        preemption_never=policy is not None and policy.preemption_policy == "Never",
        disruption_all=True,  # a group is one gang: LWS recreates it whole
        priority_class=policy.priority_class_name if policy is not None else None,
        requeue="delete-pods",
        pods_from="the LeaderWorkerSet to create the group's other pods",
    )


def lws_units(state: OwnerState, view: ClusterView) -> Iterable[Unit]:
    lws: LwsRecord = state.owner
    owner = owner_of(lws)
    key = unit_key(KIND, lws.namespace, lws.name)
    policy = lws.policy
    if policy is None:
        notes = announce_once(view.announced, lws.ref, "policy", "InvalidPolicy", lws.policy_error)
        yield Unit(key, owner, None, tuple(notes), created=lws.created)
        return
    groups = _groups(state.pods)
    for remade in _being_remade(state, view, policy, groups):
        groups[remade] = []
    wanted: set[str] = set()
    for (index, revision), pods in sorted(groups.items()):
        unit, names_ = _group_unit(state, view, owner, policy, index, revision, pods)
        wanted |= names_
        yield unit
    stale: list[ObjectRef] = [g.ref for g in state.pod_groups if g.name not in wanted]
    stale += [g.ref for g in state.composites if g.name not in wanted]
    if stale:  # groups of an older revision, or scaled away, whose pods are gone
        yield Unit(key, owner, None, tuple(DeleteObject(ref) for ref in stale), created=lws.created)


def _groups(pods: Iterable[PodRecord]) -> dict[tuple[int, str], list[PodRecord]]:
    out: dict[tuple[int, str], list[PodRecord]] = {}
    for pod in pods:
        if pod.terminal or pod.deleting:
            continue
        index = _index(pod)
        if index is not None:
            out.setdefault((index, pod.label(REVISION_LABEL)), []).append(pod)
    return {key: _of_present_leader(members) for key, members in out.items()}


def _index(pod: PodRecord) -> int | None:
    index = pod.label(GROUP_INDEX_LABEL)
    return int(index) if index.isascii() and index.isdigit() else None


def _being_remade(
    state: OwnerState,
    view: ClusterView,
    policy: LwsPolicy,
    groups: Mapping[tuple[int, str], list[PodRecord]],
) -> list[tuple[int, str]]:
    """The groups LWS is making again: an index of a group LWS has, none of whose pods is live (its leader
    was deleted — by hand, by LWS's group restart, by a requeue — and the garbage collector took its
    workers), whose root group (PodGroup, or CompositePodGroup with subgroups) exists. Its group stays, a
    unit waiting for its pods: deleting it now would lose its `status.lastDomain` (where the pods made
    again go back) and make it again a moment later. Of several revisions' roots, the newest (a rolling
    update's); once pods of another revision appear at that index, the old one is stale.

    LWS has the groups below `spec.replicas`, and during a rolling update with maxSurge the surge groups
    beyond it, until it scales them away: a group beyond spec.replicas is LWS's while `status.replicas`
    (the groups LWS counts) covers it or while pods of that index are still there, being deleted (LWS
    scaling it away takes them as a requeue does; the count lags, and dips while a group's leader is
    made again). Once neither holds, the group is gone: its root goes.

    The groups LWS has are exactly its leader StatefulSet's `spec.replicas` (api/lws.LeaderSet), which
    surges with the rollout and never dips while a leader is made again; the LWS's `status.replicas` (that
    StatefulSet's status) only stands in until the StatefulSet is seen."""
    lws: LwsRecord = state.owner
    identity = OwnerIdentity(API_VERSION, KIND, lws.namespace, lws.name, lws.uid)
    tree = policy.subgroup_size is not None
    roots: Mapping[str, PodGroupRecord | CompositePodGroupRecord] = {
        g.name: g for g in (state.composites if tree else state.pod_groups)
    }
    revisions = sorted({name.rsplit("-", 1)[-1] for name in roots} | {""})
    present = {index for index, _ in groups}
    leaving = {index for pod in state.pods if (index := _index(pod)) is not None}
    leader_set = view.lws_leader_set(lws.namespace, lws.name)
    made = (
        leader_set.replicas if leader_set is not None and leader_set.owner_uid == lws.uid else lws.groups_made
    )
    has = set(range(max(policy.replicas, made))) | leaving
    out: list[tuple[int, str]] = []
    for index in sorted(has - present):
        found = [
            (record.created or _EPOCH, revision)
            for revision in revisions
            if (record := roots.get(root_name(identity, _suffix(index, revision), tree=tree))) is not None
        ]
        if found:
            out.append((index, max(found)[1]))
    return out


def _suffix(index: int, revision: str) -> str:
    """What tells one group of the LWS from another in its groups' names and its unit's key."""
    return f"{index}-{revision}" if revision else str(index)


_EPOCH = dt.datetime.min.replace(tzinfo=dt.UTC)


def _of_present_leader(pods: list[PodRecord]) -> list[PodRecord]:
    """The group's pods without the workers of a leader that is gone. LWS makes a group's workers through a
    StatefulSet owned by its leader pod, after the leader exists: a worker older than the present leader
    was its predecessor's, and the garbage collector is taking it (the group is made again). Such a worker
    still holds its node, but it is no member: placing the new leader beside it would place a gang that
    loses its workers a moment later."""
    leader = next((p for p in pods if _rank(p) == 0), None)
    if leader is None or leader.created is None:
        return pods
    born = leader.created
    return [p for p in pods if p is leader or p.created is None or p.created >= born]


def _gone_workers(
    all_pods: Iterable[PodRecord], index: int, revision: str, members: list[PodRecord]
) -> set[int]:
    """The ranks of the group's workers of its present leader that ended or are being deleted (not its
    members: _groups). They came — LWS made them once the leader was there —, so a staged group's slots of
    them are lost, not still to come (plan/lost.py): a worker stuck terminating on a NotReady node is made
    again by its StatefulSet only once it is gone, which may be never."""
    leader = next((p for p in members if _rank(p) == 0), None)
    if leader is None:
        return set()
    born = leader.created
    return {
        _rank(p)
        for p in all_pods
        if (p.terminal or p.deleting)
        and _rank(p) != 0
        and _index(p) == index
        and p.label(REVISION_LABEL) == revision
        and (born is None or p.created is None or p.created >= born)  # as _of_present_leader
    }


def leader_of(pods: Iterable[PodRecord]) -> tuple[str, ...]:
    """The live leader pod of a group, whose deletion takes the whole group (its workers' StatefulSet is
    the leader's: LWS's own group restart deletes only the leader). Deleting the workers too would let that
    StatefulSet make them again before the garbage collector takes it."""
    return tuple(p.key for p in pods if _rank(p) == 0 and not p.terminal and not p.deleting)[:1]


def _rank(pod: PodRecord) -> int:
    value = pod.label(WORKER_INDEX_LABEL)
    return int(value) if value.isascii() and value.isdigit() else 1 << 31


def _group_unit(
    state: OwnerState,
    view: ClusterView,
    owner: Owner,
    policy: LwsPolicy,
    index: int,
    revision: str,
    pods: list[PodRecord],
) -> tuple[Unit, set[str]]:
    lws: LwsRecord = state.owner
    chosen = priority_class_of(policy.priority_class_name, view.priority_classes)
    priority = chosen.value if chosen is not None else None
    preemption = preemption_policy_of(policy.preemption_policy, chosen)
    identity = OwnerIdentity(API_VERSION, KIND, lws.namespace, lws.name, lws.uid)
    suffix = _suffix(index, revision)
    # Kueue admits each group as a Workload of its own (kinds/kueue.py); its pods wait behind Kueue's gate.
    kueue = owner_view(lws, view, index=str(index))
    owner = kueue_owner(owner, kueue)
    setup: list[Action] = list(kueue_setup(kueue, view.announced, lws.ref, str(index)))
    existing = {g.name: g for g in state.pod_groups}
    template = PodTemplate.of(policy.worker_spec, lws.namespace)
    gone = _gone_workers(state.pods, index, revision, pods)  # their slots' stage came (Leaf.made)
    if policy.subgroup_size is None:
        workload, group = build_group(
            identity,
            suffix,
            policy.size,
            topology_key=policy.topology_key,
            priority_class_name=policy.priority_class_name,
            priority=priority,
            preemption_policy=preemption,
        )
        if state.workload is None:
            setup.append(CreateWorkload(workload))
        record = existing.get(str(group.metadata["name"]))
        if record is not None:
            record, notes = kept_gang_size(record, group.spec, KIND, lws.ref, view.announced)
            setup.extend(notes)
        else:
            setup.append(CreatePodGroup(group, str(workload.metadata["name"])))
            setup.append(
                PostEvent(
                    lws.ref,
                    "Normal",
                    "PodGroupCreated",
                    f"created PodGroup {group.metadata['name']} for group {index}",
                )
            )
            record = _planned_group(lws, group)
        ordered = tuple(sorted(pods, key=lambda p: (_rank(p), p.name)))
        leaf = Leaf(
            record,
            ordered,
            ranks=tuple(_rank(p) for p in ordered),
            expected=policy.size,
            template=template,
            made=bool(gone),
        )
        tree = Tree(None, (), (leaf,), mode=policy.topology_mode)
        made = {record.name}
    else:
        tree, made = _subgroup_tree(
            state, view, identity, policy, suffix, pods, priority, preemption, setup, template, gone
        )
        setup.extend(_said_made(lws, index, setup))
    unit = Unit(
        key=unit_key(KIND, lws.namespace, lws.name, suffix),
        owner=owner,
        tree=tree,
        setup=tuple(setup),
        priority=unit_priority(tuple(pods), priority),
        created=min((p.created for p in pods if p.created is not None), default=lws.created),
        staged=policy.leader_ready,
        requeue_pods=leader_of(pods),
    )
    return unit, made


def _said_made(lws: LwsRecord, index: int, setup: list[Action]) -> list[Action]:
    """PodGroupCreated on the LWS for the CompositePodGroup and PodGroups a subgrouped group's setup makes
    (a flat group's one PodGroup is said where it is made)."""
    made = [
        f"CompositePodGroup {a.group.metadata['name']}"
        for a in setup
        if isinstance(a, CreateCompositePodGroup)
    ]
    made += [f"PodGroup {a.pod_group.metadata['name']}" for a in setup if isinstance(a, CreatePodGroup)]
    if not made:
        return []
    return [PostEvent(lws.ref, "Normal", "PodGroupCreated", f"created {', '.join(made)} for group {index}")]


def _planned_group(lws: LwsRecord, group: Any) -> PodGroupRecord:
    return PodGroupRecord(
        uid="",
        namespace=lws.namespace,
        name=str(group.metadata["name"]),
        owner_uid=lws.uid,
        generation=1,
        spec=group.spec,
        status=PodGroupStatus(),
        owner_kind=KIND,
    )


def _subgroup_tree(
    state: OwnerState,
    view: ClusterView,
    identity: OwnerIdentity,
    policy: LwsPolicy,
    suffix: str,
    pods: list[PodRecord],
    priority: int | None,
    preemption: Any,
    setup: list[Action],
    template: PodTemplate,
    gone: set[int],
) -> tuple[Tree, set[str]]:
    lws: LwsRecord = state.owner
    subgroups = policy.subgroups()
    workload, composite, groups = build_tree(
        identity,
        [LeafShape(f"s{i}", len(workers), "subgroup") for i, workers in subgroups],
        topology_key=policy.topology_key,
        leaf_topology_key=policy.slice_topology_key,
        priority_class_name=policy.priority_class_name,
        priority=priority,
        preemption_policy=preemption,
        suffix=suffix,
        topology_mode=policy.topology_mode,
    )
    if state.workload is None:
        setup.append(CreateWorkload(workload))
    root = next((g for g in state.composites if g.name == composite.metadata["name"]), None)
    if root is None:
        setup.append(CreateCompositePodGroup(composite))
        root = CompositePodGroupRecord.to_be_made(composite, lws.uid, KIND)
    existing = {g.name: g for g in state.pod_groups}
    leaves = []
    for (_, workers), group in zip(subgroups, groups, strict=True):
        record = existing.get(str(group.metadata["name"]))
        if record is not None:
            record, notes = kept_gang_size(record, group.spec, KIND, lws.ref, view.announced)
            setup.extend(notes)
        else:
            setup.append(CreatePodGroup(group, str(workload.metadata["name"])))
            record = _planned_group(lws, group)
        members = sorted((p for p in pods if _rank(p) in workers), key=lambda p: (_rank(p), p.name))
        leaves.append(
            Leaf(
                record,
                tuple(members),
                ranks=tuple(_rank(p) for p in members),
                expected=len(workers),
                template=template,
                slots=tuple(workers),
                made=bool(gone & set(workers)),
            )
        )
    return Tree(root, (root,), tuple(leaves)), {root.name, *(leaf.group.name for leaf in leaves)}
