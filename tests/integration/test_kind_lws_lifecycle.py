"""A LeaderWorkerSet's life after its first placement, against the real LWS v0.8.0 controller: what an
inference user does to a running LWS. A rolling update (a template edited: LWS makes the groups again one at a
time, with a new template revision; also with maxSurge), scaling replicas up and down, a group restarted by
hand (its leader or a worker deleted), and the LWS deleted. Every group of every revision is bound whole or
not at all (`whole_lws_groups`: a pod watch, one gang per group index and revision), in one block when a
topology-key is set; Phalanx's objects follow the groups LWS has (those of an old revision, of a group scaled
away, of a deleted LWS go), and the statuses and events say so."""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.tools import fail_node, heal_node

from .kinds import (
    GATE,
    LWS_GROUP,
    LWS_REVISION,
    LWS_WORKER,
    LWSS,
    PHALANX_API,
    condition,
    events_of,
    gated,
    label_of,
    live,
    lws,
    lws_pods,
    owned,
    whole_lws_groups,
)
from .kube import NB_KEY, Namespace, bound, hold, node_labels, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale_watch import PodWatch

pytestmark = [pytest.mark.integration, pytest.mark.addons("lws")]

KEY = {"phalanx.dev/topology-key": NB_KEY}
OWNED_KINDS = ("podgroups", "compositepodgroups", "workloads")


def lws_path(ns: Namespace, name: str) -> str:
    return f"{LWSS.format(ns=ns.name)}/{name}"


def get_lws(ns: Namespace, name: str) -> dict[str, Any]:
    body: dict[str, Any] = ns.get(lws_path(ns, name))
    return body


def patch_lws(ns: Namespace, name: str, patch: dict[str, Any]) -> None:
    ns.api.request("PATCH", lws_path(ns, name), patch, "application/merge-patch+json")


