"""LeaderWorkerSet groups and staged units through `plan()`: each LWS group (of one revision) is one gang;
LeaderReady and JobSet InOrder are decided whole with their first stage, the later pods' room held and
released into their slots; a group is requeued by deleting its pods."""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf
import pytest
from testkit import (
    LB,
    LOCAL,
    NB,
    NODES,
    NOW,
    StaticContext,
    child_job,
    cluster,
    group_of,
    job_body,
    jobset_body,
    jobset_pod,
    leader_statefulset,
    lws_body,
    lws_pod,
    made_groups,
    node_body,
    owner_cluster,
    pod_body,
    with_status,
    written,
    written_statuses,
)

from phalanx.api import conditions as c
from phalanx.api.lws import LeaderSet
from phalanx.api.naming import pod_group_label_value
from phalanx.api.status import Assignment
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.lws import LwsKind
from phalanx.controller.loop.incremental import UnitMemo
from phalanx.controller.loop.scheduler import BIND_TIMEOUT_SECONDS as BIND_TIMEOUT
from phalanx.controller.loop.scheduler import plan_input
from phalanx.controller.model.actions import (
    CreatePodGroup,
    CreateWorkload,
    DeleteObject,
    DeletePod,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    SuspendJob,
)
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan import Plan, plan
from phalanx.controller.plan.status import SETTLE_SECONDS
from phalanx.controller.watch.webhooks import Webhooks

BLOCK = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}


def group_pods(lws: str, group: int, size: int, **kw: Any) -> list[dict[str, Any]]:
    return [lws_pod(lws, group, w, **kw) for w in range(size)]


def releases(result: Plan) -> dict[str, str]:
    return {a.pod.name: a.node for a in result.actions if isinstance(a, ReleasePod)}


def test_each_group_of_an_lws_is_one_gang_in_one_block() -> None:
    lws = lws_body(replicas=2, annotations={"phalanx.dev/topology-key": NB})
    pods = group_pods("serve", 0, 4) + group_pods("serve", 1, 4)
    result = plan(owner_cluster([("LeaderWorkerSet", lws)], pods), NOW)
    keys = {u.key for u in result.units}
    assert {"LeaderWorkerSet/ml/serve/0-r1", "LeaderWorkerSet/ml/serve/1-r1"} <= keys
    placed = releases(result)
    assert len(placed) == 8
    for group in ("serve-0", "serve-1"):
        blocks = {BLOCK[n] for p, n in placed.items() if p == group or p.startswith(f"{group}-")}
        assert len(blocks) == 1
    assert {BLOCK[n] for n in placed.values()} == {"nb-a", "nb-b"}
    made = [a.pod_group for a in result.actions if isinstance(a, CreatePodGroup)]
    assert {g.metadata["annotations"]["phalanx.dev/owner"] for g in made} == {"LeaderWorkerSet/serve"}


def test_a_group_short_of_pods_waits_whole_when_its_workers_come_with_the_leader() -> None:
    first = plan(owner_cluster([("LeaderWorkerSet", lws_body())], group_pods("serve", 0, 2)), NOW)
    assert not releases(first)
    assert not [a for a in first.actions if isinstance(a, PatchStatus)]  # said only if they do not come soon
    result = plan(
        owner_cluster(
            [("LeaderWorkerSet", lws_body())], group_pods("serve", 0, 2), groups=made_groups(first)
        ),
        NOW + dt.timedelta(seconds=SETTLE_SECONDS),
    )
    assert not releases(result)
    statuses = [a.status.condition(c.ADMITTED) for a in result.actions if isinstance(a, PatchStatus)]
    assert [s.reason for s in statuses if s is not None] == [c.REASON_WAITING_FOR_PODS]


def test_leader_ready_places_the_whole_group_with_its_leader_and_holds_the_workers_room() -> None:
    lws = lws_body(leader_ready=True, annotations={"phalanx.dev/topology-key": NB})
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0)]), NOW)
    assert list(releases(first)) == ["serve-0"]  # the leader alone goes, so that it can become Ready
    (record,) = [a for a in first.actions if isinstance(a, RecordAdmission)]
    slots = {a.pod: a.node for a in record.admission.assignments}
    assert set(slots) == {"serve-0"} | {f"{record.group.name}-slot-{r}" for r in (1, 2, 3)}
    assert len({BLOCK[n] for n in slots.values()}) == 1  # the whole group in one block
    groups = made_groups(first)

    # Until the workers are released into their slots (not made yet, or made and still gated), their room
    # stays held: a gang ordered before this one (older) that would need it waits.
    leader = lws_pod(
        "serve",
        0,
        0,
        gated=False,
        released_to=slots["serve-0"],
        node=slots["serve-0"],
        pod_group=record.group.name,
    )
    block = BLOCK[slots["serve-0"]]
    busy = [n for n in range(1, 9) if BLOCK[f"n{n}"] != block]  # the other block is full
    job = job_body("other", 3, annotations={"phalanx.dev/topology-key": NB}, created="2026-11-30T10:00:00Z")
    competing = [pod_body("other", i) for i in range(3)]
    state = owner_cluster([("LeaderWorkerSet", lws)], [leader], groups=groups, busy=busy)
    assert state.units  # the group's unit, with its decision recorded
    workers = [lws_pod("serve", 0, w) for w in (1, 2, 3)]
    for made in ([], workers):
        both = plan(
            cluster(
                [(job, group_of(job), competing)],
                busy=busy,
                groups=groups,
                pods=[leader, *made],
                owners=[("LeaderWorkerSet", lws)],
            ),
            NOW,
        )
        assert not [r for r in releases(both) if r.startswith("other")], "the held room went to another gang"
        assert sorted(releases(both)) == sorted(p["metadata"]["name"] for p in made)
    # Also while the group backs off (a write of it failed): its turn comes later, its leader runs.
    (key,) = [u.key for u in state.units]
    backing_off = plan(
        cluster(
            [(job, group_of(job), competing)],
            busy=busy,
            groups=groups,
            pods=[leader],
            owners=[("LeaderWorkerSet", lws)],
            backing_off=frozenset({key}),
        ),
        NOW,
    )
    assert not releases(backing_off), "the held room went to another gang while the group backed off"

    # The workers come (LeaderReady): each goes to its slot's node.
    later = plan(owner_cluster([("LeaderWorkerSet", lws)], [leader, *workers], groups=groups), NOW)
    assert releases(later) == {f"serve-0-{r}": slots[f"{record.group.name}-slot-{r}"] for r in (1, 2, 3)}
    assert not [a for a in later.actions if isinstance(a, RecordAdmission) and a.group.kind == "PodGroup"]


def test_subgroups_are_slices_each_in_one_local_block() -> None:
    lws = lws_body(
        size=4,
        subgroup_size=2,
        annotations={"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB},
    )
    result = plan(owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 4)), NOW)
    placed = releases(result)
    assert len(placed) == 4
    local = {p: LOCAL[int(n[1:])] for p, n in placed.items()}
    assert local["serve-0"] == local["serve-0-1"] != local["serve-0-2"] == local["serve-0-3"]


def test_each_group_made_says_pod_group_created_on_the_lws_with_or_without_subgroups() -> None:
    """A flat group's PodGroup, and a subgrouped group's CompositePodGroup and PodGroups, are said made on
    the LWS (PodGroupCreated, naming the group), once: not again on the next pass."""
    for subgroup_size, names in ((None, 1), (2, 3)):
        lws = lws_body(size=4, replicas=2, subgroup_size=subgroup_size)
        pods = group_pods("serve", 0, 4) + group_pods("serve", 1, 4)
        first = plan(owner_cluster([("LeaderWorkerSet", lws)], pods), NOW)
        said = sorted(
            a.message for a in first.actions if isinstance(a, PostEvent) and a.reason == "PodGroupCreated"
        )
        assert len(said) == 2, (subgroup_size, said)
        made = made_groups(first)
        for index, message in enumerate(said):
            mine = [g.name for g in made if f"-{index}-r1" in g.name]
            assert len(mine) == names and all(n in message for n in mine), (message, mine)
            assert message.endswith(f"for group {index}"), message
        again = plan(owner_cluster([("LeaderWorkerSet", lws)], pods, groups=made), NOW)
        assert not [a for a in again.actions if isinstance(a, PostEvent) and a.reason == "PodGroupCreated"]


def test_a_group_is_requeued_by_deleting_its_pods_not_by_a_suspend() -> None:
    lws = lws_body(size=2)
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 2)), NOW)
    groups = made_groups(first)
    placed = releases(first)
    refused = [
        lws_pod("serve", 0, w, gated=False, released_to=placed[n], pod_group=groups[0].name)
        for w, n in ((0, "serve-0"), (1, "serve-0-1"))
    ]
    refused[1]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes fit"}
    ]
    result = plan(owner_cluster([("LeaderWorkerSet", lws)], refused, groups=groups), NOW)
    deleted = sorted((a.pod.name, a.foreground) for a in result.actions if isinstance(a, DeletePod))
    # The leader only: its workers' StatefulSet is the leader pod's, the garbage collector takes them with
    # it (deleting them too would let that StatefulSet make them again before it goes); in the foreground,
    # so that LWS makes it again only once they are gone (DeletePod.foreground).
    assert deleted == [("serve-0", True)]
    assert not [a for a in result.actions if isinstance(a, SuspendJob)]
    leaderless = plan(owner_cluster([("LeaderWorkerSet", lws)], refused[1:], groups=groups), NOW)
    assert [(a.pod.name, a.foreground) for a in leaderless.actions if isinstance(a, DeletePod)] == [
        ("serve-0-1", False)
    ]


