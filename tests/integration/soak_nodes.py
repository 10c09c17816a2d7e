"""Node failures at random under running and admitting gangs of every kind (the `nodes-kinds` soak).

Each round submits a mix of gang Jobs, JobSets, LeaderWorkerSets and TrainJobs (soak_kinds.py, on the real
JobSet, LWS and Trainer controllers), then fails nodes in one of five ways, drawn in a seeded cycle:

- `one`: a node that runs pods of a gang, once the round settled;
- `several`: two or three nodes at once, once settled;
- `domain`: every node of one network block at once (its gangs must go whole to the other block, or wait
  whole);
- `mid-admission`: the operator restarted with its pause between a recorded decision and the release
  (controller/apply/faults.py), and a node the decision names failed in that pause (tainted, not ready, shrunk
  or relabelled into another block): its pods are released to a failed node (released, not bound); the
  pause goes at the round's end with a kill -9 and a restart;
- `while-down`: the operator SIGKILLed at a random point of the round's admissions, a node of a gang (placed,
  or named by a decision) failed while it is down, sometimes another healed while down, then restarted.

A node fails in one of five ways (`HOWS`): a `NoExecute` taint (the taint manager evicts its pods at once; the
dev cluster's `fail-node --how taint`), `notready` (kwok stops its heartbeats and its `Ready` condition turns
False: the node controller taints it; its pods stay, tolerating `not-ready` for 300 s, and kwok no longer runs
anything new there), `delete` (the Node object is deleted; the pod garbage collector deletes its pods after
its 40 s quarantine, which the round waits for), `relabel` (its topology labels corrected: it moves to another
local block, of another network block or of its own; its pods stay, so a gang that runs there now spans two
domains as labelled, which nothing can undo — Phalanx decides what comes next as labelled now) or `shrink`
(some or all of its GPUs go unhealthy: its allocatable `nvidia.com/gpu` drops, as a device plugin reports it;
the kubelet keeps the pods there, so the node may hold more than it has now, and nothing new fits there until
they go; a pod released there before and not bound yet is refused by kube-scheduler). Healing undoes it (a
deleted node is made again, as `dev-cluster up` made it; a shrunk one gets its GPUs back; a relabelled one its
labels). The failed nodes are healed after the round settled with them failed; then it must settle again.

Checked at every poll, besides soak.py's safety (no node over capacity, one domain per gang and per part):

- a gang that runs in part (some pods bound, fewer than its size) and whose missing pods have no room in the
  domain its pods are in does so for at most `--node-failure-grace` plus `REQUEUE_SLACK` of the operator's
  running time (it must be requeued whole, or completed when room frees): `no_room_limit`;
- a gang that runs in part with room for its missing pods (its kind's controller has yet to make them again:
  the Job controller backs off 10 s, 20 s, 40 s... after each failed pod) does so for at most
  `PARTIAL_LIMIT` of the operator's running time;
- no pod is bound to a failed node later than `BIND_SLACK` after its failure (Phalanx released it there, or
  kube-scheduler bound it there, after the node was known to have failed) — to a shrunk one, none beyond
  the room it has left after the pods that were there before: `shrunk_room`;
- a gang with a pod on a node relabelled (moved, or moved back) is judged by the labels as they were: at
  each binding of one of its pods, the nodes of its pods bound so far were in one domain of its key (and of
  each part's slice key) as labelled then (`bound_across`; a binding within `BIND_SLACK` of a relabel of one
  of them is not judged: the watches);
- a requeue (a `Requeued` event, a requeue note, a bound pod taken away) only of a gang that had a pod on, or
  a decision naming, a failed node (`hit`): nothing else has a reason to be requeued.

Once settled (failed nodes still failed, then healed): every gang fully admitted (a gang that lost pods: all
its pods in one domain of its key, the one its group records; the others where their decision says) or fully
gated, none waiting that fits the room left on the schedulable nodes, nothing in flight. At the end every
gang that can ever fit was admitted once (soak.py's drain). An owner its controller failed (a Job past its
`backoffLimit` after evictions) is counted and deleted.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from phalanx.controller.apply import faults
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.devcluster.tools import fail_node, heal_node
from phalanx.devcluster.topology import SIMULATED_LABEL, seed_topology

from .gangs import LWS_GROUP, LWS_NAME, Gang, Part, pod_requests, quantity, terminal, usage_node
from .invariants import World, owner_failed, room_for_missing, short_by
from .kube import LB_KEY, NB_KEY, Namespace
from .soak import POLL, InvariantError, Soak, mid_admission, owners

SCENARIOS = ("one", "several", "domain", "mid-admission", "while-down")
HOWS = ("taint", "taint", "notready", "delete", "shrink", "relabel")
TOPOLOGY_KEYS = (NB_KEY, LB_KEY)
TAKES_PODS = ("shrink", "relabel")  # failures after which a node may still take new pods
GPU = "nvidia.com/gpu"
# Seconds past the grace: the suspension and the pods' deletion on a busy machine (the pass runs when the
# grace ends: Plan.next_due). Phalanx counts the grace from when the gang went short, and judges the pods its
# controller has not made again yet by their template (plan/lost.py); before that it counted from the
# replacement's refusal, after the Job controller's backoff (10 s, 20 s, ...), and gangs ran in part 19-30 s
# at a grace of 5 s; then 9.3 s while the requeue waited for a resync pass; 5.0 s since it does not.
REQUEUE_SLACK = 10.0
PARTIAL_LIMIT = 150.0  # a gang running in part with room for its missing pods (its controller's backoff)
BIND_SLACK = 6.0  # after a failure: the node controller's taint (--node-monitor-period 2 s), watches
SETTLE_TIMEOUT = 240.0
ORPHANS_TIMEOUT = 90.0  # the pod garbage collector deletes a deleted node's pods after 40 s
PAUSE = 4.0  # seconds between a recorded decision and its release, in `mid-admission` rounds


@dataclass
class Failure:
    how: str
    at: float  # time.time() of the failure
    body: dict[str, Any] | None = None  # a deleted node's manifest, to make it again
    allocatable: dict[str, Any] | None = None  # a shrunk node's allocatable before, to give it back
    labels: dict[str, str] | None = None  # a relabelled node's topology labels before, to give them back


@dataclass
class NodeStats:
    scenarios: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # nodes failed, by how
    hit: Counter[str] = field(
        default_factory=Counter
    )  # gangs with a pod on / a decision naming a failed node
    requeued: set[str] = field(default_factory=set)  # hit gangs requeued (seen)
    released_to_failed: int = 0  # mid-admission rounds whose paused decision named the node failed
    failed_owners: set[str] = field(default_factory=set)  # owners their controller failed
    worst_no_room: float = 0.0  # the longest a gang ran in part with no room for the rest (operator up)
    worst_no_room_gang: str = ""  # which gang, and how it looked then
    worst_partial: float = 0.0  # the longest a gang ran in part (operator up)
    worst_partial_gang: str = ""  # which gang, and how it looked then

    def lines(self) -> list[str]:
        return [
            "node-failure rounds: " + ", ".join(f"{k} {v}" for k, v in sorted(self.scenarios.items())),
            f"nodes failed: {sum(self.failures.values())} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items()))
            + ")",
            f"gangs hit (a pod on, or a decision naming, a failed node): {sum(self.hit.values())} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(self.hit.items()))
            + f"); of them requeued whole: {len(self.requeued)}",
            f"mid-admission failures (the node a paused decision named): {self.released_to_failed}",
            f"longest run in part with no room for the rest: {self.worst_no_room:.1f} s "
            f"({self.worst_no_room_gang or '-'}); "
            f"longest run in part: {self.worst_partial:.1f} s "
            f"(operator up; {self.worst_partial_gang or '-'})",
            f"owners failed by their controller after evictions (deleted): {sorted(self.failed_owners)}",
        ]


def fail(api: Any, node: str, how: str, rng: random.Random | None = None) -> Failure:
    """Fail `node` the way `how` says (module docstring); `rng` draws how many GPUs a shrunk node keeps, and
    where a relabelled one goes."""
    failure = Failure(how, time.time())
    if how == "relabel":
        labels = api.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
        failure.labels = {k: labels[k] for k in TOPOLOGY_KEYS if k in labels}
        blocks = sorted({tuple(n.labels.get(k, "") for k in TOPOLOGY_KEYS) for n in seed_topology()})
        to = (rng or random.Random(0)).choice([b for b in blocks if b != tuple(failure.labels.values())])
        patch = {"metadata": {"labels": dict(zip(TOPOLOGY_KEYS, to, strict=True))}}
        api.request("PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")
        failure.at = time.time()
    elif how == "shrink":
        allocatable = api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]
        gpus = quantity(allocatable.get(GPU, 0), GPU)
        keep = (rng or random.Random(0)).randint(0, max(0, gpus - 1))
        failure.allocatable = dict(allocatable)
        api.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"allocatable": {GPU: str(keep)}}},
            "application/merge-patch+json",
        )
        failure.at = time.time()
    elif how == "taint":
        fail_node(api, node, how="taint")
    elif how == "notready":
        fail_node(api, node, how="heartbeat")  # kwok lets go of it
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "soak: node failed",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        api.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"conditions": [ready]}},
            "application/strategic-merge-patch+json",
        )
    elif how == "delete":
        failure.body = next(n.manifest() for n in seed_topology() if n.name == node)
        api.request("DELETE", f"/api/v1/nodes/{node}")
    else:
        raise ValueError(how)
    return failure


def heal(api: Any, node: str, failure: Failure) -> None:
    if failure.labels is not None:
        patch = {"metadata": {"labels": failure.labels}}
        api.request("PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")
        return
    if failure.allocatable is not None:
        api.request(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": {"allocatable": failure.allocatable}},
            "application/merge-patch+json",
        )
        return
    if failure.body is None:
        heal_node(api, node)
        return
    body = failure.body
    try:
        api.request("POST", "/api/v1/nodes", body)
    except ApiError as e:
        if e.status != 409:
            raise
    api.request(
        "PATCH", f"/api/v1/nodes/{node}/status", {"status": body["status"]}, "application/merge-patch+json"
    )


def shrunk_room(world: World, name: str, failure: Failure) -> list[str]:
    """A shrunk node holds the pods bound there before its shrink (and `BIND_SLACK` after: the watches) even
    beyond what it has now; a pod bound since must fit beside them in what it has now: no GPU it lost was
    given to a new pod."""
    node = world.nodes.get(name)
    if node is None:
        return []
    before: Counter[str] = Counter()
    since: Counter[str] = Counter()
    for pod in world.pods:
        if pod["spec"].get("nodeName") != name or terminal(pod):
            continue
        at = _scheduled_at(pod)
        side = since if at is not None and at > failure.at + BIND_SLACK else before
        side.update(pod_requests(pod))
    return [
        f"node {name} shrank to {node.allocatable.get(resource, 0)} {resource} under {before[resource]}, "
        f"and pods bound since take {amount} more"
        for resource, amount in since.items()
        if amount and before[resource] + amount > node.allocatable.get(resource, 0)
    ]


Relabels = dict[str, list[tuple[float, dict[str, str]]]]  # node -> [(since when, its topology labels)]


def labels_at(
    world: World, node: str, at: float, relabels: Relabels, made: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The node's labels at time `at`: a relabelled node's as they were then (`relabels`, whose first entry
    is what it had before), another's as they are (or as it was made, `made`, once deleted)."""
    now = world.nodes[node].labels if node in world.nodes else made.get(node, {})
    history = relabels.get(node)
    if not history:
        return now
    then = [labels for t, labels in history if t <= at]
    return {**now, **(then[-1] if then else history[0][1])}


