"""The crash soak with preemption (`crash-preempt`): seeded rounds on the dev cluster with the real JobSet,
LWS and Trainer controllers, in which low-priority gangs of every kind run and higher-priority gangs that fit
only by preempting them come, while the operator is SIGKILLed at a random kill point, the new one in the
middle of a preemption among them — then restarted.

Each round:

1. **fill**: 2-4 low-priority gangs (PriorityClass `phalanx-soak-low`) of a random mix of Jobs, JobSets,
   LeaderWorkerSets and TrainJobs (soak_kinds.py's draws) are created and released with the operator up,
   and the namespace settles (they run, or wait whole); in about a third of the rounds one bare low pod
   (no owner, not managed) is bound beside them: a victim Phalanx can only evict (EvictPod);
2. **preempt**: 1-2 high-priority gangs (`phalanx-soak-high`) of 8-GPU pods, of random kinds — a whole
   network block, a whole local block, or 4-6 nodes anywhere; two only when both fit together — are
   released while the operator dies: after a random delay, or at one of the test-only kill points of
   controller/apply/faults.py armed for that start (right after a recorded decision, after the Nth pod
   release, before the Nth status write, after the Nth victim action of a preemption: a Job, JobSet or
   TrainJob suspended, an LWS group's pod deleted, a pod evicted — victim actions then go one at a time);
   the kill points cycle, the victim one twice in each six rounds; in a quarter of the rounds it is killed
   again during the recovery; in about three rounds of ten one owner (mid-admission, being taken back, or
   of this round) is deleted while it is down;
3. restarted without switches; the namespace settles; the round's high gangs, some low ones (some running,
   most of those that waited two rounds) and the bare pod are deleted, so the next round's lows find room
   and its highs must preempt again.

Checked (invariants.py and gangs.py: read from the API only, no Phalanx code):

- at every poll: no node over capacity, no gang in two domains of its key (nor a JobSet child Job or LWS
  subgroup in two of its slice key); no pod of a gang bound (not terminating) outside the domain its group
  records, twice in a row; no gang partly running — some of its pods holding nodes, fewer than its size,
  not terminating — for longer than PARTIAL_WINDOW (a preempted gang is taken back whole, not left
  half-running; a gang a kill left released in part is finished);
- once settled: every gang runs whole where its decision says or waits whole, none waits that fits the room
  left or that would fit once the pods of lower priority were gone (it must preempt: a high gang does not
  wait forever); every high gang of the round runs whole in one domain of its key; no reservation left on
  a group whose gang runs or whose owner is gone, or lapsed; no requeue but the preemptions' (a `Requeued`
  event whose message is not `preempted by ...`, or a bound pod taken from a gang no `Preempted` event
  names, fails the round);
- at the end (drain): every gang that can ever fit ran, a preempted one again (counted).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from phalanx.controller.apply import faults
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .gangs import REQUEUED_ANNOTATION, Gang
from .invariants import World
from .kinds import PAUSE
from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, ensure_priority_class
from .soak import SWITCHES, GangSpec, InvariantError, Soak, mid_admission, owners, random_gang
from .soak_kinds import JobSetSpec, LwsSpec, Submission, TrainJobSpec, random_kind, runtimes

LOW, HIGH = "phalanx-soak-low", "phalanx-soak-high"
PRIORITIES = {LOW: 10, HIGH: 1000}
PREEMPT_SWITCHES = {**SWITCHES, "after-victims": faults.AFTER_VICTIMS}
MODES = ("delay", *SWITCHES, "after-victims", "after-victims")  # one cycle: six rounds
PARTIAL_WINDOW = 60.0  # seconds a gang may run in part (released in part, taken back, staged, a kill)
KINDS = ("Job", "JobSet", "LeaderWorkerSet", "TrainJob")
HIGH_PAIRS = ((NB_KEY, NB_KEY), (NB_KEY, LB_KEY), (LB_KEY, LB_KEY))  # two high gangs that fit together
PREEMPTED = "preempted by "  # how the message of a preemption's Requeued event starts (docs/design.md)


def priority_classes(ns: Namespace) -> None:
    for name, value in PRIORITIES.items():
        ensure_priority_class(ns.api, name, value)


def random_low(rng: Any, name: str) -> Submission:
    """A low-priority gang of a random kind, as the crash-kinds soak draws them (some never fit)."""
    spec = random_kind(rng, name, False) or random_gang(rng, name)
    return dataclasses.replace(spec, priority=LOW)  # type: ignore[type-var]


def random_high(rng: Any, name: str, key: str | None) -> Submission:
    """A high-priority gang of 8-GPU pods that fits an empty cluster: a whole network block (3-4 pods), a
    local block (2), or 4-6 pods anywhere."""
    size = {NB_KEY: rng.randint(3, 4), LB_KEY: 2, None: rng.randint(4, 6)}[key]
    kind = rng.choice(KINDS)
    if kind == "JobSet":
        children = ((2, size // 2),) if size % 2 == 0 and rng.random() < 0.5 else ((1, size),)
        return JobSetSpec(name, children, 8, key, priority=HIGH)
    if kind == "LeaderWorkerSet":
        return LwsSpec(name, 1, size, 8, key, priority=HIGH)
    if kind == "TrainJob":
        return TrainJobSpec(name, size, 8, key, priority=HIGH)
    return GangSpec(name, size, 8, key, priority=HIGH)


def said(gang: Gang) -> str:
    """What its group says (for a failure's message): its conditions and reservation."""
    status = (gang.holder or {}).get("status") or {}
    conditions = [
        f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
        for c in status.get("conditions") or []
    ]
    return f"{conditions}; reservation {status.get('reservation')}"


@dataclass
class PreemptStats:
    lows: int = 0
    highs: int = 0
    preempting: int = 0  # Preempting events, counts summed (said on a preemptor's groups and on its owner)
    preemptors: set[str] = field(default_factory=set)  # owners a Preempting event was said on
    victims: Counter[str] = field(default_factory=Counter)  # owners preempted (at least once), by kind
    evicted: int = 0  # bare pods evicted
    readmitted: set[str] = field(default_factory=set)  # gangs taken back and later running whole again
    bare: int = 0
    worst_partial: float = 0.0  # longest a gang ran in part
    high_admitted: int = 0
    untraced: set[str] = field(default_factory=set)  # taken back, no preemption trace seen (requeues())

    def lines(self) -> list[str]:
        victims = ", ".join(f"{k} {v}" for k, v in sorted(self.victims.items())) or "none"
        return [
            f"low-priority gangs submitted: {self.lows}; high-priority: {self.highs} "
            f"({self.high_admitted} seen running whole)",
            f"owners that preempted: {len(self.preemptors)} (Preempting events on their groups and on them, "
            f"counts summed: {self.preempting}); owners preempted: {victims}; "
            f"bare pods evicted: {self.evicted} of {self.bare}",
            f"gangs taken back by a preemption and later running whole again: {len(self.readmitted)}",
            f"gangs taken back with no trace of a preemption seen (a kill before its events): "
            f"{len(self.untraced)}",
            f"longest a gang ran in part (bound at most {PARTIAL_WINDOW:.0f} s): {self.worst_partial:.1f} s",
        ]


class PreemptSoak(Soak):
    def __init__(self, ns: Namespace, operator: OperatorProcess, seed: int, log: Any = print) -> None:
        priority_classes(ns)
        super().__init__(ns, operator, seed, log, kinds=True)
        runtimes(ns, tuple(PRIORITIES))
        self.preemption = True
        self.pstats = PreemptStats()
        self.partial_since: dict[str, float] = {}
        self.outside: set[str] = set()
        self.taken: set[str] = set()  # gangs a bound pod was taken from, not running whole again yet
        self.highs: set[str] = set()  # owners (`Kind/name`) of high gangs
        self.preempted: set[str] = set()  # owner names a Preempted event names
        self.bad_requeues: set[str] = set()
        self.vmodes: list[str] = []
        self.admitted_high: set[str] = set()
        self.kind_of: dict[str, str] = {}  # owner name -> its kind

    # ------------------------------------------------------------------ observation
    def world(self) -> World:
        world = super().world()
        now = time.monotonic()
        for gang in world.gangs.values():
            running = gang.running
            if running and len(running) < gang.size:
                since = self.partial_since.setdefault(gang.name, now)
                if now - since > PARTIAL_WINDOW:
                    names = sorted(p["metadata"]["name"] for p in running)
                    raise InvariantError(
                        f"{gang.name}: {len(running)} of its {gang.size} pods running for "
                        f"{now - since:.0f} s (a partial gang): {names}"
                    )
            elif gang.name in self.partial_since:
                self.pstats.worst_partial = max(
                    self.pstats.worst_partial, now - self.partial_since.pop(gang.name)
                )
            if gang.admitted and gang.name in self.taken:
                self.taken.discard(gang.name)
                self.pstats.readmitted.add(gang.name)
            if gang.admitted and f"{gang.kind}/{gang.owner_name}" in self.highs:
                self.pstats.high_admitted += gang.name not in self.admitted_high
                self.admitted_high.add(gang.name)
            self.evidence(gang)
        for name in set(self.partial_since) - set(world.gangs):
            del self.partial_since[name]
        outside = set(world.outside_decision())
        if outside & self.outside:
            raise InvariantError("bound outside its decision's domain: " + "; ".join(sorted(outside)))
        self.outside = outside
        return world

    def evidence(self, gang: Gang) -> None:
        """What the API shows of a requeue: the owner's requeue note, the DisruptionTarget condition Phalanx
        puts on a pod it deletes or evicts, and on the group of a preempted gang. A preemption's says
        `preempted by` (PreemptionByPhalanx); any other (a requeue of its own, RequeueByPhalanx) is one no
        crash should cause: no node fails in this soak."""
        note = (gang.owner["metadata"].get("annotations") or {}).get(REQUEUED_ANNOTATION, "")
        if note.startswith(PREEMPTED):
            self.preempted.add(gang.owner_name)
        elif note:
            self.bad_requeues.add(f"{gang.kind}/{gang.owner_name} (requeue note: {note})")
        for obj in [*gang.pods, gang.holder or {}]:
            for condition in (obj.get("status") or {}).get("conditions") or []:
                if condition.get("type") != "DisruptionTarget":
                    continue
                if condition.get("reason") == "PreemptionByPhalanx":
                    self.preempted.add(gang.owner_name)
                elif condition.get("reason") == "RequeueByPhalanx":
                    name = obj["metadata"]["name"]
                    self.bad_requeues.add(f"{gang.name} ({name}: {condition.get('message', '')})")

    def taken_away(self, world: World) -> None:
        before = set(self.requeued)
        super().taken_away(world)
        for entry in set(self.requeued) - before:
            if entry.endswith("(a bound pod was taken away)"):
                self.taken.add(entry.split(" ", 1)[0].split("/", 1)[1])

    def requeues(self) -> list[str]:
        """Requeues but a preemption's fail the round: a Requeued event whose message does not say
        `preempted by`, a requeue note or a bound pod taken from a gang whose owner no Preempted event names
        (nor deleted by the soak)."""
        for event in self.ns.events():
            involved = event["involvedObject"]
            what = f"{involved['kind']}/{involved['name']}"
            if event["reason"] == "Preempted":
                if involved["kind"] == "Pod":
                    continue
                self.preempted.add(involved["name"])
            elif event["reason"] == "Requeued" and not event.get("message", "").startswith(PREEMPTED):
                self.bad_requeues.add(f"{what} ({event.get('message', '')})")
        # A gang taken back with no trace left of why (the kill fell after the victim action, before its
        # events; an LWS group's pods gone between two polls) is counted, not failed: the partial window
        # and the settled checks say whether it was taken back whole and runs again.
        for entry in self.requeued:
            kind, name = entry.split(" ", 1)[0].split("/", 1)
            owner = name.split("/", 1)[0] if kind == "LeaderWorkerSet" else name
            if owner not in self.preempted and f"{kind}/{owner}" not in self.deleted:
                self.pstats.untraced.add(entry)
        bad = sorted(self.bad_requeues)
        return [f"requeued, not by a preemption: {bad}"] if bad else []

    def settled_problems(self, world: World) -> list[str]:
        problems = world.settled_problems() + world.reservations_left(dt.datetime.now(dt.UTC))
        for gang in world.gangs.values():
            high = f"{gang.kind}/{gang.owner_name}" in self.highs
            if high and not gang.admitted and world.fits_empty(gang):
                problems.append(f"{gang.name}: a high-priority gang that fits waits: {said(gang)}")
        return problems

    def count_events(self) -> None:
        """The preemptions decided and the bare pods evicted, from the namespace's events; the owners
        preempted, by kind, from every trace of it seen."""
        self.requeues()
        self.pstats.victims = Counter(self.kind_of[n] for n in self.preempted if n in self.kind_of)
        preempting, evicted = 0, set()
        for event in self.ns.events():
            if event["reason"] == "Preempting":
                preempting += int(event.get("count") or 1)
                if event["involvedObject"]["kind"] in KINDS:
                    self.pstats.preemptors.add(event["involvedObject"]["name"])
            elif event["reason"] == "Preempted" and event["involvedObject"]["kind"] == "Pod":
                evicted.add(event["involvedObject"]["name"])
        self.pstats.preempting = max(self.pstats.preempting, preempting)
        self.pstats.evicted = max(self.pstats.evicted, len(evicted))

    # ------------------------------------------------------------------ actions
    def create(self, specs: list[Submission], high: bool) -> None:
        for spec in specs:
            spec.create(self.ns, True)  # an LWS is made at the release
            self.stats.gangs += spec.gangs
            self.stats.by_kind[spec.kind] += spec.gangs
            self.kind_of[spec.name] = spec.kind
            if high:
                self.pstats.highs += spec.gangs
                self.highs.add(f"{spec.kind}/{spec.name}")
            else:
                self.pstats.lows += spec.gangs

    def bare_pod(self) -> None:
        """One low-priority pod of no owner on a free node (kube-scheduler binds it): a victim that can only
        be evicted. Deleted again if it is not bound at once."""
        world = self.world()
        free = world.free()
        if not any(room.get(GPU_KEY, 0) >= 8 for n, room in free.items() if world.nodes[n].schedulable):
            return
        name = f"r{self.stats.rounds:03d}-bare"
        container = {
            "name": "w",
            "image": PAUSE,
            "resources": {"limits": {GPU_KEY: "8"}, "requests": {"cpu": "2"}},
        }
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"soak": "bare"}},
            "spec": {"containers": [container], "restartPolicy": "Never", "priorityClassName": LOW},
        }
        self.ns.create(body)
        self.pstats.bare += 1
        deadline = time.monotonic() + 20
        path = f"/api/v1/namespaces/{self.ns.name}/pods/{name}"
        while time.monotonic() < deadline:
            if self.ns.api.get(path)["spec"].get("nodeName"):
                return
            time.sleep(0.3)
        self.delete_bare()

    def delete_bare(self) -> None:
        for pod in self.ns.api.get(f"/api/v1/namespaces/{self.ns.name}/pods?labelSelector=soak%3Dbare")[
            "items"
        ]:
            try:
                self.ns.api.request(
                    "DELETE", f"/api/v1/namespaces/{self.ns.name}/pods/{pod['metadata']['name']}"
                )
            except ApiError as e:
                if e.status != 404:
                    raise

    def busy(self, gang: Gang) -> bool:
        """delete_while_down prefers an owner mid-admission or being taken back by a preemption (suspended,
        or its pods terminating)."""
        return (
            mid_admission(gang)
            or gang.suspended
            or bool(gang.requeued)
            or any(p["metadata"].get("deletionTimestamp") for p in gang.pods)
        )

    # ------------------------------------------------------------------ rounds
    def preempt_round(self, mode: str | None = None) -> None:
        self.stats.rounds += 1
        tag = f"r{self.stats.rounds:03d}"
        lows = [random_low(self.rng, f"{tag}-l{i}") for i in range(self.rng.randint(2, 4))]
        self.create(lows, high=False)
        self.unsuspend(lows)
        filled = self.settle(f"round {self.stats.rounds} (fill)")
        if self.rng.random() < 0.35:
            self.bare_pod()
        keys = (
            list(self.rng.choice(HIGH_PAIRS))
            if self.rng.random() < 0.35
            else [self.rng.choice([NB_KEY, NB_KEY, None, LB_KEY])]
        )
        highs = [random_high(self.rng, f"{tag}-h{i}", key) for i, key in enumerate(keys)]
        self.create(highs, high=True)
        if mode is None:
            if not self.vmodes:  # every kill point in each cycle of six rounds, the victim one twice
                self.vmodes = list(MODES)
                self.rng.shuffle(self.vmodes)
            mode = self.vmodes.pop()
        if mode in PREEMPT_SWITCHES:
            self.kill("while creating objects")
            most = {
                "after-record": 2,
                "after-releases": min(spec.smallest for spec in highs),
                "after-victims": 2,
            }.get(mode, 4)
            count = self.rng.randint(1, most)
            if self.start({PREEMPT_SWITCHES[mode]: str(count)}):
                self.unsuspend(highs)
                self.wait_exit(30.0)
            else:
                self.unsuspend(highs)
            if self.operator_alive():
                self.kill("delay (switch not reached)")
            else:
                self.stats.kills[mode] += 1
        else:
            self.unsuspend(highs)
            time.sleep(self.rng.uniform(0.0, 3.0))  # a random point of the preemption and admissions
            self.kill("delay")
        self.left_mid_admission()
        if self.rng.random() < 0.3:
            self.delete_while_down()
        self.watch(self.rng.uniform(0.0, 1.0))
        if self.rng.random() < 0.25:
            self.start()
            time.sleep(self.rng.uniform(0.0, 1.5))
            self.kill("during recovery")
        self.start()
        world = self.settle(f"round {self.stats.rounds} ({mode})")
        self.count_events()
        self.log(
            f"round {self.stats.rounds}: {mode}; fill: {filled.summary()}; then {world.summary()}; "
            f"owners that preempted so far {len(self.pstats.preemptors)}, "
            f"owners preempted {dict(self.pstats.victims)}"
        )
        self.log(
            "  low: " + "; ".join(s.brief for s in lows) + " | high: " + "; ".join(s.brief for s in highs)
        )
        self.delete_some(world, share=0.3)
        for owner in sorted(owners(world)):
            if owner in self.highs and owner not in self.deleted:
                self.delete(owner)
        self.delete_bare()

    def withdraws(self, owner: str, gangs: list[Gang], share: float) -> bool:
        """As the kinds soak, but a low owner whose gangs all waited two rounds goes more often: else the
        gangs that wait (for room the bounded-waiting holds keep, for each other) pile up round after
        round and few low gangs still run for the high ones to preempt."""
        if any(g.admitted for g in gangs):
            return self.rng.random() < share
        submitted = int(owner.split("/", 1)[1][1:4])  # r<round>-l<i>
        return self.stats.rounds - submitted >= 2 and self.rng.random() < 0.7

    def lines(self) -> list[str]:
        try:
            self.count_events()
        except (ApiError, OSError) as e:  # the cluster is gone: the counts of the last round stand
            self.log(f"could not read the events at the end: {e}")
        return self.stats.lines() + self.pstats.lines()