def _born(body: dict[str, Any], at: str) -> dict[str, Any]:
    body["metadata"]["creationTimestamp"] = at
    return body


def test_workers_older_than_their_leader_are_not_its_members() -> None:
    """The leader was made again (its predecessor failed): the worker still running is the old leader's,
    being taken by the garbage collector with its StatefulSet. The group waits for its new workers rather
    than placing the leader beside a worker about to go."""
    lws = lws_body(size=2)
    groups = made_groups(plan(owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 2)), NOW))
    old = _born(lws_pod("serve", 0, 1, node="n1", pod_group=groups[0].name), "2026-11-30T11:00:00Z")
    leader = _born(lws_pod("serve", 0, 0), "2026-11-30T11:59:00Z")
    result = plan(owner_cluster([("LeaderWorkerSet", lws)], [leader, old], groups=groups), NOW)
    assert not releases(result)
    reasons = {
        a.group.name: a.status.condition(c.ADMITTED) for a in result.actions if isinstance(a, PatchStatus)
    }
    (admitted,) = reasons.values()
    assert admitted is not None and admitted.reason == c.REASON_WAITING_FOR_PODS, admitted
    new = _born(lws_pod("serve", 0, 1), "2026-11-30T11:59:01Z")
    again = plan(owner_cluster([("LeaderWorkerSet", lws)], [leader, new], groups=groups), NOW)
    assert sorted(releases(again)) == ["serve-0", "serve-0-1"]  # its own worker came: placed whole


def test_a_rolling_update_makes_fresh_gangs_and_drops_the_old_revisions_group() -> None:
    lws = lws_body(size=2)
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 2)), NOW)
    groups = made_groups(first)
    updated = plan(
        owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 2, revision="r2"), groups=groups),
        NOW,
    )
    assert "LeaderWorkerSet/ml/serve/0-r2" in {u.key for u in updated.units}
    deleted = [a.target.name for a in updated.actions if type(a).__name__ == "DeleteObject"]
    assert deleted == [groups[0].name]
    assert len(releases(updated)) == 2


def _deleted(result: Plan) -> list[str]:
    return sorted(a.target.name for a in result.actions if isinstance(a, DeleteObject))


def test_a_group_lws_makes_again_keeps_its_pod_group_and_goes_back_to_the_block_it_had() -> None:
    """A group whose pods are all gone for a moment (its leader deleted by hand, or by LWS's own group
    restart; the garbage collector took the workers) is made again by LWS, of the same index and revision:
    its PodGroup stays (waiting for the pods, its status.lastDomain kept), and the new pods go back to the
    block the group had, although another block is now the tighter fit (docs/integrations.md)."""
    lws = lws_body(size=2, annotations={"phalanx.dev/topology-key": NB})
    owners = [("LeaderWorkerSet", lws)]
    first = plan(owner_cluster(owners, group_pods("serve", 0, 2), busy=[1, 2, 3]), NOW)
    placed = releases(first)
    assert {BLOCK[n] for n in placed.values()} == {"nb-b"}  # nb-a has one free node
    groups = made_groups(first)
    running = [
        lws_pod("serve", 0, w, gated=False, node=placed[n], released_to=placed[n], pod_group=groups[0].name)
        for w, n in ((0, "serve-0"), (1, "serve-0-1"))
    ]
    groups = written(plan(owner_cluster(owners, running, groups=groups, busy=[1, 2, 3]), NOW), groups)
    assert groups[0].status.last_domain == "nb-b"
    # A node of nb-a frees; the group's pods are all gone (LWS is making it again).
    gone = plan(owner_cluster(owners, [], groups=groups, busy=[1, 2]), NOW)
    assert _deleted(gone) == []
    groups = written(gone, groups)
    assert groups[0].status.last_domain == "nb-b"
    admitted = groups[0].status.condition(c.ADMITTED)
    assert admitted is not None and admitted.reason != c.REASON_ADMITTED  # it no longer says it runs
    again = plan(owner_cluster(owners, group_pods("serve", 0, 2), groups=groups, busy=[1, 2]), NOW)
    assert {BLOCK[n] for n in releases(again).values()} == {"nb-b"}, releases(again)
    # (a group without that past goes to the tighter nb-a)
    fresh = plan(owner_cluster(owners, group_pods("serve", 0, 2), busy=[1, 2]), NOW)
    assert {BLOCK[n] for n in releases(fresh).values()} == {"nb-a"}


def test_the_pod_group_of_a_group_scaled_away_or_of_an_old_revision_goes_once_its_pods_are_gone() -> None:
    """replicas 2 -> 1: group 1's PodGroup goes with its pods; a group whose index now runs another revision
    (a rolling update) loses its old revision's PodGroup, while the present revision's stays."""
    two = lws_body(size=2, replicas=2)
    first = plan(
        owner_cluster([("LeaderWorkerSet", two)], group_pods("serve", 0, 2) + group_pods("serve", 1, 2)), NOW
    )
    groups = made_groups(first)
    names = sorted(g.name for g in groups)
    one = lws_body(size=2, replicas=1)
    scaled = plan(owner_cluster([("LeaderWorkerSet", one)], group_pods("serve", 0, 2), groups=groups), NOW)
    assert _deleted(scaled) == [n for n in names if n.endswith("-1-r1")]
    empty = plan(owner_cluster([("LeaderWorkerSet", one)], [], groups=groups), NOW)
    assert _deleted(empty) == [n for n in names if n.endswith("-1-r1")]  # group 0 is still wanted
    updated = plan(
        owner_cluster([("LeaderWorkerSet", one)], group_pods("serve", 0, 1, revision="r2"), groups=groups),
        NOW,
    )
    assert _deleted(updated) == names  # group 0 runs r2 now; group 1 is scaled away
    none = plan(owner_cluster([("LeaderWorkerSet", lws_body(size=2, replicas=0))], [], groups=groups), NOW)
    assert _deleted(none) == names


OTHER_LWS = "uid-lws-serve-before"  # the uid of an LWS of the same name, deleted before this one was made


@pytest.mark.parametrize(
    ("replicas", "groups_made", "leaving", "kept", "leader_set"),
    [
        (2, 3, False, True, None),  # a rollout's surge group (maxSurge 1): LWS counts it, and makes it again
        (2, None, True, True, None),  # its pods are being deleted (a requeue; LWS's count dips meanwhile)
        (2, 2, True, True, None),  # ... or LWS scales it away: the PodGroup goes once they are gone
        (2, 2, False, False, None),  # the surge group LWS scaled away: it counts 2 groups, no pod is left
        (2, None, False, False, None),  # no status.replicas: the groups of spec.replicas only
        (3, 2, False, True, None),  # scaled up to 3: group 2 is LWS's although its count lags
        (1, 2, False, False, None),  # scaled down to 1, LWS counting 2: group 2 is gone either way
        # With the leader StatefulSet seen, its spec.replicas says what LWS has, whatever status says:
        (2, 2, False, True, 3),  # the surge group's leader made again: status.replicas dips, spec does not
        (2, 1, False, True, 3),  # ... also while another group's leader is made again
        (2, 3, False, False, 2),  # LWS scaled the surge group away; its count still lags at 3
        (2, 3, False, True, (3, OTHER_LWS)),  # the set of an LWS of that name before: status stands in
        (2, 2, False, False, (3, OTHER_LWS)),  # ... and says 2
        (3, 2, False, True, 2),  # scaled up to 3 before LWS's StatefulSet followed: spec.replicas counts
    ],
)
def test_a_group_whose_pods_are_gone_keeps_its_pod_group_while_lws_has_it(
    replicas: int,
    groups_made: int | None,
    leaving: bool,
    kept: bool,
    leader_set: int | tuple[int, str] | None,
) -> None:
    """Group 2 has no live pod (its leader deleted: a requeue, or LWS's group restart; with `leaving`, its
    pods are still being deleted): its PodGroup stays while group 2 is one LWS has — below spec.replicas,
    below its leader StatefulSet's spec.replicas (a rolling update with maxSurge makes surge groups beyond
    spec.replicas, and makes one again like any other), or, that StatefulSet not seen, below status.replicas
    (the groups LWS counts, which dip while a leader is made again), or while its pods are still there — and
    LWS's pods made again find it (no PodGroup made again). A group LWS no longer has (scaled away, a surge
    group too) loses its PodGroup once its pods are gone."""
    three = lws_body(size=2, replicas=3)
    pods = [p for g in range(3) for p in group_pods("serve", g, 2)]
    groups = made_groups(plan(owner_cluster([("LeaderWorkerSet", three)], pods), NOW))
    (surge,) = [g.name for g in groups if g.name.endswith("-2-r1")]
    owners = [("LeaderWorkerSet", lws_body(size=2, replicas=replicas, groups_made=groups_made))]
    if leader_set is not None:
        wanted, uid = leader_set if isinstance(leader_set, tuple) else (leader_set, None)
        owners.append(("StatefulSet", leader_statefulset("serve", wanted, owner_uid=uid)))
    left = [_deleting(p) for p in pods[4:]] if leaving else []
    gone = plan(owner_cluster(owners, pods[:4] + left, groups=groups), NOW)
    assert _deleted(gone) == ([] if kept else [surge])
    if kept:
        again = plan(owner_cluster(owners, pods, groups=groups), NOW)
        assert not [a for a in again.actions if isinstance(a, CreatePodGroup)]
        assert _deleted(again) == []
        assert {"serve-2", "serve-2-1"} <= set(releases(again))  # placed whole, in its PodGroup


