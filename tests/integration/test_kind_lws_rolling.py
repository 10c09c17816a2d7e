"""Rolling updates of a LeaderWorkerSet in the harder cases, against the real LWS v0.8.0 controller: a
higher-priority gang preempting a group in the middle of a rollout (a rollout held at a partition, a rollout
that reaches a preempted group while it waits, and a rollout with maxSurge whose surge group is preempted on a
full cluster), a rollout of an LWS with startupPolicy LeaderReady, and a rollout of an LWS with subgroups
(slices). Every group of every revision (surge groups too) is bound whole or not at all (`whole_lws_groups`: a
pod watch, one gang per group index and revision), in one network block; the rollout completes once there is
room; Phalanx's groups follow the groups LWS has (none of an old revision is left, also of a group that never
ran again, nor of a surge group LWS scaled away). The helpers of the plainer rollouts are
test_kind_lws_lifecycle.py's.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from phalanx.devcluster.tools import filler_pod

from .kinds import (
    LWS_WORKER,
    MANAGED,
    condition,
    gated,
    groups,
    label_of,
    lws,
    lws_pods,
    owned,
    priority_classes,
    reasons_of,
    whole_lws_groups,
)
from .kube import LB_KEY, NB_KEY, Namespace, bound, gpu_job, hold, node_labels, wait_for
from .test_kind_lws_lifecycle import (
    KEY,
    admitted_groups,
    by_group,
    diagnose,
    get_lws,
    group_names,
    one_block_each,
    patch_lws,
    revisions,
    settled,
    with_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.addons("lws")]

BOUND, GATED = "bound", "gated"
LEADER_ALONE = 30.0
"""Seconds a LeaderReady group may run its leader alone: LWS makes the workers once the leader is Ready, and
Phalanx releases them into the room held for them; a leader alone for longer is a deadlock."""


def rolling(manifest: dict[str, Any], **configuration: int) -> dict[str, Any]:
    """The manifest with a `rolloutStrategy.rollingUpdateConfiguration` (maxUnavailable, partition...)."""
    out = copy.deepcopy(manifest)
    out["spec"]["rolloutStrategy"] = {"type": "RollingUpdate", "rollingUpdateConfiguration": configuration}
    return out


def new_template(ns: Namespace, name: str, manifest: dict[str, Any], value: str) -> None:
    """A merge patch of the worker template's containers, an env var added: a new template revision."""
    spec = with_env(manifest, value)["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    template = {"workerTemplate": {"spec": {"containers": spec["containers"]}}}
    patch_lws(ns, name, {"spec": {"leaderWorkerTemplate": template}})


@dataclass(frozen=True)
class Group:
    """One LWS group as the API shows it now: its revision, whether all its pods are bound or all gated,
    their uids (a group made again has new ones) and the pods."""

    revision: str
    state: str
    uids: frozenset[str]
    pods: list[dict[str, Any]]


def groups_now(ns: Namespace, name: str, size: int) -> dict[int, Group] | None:
    """The LWS's groups by index, each `size` live pods of one revision, all bound or all gated; None while
    any group is in between (being made, torn down, released)."""
    out: dict[int, Group] = {}
    for index, pods in by_group(lws_pods(ns, name)).items():
        revs = revisions(pods)
        if len(pods) != size or len(revs) != 1:
            return None
        if len(bound(pods)) == size:
            state = BOUND
        elif len(gated(pods)) == size and not bound(pods):
            state = GATED
        else:
            return None
        out[index] = Group(next(iter(revs)), state, frozenset(p["metadata"]["uid"] for p in pods), pods)
    return out


def roots_of(ns: Namespace, name: str, plural: str = "podgroups") -> set[str]:
    """`<group index>-<revision>` of each root group Phalanx has for the LWS (its PodGroups; with subgroups,
    its CompositePodGroups): the name is `<lws>-<hash of its uid>-<index>-<revision>`."""
    return {"-".join(n.rsplit("-", 2)[1:]) for n in group_names(ns, name, plural)}


def shaped(
    ns: Namespace, name: str, old: str, want: dict[int, tuple[bool, str]], size: int = 4
) -> dict[int, Group] | None:
    """The groups (of `size` pods) once each index of `want` is (at a revision other than `old`?, BOUND or
    GATED), those of another revision than `old` all of one, and the LWS's PodGroups exactly one per group,
    of its revision (none left of a revision the group no longer has)."""
    found = groups_now(ns, name, size)
    if found is None or sorted(found) != sorted(want):
        return None
    if any((g.revision != old, g.state) != want[i] for i, g in found.items()):
        return None
    if len({g.revision for g in found.values() if g.revision != old}) > 1:
        return None
    if roots_of(ns, name) != {f"{i}-{g.revision}" for i, g in found.items()}:
        return None
    return found


def half_rolled(ns: Namespace, name: str, manifest: dict[str, Any]) -> tuple[str, dict[int, Group]]:
    """The LWS of `manifest` (replicas 2, size 4, a rollout held at partition 1) created and its two groups
    running at one revision (returned first), then its worker template edited (new_template): once LWS
    has remade group 1 at the new revision, bound, and kept group 0 bound at the old (the groups)."""
    ns.create(manifest)
    _, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 4), timeout=120)
    new_template(ns, name, manifest, "v2")
    half = wait_for(
        "group 1 remade at the new revision and bound, group 0 bound at the old",
        lambda: shaped(ns, name, old, {0: (False, BOUND), 1: (True, BOUND)}),
        timeout=150,
    )
    return old, half