def bound_across(world: World, gang: Gang, relabels: Relabels, made: dict[str, dict[str, str]]) -> list[str]:
    """At each binding of a pod of the gang, the nodes of its pods bound so far were in one domain of its key
    (and each part's of its slice key) as labelled then — not judged within BIND_SLACK of a relabel of one
    of them (the watches)."""
    bound = sorted(
        (at, p["metadata"]["uid"], p["spec"]["nodeName"])
        for p in gang.placed
        if p["spec"].get("nodeName") and (at := _scheduled_at(p)) is not None
    )
    parts: list[tuple[str | None, Part | None]] = [(gang.key, None)]
    parts += [(gang.slice_key, part) for part in gang.parts]
    for i, (at, _, _) in enumerate(bound):
        so_far = {uid: node for _, uid, node in bound[: i + 1]}
        near = (t for node in set(so_far.values()) for t, _ in relabels.get(node, [])[1:])
        if any(abs(t - at) <= BIND_SLACK for t in near):
            continue
        for key, part in parts:
            if not key:
                continue
            mine = set(so_far) if part is None else {p["metadata"]["uid"] for p in part.pods}
            values = {
                labels_at(world, so_far[u], at, relabels, made).get(key, "-") for u in mine & set(so_far)
            }
            if len(values) > 1:
                what = gang.name if part is None else f"{gang.name}: {part.name}"
                when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S")
                return [f"{what}: at a binding ({when}) its pods were in {sorted(values)} of {key}"]
    return []