def with_env(manifest: dict[str, Any], value: str) -> dict[str, Any]:
    """The manifest with an env var on its worker container: a new template revision."""
    out = copy.deepcopy(manifest)
    container = out["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["env"] = [{"name": "MODEL_VERSION", "value": value}]
    return out


def revisions(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["labels"].get(LWS_REVISION, "") for p in pods}


def group_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"][LWS_GROUP])


def by_group(pods: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        out.setdefault(group_of(pod), []).append(pod)
    return out


def phalanx_objects(ns: Namespace) -> dict[str, list[str]]:
    """Phalanx's objects in the namespace, by plural (only those with any)."""
    out: dict[str, list[str]] = {}
    for plural in OWNED_KINDS:
        items = ns.get(f"{PHALANX_API}/{plural}")["items"]
        if items:
            out[plural] = sorted(i["metadata"]["name"] for i in items)
    return out


def group_names(ns: Namespace, name: str, plural: str = "podgroups") -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in owned(ns, f"LeaderWorkerSet/{name}", plural)}


def settled(
    ns: Namespace,
    name: str,
    replicas: int,
    size: int,
    revision: str | None = None,
    *,
    after: str = "",
    plural: str = "podgroups",
) -> Any:
    """`replicas` groups of `size` pods bound, all of one revision (`revision` when given; not `after`), the
    LWS's status saying the same (every replica ready and updated), and one PodGroup per group (`plural`:
    one root CompositePodGroup, with subgroups), of that revision: the (group index -> pods, revision), or
    None."""
    pods = lws_pods(ns, name)
    revs = revisions(pods)
    if len(pods) != replicas * size or len(bound(pods)) != len(pods) or len(revs) != 1:
        return None
    (rev,) = revs
    if (revision is not None and rev != revision) or rev == after:
        return None
    status = get_lws(ns, name).get("status") or {}
    if not status.get("updatedReplicas") == status.get("readyReplicas") == status.get("replicas") == replicas:
        return None
    groups = by_group(pods)
    if sorted(groups) != list(range(replicas)):
        return None
    wanted = {f"-{g}-{rev}" for g in groups}
    names = group_names(ns, name, plural)
    if len(names) != replicas or {n[n.rindex("-", 0, n.rindex("-")) :] for n in names} != wanted:
        return None
    return groups, rev


def admitted_groups(ns: Namespace, name: str, count: int) -> Any:
    """`count` PodGroups of the LWS, every one Admitted=True and Running (written a pass after the binds)."""
    names = group_names(ns, name)
    ok = [
        g
        for g in names.values()
        if condition(g).get("status") == "True" and (g.get("status") or {}).get("phase") == "Running"
    ]
    return names if len(names) == count and len(ok) == count else None


def event_of(ns: Namespace, name: str, reason: str) -> dict[str, Any]:
    """The Event of that reason on the LWS ({} if none); Phalanx aggregates them (count, latest message)."""
    found = [e for e in events_of(ns, "LeaderWorkerSet", name) if e["reason"] == reason]
    assert len(found) <= 1, found
    return found[0] if found else {}


def said_made(ns: Namespace, name: str, groups: list[str]) -> dict[str, Any] | None:
    """The PodGroupCreated Event on the LWS once its message names every one of `groups`."""
    found = event_of(ns, name, "PodGroupCreated")
    return found if all(g in found.get("message", "") for g in groups) else None


def one_block_each(ns: Namespace, groups: dict[int, list[dict[str, Any]]]) -> dict[int, str]:
    labels = node_labels(ns.api)
    blocks = {g: {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in ps} for g, ps in groups.items()}
    assert all(len(b) == 1 for b in blocks.values()), blocks
    return {g: next(iter(b)) for g, b in blocks.items()}


def print_events(ns: Namespace) -> None:
    for e in ns.events():
        obj = e["involvedObject"]
        print(f"event {obj['kind']}/{obj['name']} {e['reason']} x{e.get('count')}: {e.get('message')}")


def diagnose(ns: Namespace, name: str) -> None:
    print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
    print(json.dumps(get_lws(ns, name).get("status"), indent=1)[:3000])
    print_events(ns)
    for plural in OWNED_KINDS:
        for item in ns.get(f"{PHALANX_API}/{plural}")["items"]:
            print(plural, item["metadata"]["name"], json.dumps(item.get("status"))[:1500])


def test_a_rolling_update_by_a_manifest_without_the_gate_remakes_each_group_gated_and_whole(
    kinds_ns: Namespace,
) -> None:
    """replicas 2, size 4, topology-key: each group fills a network block. The user replaces the LWS with
    their manifest, an env var added (as `kubectl replace`; the manifest never had Phalanx's gate). LWS
    remakes group 1, then group 0, with the new template revision: each new group is gated (the gate was
    put back into the templates), placed whole in one block, its PodGroup made (PodGroupCreated) and
    Admitted; the old revision's PodGroups go; the rollout completes."""
    ns, name = kinds_ns, "roll"
    manifest = lws(name, 4, replicas=2, annotations=KEY)
    try:
        with whole_lws_groups(ns, name, 4, NB_KEY) as watch:
            ns.create(manifest)
            first, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 4), timeout=120)
            one_block_each(ns, first)
            before = set(group_names(ns, name))
            body = with_env(manifest, "v2")
            body["metadata"]["resourceVersion"] = get_lws(ns, name)["metadata"]["resourceVersion"]
            ns.api.request("PUT", lws_path(ns, name), body)
            templates = get_lws(ns, name)["spec"]["leaderWorkerTemplate"]
            assert GATE in {g["name"] for g in templates["workerTemplate"]["spec"]["schedulingGates"]}
            groups, new = wait_for(
                "the rollout done: 2 groups of the new revision bound, one PodGroup each",
                lambda: settled(ns, name, 2, 4, after=old),
                timeout=150,
            )
            assert new != old
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        one_block_each(ns, groups)
        seen = sorted(g for g in watch.gangs if g.endswith(f"/{new}"))
        assert seen == [f"{name}/0/{new}", f"{name}/1/{new}"], seen
        names = wait_for("the new PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2))
        assert not before & set(names), (before, names)  # the old revision's groups are gone
        # One Event per reason on the LWS, counted (apply/events.py): a PodGroup made per group and revision,
        # 2 at the creation and 2 in the rollout, no more; the latest says a new revision's group.
        created = wait_for(
            "PodGroupCreated counted 4 times on the LWS",
            lambda: e if (e := event_of(ns, name, "PodGroupCreated")).get("count") == 4 else None,
        )
        assert new in created["message"], created
    except AssertionError:
        diagnose(ns, name)
        raise


def test_a_rolling_update_with_max_surge_places_the_surge_group_whole_and_deletes_its_podgroup_after(
    kinds_ns: Namespace,
) -> None:
    """replicas 2, size 2, maxSurge 1 (LWS v0.8.0's rollingUpdateConfiguration): the edit (a merge patch of
    the worker template) makes a surge group 2 of the new revision first, then remakes groups 1 and 0, then
    scales the surge group away. Every group of either revision is bound whole in one block; at the end two
    groups of the new revision run, each with its PodGroup, and the surge group's PodGroup is gone."""
    ns, name = kinds_ns, "surge"
    manifest = lws(name, 2, replicas=2, annotations=KEY)
    manifest["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 1},
    }
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY) as watch:
            ns.create(manifest)
            _, old = wait_for("2 groups running", lambda: settled(ns, name, 2, 2), timeout=120)
            container = with_env(manifest, "v2")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
            patch_lws(
                ns,
                name,
                {
                    "spec": {
                        "leaderWorkerTemplate": {
                            "workerTemplate": {"spec": {"containers": container["containers"]}}
                        }
                    }
                },
            )
            groups, new = wait_for(
                "the rollout done: 2 groups of the new revision bound, one PodGroup each",
                lambda: settled(ns, name, 2, 2, after=old),
                timeout=150,
            )
            assert new != old
        print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
        one_block_each(ns, groups)
        seen = sorted(g for g in watch.gangs if g.endswith(f"/{new}"))
        assert f"{name}/2/{new}" in seen, seen  # LWS surged: a third group of the new revision was made
        with watch.lock:
            surge = watch.gangs[f"{name}/2/{new}"]
            assert surge.ran is not None, "the surge group never ran whole"
        names = wait_for("the new PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2))
        assert not [n for n in names if f"-2-{new}" in n], names  # the surge group's PodGroup is gone
        assert phalanx_objects(ns)["podgroups"] == sorted(names)
    except AssertionError:
        diagnose(ns, name)
        raise


def test_scaling_an_lws_up_gangs_each_new_group_whole_and_down_deletes_the_removed_groups_podgroups(
    kinds_ns: Namespace,
) -> None:
    """size 2, topology-key, replicas 1 -> 5 on 8 nodes: LWS makes groups 1 to 4 at once; four groups are
    placed whole, each in one block, and one (whichever Phalanx saw last) waits, all its pods gated (none
    bound), its PodGroup saying why. Then 5 -> 2: LWS deletes groups 2 to 4; their PodGroups go, nothing
    of them is left, and groups 0 and 1 run (the waiting one placed whole if it was group 1)."""
    ns, name = kinds_ns, "scale"
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY):
            ns.create(lws(name, 2, replicas=1, annotations=KEY))
            _, rev = wait_for("1 group running", lambda: settled(ns, name, 1, 2), timeout=120)
            patch_lws(ns, name, {"spec": {"replicas": 5}})
            groups, waiting = wait_for(
                "4 groups running, 1 gated whole", lambda: four_run_one_waits(ns, name, rev), timeout=120
            )
            print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
            print(f"group {waiting[0]} waits:", condition(waiting[1])["message"])
            one_block_each(ns, {g: ps for g, ps in groups.items() if g != waiting[0]})
            patch_lws(ns, name, {"spec": {"replicas": 2}})
            groups, _ = wait_for("2 groups left", lambda: settled(ns, name, 2, 2, rev), timeout=120)
        one_block_each(ns, groups)
        names = wait_for("2 PodGroups Admitted and Running", lambda: admitted_groups(ns, name, 2))
        assert sorted(names) == phalanx_objects(ns)["podgroups"]
        assert sorted(n[n.rindex("-", 0, n.rindex("-")) :] for n in names) == [f"-0-{rev}", f"-1-{rev}"]
        assert not gated(ns.pods())
    except AssertionError:
        diagnose(ns, name)
        raise