def high_job(ns: Namespace, victim: Group) -> dict[str, Any]:
    """A high-priority gang Job of 2 (PriorityClass high) that must run in `victim`'s network block (a
    nodeSelector): that group is the one victim that makes room for it. (Left to choose, Phalanx prices the
    pods that started last the cheapest, but creation times have whole seconds, and a group remade within
    the second of the other group's creation ties with it.)"""
    labels = node_labels(ns.api)
    (block,) = {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in victim.pods}
    job = gpu_job("high-2", 2, labels=MANAGED, priority_class="high")
    job["spec"]["template"]["spec"]["nodeSelector"] = {NB_KEY: block}
    return job


def job_bound(ns: Namespace, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = ns.job_pods(job)
    return pods if len(pods) == count and len(bound(pods)) == count else None


def delete_job(ns: Namespace, job: str) -> None:
    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/{job}", {"propagationPolicy": "Background"}
    )


def waits_for_room(ns: Namespace, name: str, suffix: str, high: list[dict[str, Any]]) -> str:
    """The Admitted=False Unschedulable message of the LWS's PodGroup ending in `suffix` (a group of 4
    preempted by the Job of 2 pods `high`) once it says that 2 of its 4 pods fit in the Job's block."""
    labels = node_labels(ns.api)
    (block,) = {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in high}
    wanted = f"{block}: 2 of 4 pods fit (2 nodes: Insufficient nvidia.com/gpu)"

    def said() -> str | None:
        found = [g for n, g in group_names(ns, name).items() if n.endswith(suffix)]
        cond = condition(found[0] if found else None)
        message = str(cond.get("message", ""))
        return message if cond.get("reason") == "Unschedulable" and wanted in message else None

    try:
        return wait_for(f"the PodGroup *{suffix} Unschedulable, saying {wanted!r}", said, timeout=60)
    except AssertionError:
        print([condition(g) for n, g in group_names(ns, name).items() if n.endswith(suffix)])
        raise


def preempted(
    ns: Namespace, name: str, old: str, before: dict[int, Group], victim: int, size: int = 4
) -> tuple[list[dict[str, Any]], dict[int, Group]]:
    """A high-priority gang Job of 2 for group `victim`'s block (high_job) bound, and that group taken
    whole: LWS makes it again at the revision it had, all its pods new and gated, every other group running
    untouched (the pods of `before`), one PodGroup per group; the events Preempted and Requeued on the LWS.
    The Job's pods and the groups then."""
    ns.create(high_job(ns, before[victim]))
    high = wait_for("high-2 bound", lambda: job_bound(ns, "high-2", 2), timeout=120)
    want = {i: (g.revision != old, GATED if i == victim else BOUND) for i, g in before.items()}

    def remade() -> dict[int, Group] | None:
        found = shaped(ns, name, old, want, size)
        if found is None or found[victim].revision != before[victim].revision:
            return None
        if found[victim].uids & before[victim].uids:
            return None
        return found if all(found[i].uids == g.uids for i, g in before.items() if i != victim) else None

    groups = wait_for(
        f"group {victim} made again at its revision, gated whole; the other groups running, untouched",
        remade,
        timeout=120,
    )
    wait_for(
        "events Preempted and Requeued on the LWS",
        lambda: {"Preempted", "Requeued"} <= reasons_of(ns, "LeaderWorkerSet", name) or None,
    )
    return high, groups


def ran(watch: Any, gang: str) -> bool:
    with watch.lock:
        found = watch.gangs.get(gang)
        return found is not None and found.ran is not None


def rollout_done_once_the_job_is_gone(ns: Namespace, name: str, new: str) -> dict[int, list[dict[str, Any]]]:
    """The high-priority Job deleted: the rollout completes, both groups of the new revision bound."""
    delete_job(ns, "high-2")
    groups, _ = wait_for(
        "the rollout done: 2 groups of the new revision bound, one PodGroup each",
        lambda: settled(ns, name, 2, 4, new),
        timeout=180,
    )
    return groups