def orphans(pods: list[dict[str, Any]], failed: dict[str, Failure]) -> list[str]:
    """The pods still bound to a deleted node (the pod garbage collector deletes them after its 40 s),
    less those whose deletion waits on their dependents (finalizer `foregroundDeletion`: an LWS leader
    deleted in the foreground, by Phalanx or by LWS's RecreateGroupOnPodRestart) while a pod of their LWS
    group is stuck being deleted on a NotReady node: no kubelet confirms it until the heal, and the garbage
    collector removes the leader only after it (Kubernetes' own order, not a pod left behind)."""
    deleted = {n for n, f in failed.items() if f.how == "delete"}
    notready = {n for n, f in failed.items() if f.how == "notready"}

    def group(p: dict[str, Any]) -> tuple[str, str, str] | None:
        labels = p["metadata"].get("labels") or {}
        name = labels.get(LWS_NAME)
        return (p["metadata"].get("namespace", ""), name, labels.get(LWS_GROUP, "")) if name else None

    stuck = {
        g
        for p in pods
        if p["metadata"].get("deletionTimestamp")
        and p["spec"].get("nodeName") in notready
        and (g := group(p)) is not None
    }
    return sorted(
        f"{p['metadata']['name']}@{p['spec']['nodeName']}"
        for p in pods
        if p["spec"].get("nodeName") in deleted
        and not (
            p["metadata"].get("deletionTimestamp")
            and "foregroundDeletion" in (p["metadata"].get("finalizers") or [])
            and group(p) in stuck
        )
    )