def test_the_leader_statefulset_is_read_through_the_cache_and_a_change_of_it_makes_the_lws_units_again() -> (
    None
):
    """The cache keeps an LWS's leader StatefulSet (named as the LWS, labelled with its name, no group index,
    controlled by it), none of its groups' workers' StatefulSets nor anyone else's; and the loop's memo makes
    the LWS's units again when it changes: the surge group's PodGroup, kept while the StatefulSet wants 3
    groups, goes in the pass after LWS scales it away to 2 (status.replicas lagging at 3 meanwhile)."""
    three = lws_body(size=2, replicas=3)
    pods = [p for g in range(3) for p in group_pods("serve", g, 2)]
    groups = made_groups(plan(owner_cluster([("LeaderWorkerSet", three)], pods), NOW))
    (surge,) = [g.name for g in groups if g.name.endswith("-2-r1")]
    cache = ClusterCache()
    for n in NODES:
        cache.upsert("Node", node_body(n))
    for record in groups:
        cache.pod_groups.put(record)
    for body in pods[:4]:
        cache.upsert("Pod", body)
    cache.upsert("LeaderWorkerSet", lws_body(size=2, replicas=2, groups_made=3))
    memo = UnitMemo()
    foreign = leader_statefulset("serve", 9)
    foreign["metadata"]["ownerReferences"][0]["kind"] = "Deployment"
    for other in (leader_statefulset("serve", 9, group_index=0), foreign):
        cache.upsert("StatefulSet", other)
        assert cache.lws_leader_set("ml", "serve") is None
    cache.upsert("StatefulSet", leader_statefulset("serve", 3))
    assert cache.lws_leader_set("ml", "serve") == LeaderSet("uid-lws-serve", 3)
    assert _deleted(plan(plan_input(cache, memo=memo), NOW)) == []
    generation = cache.view_generation
    cache.upsert("StatefulSet", leader_statefulset("serve", 9, group_index=2))  # a worker set: nothing
    assert cache.view_generation == generation
    cache.upsert("StatefulSet", leader_statefulset("serve", 2))
    assert _deleted(plan(plan_input(cache, memo=memo), NOW)) == [surge]
    cache.delete("StatefulSet", leader_statefulset("serve", 2))
    assert cache.lws_leader_set("ml", "serve") is None
    assert ("ml/serve", "") not in cache.records("StatefulSet")


def _deleting(body: dict[str, Any]) -> dict[str, Any]:
    out = {**body, "metadata": {**body["metadata"], "deletionTimestamp": "2026-11-30T12:00:00Z"}}
    return out


def test_an_lws_being_deleted_gets_no_new_object_of_phalanx() -> None:
    """Deleted in the foreground, an LWS stays (deletionTimestamp set) while the garbage collector deletes
    what blocks it: Phalanx's Workload and groups, its StatefulSets and pods. Its pods are still there for a
    while; Phalanx makes nothing for it again (the collector would only have it to delete too, and the LWS
    would be told PodGroupCreated while it goes), with or without subgroups, and places none of its pods."""
    for subgroup_size in (None, 2):
        lws = lws_body(size=4, subgroup_size=subgroup_size)
        pods = group_pods("serve", 0, 4)
        made = made_groups(plan(owner_cluster([("LeaderWorkerSet", lws)], pods), NOW))
        lws["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
        for groups in ([], [g for g in made if isinstance(g, CompositePodGroupRecord)]):
            result = plan(owner_cluster([("LeaderWorkerSet", lws)], pods, groups=groups), NOW)
            kinds = {type(a).__name__ for a in result.actions}
            assert not kinds & {"CreateWorkload", "CreatePodGroup", "CreateCompositePodGroup", "PostEvent"}, (
                kinds
            )
            assert not releases(result)


def test_the_lws_webhook_gates_both_templates_and_refuses_a_slice_key_without_subgroups() -> None:
    hooks = Webhooks(StaticContext())
    body = lws_body(gated=False)
    body["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = {
        "spec": {"containers": [{"name": "l", "image": "x"}]}
    }
    patch = kopf.Patch()
    hooks.gate_owner(LwsKind())(body=kopf.Body(body), patch=patch)
    template = patch["spec"]["leaderWorkerTemplate"]
    assert template["leaderTemplate"]["spec"]["schedulingGates"] == [{"name": "phalanx.dev/admission"}]
    assert template["workerTemplate"]["spec"]["schedulingGates"] == [{"name": "phalanx.dev/admission"}]
    bad = lws_body(gated=False, annotations={"phalanx.dev/slice-topology-key": LB})
    try:
        hooks.gate_owner(LwsKind())(body=kopf.Body(bad), patch=kopf.Patch())
    except kopf.AdmissionError as e:
        assert "subGroupPolicy" in str(e)
    else:
        raise AssertionError("a slice key without subgroups was let through")
    edit = lws_body(size=8)
    try:
        hooks.validate_owner(LwsKind())(body=kopf.Body(edit), old=kopf.Body(lws_body()))
    except kopf.AdmissionError as e:
        assert "spec.leaderWorkerTemplate.size" in str(e)
    else:
        raise AssertionError("a size change of a managed LWS was let through")


@pytest.mark.parametrize(
    ("annotations", "subgroup_size", "message"),
    [
        (
            {"phalanx.dev/topology-key": "bad key!"},
            None,
            'metadata.annotations[phalanx.dev/topology-key]: "bad key!" is not a valid label key',
        ),
        (
            {"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": "a/b/c"},
            2,
            'metadata.annotations[phalanx.dev/slice-topology-key]: "a/b/c" is not a valid label key',
        ),
        (
            {"phalanx.dev/topology-key": ""},
            None,
            'metadata.annotations[phalanx.dev/topology-key]: "" is not a valid label key: must not be empty',
        ),
    ],
)
def test_the_lws_webhook_refuses_a_key_that_is_no_label_key(
    annotations: dict[str, str], subgroup_size: int | None, message: str
) -> None:
    body = lws_body(gated=False, annotations=annotations, subgroup_size=subgroup_size)
    with pytest.raises(kopf.AdmissionError) as error:
        Webhooks(StaticContext()).gate_owner(LwsKind())(body=kopf.Body(body), patch=kopf.Patch())
    assert message in str(error.value)


def test_an_lws_with_a_bad_key_made_around_the_webhook_is_said_invalid_and_the_others_are_placed() -> None:
    bad = lws_body("bad", annotations={"phalanx.dev/topology-key": "bad key!"})
    good = lws_body("good", created="2026-11-30T11:05:00Z")
    pods = group_pods("bad", 0, 4) + group_pods("good", 0, 4)
    result = plan(owner_cluster([("LeaderWorkerSet", bad), ("LeaderWorkerSet", good)], pods), NOW)
    assert ("bad", "InvalidPolicy") in [
        (e.involved.name, e.reason) for e in result.actions if isinstance(e, PostEvent)
    ]
    assert sorted(releases(result)) == ["good-0", "good-0-1", "good-0-2", "good-0-3"]


def test_an_lws_of_a_system_priority_class_is_refused_and_said_invalid_if_made_around_the_webhook() -> None:
    """No PodGroup may carry a system class's priority (above 1000000000, as upstream's)."""
    body = lws_body(gated=False)
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = (
        "system-node-critical"
    )
    with pytest.raises(kopf.AdmissionError) as error:
        Webhooks(StaticContext()).gate_owner(LwsKind())(body=kopf.Body(body), patch=kopf.Patch())
    field = "spec.leaderWorkerTemplate.workerTemplate.spec.priorityClassName"
    assert f'{field}: "system-node-critical" is a system PriorityClass' in str(error.value)
    critical = lws_body("critical")
    critical["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = (
        "system-node-critical"
    )
    good = lws_body("good", created="2026-11-30T11:05:00Z")
    classes = [{"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000}]
    result = plan(
        cluster(
            owners=[("LeaderWorkerSet", critical), ("LeaderWorkerSet", good)],
            others=group_pods("critical", 0, 4) + group_pods("good", 0, 4),
            priority_classes=classes,
        ),
        NOW,
    )
    assert ("critical", "InvalidPolicy") in [
        (e.involved.name, e.reason) for e in result.actions if isinstance(e, PostEvent)
    ]
    assert sorted(releases(result)) == ["good-0", "good-0-1", "good-0-2", "good-0-3"]


def test_lws_annotations_are_read_without_surrounding_whitespace() -> None:
    spaced = {"phalanx.dev/topology-key": f" {NB} ", "phalanx.dev/topology-mode": "preferred "}
    Webhooks(StaticContext()).gate_owner(LwsKind())(
        body=kopf.Body(lws_body(gated=False, annotations=spaced)), patch=kopf.Patch()
    )
    result = plan(
        owner_cluster([("LeaderWorkerSet", lws_body(annotations=spaced))], group_pods("serve", 0, 4)), NOW
    )
    (group,) = [a.pod_group for a in result.actions if isinstance(a, CreatePodGroup)]
    constraints = group.spec.scheduling_constraints
    assert constraints is not None and constraints.topology and constraints.topology[0].key == NB
    assert len(releases(result)) == 4


# ---------------------------------------------------------------------- JobSet InOrder
def test_an_in_order_jobset_is_decided_whole_with_its_first_replicated_job_and_the_rest_follow() -> None:
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 3)),
        in_order=True,
        annotations={"phalanx.dev/topology-key": NB},
    )
    first = plan(owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0)]), NOW)
    assert list(releases(first)) == ["train-driver-0-0"]
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    nodes = {a.pod: a.node for a in root.admission.assignments}
    assert len(nodes) == 4 and len({BLOCK[n] for n in nodes.values()}) == 1
    groups = made_groups(first)
    driver = jobset_pod("train", "driver", 0, 0, gated=False, node=nodes["train-driver-0-0"])
    workers = [jobset_pod("train", "workers", 0, i, global_index=1) for i in range(3)]
    later = plan(owner_cluster([("JobSet", js)], [driver, *workers], groups=groups), NOW)
    slots = {k: v for k, v in nodes.items() if "-slot-" in k}
    assert sorted(releases(later).values()) == sorted(slots.values())