def new_groups_whole(
    ns: Namespace, name: str, new: str, watch: Any, groups: dict[int, list[dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """Each new group ran whole in one block; their PodGroups say Admitted and Running (returned by name)."""
    print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
    one_block_each(ns, groups)
    assert ran(watch, f"{name}/0/{new}") and ran(watch, f"{name}/1/{new}")
    names: dict[str, dict[str, Any]] = wait_for(
        "the new PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2)
    )
    return names


def workers_in_their_slots(
    names: dict[str, dict[str, Any]], groups: dict[int, list[dict[str, Any]]], new: str
) -> dict[int, dict[str, Any]]:
    """Each LeaderReady group of 4 pods (`groups`) was decided whole with its leader: its PodGroup of the
    revision `new` (in `names`) records a slot per worker, and the workers run on the slots' nodes. The
    recorded decisions, by group index."""
    out: dict[int, dict[str, Any]] = {}
    for index, pods in groups.items():
        (group,) = [g for n, g in names.items() if n.endswith(f"-{index}-{new}")]
        admission = out[index] = group["status"]["admission"]
        print(group["metadata"]["name"], json.dumps(admission)[:1500])
        slots = sorted(a["node"] for a in admission["assignments"] if "-slot-" in a["pod"])
        workers = sorted(p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"][LWS_WORKER] != "0")
        assert len(workers) == 3 and slots == workers, (index, slots, workers)
    return out


def test_a_higher_priority_job_preempts_the_updated_group_of_a_rollout_whole_and_the_rollout_completes_after(
    kinds_ns: Namespace,
) -> None:
    """replicas 2, size 4, topology-key, PriorityClass low: the two groups fill the 8 nodes, a network block
    each. A rolling update held at partition 1 (LWS v0.8.0's rollingUpdateConfiguration.partition): LWS
    remakes group 1 at the new revision, placed whole in the block it left, and keeps group 0 at the old one,
    a rollout half done. A high-priority gang Job of 2 comes, for group 1's block (high_job): one victim,
    taken whole, the updated group 1; LWS makes it again at the new revision, and its 4 pods wait gated
    while the Job runs, group 0 untouched; the PodGroups are group 0's of the old revision
    and group 1's of the new, no other. The partition is lifted while the Job still holds the room: LWS does
    not take group 0 down (maxUnavailable 1, group 1 is down), nothing is bound in part. Once the Job is
    gone, group 1 is placed whole, LWS remakes group 0, placed whole: the rollout completes, one PodGroup per
    group of the new revision and none of the old."""
    ns, name = kinds_ns, "canary"
    priority_classes(ns)
    manifest = rolling(
        lws(name, 4, replicas=2, annotations=KEY, priority_class="low"), maxUnavailable=1, partition=1
    )
    try:
        with whole_lws_groups(ns, name, 4, NB_KEY) as watch:
            old, half = half_rolled(ns, name, manifest)
            new = half[1].revision
            print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
            high, waiting = preempted(ns, name, old, half, 1)
            print(ns.where())
            assert waiting[1].revision == new
            assert not {p["spec"]["nodeName"] for p in high} & {
                p["spec"]["nodeName"] for p in waiting[0].pods
            }
            print(waits_for_room(ns, name, f"-1-{new}", high))
            patch_lws(
                ns, name, {"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": 0}}}}
            )
            hold(
                "group 1 gated whole, group 0 running at the old revision, while the Job runs",
                lambda: (
                    (gs := shaped(ns, name, old, {0: (False, BOUND), 1: (True, GATED)})) is not None
                    and gs[0].uids == half[0].uids
                    and job_bound(ns, "high-2", 2) is not None
                ),
                seconds=3,
            )
            groups = rollout_done_once_the_job_is_gone(ns, name, new)
        names = new_groups_whole(ns, name, new, watch, groups)
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}, names
        assert not owned(ns, f"LeaderWorkerSet/{name}", "compositepodgroups")
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_rollout_remakes_a_preempted_group_while_it_waits_and_completes_once_the_job_is_gone(
    kinds_ns: Namespace,
) -> None:
    """replicas 2, size 4, topology-key, PriorityClass low: the two groups fill the 8 nodes. A high-priority
    gang Job of 2 for group 1's block (high_job) takes group 1 whole; LWS makes it again at the old revision,
    gated. The template is edited while it waits: LWS (maxUnavailable 1, group 1 is
    already down) remakes group 1 at the new revision, its 4 new pods gated, and keeps group 0 running;
    Phalanx deletes group 1's PodGroup of the old revision though that group never ran again, and makes the
    new revision's, which waits whole while the Job runs. Once the Job is gone, group 1 is placed whole,
    then LWS remakes group 0, placed whole: the rollout completes, one PodGroup per group of the new revision
    and none of the old."""
    ns, name = kinds_ns, "waits"
    priority_classes(ns)
    manifest = lws(name, 4, replicas=2, annotations=KEY, priority_class="low")
    try:
        with whole_lws_groups(ns, name, 4, NB_KEY) as watch:
            ns.create(manifest)
            _, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 4), timeout=120)
            first = wait_for(
                "2 groups running",
                lambda: shaped(ns, name, old, {0: (False, BOUND), 1: (False, BOUND)}),
                timeout=120,
            )
            _, waiting = preempted(ns, name, old, first, 1)
            print(ns.where())
            new_template(ns, name, manifest, "v2")
            remade = wait_for(
                "group 1 remade at the new revision, gated whole, only its new PodGroup; group 0 running",
                lambda: (
                    gs
                    if (gs := shaped(ns, name, old, {0: (False, BOUND), 1: (True, GATED)}))
                    and gs[0].uids == first[0].uids
                    and not gs[1].uids & waiting[1].uids
                    else None
                ),
                timeout=120,
            )
            new = remade[1].revision
            print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
            hold(
                "group 1 waits gated whole at the new revision while the Job runs, group 0 untouched",
                lambda: (
                    (gs := shaped(ns, name, old, {0: (False, BOUND), 1: (True, GATED)})) is not None
                    and gs[0].uids == first[0].uids
                    and gs[1].uids == remade[1].uids
                    and job_bound(ns, "high-2", 2) is not None
                ),
                seconds=3,
            )
            (group,) = [g for n, g in group_names(ns, name).items() if n.endswith(f"-1-{new}")]
            wait_for(
                f"{group['metadata']['name']} Admitted=False Unschedulable",
                lambda: (
                    condition(group_names(ns, name).get(group["metadata"]["name"])).get("reason")
                    == "Unschedulable"
                ),
            )
            groups = rollout_done_once_the_job_is_gone(ns, name, new)
        names = new_groups_whole(ns, name, new, watch, groups)
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}, names
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_rolling_update_of_a_leader_ready_lws_decides_each_new_group_whole_with_its_leader(
    kinds_ns: Namespace,
) -> None:
    """startupPolicy LeaderReady, replicas 2, size 4, topology-key: the two groups fill the 8 nodes. The
    template is edited: LWS remakes group 1, then group 0, each new leader alone at first (LWS makes its
    workers once it is Ready). Each new group is decided whole when its leader arrives, in the block its
    predecessor left, the workers' room held and the workers released into it: each new group's PodGroup
    records one decision (attempt 0) whose slots are the nodes its workers run on. No deadlock: the rollout
    completes; no group runs its leader alone longer than LEADER_ALONE, none is in two blocks."""
    ns, name = kinds_ns, "ready"
    manifest = lws(name, 4, replicas=2, leader_ready=True, annotations=KEY)
    try:
        with whole_lws_groups(ns, name, 4, NB_KEY, settle=LEADER_ALONE) as watch:
            ns.create(manifest)
            _, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 4), timeout=120)
            new_template(ns, name, manifest, "v2")
            groups, new = wait_for(
                "the rollout done: 2 groups of the new revision bound, one PodGroup each",
                lambda: settled(ns, name, 2, 4, after=old),
                timeout=180,
            )
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        one_block_each(ns, groups)
        assert ran(watch, f"{name}/0/{new}") and ran(watch, f"{name}/1/{new}")
        names = wait_for("the new PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2))
        for admission in workers_in_their_slots(names, groups, new).values():
            assert admission.get("attempt", 0) == 0, admission
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}
    except AssertionError:
        diagnose(ns, name)
        raise


