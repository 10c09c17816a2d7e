"""Hand-made groups: PodGroups and CompositePodGroups no owner made (the article's slice objects, written
by hand or by another controller), and the pods that join them by the `phalanx.dev/pod-group` label.

A tree rooted at a CompositePodGroup (its child CompositePodGroups and PodGroups found by
`parentCompositePodGroupName` in its namespace) is one unit; so is a standalone PodGroup. A group whose
parent does not exist (yet), or whose parents form a cycle, is in no tree: its pods stay gated, and it says
why (a Warning, once; so does the root of a tree too large to place). These units have no owner: nothing
Phalanx knows would recreate their pods, so they are never preemption victims; broken (a member lost with its
node, released pods that cannot bind) they are requeued whole by deleting their pods (plan/requeue.py),
and they preempt like any gang of their pods' priority (plan/preempt.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from phalanx.api.group import COMPOSITE_POD_GROUP_KIND, POD_GROUP_KIND
from phalanx.api.naming import pod_group_label_value
from phalanx.controller.kinds.base import ClusterView, Leaf, Tree, Unit
from phalanx.controller.kinds.common import announce_once, unit_priority
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, PodRecord

MAX_GROUPS = 64  # a tree deeper or wider than upstream allows is cut here (the engine refuses it)


class HandMadeKind:
    """Trees of hand-made groups (implements kinds.base.WorkloadKind)."""

    name = "HandMade"

    def units(self, view: ClusterView) -> Iterable[Unit]:
        composites, groups = view.unowned_groups()

        def pods_of(group: PodGroupRecord) -> Iterable[PodRecord]:
            return view.pods_joining(group.namespace, pod_group_label_value(group.name))

        return trees(composites, groups, pods_of, view.announced)


def _rank(pod: PodRecord) -> tuple[int, str]:
    return (pod.completion_index if pod.completion_index is not None else 1 << 31, pod.name)


def _leaf(group: PodGroupRecord, pods_of: Callable[[PodGroupRecord], Iterable[PodRecord]]) -> Leaf:
    return Leaf(group, tuple(sorted(pods_of(group), key=_rank)))


def trees(
    composites: Iterable[CompositePodGroupRecord],
    pod_groups: Iterable[PodGroupRecord],
    pods_of: Callable[[PodGroupRecord], Iterable[PodRecord]],
    announced: Mapping[str, str] | None = None,
) -> list[Unit]:
    """One unit per root CompositePodGroup, one per standalone PodGroup (groups with an owner excluded).
    A group no root reaches (its parent missing, or parents in a cycle) and a tree of more than MAX_GROUPS
    CompositePodGroups are placed never: each gets a Warning saying why, once (its pods stay gated)."""
    announced = announced or {}
    mine = [g for g in composites if not g.owner_uid]
    children: dict[str, list[CompositePodGroupRecord]] = {}
    for g in mine:
        if g.parent:
            children.setdefault(f"{g.namespace}/{g.parent}", []).append(g)
    leaves: dict[str, list[PodGroupRecord]] = {}
    units: list[Unit] = []
    reached: set[str] = set()
    for pg in pod_groups:
        if pg.owner_uid:
            continue
        if pg.parent:
            leaves.setdefault(f"{pg.namespace}/{pg.parent}", []).append(pg)
            continue
        leaf = _leaf(pg, pods_of)
        tree = Tree(None, (), (leaf,), mode=pg.topology_mode)
        key = unit_key(POD_GROUP_KIND, pg.namespace, pg.name)
        units.append(Unit(key, None, tree, priority=unit_priority(leaf.pods, 0), created=pg.created))
    for root in sorted((g for g in mine if not g.parent), key=lambda g: g.key):
        found: list[CompositePodGroupRecord] = []
        found_groups: list[PodGroupRecord] = []
        stack = [root]
        while stack:
            g = stack.pop(0)
            found.append(g)
            stack.extend(sorted(children.get(g.key, ()), key=lambda x: x.name))
            found_groups.extend(sorted(leaves.get(g.key, ()), key=lambda x: x.name))
        reached.update(g.key for g in found)
        reached.update(f"leaf:{pg.key}" for pg in found_groups)
        key = unit_key(COMPOSITE_POD_GROUP_KIND, root.namespace, root.name)
        if len(found) > MAX_GROUPS:
            why = (
                f"its tree has {len(found)} CompositePodGroups, more than the {MAX_GROUPS} Phalanx places as "
                "one gang: its pods stay gated; split it into trees of fewer groups"
            )
            notes = announce_once(announced, root.ref, "tree", "TreeNotPlaced", why)
            units.append(Unit(key, None, None, tuple(notes), created=root.created))
            continue
        found_leaves = [_leaf(pg, pods_of) for pg in found_groups]
        tree = Tree(root, tuple(found), tuple(found_leaves))
        pods = tuple(p for leaf in found_leaves for p in leaf.pods)
        units.append(Unit(key, None, tree, priority=unit_priority(pods, 0), created=root.created))
    by_key = {g.key: g for g in mine}
    stray: list[CompositePodGroupRecord | PodGroupRecord] = [g for g in mine if g.key not in reached]
    stray += [pg for group in leaves.values() for pg in group if f"leaf:{pg.key}" not in reached]
    for group in sorted(stray, key=lambda g: (g.ref.kind, g.key)):
        parent = f"{group.namespace}/{group.parent}"
        why = (
            f"spec.parentCompositePodGroupName: no CompositePodGroup {group.parent!r} made by hand in "
            f"{group.namespace}: its pods stay gated until it exists"
            if parent not in by_key
            else f"spec.parentCompositePodGroupName: its parents ({group.parent!r} and up) never reach a "
            "root CompositePodGroup (they form a cycle): its pods stay gated; give the tree a root"
        )
        notes = announce_once(announced, group.ref, "tree", "NotInATree", why)
        key = unit_key(group.ref.kind, group.namespace, group.name)
        units.append(Unit(key, None, None, tuple(notes), created=group.created))
    return units