def four_run_one_waits(ns: Namespace, name: str, rev: str) -> Any:
    """Groups 0 to 4 of 2 pods each, four of them bound whole and one all gated, its PodGroup Admitted=False
    Unschedulable: (group index -> pods, (the waiting index, its PodGroup)), or None."""
    pods = lws_pods(ns, name)
    groups = by_group(pods)
    if sorted(groups) != [0, 1, 2, 3, 4] or any(len(ps) != 2 for ps in groups.values()):
        return None
    waiting = [g for g, ps in groups.items() if len(gated(ps)) == 2 and not bound(ps)]
    if len(bound(pods)) != 8 or len(waiting) != 1:
        return None
    (index,) = waiting
    group = [g for g in owned(ns, f"LeaderWorkerSet/{name}") if f"-{index}-{rev}" in g["metadata"]["name"]]
    if not group or condition(group[0]).get("reason") != "Unschedulable":
        return None
    return groups, (index, group[0])


def test_deleting_an_lws_takes_every_phalanx_object_and_pod_with_it(kinds_ns: Namespace) -> None:
    """Two LWSs: `run` (replicas 2, size 4: both groups running on all 8 nodes) and `wait` (replicas 1,
    size 4: waiting, its pods gated). `wait` is deleted in the foreground, `run` in the background (kubectl's
    default): every PodGroup, CompositePodGroup and Workload of each goes with it (garbage collection), and
    every pod; nothing is left gated and Phalanx does not make their objects again."""
    ns = kinds_ns
    ns.create(lws("run", 4, replicas=2, annotations=KEY))
    wait_for("2 groups of run running", lambda: settled(ns, "run", 2, 4), timeout=120)
    ns.create(lws("wait", 4, replicas=1, subgroup_size=2, annotations=KEY))
    wait_for(
        "wait's group gated whole, its root Unschedulable",
        lambda: (
            len(gated(lws_pods(ns, "wait"))) == 4
            and any(
                condition(g).get("reason") == "Unschedulable"
                for g in owned(ns, "LeaderWorkerSet/wait", "compositepodgroups")
            )
        ),
        timeout=60,
    )
    made = phalanx_objects(ns)
    print(made)
    assert set(made) == set(OWNED_KINDS), made
    wanted = made["compositepodgroups"] + [n for n in made["podgroups"] if n.startswith("wait-")]
    said = wait_for(
        "PodGroupCreated on wait, naming its CompositePodGroup and its 2 PodGroups",
        lambda: said_made(ns, "wait", wanted),
    )
    print(said["message"])
    # Every Phalanx object the namespace ever has from now on, by uid (a watch each: one made and deleted
    # again between two reads is seen too).
    seen: list[str] = []
    watches = [
        PodWatch(
            ns.cluster,
            ns.name,
            lambda _kind, obj, _now: seen.append(
                f"{obj['kind']}/{obj['metadata']['name']}/{obj['metadata']['uid']}"
            ),
            f"apis/scheduling.phalanx.dev/v1beta1/{plural}",
        )
        for plural in OWNED_KINDS
    ]
    for watch in watches:
        watch.start()
    before = set(seen)
    assert len(before) == sum(len(names) for names in made.values()), (before, made)
    try:
        ns.api.request("DELETE", lws_path(ns, "wait"), {"propagationPolicy": "Foreground"})
        ns.api.request("DELETE", lws_path(ns, "run"), {"propagationPolicy": "Background"})
        wait_for(
            "both LWSs, their pods and every Phalanx object gone",
            lambda: not ns.get(LWSS)["items"] and not live(ns.pods()) and not phalanx_objects(ns),
            timeout=120,
        )
        assert all(w.thread.is_alive() for w in watches), [w.errors for w in watches]
        assert set(seen) == before, sorted(set(seen) - before)  # nothing made for an LWS being deleted
    except AssertionError:
        print(ns.where())
        print(phalanx_objects(ns))
        print_events(ns)
        raise
    finally:
        for watch in watches:
            watch.stop()