def slices_each(ns: Namespace, groups: dict[int, list[dict[str, Any]]]) -> dict[int, list[str]]:
    """Each group's subgroups (workers 0-1 and 2-3) each in one local block, the two in two: the local
    blocks of each group, by subgroup."""
    labels = node_labels(ns.api)
    out: dict[int, list[str]] = {}
    for index, pods in groups.items():
        by_sub: dict[int, set[str]] = {}
        for pod in pods:
            sub = int(pod["metadata"]["labels"][LWS_WORKER]) // 2
            by_sub.setdefault(sub, set()).add(label_of(pod["spec"]["nodeName"], LB_KEY, labels))
        assert sorted(by_sub) == [0, 1] and all(len(b) == 1 for b in by_sub.values()), (index, by_sub)
        out[index] = [next(iter(by_sub[s])) for s in (0, 1)]
        assert out[index][0] != out[index][1], (index, out[index])
    return out


def test_a_rolling_update_of_an_lws_with_subgroups_keeps_each_remade_groups_slices(
    kinds_ns: Namespace,
) -> None:
    """subGroupSize 2 with topology-key (network block) and slice-topology-key (local block), replicas 2,
    size 4: each group takes a network block, each subgroup (workers 0-1, 2-3) a local block of it. The
    template is edited: LWS remakes group 1, then group 0. Each new group is a new tree of the new revision
    (a CompositePodGroup over one PodGroup per subgroup, the slice key on each), placed whole in one
    network block with each subgroup in one local block; the old revision's trees go, CompositePodGroups and
    PodGroups alike, and the new roots record their block."""
    ns, name = kinds_ns, "sub"
    keys = {"phalanx.dev/topology-key": NB_KEY, "phalanx.dev/slice-topology-key": LB_KEY}
    manifest = lws(name, 4, replicas=2, subgroup_size=2, annotations=keys)
    tree = "compositepodgroups"
    try:
        with whole_lws_groups(ns, name, 4, NB_KEY):
            ns.create(manifest)
            first, old = wait_for(
                "2 groups running", lambda: settled(ns, name, 2, 4, plural=tree), timeout=120
            )
            print(slices_each(ns, first))
            new_template(ns, name, manifest, "v2")
            groups, new = wait_for(
                "the rollout done: 2 groups of the new revision bound, one CompositePodGroup each",
                lambda: settled(ns, name, 2, 4, after=old, plural=tree),
                timeout=180,
            )
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        blocks = one_block_each(ns, groups)
        print(slices_each(ns, groups))
        roots = wait_for(
            "each new CompositePodGroup's status.domain, the block of its group",
            lambda: (
                rs
                if len(rs := group_names(ns, name, tree)) == 2
                and all((r.get("status") or {}).get("domain") for r in rs.values())
                else None
            ),
            timeout=120,
        )
        for index, block in blocks.items():
            (root,) = [r for n, r in roots.items() if n.endswith(f"-{index}-{new}")]
            assert root["status"]["domain"] == block, (index, root["status"], block)
        leaves = group_names(ns, name)
        print(sorted(leaves))
        assert len(leaves) == 4 and all(f"-{new}-" in n for n in leaves), sorted(leaves)
        assert all(LB_KEY in json.dumps(g["spec"]) for g in leaves.values()), [
            g["spec"] for g in leaves.values()
        ]
        assert roots_of(ns, name, tree) == {f"0-{new}", f"1-{new}"}
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_rolling_update_of_an_lws_with_subgroups_on_fragmented_nodes_places_each_slice_in_one_local_block(
    kinds_ns: Namespace,
) -> None:
    """subGroupSize 2 and slice-topology-key (local block) only, replicas 1, size 4. was-worker2 and
    was-worker4 are busy: nb-a's two local blocks have a free node each, room for a pod of a subgroup but
    not for a whole one, so the group goes to lb-b1 and lb-b2. The template is edited: LWS remakes the
    group; its new tree (of the new revision) is placed whole with each subgroup in one local block, lb-b1
    and lb-b2 again, never on the two lone free nodes of nb-a (which a placement without the slice key may
    take); the old tree goes."""
    ns, name = kinds_ns, "frag"
    ns.fill("was-worker2", "was-worker4")
    manifest = lws(name, 4, subgroup_size=2, annotations={"phalanx.dev/slice-topology-key": LB_KEY})
    tree = "compositepodgroups"
    try:
        with whole_lws_groups(ns, name, 4):
            ns.create(manifest)
            first, old = wait_for(
                "the group running", lambda: settled(ns, name, 1, 4, plural=tree), timeout=120
            )
            assert sorted(slices_each(ns, first)[0]) == ["lb-b1", "lb-b2"]
            new_template(ns, name, manifest, "v2")
            groups, new = wait_for(
                "the rollout done: the group of the new revision bound, one CompositePodGroup",
                lambda: settled(ns, name, 1, 4, after=old, plural=tree),
                timeout=180,
            )
        print(ns.where())
        assert sorted(slices_each(ns, groups)[0]) == ["lb-b1", "lb-b2"]
        leaves = group_names(ns, name)
        assert sorted(leaves) == sorted(f"{n}-s{i}" for n in group_names(ns, name, tree) for i in (0, 1))
        assert all(f"-0-{new}-" in n for n in leaves), sorted(leaves)
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_leader_ready_group_preempted_in_the_middle_of_a_rollout_comes_back_with_its_leader_and_whole(
    kinds_ns: Namespace,
) -> None:
    """startupPolicy LeaderReady, replicas 2, size 4, topology-key, PriorityClass low, a rollout held at
    partition 1: group 1 remade at the new revision (its leader first, its workers into the room held for
    them), group 0 at the old. A high-priority gang Job of 2 for group 1's block (high_job) takes group 1
    whole; LWS makes its leader again, alone (no worker before it is Ready), and the leader waits gated: its
    whole group is decided with it, and the block has room for 2 of its 4 pods, which its Unschedulable
    message says. Group 0 is untouched. The partition is lifted and the Job deleted: the
    group is decided whole with its leader, its workers go into their slots, then group 0 is remade the same
    way; the rollout completes, one PodGroup per group of the new revision, none of the old."""
    ns, name = kinds_ns, "ready-low"
    priority_classes(ns)
    manifest = rolling(
        lws(name, 4, replicas=2, leader_ready=True, annotations=KEY, priority_class="low"),
        maxUnavailable=1,
        partition=1,
    )

    def leader_waits(old: str, half: dict[int, Group]) -> Any:
        """Group 0 running untouched, group 1 only its new leader, gated, of the other revision; the
        PodGroups those of group 0's old revision and group 1's new one."""
        pods = by_group(lws_pods(ns, name))
        leader = pods.get(1, [])
        if sorted(pods) != [0, 1] or len(leader) != 1 or len(gated(leader)) != 1:
            return None
        if {p["metadata"]["uid"] for p in pods[0]} != half[0].uids or len(bound(pods[0])) != 4:
            return None
        if leader[0]["metadata"]["uid"] in half[1].uids or revisions(leader) != {half[1].revision}:
            return None
        return leader[0] if roots_of(ns, name) == {f"0-{old}", f"1-{half[1].revision}"} else None

    try:
        with whole_lws_groups(ns, name, 4, NB_KEY, settle=LEADER_ALONE) as watch:
            old, half = half_rolled(ns, name, manifest)
            new = half[1].revision
            ns.create(high_job(ns, half[1]))
            high = wait_for("high-2 bound", lambda: job_bound(ns, "high-2", 2), timeout=120)
            wait_for(
                "group 1's new leader alone, gated; group 0 untouched", lambda: leader_waits(old, half), 120
            )
            print(ns.where())
            hold(
                "the leader waits gated and alone while the Job runs",
                lambda: leader_waits(old, half) is not None and job_bound(ns, "high-2", 2) is not None,
                seconds=3,
            )
            # Why it waits, counted for the whole group (the leader and the slots of its 3 workers) on the
            # free nodes: in the Job's block 2 of its 4 pods fit (not room for 4 refused by pod rules).
            print(waits_for_room(ns, name, f"-1-{new}", high))
            patch_lws(
                ns, name, {"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": 0}}}}
            )
            groups = rollout_done_once_the_job_is_gone(ns, name, new)
        names = new_groups_whole(ns, name, new, watch, groups)
        workers_in_their_slots(names, groups, new)
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}
    except AssertionError:
        diagnose(ns, name)
        raise


NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
"""The nodes of network block nb-b (the seed topology)."""


def busy(ns: Namespace, *nodes: str) -> None:
    """Each node kept busy by a pod of all its GPUs (ns.fill), of PriorityClass high: of the high Job's
    priority, so never its victim (Phalanx preempts strictly lower priorities only), unlike ns.fill's."""
    for node in nodes:
        pod = filler_pod(node)
        pod["spec"]["priorityClassName"] = "high"
        ns.create(pod)
    wait_for(
        f"fillers on {nodes} running",
        lambda: (
            {
                p["spec"].get("nodeName")
                for p in ns.pods("app=filler")
                if p["status"].get("phase") == "Running"
            }
            >= set(nodes)
        ),
        timeout=60,
    )


def free(ns: Namespace, *nodes: str) -> None:
    """The fillers of `nodes` deleted, and gone."""
    for node in nodes:
        ns.unfill(node)
    names = {f"filler-{node}" for node in nodes}
    wait_for(
        f"the fillers of {nodes} gone",
        lambda: not names & {p["metadata"]["name"] for p in ns.pods("app=filler")},
        timeout=60,
    )


def reservations(ns: Namespace) -> dict[str, Any]:
    """The PodGroups of the namespace that record room held for them (`status.reservation`), by name."""
    return {g["metadata"]["name"]: r for g in groups(ns) if (r := (g.get("status") or {}).get("reservation"))}