def test_an_in_order_jobsets_later_child_job_keeps_its_decision_from_one_write_while_its_pods_come() -> None:
    """The workers' PodGroup of an InOrder JobSet decided with its driver: its own decision (its slots, its
    block) is written once, with its status, and stays while its pods are still to come — not dropped by a
    second status write of the same pass (no pod of it held a node yet) and written again when they come."""
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 3)),
        in_order=True,
        annotations={"phalanx.dev/topology-key": NB},
    )
    first = plan(owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0)]), NOW)
    writes: dict[str, list[Any]] = {}
    for a in first.actions:
        if isinstance(a, (RecordAdmission, PatchStatus)):
            writes.setdefault(a.group.name, []).append(a)
    (workers_group,) = [g for g in writes if "workers" in g]
    (write,) = writes[workers_group]
    assert isinstance(write, RecordAdmission) and write.status is not None
    slots = {a.pod: a.node for a in write.admission.assignments}
    assert len(slots) == 3 and all("-slot-" in s for s in slots)
    assert (
        write.status.admission == write.admission and write.status.domain == BLOCK[next(iter(slots.values()))]
    )
    groups = made_groups(first)
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    driver_node = {a.pod: a.node for a in root.admission.assignments}["train-driver-0-0"]
    driver = jobset_pod("train", "driver", 0, 0, gated=False, node=driver_node)
    between = plan(owner_cluster([("JobSet", js)], [driver], groups=groups), NOW + dt.timedelta(seconds=5))
    groups = written(between, groups)
    (kept,) = [g for g in groups if g.name == workers_group]
    assert kept.status.admission == write.admission and kept.status.domain == write.status.domain
    workers = [jobset_pod("train", "workers", 0, i, global_index=1) for i in range(3)]
    later = plan(owner_cluster([("JobSet", js)], [driver, *workers], groups=groups), NOW)
    assert sorted(releases(later).values()) == sorted(slots.values())
    assert not [a for a in later.actions if isinstance(a, RecordAdmission) and a.group.name == workers_group]


def in_order_jobset_decided() -> tuple[dict[str, Any], list[int], list[Any]]:
    """A JobSet InOrder of a driver and 2 workers of 4 GPUs each, in nb-a (nb-b and n4 busy): decided with
    its driver's pod, the record moved to put the driver and slot 0 on n1, slot 1 on n2. Returns the
    JobSet, the busy nodes and its groups with that record."""
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 2)),
        in_order=True,
        gpus=4,
        annotations={"phalanx.dev/topology-key": NB},
    )
    busy = [4, 5, 6, 7, 8]
    first = plan(
        owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0, gpus=4)], busy=busy), NOW
    )
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    slot = sorted(a.pod for a in root.admission.assignments if "-slot-" in a.pod)
    assert len(slot) == 2
    return js, busy, recorded_on(made_groups(first), {"train-driver-0-0": "n1", slot[0]: "n1", slot[1]: "n2"})


@pytest.mark.parametrize("slot_node", ["tainted", "shrunk", "moved", "deleted"])
def test_an_in_order_jobset_whose_slot_no_longer_takes_its_worker_is_decided_again_in_its_own_room(
    slot_node: str,
) -> None:
    """The tree form of the LeaderReady row above: the driver (4 GPUs) runs on n1, the workers' slots are
    on n1 and n2; n2 is tainted (or deleted) when the workers come: the tree is decided again with its own
    held room given back — a worker on n1 and one on n3 — not requeued."""
    js, busy, groups = in_order_jobset_decided()
    driver = jobset_pod("train", "driver", 0, 0, gpus=4, gated=False, released_to="n1", node="n1")
    workers = [jobset_pod("train", "workers", 0, i, global_index=1, gpus=4) for i in range(2)]
    state = cluster(
        busy=busy,
        groups=groups,
        pods=[driver, *workers],
        others=[half_of("n3")],
        owners=[("JobSet", js)],
        nodes=nodes_with_n2(slot_node),
    )
    result = plan(state, NOW)
    assert not [a for a in result.actions if isinstance(a, DeletePod | SuspendJob)], "the tree was requeued"
    assert sorted(releases(result).values()) == ["n1", "n3"]


def test_a_staged_tree_decided_again_keeps_the_pods_released_into_their_slots_in_its_record() -> None:
    """The JobSet above with worker 0 already released into its slot on n1, worker 1 still gated when its
    slot's node n2 is tainted: the tree is decided again for worker 1 — and its new record still names
    worker 0 (by its own name now; the earlier record named its slot). A node soak saw the record lose it:
    the gang then ran whole with a record of three pods of four, so a later loss of that pod would not be
    seen as a loss (plan/lost.py reads the record)."""
    js, busy, groups = in_order_jobset_decided()
    workers_group = next(g.name for g in groups if g.name.endswith("-workers-0"))
    driver = jobset_pod("train", "driver", 0, 0, gpus=4, gated=False, released_to="n1", node="n1")
    w0 = jobset_pod(
        "train", "workers", 0, 0, global_index=1, gpus=4, gated=False, released_to="n1", node="n1"
    )
    w0["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(workers_group)
    w1 = jobset_pod("train", "workers", 0, 1, global_index=1, gpus=4)
    state = cluster(
        busy=busy,
        groups=groups,
        pods=[driver, w0, w1],
        others=[half_of("n3")],
        owners=[("JobSet", js)],
        nodes=nodes_with_n2("tainted"),
    )
    result = plan(state, NOW)
    assert releases(result) == {"train-workers-0-1": "n3"}
    again = next(
        a for a in result.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    assert {a.pod: a.node for a in again.admission.assignments} == {
        "train-driver-0-0": "n1",
        "train-workers-0-0": "n1",
        "train-workers-0-1": "n3",
    }


def test_written_keeps_what_a_plan_recorded() -> None:
    lws = lws_body(leader_ready=True)
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0)]), NOW)
    (group,) = made_groups(first)
    assert group.status.admission is not None
    assert written(first, [group])[0].status.admission == group.status.admission