def remade(ns: Namespace, name: str, rev: str, before: set[str]) -> Any:
    """settled() with one group, every pod of it new (none of the uids `before`)."""
    found = settled(ns, name, 1, 2, rev)
    if not found or before & {p["metadata"]["uid"] for p in found[0][0]}:
        return None
    return found


def test_a_group_restarted_by_hand_is_made_again_whole_in_the_block_it_had(kinds_ns: Namespace) -> None:
    """replicas 1, size 2, topology-key. nb-a has one free node (three filled), so the group goes to nb-b.
    Then a node of nb-a frees: nb-a (2 free) is now the tighter fit for a new group of 2. The user deletes
    the leader: LWS makes the group again (gated), and Phalanx places it whole, back in nb-b, the block it had
    (its PodGroup's status.lastDomain: docs/integrations.md). Then the user deletes a worker: LWS
    (RecreateGroupOnPodRestart) deletes the leader and makes the whole group again: whole, in nb-b again."""
    ns, name = kinds_ns, "restart"
    ns.fill("was-worker", "was-worker2", "was-worker3")
    labels = node_labels(ns.api)
    try:
        with whole_lws_groups(ns, name, 2, NB_KEY):
            ns.create(lws(name, 2, replicas=1, annotations=KEY))
            groups, rev = wait_for("the group running", lambda: settled(ns, name, 1, 2), timeout=120)
            assert one_block_each(ns, groups) == {0: "nb-b"}
            (group,) = owned(ns, f"LeaderWorkerSet/{name}")
            ns.unfill("was-worker3")
            wait_for(
                "was-worker3 free",
                lambda: all(p["metadata"]["name"] != "filler-was-worker3" for p in ns.pods("app=filler")),
            )
            for victim in ("leader", "worker"):
                before = {p["metadata"]["uid"] for p in groups[0]}
                pod = next(
                    p
                    for p in groups[0]
                    if (p["metadata"]["labels"][LWS_WORKER] == "0") == (victim == "leader")
                )
                ns.delete_pod(pod["metadata"]["name"])
                groups, _ = wait_for(
                    f"the group made again after its {victim} was deleted, bound whole",
                    functools.partial(remade, ns, name, rev, before),
                    timeout=120,
                )
                print(ns.where(f"leaderworkerset.sigs.k8s.io/name={name}"))
                nodes = {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in groups[0]}
                assert nodes == {"nb-b"}, (victim, nodes)
        (again,) = wait_for(
            "its PodGroup Admitted and Running", lambda: admitted_groups(ns, name, 1)
        ).values()
        print(again["metadata"]["name"], again["metadata"]["uid"], group["metadata"]["uid"])
        assert again["metadata"]["name"] == group["metadata"]["name"]
    except AssertionError:
        diagnose(ns, name)
        raise