SURGED = {0: (False, BOUND), 1: (False, BOUND), 2: (True, BOUND)}
"""Groups 0 and 1 bound at the old revision, the surge group 2 bound at the new (`shaped`)."""


def surge_preempted(
    ns: Namespace, name: str
) -> tuple[str, dict[int, Group], dict[int, Group], dict[str, Any], list[dict[str, Any]]]:
    """The surge tests' first steps, inside their watches: LWS `name` (replicas 2, size 2, topology-key,
    PriorityClass low, maxSurge 1, maxUnavailable 1 (v0.8.0 refuses 0: its StatefulSet gets it as is), the
    rollout held at partition 2) made while pods of PriorityClass high keep nb-b busy (busy), so both
    groups go to nb-a; two of those pods go (nb-b has room for one group, no more). The template is edited:
    LWS makes a surge group 2 at the new revision (beyond spec.replicas), placed whole in nb-b, and keeps
    groups 0 and 1 at the old one (partition 2): no node is free. A high-priority gang Job of 2 for nb-b
    (preempted) takes the surge group whole (the busy pods are of its own priority, never its victims);
    LWS makes it again at the new revision, its 2 pods gated whole; its PodGroup is the one it had (LWS
    makes that group again: kept, as a group's below spec.replicas is) and says Unschedulable; groups 0
    and 1 run untouched. Returns the old revision, the groups before and after the preemption, the surge
    group's PodGroup and the Job's pods."""
    priority_classes(ns)
    busy(ns, *NB_B)
    manifest = rolling(
        lws(name, 2, replicas=2, annotations=KEY, priority_class="low"),
        maxUnavailable=1,
        maxSurge=1,
        partition=2,
    )
    ns.create(manifest)
    first, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 2), timeout=120)
    assert one_block_each(ns, first) == {0: "nb-a", 1: "nb-a"}
    free(ns, *NB_B[:2])
    new_template(ns, name, manifest, "v2")
    surged = wait_for(
        "the surge group 2 at the new revision bound, groups 0 and 1 bound at the old",
        lambda: shaped(ns, name, old, SURGED, 2),
        timeout=150,
    )
    print(ns.where())
    new = surged[2].revision
    (surge,) = [g for n, g in group_names(ns, name).items() if n.endswith(f"-2-{new}")]
    high, waiting = preempted(ns, name, old, surged, 2, size=2)
    print(ns.where())
    assert {p["spec"]["nodeName"] for p in high} == {p["spec"]["nodeName"] for p in surged[2].pods}
    said = wait_for(
        f"{surge['metadata']['name']} Admitted=False Unschedulable",
        lambda: (
            g
            if condition(g := group_names(ns, name).get(surge["metadata"]["name"])).get("reason")
            == "Unschedulable"
            else None
        ),
    )
    print(condition(said))
    assert said["metadata"]["uid"] == surge["metadata"]["uid"], (said["metadata"], surge["metadata"])
    return old, surged, waiting, surge, high