def excused(world: World, reasons: list[str], failed: dict[str, Failure]) -> list[str]:
    """`reasons` the world is not settled, less those of pods stuck on failed nodes. A pod being deleted on
    a NotReady or deleted node stays so until the node heals (no kubelet confirms it; the pod garbage
    collector's 40 s for a deleted one), and a gang whose every live pod is such a pod waits for it —
    requeued whole (suspended), or taken back by deleting its pods (an LWS group's leader deleted, by
    Phalanx or by LWS's RecreateGroupOnPodRestart: LWS makes the group again once it is gone): settled for
    now (judged again once healed)."""
    stuck = {
        p["metadata"]["uid"]
        for p in world.pods
        if p["metadata"].get("deletionTimestamp")
        and (f := failed.get(p["spec"].get("nodeName") or "")) is not None
        and f.how in ("notready", "delete")
    }
    if not stuck:
        return reasons
    deleting = [p for p in world.pods if p["metadata"].get("deletionTimestamp")]
    waiting_for_stuck = [
        f"{g.name}: "
        for g in world.gangs.values()
        if g.live and all(p["metadata"]["uid"] in stuck for p in g.live)
    ]
    kept = []
    for reason in reasons:
        if reason == "pods terminating" and all(p["metadata"]["uid"] in stuck for p in deleting):
            continue
        if any(reason.startswith(gang) for gang in waiting_for_stuck):
            continue
        kept.append(reason)
    return kept