HOLD = "phalanx.dev/test-hold"  # a finalizer of the test's own, as another tool may keep on an LWS


def test_a_group_of_an_lws_being_deleted_that_loses_a_node_is_taken_down_not_left_split(
    kinds_ns: Namespace,
) -> None:
    """The user deletes a running LWS (background, kubectl's default) while another tool's finalizer holds
    it: its group runs on until the garbage collector takes it after the LWS. A node of the group fails and
    its pod is evicted; the group's StatefulSet makes it again, gated, and Phalanx places nothing for an LWS
    being deleted, so the three others would run split for as long as the finalizer holds. Phalanx deletes
    them at once (the leader among them) and says so on the LWS; nothing of the group runs again, and the
    group is never left bound in part (the pod watch). `restartPolicy: None`: with LWS's default
    (RecreateGroupOnPodRestart) LWS itself deletes the leader when a worker fails."""
    ns = kinds_ns
    ns.create(lws("held", 4, restart_policy="None", annotations=KEY))
    found = wait_for("the group running", lambda: settled(ns, "held", 1, 4), timeout=120)
    patch_lws(ns, "held", {"metadata": {"finalizers": [HOLD]}})
    failed = ""
    try:
        with whole_lws_groups(ns, "held", 4, NB_KEY):
            ns.api.request("DELETE", lws_path(ns, "held"), {"propagationPolicy": "Background"})
            wait_for(
                "the LWS being deleted", lambda: get_lws(ns, "held")["metadata"].get("deletionTimestamp")
            )
            hold("whole, left alone", lambda: len(bound(lws_pods(ns, "held"))) == 4, seconds=3)
            workers = [p for p in found[0][0] if p["metadata"]["labels"].get(LWS_WORKER) != "0"]
            failed = workers[0]["spec"]["nodeName"]
            fail_node(ns.api, failed, how="taint")
            wait_for("no pod of the group bound", lambda: not bound(lws_pods(ns, "held")), timeout=60)
            said = wait_for(
                "SplitWhileDeleting on the LWS",
                lambda: [
                    e for e in events_of(ns, "LeaderWorkerSet", "held") if e["reason"] == "SplitWhileDeleting"
                ],
            )
            assert "is being deleted and its gang runs short" in said[0]["message"], said
            hold("nothing of it bound again", lambda: not bound(lws_pods(ns, "held")), seconds=3)
    except AssertionError:
        print(ns.where())
        print_events(ns)
        raise
    finally:
        if failed:
            heal_node(ns.api, failed)
        patch_lws(ns, "held", {"metadata": {"finalizers": None}})
    wait_for(
        "the LWS, its pods and every Phalanx object gone",
        lambda: not ns.get(LWSS)["items"] and not live(ns.pods()) and not phalanx_objects(ns),
        timeout=120,
    )