def sts_partition(ns: Namespace, name: str) -> int:
    """The partition LWS gave its leader StatefulSet (named as the LWS): the groups below it keep the old
    template (its rolling update's step, partition or not)."""
    sts = ns.get(f"/apis/apps/v1/namespaces/{{ns}}/statefulsets/{name}")
    return int(sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"])


def test_a_surge_group_preempted_in_a_rollout_waits_whole_and_the_rollout_completes_once_the_job_is_gone(
    kinds_ns: Namespace,
) -> None:
    """surge_preempted: in a rollout with maxSurge 1 held at partition 2 on a full cluster, the surge group 2
    of the new revision is taken whole by a high-priority Job and made again, gated whole, its PodGroup
    kept. The partition is lifted while the Job runs: LWS moves its StatefulSet's partition to 1 (group 1's
    turn), but takes no old group down while the surge group waits (the StatefulSet's maxUnavailable 1
    counts it): groups 0 and 1 run untouched, the surge group waits gated whole. Once the Job is gone the
    surge group is placed whole (the rollout needs it Ready), LWS remakes groups 1 and 0, each placed
    whole, and deletes the surge group: the rollout completes, the two groups of the new revision each with
    its PodGroup; the surge group's PodGroup is gone, no PodGroup holds a reservation, no pod is left
    gated. Every group (the surge group too) is bound whole or not at all at every pod event."""
    ns, name = kinds_ns, "surge-low"
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY) as watch:
            old, surged, waiting, surge, _ = surge_preempted(ns, name)
            new = surged[2].revision
            patch_lws(
                ns, name, {"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": 0}}}}
            )
            wait_for("LWS's StatefulSet at partition 1", lambda: sts_partition(ns, name) == 1, timeout=60)
            hold(
                "the surge group gated whole, groups 0 and 1 running at the old revision, while the Job runs",
                lambda: (
                    (gs := shaped(ns, name, old, {**SURGED, 2: (True, GATED)}, 2)) is not None
                    and all(gs[i].uids == waiting[i].uids for i in (0, 1, 2))
                    and job_bound(ns, "high-2", 2) is not None
                ),
                seconds=3,
            )
            delete_job(ns, "high-2")
            groups, _ = wait_for(
                "the rollout done: 2 groups of the new revision bound, one PodGroup each, no surge group",
                lambda: settled(ns, name, 2, 2, new),
                timeout=180,
            )
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        one_block_each(ns, groups)
        assert all(ran(watch, f"{name}/{i}/{new}") for i in (0, 1, 2))  # the surge group too
        names = wait_for("the new PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2))
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}, names
        assert surge["metadata"]["name"] not in names
        assert not reservations(ns), reservations(ns)
        assert not gated(ns.pods())
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_preempted_surge_group_that_lws_scales_away_while_it_waits_leaves_no_pod_group_behind(
    kinds_ns: Namespace,
) -> None:
    """surge_preempted: in a rollout with maxSurge 1 held at partition 2 on a full cluster, the surge group 2
    of the new revision is taken whole by a high-priority Job and made again, gated whole, its PodGroup
    kept. The user scales the LWS down to 1 replica while the Job runs: LWS deletes group 1 and the
    waiting surge group (a group it no longer has: it counts 1 group) and keeps group 0 at the old revision
    (partition 2). Their PodGroups go, group 0's stays; no PodGroup holds a reservation, no pod is gated.
    The Job is deleted and the partition lifted: LWS remakes group 0 at the new revision, placed whole; the
    rollout completes, one group of the new revision, one PodGroup. Every group is bound whole or not at
    all at every pod event."""
    ns, name = kinds_ns, "surge-away"
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY) as watch:
            old, surged, waiting, surge, _ = surge_preempted(ns, name)
            new = surged[2].revision
            patch_lws(ns, name, {"spec": {"replicas": 1}})
            scaled = wait_for(
                "groups 1 and 2 gone with their PodGroups, group 0 running untouched at the old revision",
                lambda: (
                    gs
                    if (gs := shaped(ns, name, old, {0: (False, BOUND)}, 2)) is not None
                    and gs[0].uids == waiting[0].uids
                    else None
                ),
                timeout=120,
            )
            print(ns.where())
            assert surge["metadata"]["name"] not in group_names(ns, name)
            wait_for("no PodGroup holding a reservation", lambda: not reservations(ns), timeout=60)
            assert not gated(ns.pods()), ns.where()
            delete_job(ns, "high-2")
            groups = partition_lifted(ns, name, 1, new, "group 0 of the new revision bound, one PodGroup")
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        one_block_each(ns, groups)
        assert not {p["metadata"]["uid"] for p in groups[0]} & scaled[0].uids
        assert ran(watch, f"{name}/0/{new}")
        names = wait_for("the new PodGroup Admitted and Running", lambda: admitted_groups(ns, name, 1))
        assert roots_of(ns, name) == {f"0-{new}"}, names
        assert not reservations(ns), reservations(ns)
        assert not gated(ns.pods())
    except AssertionError:
        diagnose(ns, name)
        raise


def sts_replicas(ns: Namespace, name: str) -> int:
    """The replicas LWS asks of its leader StatefulSet: spec.replicas, plus maxSurge while it surges."""
    return int(ns.get(f"/apis/apps/v1/namespaces/{{ns}}/statefulsets/{name}")["spec"]["replicas"])