# ---------------------------------------------------------------------- JobSet dependsOn Complete
def test_a_jobset_whose_first_stage_completes_keeps_its_decision_and_the_next_stage_goes_to_its_slots() -> (
    None
):
    """dependsOn Complete: the driver's child Job succeeds before the workers exist. Its leaf counts as
    placed (done), so the root keeps the recorded decision (and the workers' room held); the workers are
    released into their slots, never decided again, and the driver's group says its child Job succeeded."""
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 3)), annotations={"phalanx.dev/topology-key": NB}
    )
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "driver", "status": "Complete"}]
    first = plan(owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0)]), NOW)
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    nodes = {a.pod: a.node for a in root.admission.assignments}
    groups = made_groups(first)
    driver = jobset_pod("train", "driver", 0, 0, gated=False, node=nodes["train-driver-0-0"])
    driver["status"]["phase"] = "Succeeded"
    done = plan(owner_cluster([("JobSet", js)], [driver], groups=groups), NOW)
    statuses = {
        a.group.kind + ("-driver" if "driver" in a.group.name else ""): a.status
        for a in done.actions
        if isinstance(a, PatchStatus)
    }
    assert statuses["CompositePodGroup"].admission == root.admission  # the slots stay held
    driver_admitted = statuses["PodGroup-driver"].condition(c.ADMITTED)
    assert driver_admitted is not None and driver_admitted.reason == c.REASON_FINISHED
    assert driver_admitted.message == "the child Job succeeded"
    groups = written(done, groups)
    workers = [jobset_pod("train", "workers", 0, i, global_index=1) for i in range(3)]
    later = plan(owner_cluster([("JobSet", js)], [driver, workers[0]], groups=groups), NOW)
    slots = {k.rsplit("-", 1)[1]: v for k, v in nodes.items() if "-slot-" in k}
    assert releases(later) == {"train-workers-0-0": slots["0"]}
    groups = written(later, groups)
    w0 = jobset_pod("train", "workers", 0, 0, global_index=1, gated=False, released_to=slots["0"])
    workers_group = next(g.name for g in groups if g.name.endswith("-workers-0"))
    w0["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(workers_group)  # released
    last = plan(owner_cluster([("JobSet", js)], [driver, w0, *workers[1:]], groups=groups), NOW)
    assert releases(last) == {f"train-workers-0-{i}": slots[str(i)] for i in (1, 2)}
    assert not [
        a for a in last.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    ]


def test_a_running_lws_group_is_one_victim_of_a_higher_priority_job_taken_through_its_leader() -> None:
    """Its released pods carry Phalanx's pod-group label and no Job: still an owner's pods (not a hand-made
    group's, which are never preempted), so the group is a victim, taken whole by deleting its leader."""
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in (("low", 100), ("high", 1000))
    ]
    lws = lws_body(replicas=2, size=4)
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = "low"
    first = plan(
        owner_cluster([("LeaderWorkerSet", lws)], group_pods("serve", 0, 4) + group_pods("serve", 1, 4)), NOW
    )
    groups = made_groups(first)
    placed = releases(first)
    running = []
    for g in range(2):
        (group,) = [x.name for x in groups if x.name.endswith(f"-{g}-r1")]
        for w in range(4):
            name = f"serve-{g}" if w == 0 else f"serve-{g}-{w}"
            body = lws_pod("serve", g, w, node=placed[name], gated=False, pod_group=group)
            body["spec"]["priority"] = 100
            running.append(body)
    job = job_body("high", 2)
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    high = [pod_body("high", i, priority=1000) for i in range(2)]
    result = plan(
        cluster(
            [(job, group_of(job), high)],
            owners=[("LeaderWorkerSet", lws)],
            pods=running,
            groups=groups,
            priority_classes=classes,
        ),
        NOW,
    )
    deleted = [(a.pod.name, a.foreground) for a in result.actions if isinstance(a, DeletePod)]
    # one group, through its leader, in the foreground (DeletePod.foreground)
    assert deleted in ([("serve-0", True)], [("serve-1", True)]), deleted
    assert not [a for a in result.actions if isinstance(a, SuspendJob)]
    statuses = {a.group.name: a.status for a in result.actions if isinstance(a, PatchStatus)}
    preempting = [s.condition(c.ADMITTED) for n, s in statuses.items() if n.startswith("high")]
    assert preempting and preempting[0] is not None and preempting[0].reason == c.REASON_PREEMPTING


def test_workers_released_long_after_the_decision_get_their_own_bind_timeout() -> None:
    """LeaderReady: the leader took 3 minutes to become Ready, so its workers were made (and released into
    their slots) long after the decision. The bind timeout runs from each pod's own creation: a second after
    their release nothing is requeued; only if they stay unbound for the whole timeout is the group."""
    lws = lws_body(leader_ready=True, annotations={"phalanx.dev/topology-key": NB})
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0)]), NOW)
    (record,) = [a for a in first.actions if isinstance(a, RecordAdmission)]
    slots = {a.pod: a.node for a in record.admission.assignments}
    groups, name = made_groups(first), record.group.name
    leader = lws_pod(
        "serve", 0, 0, gated=False, released_to=slots["serve-0"], node=slots["serve-0"], pod_group=name
    )
    made = NOW + dt.timedelta(seconds=180)
    workers = [
        _born(
            lws_pod("serve", 0, w, gated=False, released_to=slots[f"{name}-slot-{w}"], pod_group=name),
            made.isoformat(),
        )
        for w in (1, 2, 3)
    ]
    for after, requeued in ((1, False), (BIND_TIMEOUT + 1, True)):
        result = plan(
            owner_cluster([("LeaderWorkerSet", lws)], [leader, *workers], groups=groups),
            made + dt.timedelta(seconds=after),
        )
        assert bool([a for a in result.actions if isinstance(a, DeletePod)]) is requeued, after


def recorded_on(groups: list[Any], nodes: dict[str, str]) -> list[Any]:
    """`groups` whose recorded decisions put each pod or slot they name on the node `nodes` gives it."""
    out = []
    for g in groups:
        if g.status.admission is None:
            out.append(g)
            continue
        moved = [Assignment(pod=a.pod, node=nodes.get(a.pod, a.node)) for a in g.status.admission.assignments]
        admission = g.status.admission.model_copy(update={"assignments": moved})
        out.append(with_status(g, g.status.model_copy(update={"admission": admission})))
    return out


def half_of(node: str) -> dict[str, Any]:
    """Someone else's pod taking 4 of the node's 8 GPUs."""
    body = pod_body("other", 9, node=node, gated=False, phase="Running", gpus=4)
    body["metadata"].update(name=f"half-{node}", labels={})
    return body


def nodes_with_n2(how: str) -> list[dict[str, Any]]:
    """The seed's nodes with n2 tainted NoSchedule, shrunk (6 of its 8 GPUs gone unhealthy: the device plugin
    reports 2 allocatable), or without n2 (deleted)."""
    nodes = [node_body(n) for n in NODES if not (how == "deleted" and n == "n2")]
    if how == "tainted":
        nodes[1]["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    if how == "shrunk":
        nodes[1]["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    if how == "moved":
        nodes[1]["metadata"]["labels"][NB] = "nb-b"
    return nodes


@pytest.mark.parametrize("slot_node", ["tainted", "shrunk", "moved", "deleted"])
def test_a_leader_ready_group_whose_slot_no_longer_takes_its_worker_is_decided_again_in_its_own_room(
    slot_node: str,
) -> None:
    """LeaderReady, 3 pods of 4 GPUs: the leader runs on n1, the decision holds slot 1 on n1 and slot 2 on n2.
    Then n2 is tainted (or deleted): the workers cannot all go where the decision says, so the group is
    decided again. The room held for its own slots is its own: counted as taken (n1 full), nothing would be
    left for two workers beside n3's 4 free GPUs and the group would be requeued — its running leader
    deleted; given back, worker 1 goes on n1, worker 2 on n3 (n4-n8 full). A slot on a deleted node also
    held room on a node the pass's snapshot does not have: every pass failed (KeyError) before this."""
    lws = lws_body(leader_ready=True, size=3, gpus=4, annotations={"phalanx.dev/topology-key": NB})
    busy = [4, 5, 6, 7, 8]
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0, gpus=4)], busy=busy), NOW)
    (record,) = [a for a in first.actions if isinstance(a, RecordAdmission)]
    name = record.group.name
    slots = {"serve-0": "n1", f"{name}-slot-1": "n1", f"{name}-slot-2": "n2"}
    assert set(slots) == {a.pod for a in record.admission.assignments}
    groups = recorded_on(made_groups(first), slots)
    leader = lws_pod("serve", 0, 0, gpus=4, gated=False, released_to="n1", node="n1", pod_group=name)
    workers = [lws_pod("serve", 0, w, gpus=4) for w in (1, 2)]
    state = cluster(
        busy=busy,
        groups=groups,
        pods=[leader, *workers],
        others=[half_of("n3")],
        owners=[("LeaderWorkerSet", lws)],
        nodes=nodes_with_n2(slot_node),
    )
    result = plan(state, NOW)
    assert not [a for a in result.actions if isinstance(a, DeletePod)], "the running group was requeued"
    assert releases(result) == {"serve-0-1": "n1", "serve-0-2": "n3"}
    (again,) = [a for a in result.actions if isinstance(a, RecordAdmission)]
    assert {a.pod: a.node for a in again.admission.assignments} == {
        "serve-0": "n1",
        "serve-0-1": "n1",
        "serve-0-2": "n3",
    }
    if slot_node == "deleted":  # worker 1 alone first: decided again too, slot 2 held on a node that exists
        alone = cluster(
            busy=busy,
            groups=groups,
            pods=[leader, workers[0]],
            others=[half_of("n3")],
            owners=[("LeaderWorkerSet", lws)],
            nodes=nodes_with_n2(slot_node),
        )
        result = plan(alone, NOW)
        assert releases(result) == {"serve-0-1": "n1"}
        (again,) = [a for a in result.actions if isinstance(a, RecordAdmission)]
        assert {a.pod: a.node for a in again.admission.assignments}[f"{name}-slot-2"] == "n3"


