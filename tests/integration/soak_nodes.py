"""Node failures at random under running and admitting gangs of every kind (the `nodes-kinds` soak).

Each round submits a mix of gang Jobs, JobSets, LeaderWorkerSets and TrainJobs (soak_kinds.py, on the real
JobSet, LWS and Trainer controllers), then fails nodes in one of five ways, drawn in a seeded cycle:

- `one`: a node that runs pods of a gang, once the round settled;
- `several`: two or three nodes at once, once settled;
- `domain`: every node of one network block at once (its gangs must go whole to the other block, or wait
  whole);
- `mid-admission`: the operator restarted with its pause between a recorded decision and the release
  (controller/apply/faults.py), and a node the decision names failed in that pause: its pods are released to
  a failed node (released, not bound); the pause goes at the round's end with a kill -9 and a restart;
- `while-down`: the operator SIGKILLed at a random point of the round's admissions, a node of a gang (placed,
  or named by a decision) failed while it is down, sometimes another healed while down, then restarted.

A node fails in one of three ways (`HOWS`): a `NoExecute` taint (the taint manager evicts its pods at
once; the dev cluster's `fail-node --how taint`), `notready` (kwok stops its heartbeats and its `Ready`
condition turns False: the node controller taints it; its pods stay, tolerating `not-ready` for 300 s, and
kwok no longer runs anything new there) or `delete` (the Node object is deleted; the pod garbage collector
deletes its pods after its 40 s quarantine, which the round waits for). Healing undoes it (a deleted node is
made again, as `dev-cluster up` made it). The failed nodes are healed after the round settled with them
failed; then it must settle again.

Checked at every poll, besides soak.py's safety (no node over capacity, one domain per gang and per part):

- a gang that runs in part (some pods bound, fewer than its size) and whose missing pods have no room in the
  domain its pods are in does so for at most `--node-failure-grace` plus `REQUEUE_SLACK` of the operator's
  running time (it must be requeued whole, or completed when room frees): `no_room_limit`;
- a gang that runs in part with room for its missing pods (its kind's controller has yet to make them again:
  the Job controller backs off 10 s, 20 s, 40 s... after each failed pod) does so for at most
  `PARTIAL_LIMIT` of the operator's running time;
- no pod is bound to a failed node later than `BIND_SLACK` after its failure (Phalanx released it there, or
  kube-scheduler bound it there, after the node was known to have failed);
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

from .gangs import Gang, usage_node
from .invariants import World, owner_failed, room_for_missing, short_by
from .kube import NB_KEY, Namespace
from .soak import POLL, InvariantError, Soak, mid_admission, owners

SCENARIOS = ("one", "several", "domain", "mid-admission", "while-down")
HOWS = ("taint", "taint", "notready", "delete")
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
            f"longest run in part: {self.worst_partial:.1f} s (operator up)",
            f"owners failed by their controller after evictions (deleted): {sorted(self.failed_owners)}",
        ]


def fail(api: Any, node: str, how: str) -> Failure:
    """Fail `node` the way `how` says (module docstring)."""
    failure = Failure(how, time.time())
    if how == "taint":
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

    # ------------------------------------------------------------------ observation
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
                if failure is None or pod["metadata"].get("deletionTimestamp"):
                    continue
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
                self.nstats.worst_partial = max(self.nstats.worst_partial, ran)
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
        return [
            p
            for p in world.settled_problems()
            if not any(p.startswith(f"{g}: bound {{") for g in self.hit_gangs)
        ]

    def excused(self, world: World, reasons: list[str]) -> list[str]:
        """A pod being deleted on a NotReady or deleted node stays so until the node heals (no kubelet
        confirms it; the pod garbage collector's 40 s for a deleted one), and a gang requeued whole
        (suspended) waits for it: settled for now (judged again once healed)."""
        stuck = {
            p["metadata"]["uid"]
            for p in world.pods
            if p["metadata"].get("deletionTimestamp")
            and (f := self.failed.get(p["spec"].get("nodeName") or "")) is not None
            and f.how != "taint"
        }
        if not stuck:
            return reasons
        deleting = [p for p in world.pods if p["metadata"].get("deletionTimestamp")]
        waiting_for_stuck = {
            f"{g.name}: {why}"
            for g in world.gangs.values()
            if g.live and all(p["metadata"]["uid"] in stuck for p in g.live)
            for why in ("suspended", "requeued")
        }
        kept = []
        for reason in reasons:
            if reason == "pods terminating" and all(p["metadata"]["uid"] in stuck for p in deleting):
                continue
            if reason in waiting_for_stuck:
                continue
            kept.append(reason)
        return kept

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
            self.failed[node] = fail(self.ns.api, node, chosen)
            self.nstats.failures[chosen] += 1
        self.world()  # mark the gangs hit at once

    def heal(self, nodes: list[str] | None = None) -> None:
        for node in sorted(self.failed) if nodes is None else nodes:
            heal(self.ns.api, node, self.failed.pop(node))

    def heal_all(self) -> None:
        """Every node failed so far healed, and back Ready and schedulable (the cluster is shared)."""
        self.heal()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            nodes = World.read(self.ns.api, self.ns.name, kinds=True).nodes
            managed = all(n.labels.get(SIMULATED_LABEL) for n in nodes.values())
            if len(nodes) == len(seed_topology()) and managed and all(n.schedulable for n in nodes.values()):
                return
            time.sleep(POLL)
        raise InvariantError("the healed nodes not Ready and schedulable after 90 s")

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
        deleted = {n for n, f in self.failed.items() if f.how == "delete"}
        deadline = time.monotonic() + ORPHANS_TIMEOUT
        while deleted and any(p["spec"].get("nodeName") in deleted for p in self.world().pods):
            if time.monotonic() > deadline:
                raise InvariantError(f"pods still bound to deleted nodes {sorted(deleted)} after 90 s")
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
        self.fail(target, "taint" if self.rng.random() < 0.7 else "notready")
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