def partition_lifted(
    ns: Namespace, name: str, replicas: int, new: str, what: str
) -> dict[int, list[dict[str, Any]]]:
    """The rollout's partition lifted, and done: `replicas` groups of 2 pods of revision `new` bound."""
    patch_lws(ns, name, {"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"partition": 0}}}})
    groups, _ = wait_for(
        f"the rollout done: {what}", lambda: settled(ns, name, replicas, 2, new), timeout=180
    )
    return dict(groups)


def created_count(ns: Namespace, name: str) -> int:
    """How many times Phalanx said it made PodGroups for LWS `name`: its one PodGroupCreated Event (they
    aggregate by object and reason, as client-go's do), counted."""
    said = [
        e
        for e in ns.events(f"involvedObject.name={name},reason=PodGroupCreated")
        if e["involvedObject"]["kind"] == "LeaderWorkerSet"
    ]
    return sum(int(e.get("count") or 1) for e in said)


def test_a_surge_groups_pod_group_stays_while_lws_cannot_make_its_leader_again_and_the_group_comes_back_to_it(
    kinds_ns: Namespace,
) -> None:
    """A rollout with maxSurge 1 held at partition 2: LWS runs the surge group 2 at the new revision beside
    groups 0 and 1 at the old one, its leader StatefulSet at 3 replicas. A ResourceQuota lets no more pod be
    made in the namespace, and the surge group's leader is deleted (as LWS's own group restart does): the
    garbage collector takes its workers and the StatefulSet cannot make the leader again, so no pod of
    group 2 is left and LWS's status.replicas (its StatefulSet's status) falls to 2, while the StatefulSet
    still wants 3. The surge group's PodGroup stays, the same object, all that time. The quota lifted, LWS
    makes the group again and it is placed whole under that PodGroup (no PodGroupCreated for it again). The
    partition lifted, the rollout completes and the surge group's PodGroup goes with it. Every group is bound
    whole or not at all at every pod event."""
    ns, name = kinds_ns, "surge-dip"
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-more-pods"}}
    quotas = f"/api/v1/namespaces/{ns.name}/resourcequotas"
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY) as watch:
            manifest = rolling(
                lws(name, 2, replicas=2, annotations=KEY), maxUnavailable=1, maxSurge=1, partition=2
            )
            ns.create(manifest)
            _, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 2), timeout=120)
            new_template(ns, name, manifest, "v2")
            surged = wait_for(
                "the surge group 2 at the new revision bound, groups 0 and 1 bound at the old",
                lambda: shaped(ns, name, old, SURGED, 2),
                timeout=150,
            )
            new = surged[2].revision
            (surge,) = [g for n, g in group_names(ns, name).items() if n.endswith(f"-2-{new}")]
            assert sts_replicas(ns, name) == 3
            said = created_count(ns, name)
            live = [p for p in ns.pods() if not p["metadata"].get("deletionTimestamp")]
            ns.create({**quota, "spec": {"hard": {"pods": str(len(live) - 2)}}}, quotas)
            wait_for(
                "the quota's usage counted",
                lambda: "pods" in (ns.get(f"{quotas}/no-more-pods").get("status") or {}).get("used", {}),
                timeout=60,
            )
            ns.delete_pod(f"{name}-2")
            dipped = wait_for(
                "no pod of group 2 left, LWS counting 2 groups, its StatefulSet still wanting 3",
                lambda: (
                    not by_group(lws_pods(ns, name)).get(2)
                    and get_lws(ns, name).get("status", {}).get("replicas") == 2
                    and sts_replicas(ns, name) == 3
                ),
                timeout=120,
            )
            assert dipped
            hold(
                "the surge group's PodGroup, the same object, while no pod of group 2 can be made",
                lambda: (
                    (g := group_names(ns, name).get(surge["metadata"]["name"])) is not None
                    and g["metadata"]["uid"] == surge["metadata"]["uid"]
                    and not by_group(lws_pods(ns, name)).get(2)
                ),
                seconds=5,
            )
            ns.api.request("DELETE", f"{quotas}/no-more-pods")
            again = wait_for(
                "the surge group made again and bound, groups 0 and 1 untouched",
                lambda: (
                    gs
                    if (gs := shaped(ns, name, old, SURGED, 2)) is not None
                    and not gs[2].uids & surged[2].uids
                    and all(gs[i].uids == surged[i].uids for i in (0, 1))
                    else None
                ),
                timeout=180,
            )
            print(ns.where())
            kept = group_names(ns, name)[surge["metadata"]["name"]]
            assert kept["metadata"]["uid"] == surge["metadata"]["uid"], (kept["metadata"], surge["metadata"])
            assert created_count(ns, name) == said  # nothing said made for the group again
            groups = partition_lifted(
                ns, name, 2, new, "2 groups of the new revision bound, one PodGroup each"
            )
        one_block_each(ns, groups)
        one_block_each(ns, {i: g.pods for i, g in again.items()})
        assert all(ran(watch, f"{name}/{i}/{new}") for i in (0, 1, 2))
        wait_for(
            "the surge group's PodGroup gone", lambda: surge["metadata"]["name"] not in group_names(ns, name)
        )
        assert roots_of(ns, name) == {f"0-{new}", f"1-{new}"}
        assert not gated(ns.pods())
    except AssertionError:
        diagnose(ns, name)
        raise
    finally:
        if ns.get(quotas)["items"]:
            ns.api.request("DELETE", f"{quotas}/no-more-pods")