def test_an_lws_pod_labelled_into_a_hand_made_group_stays_its_lws_groups() -> None:
    """A template's `phalanx.dev/pod-group` label is refused at creation; an LWS made around the webhook
    with one still has its pods in its own group only: one unit, each pod released once (a hand-made
    group of that name would otherwise claim them too, and both would place them)."""
    labelled = lws_body(replicas=1, size=2, gated=False)
    labelled["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {"phalanx.dev/pod-group": "shared"}
    }
    with pytest.raises(
        kopf.AdmissionError, match=r"workerTemplate\.metadata\.labels\[phalanx\.dev/pod-group\]"
    ):
        Webhooks(StaticContext()).gate_owner(LwsKind())(body=kopf.Body(labelled), patch=kopf.Patch())
    shared = PodGroupRecord.from_body(
        {
            "metadata": {"name": "shared", "namespace": "ml", "uid": "uid-shared"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    pods = [lws_pod("serve", 0, w) for w in range(2)]
    for body in pods:
        body["metadata"]["labels"]["phalanx.dev/pod-group"] = "shared"
    result = plan(
        owner_cluster([("LeaderWorkerSet", lws_body(replicas=1, size=2))], pods, groups=[shared]), NOW
    )
    released = [a.pod.name for a in result.actions if isinstance(a, ReleasePod)]
    assert sorted(released) == ["serve-0", "serve-0-1"]


# ---------------------------------------------------------------------- minCount edited around the webhook
def _edited(groups: list[Any], min_counts: dict[str, int]) -> list[Any]:
    """The groups, with the minCount of those whose name ends in a key set as if edited by hand."""
    import dataclasses

    from phalanx.api.scheduling import SchedulingPolicy
    from phalanx.controller.model.records import PodGroupRecord

    out = []
    for g in groups:
        count = next((n for end, n in min_counts.items() if g.name.endswith(end)), None)
        if isinstance(g, PodGroupRecord) and count is not None:
            g = dataclasses.replace(
                g, spec=g.spec.model_copy(update={"scheduling_policy": SchedulingPolicy.of_gang(count)})
            )
        out.append(g)
    return out


@pytest.mark.parametrize(
    ("subgroup_size", "edits", "free", "released", "ignored"),
    [
        # Size 4, minCount edited to 1 (validate-podgroup fails open): one free node places nobody.
        (
            None,
            {"-0-r1": 1},
            1,
            0,
            ["-0-r1: spec.schedulingPolicy.gang.minCount 1 differs from 4"],
        ),
        (
            None,
            {"-0-r1": 1},
            8,
            4,
            ["-0-r1: spec.schedulingPolicy.gang.minCount 1 differs from 4"],
        ),
        (None, {"-0-r1": 4}, 1, 0, []),  # the size it was made with: nothing to say
        # With subgroups of 2, each subgroup's PodGroup keeps 2.
        (2, {"-s0": 1}, 1, 0, ["-s0: spec.schedulingPolicy.gang.minCount 1 differs from 2"]),
        (2, {"-s0": 1, "-s1": 1}, 8, 4, ["-s0: spec.schedulingPolicy", "-s1: spec.schedulingPolicy"]),
    ],
)
def test_an_lws_groups_gang_size_is_its_size_whatever_its_pod_group_was_edited_to(
    subgroup_size: int | None, edits: dict[str, int], free: int, released: int, ignored: list[str]
) -> None:
    lws = lws_body(replicas=1, size=4, subgroup_size=subgroup_size)
    pods = group_pods("serve", 0, 4)
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], pods, busy=range(1, 9)), NOW)
    groups = _edited(made_groups(first), edits)
    result = plan(
        owner_cluster([("LeaderWorkerSet", lws)], pods, groups=groups, busy=range(free + 1, 9)), NOW
    )
    assert len(releases(result)) == released
    said = [
        e.message for e in result.actions if isinstance(e, PostEvent) and e.reason == "ImmutableChangeIgnored"
    ]
    assert len(said) == len(ignored), said
    for part, message in zip(ignored, sorted(said), strict=True):
        assert part in message, message
        assert message.endswith(
            "which the LeaderWorkerSet's spec gives and Phalanx keeps (the gang sizes of a LeaderWorkerSet's "
            "groups follow its spec; recreate the LeaderWorkerSet to change them)"
        )


@pytest.mark.parametrize(
    ("kind", "owner", "pods"),
    [
        ("Job", job_body(labelled_late=True), [pod_body("train", i, gated=False) for i in range(4)]),
        ("LeaderWorkerSet", lws_body(gated=False), group_pods("serve", 0, 4)),  # lost its gate in an edit
    ],
)
def test_an_owner_whose_template_lacks_the_gate_is_said_not_gated_with_both_causes(
    kind: str, owner: dict[str, Any], pods: list[dict[str, Any]]
) -> None:
    state = (
        cluster([(owner, group_of(owner), pods)]) if kind == "Job" else owner_cluster([(kind, owner)], pods)
    )
    result = plan(state, NOW)
    said = [
        cond
        for a in result.actions
        if isinstance(a, PatchStatus)
        for cond in a.status.conditions
        if cond.reason == c.REASON_NOT_GATED
    ]
    assert said, [type(a).__name__ for a in result.actions]
    assert said[0].message.startswith(
        f"the {kind}'s pod template does not carry phalanx.dev/admission: the {kind} was labelled "
        "phalanx.dev/managed after its creation, or the gate was taken off its template by an edit made "
        "while Phalanx's webhooks were not answering"
    ), said[0].message