def _scheduled_at(pod: dict[str, Any]) -> float | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            if stamp:
                return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


class NodeSoak(Soak):
    """soak.Soak with node-failure rounds (module docstring); always with every kind."""

    def __init__(
        self,
        ns: Namespace,
        operator: OperatorProcess,
        seed: int,
        grace: float,
        log: Callable[[str], None] = print,
    ) -> None:
        super().__init__(ns, operator, seed, log, kinds=True)
        self.grace = grace
        self.settle_timeout = SETTLE_TIMEOUT  # a pod stuck on a NotReady node, a Job's backoff
        self.first_kinds = ["Job", "JobSet", "LeaderWorkerSet", "TrainJob"]  # each kind in every run
        self.failed: dict[str, Failure] = {}
        self.hit: set[str] = set()  # names a hit gang's requeue may carry: gang, owner, holder
        self.hit_gangs: set[str] = set()
        self.partial_since: dict[str, float] = {}  # gang -> monotonic time it began to run in part
        self.no_room_since: dict[str, float] = {}
        self.up_since = time.monotonic()
        self.scenarios: list[str] = []
        self.nstats = NodeStats()
        # node -> [(time, its topology labels from then)], the first entry those it had before: every node
        # relabelled so far in the run (a gang on one is judged by the labels as they were: bound_across)
        self.relabels: Relabels = {}
        self.seed_labels = {n.name: dict(n.labels) for n in seed_topology()}

    # ------------------------------------------------------------------ observation
    def safety(self, world: World) -> list[str]:
        """soak.py's safety; a shrunk node judged by `shrunk_room`, a gang on a relabelled node by
        `bound_across`."""
        shrunk = {n: f for n, f in self.failed.items() if f.how == "shrink"}
        moved = set(self.relabels)
        problems = world.safety(shrunk=set(shrunk), relabelled=moved)
        problems += [p for name, failure in shrunk.items() for p in shrunk_room(world, name, failure)]
        for gang in world.gangs.values():
            if any(usage_node(p) in moved for p in gang.placed):
                problems += bound_across(world, gang, self.relabels, self.seed_labels)
        return problems

    def world(self) -> World:
        world = super().world()
        self.mark_hits(world)
        self.bound_to_failed(world)
        self.partials(world)
        return world

    def mark_hits(self, world: World, failing: set[str] | None = None) -> None:
        """A gang with a pod on a failed node (`failing`: about to fail), or a decision naming one, may lose
        pods and be requeued. A pod the failure already ended (evicted: Failed) counts."""
        failed = set(self.failed) | (failing or set())
        if not failed:
            return
        for gang in world.gangs.values():
            nodes = {usage_node(p) for p in gang.live} | {p["spec"].get("nodeName") for p in gang.pods}
            nodes |= {a.get("node") for a in (gang.admission or {}).get("assignments") or []}
            if nodes & failed and gang.name not in self.hit_gangs:
                self.hit_gangs.add(gang.name)
                self.nstats.hit[gang.kind] += 1
            if gang.name in self.hit_gangs:
                self.hit |= {gang.name, gang.owner_name}
                if gang.holder is not None:
                    self.hit.add(gang.holder["metadata"]["name"])

    def bound_to_failed(self, world: World) -> None:
        for gang in world.gangs.values():
            for pod in gang.live:
                node = pod["spec"].get("nodeName")
                failure = self.failed.get(node or "")
                if failure is None or failure.how in TAKES_PODS or pod["metadata"].get("deletionTimestamp"):
                    continue  # a shrunk or relabelled node may still take pods: shrunk_room, bound_across
                at = _scheduled_at(pod)
                if at is not None and at > failure.at + BIND_SLACK:
                    raise InvariantError(
                        f"{gang.name}: pod {pod['metadata']['name']} bound to {node} "
                        f"{at - failure.at:.0f} s after it failed ({failure.how})"
                    )

    def partials(self, world: World) -> None:
        """The bounded windows of a gang running in part (module docstring), counted while the operator
        runs."""
        now = time.monotonic()
        up = self.operator_alive()
        if not up:
            self.up_since = now + 3600  # counted again from the next start
        for table in (self.partial_since, self.no_room_since):
            for name in [n for n in table if n not in world.gangs]:
                del table[name]
        for gang in world.gangs.values():
            short = short_by(gang) > 0
            no_room = short and not room_for_missing(world, gang)
            for table, on in ((self.partial_since, short), (self.no_room_since, no_room)):
                if not on:
                    table.pop(gang.name, None)
                else:
                    table.setdefault(gang.name, now)
            if not up:
                continue
            if gang.name in self.partial_since:
                ran = now - max(self.partial_since[gang.name], self.up_since)
                if ran > self.nstats.worst_partial:
                    self.nstats.worst_partial = ran
                    self.nstats.worst_partial_gang = f"{gang.name}: {self.brief(gang)}"
                if ran > PARTIAL_LIMIT:
                    raise InvariantError(f"{gang.name}: ran in part for {ran:.0f} s: {self.brief(gang)}")
            if gang.name in self.no_room_since:
                ran = now - max(self.no_room_since[gang.name], self.up_since)
                if ran > self.nstats.worst_no_room:
                    self.nstats.worst_no_room = ran
                    self.nstats.worst_no_room_gang = f"{gang.name}: {self.brief(gang)}"
                if ran > self.no_room_limit:
                    raise InvariantError(
                        f"{gang.name}: ran in part with no room for its {short_by(gang)} missing pod(s) in "
                        f"its domain for {ran:.0f} s (grace {self.grace:.0f} s): {self.brief(gang)}"
                    )

    @property
    def no_room_limit(self) -> float:
        return self.grace + REQUEUE_SLACK

    def brief(self, gang: Gang) -> str:
        pods = [
            f"{p['metadata']['name']}@{p['spec'].get('nodeName') or '-'}"
            + ("(deleting)" if p["metadata"].get("deletionTimestamp") else "")
            for p in gang.live
        ]
        return f"size {gang.size}, pods {pods}, failed nodes {sorted(self.failed)}"

    def requeues(self) -> list[str]:
        """Only a gang a node failure touched may be requeued (or lose a bound pod)."""
        for event in self.ns.events("reason=Requeued"):
            involved = event["involvedObject"]
            self.requeued.add(f"{involved['kind']}/{involved['name']}")
        unexplained = []
        for what in sorted(self.requeued):
            name = what.split("/", 1)[1].split(" (", 1)[0]
            if name in self.hit:
                if name in self.hit_gangs:
                    self.nstats.requeued.add(name)
            else:
                unexplained.append(what)
        return [f"requeued although no node of it failed: {unexplained}"] if unexplained else []

    def unsettled(self, world: World) -> list[str]:
        """With owners their controller failed deleted, and pods stuck on failed nodes excused."""
        self.drop_failed_owners(world)
        return self.excused(world, world.unsettled(self.preemption))

    def settled_problems(self, world: World) -> list[str]:
        """A gang that lost pods is judged by its domain (a pod made again in place is recorded alone, so its
        decision no longer names all)."""
        moved = {
            g.name for g in world.gangs.values() if any(usage_node(p) in self.relabels for p in g.placed)
        }
        return [
            p
            for p in world.settled_problems()
            if not any(p.startswith(f"{g}: bound {{") for g in self.hit_gangs)
            and not any(p.startswith(f"{g}: bound in {{") for g in moved)  # bound_across judged them
        ]

    def excused(self, world: World, reasons: list[str]) -> list[str]:
        return excused(world, reasons, self.failed)

    def drop_failed_owners(self, world: World) -> None:
        for owner, gangs in owners(world).items():
            if owner not in self.deleted and any(owner_failed(g) for g in gangs):
                self.nstats.failed_owners.add(owner)
                self.delete(owner)

    # ------------------------------------------------------------------ actions
    def start(self, env: Any = None) -> bool:
        started = super().start(env)
        self.up_since = time.monotonic()
        return started

    def fail(self, nodes: list[str], how: str | None = None) -> None:
        self.mark_hits(self.world(), set(nodes))
        for node in nodes:
            if node in self.failed:
                continue
            chosen = how or self.rng.choice(HOWS)
            failure = self.failed[node] = fail(self.ns.api, node, chosen, self.rng)
            if failure.labels is not None:
                history = self.relabels.setdefault(node, [(0.0, failure.labels)])
                labels = self.ns.api.get(f"/api/v1/nodes/{node}")["metadata"]["labels"]
                history.append((failure.at, {k: labels[k] for k in TOPOLOGY_KEYS if k in labels}))
            self.nstats.failures[chosen] += 1
        self.world()  # mark the gangs hit at once

    def heal(self, nodes: list[str] | None = None) -> None:
        for node in sorted(self.failed) if nodes is None else nodes:
            failure = self.failed.pop(node)
            heal(self.ns.api, node, failure)
            if failure.labels is not None:
                self.relabels[node].append((time.time(), failure.labels))

    def heal_all(self) -> None:
        """Every node failed so far healed, and back Ready and schedulable (the cluster is shared)."""
        self.heal()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            nodes = World.read(self.ns.api, self.ns.name, kinds=True).nodes
            managed = all(n.labels.get(SIMULATED_LABEL) for n in nodes.values())
            whole = all(
                n.allocatable.get(GPU, 0) == quantity(spec.capacity.get(GPU, 0), GPU)
                and all(n.labels.get(k) == spec.labels.get(k) for k in TOPOLOGY_KEYS)
                for spec in seed_topology()
                if (n := nodes.get(spec.name)) is not None
            )
            if (
                len(nodes) == len(seed_topology())
                and managed
                and whole
                and all(n.schedulable for n in nodes.values())
            ):
                return
            time.sleep(POLL)
        raise InvariantError("the healed nodes not Ready, schedulable, whole and labelled as made after 90 s")

    def nodes_in_use(self, world: World) -> list[str]:
        """Nodes a gang of the namespace runs on, or a decision names."""
        used: set[str] = set()
        for gang in world.gangs.values():
            used |= {n for p in gang.live if (n := usage_node(p))}
            used |= {a["node"] for a in (gang.admission or {}).get("assignments") or [] if a.get("node")}
        return sorted((used & set(world.nodes)) - set(self.failed))

    def pick(self, world: World, count: int) -> list[str]:
        """`count` nodes, those in use first."""
        used = self.nodes_in_use(world)
        others = sorted(set(world.nodes) - set(used) - set(self.failed))
        self.rng.shuffle(used)
        self.rng.shuffle(others)
        return (used + others)[:count]

    def after_failure(self, what: str) -> World:
        """Let the grace period pass (checking at every poll), and a deleted node's pods go (the pod garbage
        collector's quarantine), then settle with the nodes failed."""
        self.watch(self.grace + 2.0)
        deadline = time.monotonic() + ORPHANS_TIMEOUT
        while left := orphans(self.world().pods, self.failed):
            if time.monotonic() > deadline:
                raise InvariantError(f"pods still bound to deleted nodes after 90 s: {left}")
            time.sleep(POLL)
        return self.settle(what)

    # ------------------------------------------------------------------ rounds
    def node_round(self, scenario: str | None = None) -> None:
        self.stats.rounds += 1
        if scenario is None:
            if not self.scenarios:
                self.scenarios = list(SCENARIOS)
                self.rng.shuffle(self.scenarios)
            scenario = self.scenarios.pop()
        self.nstats.scenarios[scenario] += 1
        label = f"round {self.stats.rounds} ({scenario})"
        specs = self.submit(self.rng.randint(3, 5), suspend=True)
        detail = getattr(self, f"_{scenario.replace('-', '_')}")()
        world = self.after_failure(f"{label}, nodes failed")
        self.log(f"{label}: {detail}; {world.summary()}")
        self.log("  submitted: " + "; ".join(spec.brief for spec in specs))
        self.heal()
        world = self.settle(f"{label}, healed")
        self.log(f"  healed: {world.summary()}; admissions so far {self.stats.admissions}")
        self.delete_some(world, share=0.6)

    def _failed_text(self) -> str:
        return ", ".join(f"{n} {f.how}" for n, f in sorted(self.failed.items()))

    def _one(self) -> str:
        self.unsuspend(self.submitted())
        self.fail(self.pick(self.settle("before the failure"), 1))
        return f"failed {self._failed_text()}"

    def _several(self) -> str:
        self.unsuspend(self.submitted())
        self.fail(self.pick(self.settle("before the failures"), self.rng.randint(2, 3)))
        return f"failed {self._failed_text()}"

    def _domain(self) -> str:
        self.unsuspend(self.submitted())
        world = self.settle("before the domain failure")
        blocks = sorted({n.labels.get(NB_KEY, "") for n in world.nodes.values()})
        in_use = {world.nodes[n].labels.get(NB_KEY, "") for n in self.nodes_in_use(world)}
        block = self.rng.choice(sorted(in_use) or blocks)
        how = self.rng.choice(("taint", "notready"))
        self.fail(sorted(n for n, node in world.nodes.items() if node.labels.get(NB_KEY) == block), how)
        return f"network block {block} failed ({how}): {self._failed_text()}"

    def _mid_admission(self) -> str:
        """The operator pauses between a decision and its release; a node the decision names fails then."""
        self.kill("to arm the pause")
        self.start({faults.PAUSE_BEFORE_RELEASE_ENV: str(PAUSE)})
        self.unsuspend(self.submitted())
        deadline = time.monotonic() + 20
        target: list[str] = []
        while time.monotonic() < deadline and not target:
            world = self.world()
            for gang in sorted(world.gangs.values(), key=lambda g: g.name):
                if mid_admission(gang) and not gang.placed:
                    assignments = (gang.admission or {}).get("assignments") or []
                    nodes = sorted({a["node"] for a in assignments if a.get("node")})
                    target = [self.rng.choice(nodes)] if nodes else []
                    if target:
                        self.nstats.released_to_failed += 1
                        break
            time.sleep(POLL / 3)
        if not target:
            target = self.pick(self.world(), 1)
        # relabel: the release pins the labels the decision saw, so kube-scheduler binds nothing on the moved
        # node and the gang is rolled back whole (plan/requeue.py stranded), never split across two blocks
        self.fail(target, self.rng.choice(("taint", "taint", "notready", "shrink", "relabel")))
        self.watch(PAUSE + self.grace)
        self.kill("to disarm the pause")
        self.start()
        return f"failed in a decision's pause: {self._failed_text()}"

    def _while_down(self) -> str:
        self.unsuspend(self.submitted())
        time.sleep(self.rng.uniform(0.0, 2.0))
        self.kill("delay")
        self.left_mid_admission()
        self.fail(self.pick(self.world(), self.rng.randint(1, 2)))
        healed = ""
        if len(self.failed) > 1 and self.rng.random() < 0.3:
            node = sorted(self.failed)[0]
            healed = f"; {node} healed while down"
            self.heal([node])
        self.watch(self.rng.uniform(0.5, 3.0))
        self.start()
        return f"failed while the operator was down: {self._failed_text()}{healed}"

    def submitted(self) -> list[Any]:
        """This round's owners (made suspended; an LWS is made at the release)."""
        return self._round_specs

    def submit(self, count: int, suspend: bool) -> list[Any]:
        self._round_specs = super().submit(count, suspend)
        return self._round_specs