# ---------------------------------------------------------------------- a staged unit's lost pods (lost.py)
def in_order_jobset_running(gone_for: int) -> tuple[dict[str, Any], list[Any], dict[str, Any], list[Any]]:
    """A JobSet InOrder of a driver and 2 workers of 8 GPUs each in nb-a (nb-b busy), recorded with the
    driver on n3 and the workers' slots on n1 and n2, all three running there. Returns the JobSet, its
    groups as the pass `gone_for` seconds ago wrote them (all whole), the driver and the workers."""
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 2)),
        in_order=True,
        annotations={"phalanx.dev/topology-key": NB},
    )
    busy = [5, 6, 7, 8]
    first = plan(owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0)], busy=busy), NOW)
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    slot = sorted(a.pod for a in root.admission.assignments if "-slot-" in a.pod)
    groups = recorded_on(made_groups(first), {"train-driver-0-0": "n3", slot[0]: "n1", slot[1]: "n2"})
    workers_group = next(g.name for g in groups if g.name.endswith("-workers-0"))
    driver = jobset_pod("train", "driver", 0, 0, gated=False, released_to="n3", node="n3")
    driver_group = next(g.name for g in groups if g.name.endswith("-driver-0"))
    driver["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(driver_group)
    workers = []
    for i, node in enumerate(("n1", "n2")):
        w = jobset_pod("train", "workers", 0, i, global_index=1, gated=False, released_to=node, node=node)
        w["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(workers_group)
        w["status"]["phase"] = "Running"
        workers.append(w)
    driver["status"]["phase"] = "Running"
    whole = plan(
        owner_cluster([("JobSet", js)], [driver, *workers], groups=groups, busy=busy),
        NOW - dt.timedelta(seconds=gone_for + 30),
    )
    assert not releases(whole)
    return js, written(whole, groups), driver, workers


@pytest.mark.parametrize(
    ("case", "gone", "gone_for", "n4_busy", "requeued"),
    [
        ("past the grace, no room for the driver to come: requeued now", "n3", 31, True, True),
        ("within the grace: waits for its controller to make the driver again", "n3", 10, True, False),
        ("past the grace, room for the driver on n4: waits for it", "n3", 31, False, False),
        # A later stage's pod, released into its slot (the record names the slot): lost as well.
        ("past the grace, no room for worker 1 to come: requeued now", "n2", 31, True, True),
        ("past the grace, room for worker 1 on n4: waits for it", "n2", 31, False, False),
    ],
)
def test_an_in_order_jobset_that_lost_a_pod_while_its_second_stage_runs(
    case: str, gone: str, gone_for: int, n4_busy: bool, requeued: bool
) -> None:
    """A node of the JobSet goes while its workers run — the driver's n3, or worker 1's n2 — and its child
    Job's controller makes the pod again only after its backoff (10 s and more). Past the grace the pod to
    come is tried beside the running ones, as a Job's lost pods are (lost.py): with no room for it in nb-a
    the JobSet is requeued whole then, not once its replacement came and was refused. A node soak found the
    staged unit left out: it ran in part for the backoff past the grace."""
    js, groups, driver, workers = in_order_jobset_running(gone_for)
    pods = [p for p in [driver, *workers] if p["spec"]["nodeName"] != gone]
    busy = [5, 6, 7, 8, *([4] if n4_busy else [])]
    nodes = [node_body(n) for n in NODES if n != gone]
    went = NOW - dt.timedelta(seconds=gone_for)
    short = plan(cluster(busy=busy, groups=groups, pods=pods, owners=[("JobSet", js)], nodes=nodes), went)
    root = next(g for g in groups if isinstance(g, CompositePodGroupRecord))
    admitted = written(short, groups)
    status = next(g for g in admitted if g.name == root.name).status.condition(c.ADMITTED)
    assert status is not None and (status.status, status.reason) == (c.FALSE, c.REASON_WAITING_FOR_PODS), case
    assert not [a for a in short.actions if isinstance(a, SuspendJob | DeletePod)], case
    now = plan(cluster(busy=busy, groups=admitted, pods=pods, owners=[("JobSet", js)], nodes=nodes), NOW)
    suspends = [a for a in now.actions if isinstance(a, SuspendJob)]
    assert bool(suspends) == requeued, case
    if requeued:
        assert f"(after {gone_for} s)" in suspends[0].why, suspends[0].why
    else:
        assert not [a for a in now.actions if isinstance(a, DeletePod)], case
    if gone_for < 30:
        assert now.next_due == went + dt.timedelta(seconds=30), case


@pytest.mark.parametrize(
    ("case", "how", "child", "gone_for", "requeued"),
    [
        ("its child Job there, past the grace, no room for them: requeued now", "nodes", "made", 31, True),
        ("its child Job there, within the grace: waits", "nodes", "made", 10, False),
        # Not told from a stage not made yet: judged when the Job controller makes the pods again.
        ("no child Job seen: waits for the stage", "nodes", "absent", 31, False),
        ("its child Job being deleted (a JobSet restart): waits", "nodes", "deleting", 31, False),
        ("its pods evicted, their nodes fine: their held room waits for them", "evicted", "made", 31, False),
    ],
)
def test_an_in_order_jobset_whose_later_stage_is_lost_whole_is_judged_by_its_child_job(
    case: str, how: str, child: str, gone_for: int, requeued: bool
) -> None:
    """The JobSet above loses both workers — every pod of its second stage — with their nodes n1 and n2 while
    the driver runs on n3; n4 is the only free node left in nb-a. No pod says the workers' stage came, but
    its child Job does (cache/children.py): past the grace the workers still to come are tried beside the
    driver and, with no room for two, the JobSet is requeued whole then — not after the Job controller's
    backoff (10 s, 20 s, ...) and a refusal. Without the child Job (not seen, or being deleted) the stage is
    not told from one not made yet; with their nodes fine, their slots hold their room and count as
    admitted, so nothing waits on a grace."""
    js, groups, driver, _ = in_order_jobset_running(gone_for)
    gone = {"n1", "n2"} if how == "nodes" else set()
    nodes = [node_body(n) for n in NODES if n not in gone]
    busy = [5, 6, 7, 8]
    objects = (
        [] if child == "absent" else [("Job", child_job("train", "workers", 0, deleting=child == "deleting"))]
    )

    def at(when: dt.datetime, groups: list[Any]) -> Plan:
        state = cluster(
            busy=busy, groups=groups, pods=[driver], owners=[("JobSet", js)], nodes=nodes, objects=objects
        )
        return plan(state, when)

    went = NOW - dt.timedelta(seconds=gone_for)
    short = at(went, groups)
    root = next(g for g in groups if isinstance(g, CompositePodGroupRecord))
    admitted = written(short, groups)
    status = next(g for g in admitted if g.name == root.name).status.condition(c.ADMITTED)
    assert status is not None
    assert (status.status == c.FALSE) is (how == "nodes"), (case, status)
    now = at(NOW, admitted)
    suspends = [a for a in now.actions if isinstance(a, SuspendJob)]
    assert bool(suspends) == requeued, case
    if requeued:
        assert f"(after {gone_for} s)" in suspends[0].why, suspends[0].why


def settles_untouched(owners: list[Any], groups: list[Any], pods: list[Any], busy: list[int]) -> Plan:
    """An hour on, the unit plans nothing that moves a pod and asks for no timed pass; its Workload made
    (the cache had none), a pass an hour after that plans nothing at all. It is not skipped as settled: the
    room others leave on its slots' nodes says whether they still count as admitted."""
    result = plan(cluster(busy=busy, groups=groups, pods=pods, owners=owners), NOW + dt.timedelta(hours=1))
    assert not [a for a in result.actions if isinstance(a, SuspendJob | DeletePod | ReleasePod)]
    assert result.next_due is None
    (made,) = [a.workload for a in result.actions if isinstance(a, CreateWorkload)]
    workload = made.to_api()
    workload["metadata"]["uid"] = "wl-made"
    later = plan(
        cluster(
            busy=busy,
            groups=written(result, groups),
            pods=pods,
            owners=owners,
            objects=[("Workload", workload)],
        ),
        NOW + dt.timedelta(hours=2),
    )
    assert not later.actions
    return later


def test_an_in_order_jobsets_later_stage_still_to_come_is_no_loss() -> None:
    """The driver runs, the workers' child Job is not made yet (the driver not Ready): its slots in the
    record are pods still to come, their room held — nothing lost, so nothing is planned: the unit is never
    requeued, however long the driver takes, also with no room left beside the held slots."""
    js, groups, driver, _ = in_order_jobset_running(0)
    later = settles_untouched([("JobSet", js)], groups, [driver], [4, 5, 6, 7, 8])
    assert "JobSet/ml/train" not in later.settled


def test_a_leader_ready_groups_workers_still_to_come_are_no_loss() -> None:
    """The LWS form of the row above: the leader runs, its workers are not made yet (the leader not Ready),
    their slots held on n1 and n2 — one leaf holds both stages, so a slot is a loss only once a worker of
    it came, not because the leader runs. Nothing is planned: the group is never requeued."""
    lws = lws_body(leader_ready=True, size=3, annotations={"phalanx.dev/topology-key": NB})
    busy = [4, 5, 6, 7, 8]
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0)], busy=busy), NOW)
    (record,) = [a for a in first.actions if isinstance(a, RecordAdmission)]
    name = record.group.name
    groups = recorded_on(
        made_groups(first), {"serve-0": "n3", f"{name}-slot-1": "n1", f"{name}-slot-2": "n2"}
    )
    leader = lws_pod("serve", 0, 0, gated=False, released_to="n3", node="n3", pod_group=name)
    later = settles_untouched([("LeaderWorkerSet", lws)], groups, [leader], busy)
    assert not later.settled


def leader_ready_running() -> tuple[dict[str, Any], str, list[Any], list[dict[str, Any]]]:
    """A LeaderReady group of 3 pods of 8 GPUs in nb-a (nb-b busy), the leader on n3 and its workers in
    their slots on n1 and n2, all running (made in that order), its groups as a pass wrote them: the LWS,
    its PodGroup's name, the groups and the pods."""
    lws = lws_body(leader_ready=True, size=3, annotations={"phalanx.dev/topology-key": NB})
    busy = [5, 6, 7, 8]
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], [lws_pod("serve", 0, 0)], busy=busy), NOW)
    (record,) = [a for a in first.actions if isinstance(a, RecordAdmission)]
    name = record.group.name
    groups = recorded_on(
        made_groups(first), {"serve-0": "n3", f"{name}-slot-1": "n1", f"{name}-slot-2": "n2"}
    )
    on = {0: "n3", 1: "n1", 2: "n2"}
    pods = [lws_pod("serve", 0, w, gated=False, released_to=n, node=n, pod_group=name) for w, n in on.items()]
    for i, p in enumerate(pods):
        p["metadata"]["creationTimestamp"] = f"2026-11-30T11:0{i}:00Z"
    whole = plan(cluster(busy=busy, groups=groups, pods=pods, owners=[("LeaderWorkerSet", lws)]), NOW)
    assert not [a for a in whole.actions if isinstance(a, ReleasePod | DeletePod)]
    return lws, name, written(whole, groups), pods


@pytest.mark.parametrize(
    ("case", "gone", "n4_busy", "requeued"),
    [
        ("the leader's node went, no room for it: requeued", "n3", True, True),
        ("the leader's node went, room on n4: waits for it", "n3", False, False),
        ("worker 2's node went, no room for it: requeued", "n2", True, True),
        ("worker 2's node went, room on n4: waits for it", "n2", False, False),
    ],
)
def test_a_leader_ready_group_that_lost_a_pod_is_judged_past_the_grace(
    case: str, gone: str, n4_busy: bool, requeued: bool
) -> None:
    """The LWS form of the JobSet rows above (restartPolicy None: LWS makes the lost pod again, its group
    stays): a LeaderReady group of 3 pods of 8 GPUs, the leader on n3, the workers in their slots on n1 and
    n2, all running; a node goes. Past the grace the lost pod is tried beside the running ones: no room
    left in nb-a — the group is requeued (its leader deleted: LWS makes the group again)."""
    lws, name, groups, pods = leader_ready_running()
    busy = [5, 6, 7, 8]
    left = [p for p in pods if p["spec"]["nodeName"] != gone]
    busy += [4] if n4_busy else []
    nodes = [node_body(n) for n in NODES if n != gone]
    went = NOW + dt.timedelta(seconds=60)
    short = plan(
        cluster(busy=busy, groups=groups, pods=left, owners=[("LeaderWorkerSet", lws)], nodes=nodes), went
    )
    assert not [a for a in short.actions if isinstance(a, DeletePod)], case
    after = went + dt.timedelta(seconds=31)
    groups = written(short, groups)
    now = plan(
        cluster(busy=busy, groups=groups, pods=left, owners=[("LeaderWorkerSet", lws)], nodes=nodes), after
    )
    deleted = sorted((a.pod.name, a.foreground) for a in now.actions if isinstance(a, DeletePod))
    # LWS recreates a group whose leader is deleted (in the foreground); one without its leader goes pod
    # by pod
    through = [("serve-0", True)] if gone != "n3" else [("serve-0-1", False), ("serve-0-2", False)]
    assert deleted == (through if requeued else []), case
    if requeued:
        status = written_statuses(now)[name].condition(c.ADMITTED)
        assert status is not None and status.reason == c.REASON_REQUEUED, case
        assert "(after 31 s)" in status.message, status.message


@pytest.mark.parametrize(
    ("case", "how", "n4_busy", "gone_for", "requeued"),
    [
        ("being deleted on NotReady nodes, no room for them: requeued", "deleting", True, 31, True),
        ("being deleted on NotReady nodes, within the grace: waits", "deleting", True, 10, False),
        (
            "being deleted on NotReady nodes, n4 free, room for one of the two: requeued",
            "deleting",
            False,
            31,
            True,
        ),
        ("failed on NotReady nodes, no room: requeued", "failed", True, 31, True),
        # Workers of a leader before this one (the group made again) say nothing of this leader's.
        ("an earlier leader's workers being deleted: still to come", "older", True, 31, False),
    ],
)
def test_a_leader_ready_groups_workers_all_lost_but_still_terminating_are_judged_past_the_grace(
    case: str, how: str, n4_busy: bool, gone_for: int, requeued: bool
) -> None:
    """A LeaderReady group of 3 (the leader on n3, its workers in their slots on n1 and n2) whose two
    workers' nodes go NotReady: the workers are stuck terminating there (or failed), and LWS's worker
    StatefulSet makes no other until they are gone — which may be never. They are no members of the group
    (kinds/lws.py leaves them out), but they came (kinds/lws._gone_workers: Leaf.made), so their slots are
    lost, not still to come: past the grace they are tried beside the leader and, with no room for both in
    nb-a, the group is requeued (its leader deleted). Before, it waited with its leader alone, for ever."""
    lws, name, groups, pods = leader_ready_running()
    busy = [5, 6, 7, 8]
    for p in pods[1:]:
        if how == "failed":
            p["status"]["phase"] = "Failed"
        else:
            p["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
        if how == "older":
            p["metadata"]["creationTimestamp"] = "2026-11-30T10:00:00Z"
    nodes = [node_body(n) for n in NODES]
    for n in nodes[:2]:
        n["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    busy += [4] if n4_busy else []

    def at(when: dt.datetime, groups: list[Any]) -> Plan:
        return plan(
            cluster(busy=busy, groups=groups, pods=pods, owners=[("LeaderWorkerSet", lws)], nodes=nodes), when
        )

    went = NOW + dt.timedelta(seconds=60)
    short = at(went, groups)
    assert not [a for a in short.actions if isinstance(a, DeletePod)], case
    groups = written(short, groups)
    status = written_statuses(short)[name].condition(c.ADMITTED)
    assert status is not None and status.reason == c.REASON_WAITING_FOR_PODS, (case, status)
    now = at(went + dt.timedelta(seconds=gone_for), groups)
    deleted = sorted(a.pod.name for a in now.actions if isinstance(a, DeletePod))
    assert deleted == (["serve-0"] if requeued else []), case


@pytest.mark.parametrize(("n4_busy", "requeued"), [(False, False), (True, True)])
def test_a_staged_jobset_that_lost_its_first_stage_counts_its_own_held_slots_once(
    n4_busy: bool, requeued: bool
) -> None:
    """InOrder in three stages of one 8-GPU pod each: the driver on n3 and the workers on n1 run, the eval's
    child Job is not made yet, its slot held on n2. n3 goes. Past the grace the driver and the eval still to
    come are tried with the eval's held room given back (staging.lift_own_hold): with n4 free both fit (the
    driver on n4, the eval on n2), so the JobSet waits for its driver; counted twice, the eval's room would
    have left none and the JobSet been requeued."""
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, 1), ("eval", 1, 1)),
        in_order=True,
        annotations={"phalanx.dev/topology-key": NB},
    )
    busy: list[int | str] = [5, 6, 7, 8]
    first = plan(owner_cluster([("JobSet", js)], [jobset_pod("train", "driver", 0, 0)], busy=busy), NOW)
    root = next(
        a for a in first.actions if isinstance(a, RecordAdmission) and a.group.kind == "CompositePodGroup"
    )
    (w_slot,) = [a.pod for a in root.admission.assignments if "-workers-0-slot-" in a.pod]
    (e_slot,) = [a.pod for a in root.admission.assignments if "-eval-0-slot-" in a.pod]
    groups = recorded_on(made_groups(first), {"train-driver-0-0": "n3", w_slot: "n1", e_slot: "n2"})
    running = []
    for rjob, index, node in (("driver", 0, "n3"), ("workers", 1, "n1")):
        pod = jobset_pod("train", rjob, 0, 0, global_index=index, gated=False, released_to=node, node=node)
        group = next(g.name for g in groups if g.name.endswith(f"-{rjob}-0"))
        pod["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(group)
        pod["status"]["phase"] = "Running"
        running.append(pod)
    state = cluster(busy=busy, groups=groups, pods=running, owners=[("JobSet", js)])
    whole = plan(state, NOW)
    assert not [a for a in whole.actions if isinstance(a, ReleasePod | SuspendJob)]
    groups = written(whole, groups)
    busy += [4] if n4_busy else []
    nodes = [node_body(n) for n in NODES if n != "n3"]
    went = NOW + dt.timedelta(seconds=60)
    short = plan(
        cluster(busy=busy, groups=groups, pods=running[1:], owners=[("JobSet", js)], nodes=nodes), went
    )
    assert not [a for a in short.actions if isinstance(a, SuspendJob)]
    groups = written(short, groups)
    after = went + dt.timedelta(seconds=31)
    now = plan(
        cluster(busy=busy, groups=groups, pods=running[1:], owners=[("JobSet", js)], nodes=nodes), after
    )
    assert bool([a for a in now.actions if isinstance(a, SuspendJob)]) is requeued


@pytest.mark.parametrize("how", ["tainted", "shrunk", "cordoned", "filled"])
def test_a_later_stage_pod_lost_from_a_slot_whose_node_no_longer_takes_it_is_judged_from_the_loss(
    how: str,
) -> None:
    """The JobSet above, worker 1 lost from its slot on n2 while n2 stays in the cluster but no longer takes
    a pod like it (tainted NoExecute: the taint evicted it; its GPUs gone unhealthy; cordoned after a drain;
    or a pod Phalanx does not place took its room, as kube-scheduler knows nothing of held room): its slot
    holds room on a node its replacement cannot go to, so it is not counted as admitted — the root
    goes to WaitingForPods at the loss, and past the grace, with no room for worker 1 elsewhere in nb-a, the
    JobSet is requeued whole then, not after the backoff and a grace counted from its replacement's
    refusal."""
    js, groups, driver, workers = in_order_jobset_running(0)
    nodes = [node_body(n) for n in NODES]
    n2 = nodes[1]
    if how == "tainted":
        n2["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    elif how == "shrunk":
        n2["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    elif how == "cordoned":
        n2["spec"]["unschedulable"] = True
    pods = [driver, workers[0]]
    busy: list[int | str] = [4, 5, 6, 7, 8, *(["n2"] if how == "filled" else [])]
    went = NOW
    short = plan(cluster(busy=busy, groups=groups, pods=pods, owners=[("JobSet", js)], nodes=nodes), went)
    root = next(g for g in groups if isinstance(g, CompositePodGroupRecord))
    groups = written(short, groups)
    status = next(g for g in groups if g.name == root.name).status.condition(c.ADMITTED)
    assert status is not None and (status.status, status.reason) == (c.FALSE, c.REASON_WAITING_FOR_PODS), how
    assert "the room held for 1 pod(s) still to come is gone" in status.message, status.message
    after = went + dt.timedelta(seconds=31)
    now = plan(cluster(busy=busy, groups=groups, pods=pods, owners=[("JobSet", js)], nodes=nodes), after)
    (suspend,) = [a for a in now.actions if isinstance(a, SuspendJob)]
    assert "(after 31 s)" in suspend.why, suspend.why
