"""Randomized, seeded soaks of gang Jobs on the real dev cluster (issue 10 items 4 and 5).

`crash`: rounds of gang Jobs (mixed sizes, GPUs per pod and topology keys; some fit, some never can) released
at once while the operator is SIGKILLed at a random point — a random delay, or the test-only switches of
controller/faults.py (right after a recorded decision, after the Nth pod release, before the Nth status
write), sometimes twice in a row — then restarted. `crash-kinds` (`kinds=True`, on a cluster with the real
JobSet, LWS and Trainer controllers): the same rounds with a mix of Jobs, JobSets, LeaderWorkerSets and
TrainJobs (soak_kinds.py; some staged: JobSet InOrder, LWS LeaderReady), and in about three rounds of ten
one owner (mid-admission if any) deleted while the operator is down. `faults`: the Job rounds with the
operator talking to the apiserver through faultproxy.py (429, 5xx, 409, cut watches, 410 Gone) and never
killed; `faults-kinds` (`kinds=True`) with the kinds' mix.

After every round, invariants.py: safety at every poll (no node over capacity, no gang in two domains), then
settled (every gang fully admitted where its decision says, or fully gated; none waits that fits the room
left; no gang requeued and no bound pod of a gang taken away, as no node fails). At the end the admitted
gangs are deleted until every gang that can ever fit was admitted once. The short forms run in CI
(test_crash_soak.py, test_crash_soak_kinds.py, test_api_fault_soak.py); the full ones: bench/soak.py.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.controller.apply import faults
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .faultproxy import FaultProxy
from .gangs import Gang, delete_owner, gated
from .invariants import World
from .kube import LB_KEY, NB_KEY, Namespace, gpu_job
from .soak_kinds import Submission, draw_kind, key_name, random_kind, runtimes

SETTLE_TIMEOUT = 120.0
POLL = 0.3
WEBHOOK_CATCH_UP = 15.0  # seconds the apiserver may call a restarted operator's webhook at its old port
SWITCHES = {
    "after-record": faults.AFTER_RECORD,
    "after-releases": faults.AFTER_RELEASES,
    "before-status": faults.BEFORE_STATUS,
}


class InvariantError(AssertionError):
    pass


@dataclass(frozen=True)
class GangSpec:
    name: str
    size: int
    gpus: int  # per pod
    key: str | None
    kind: str = "Job"
    gangs: int = 1
    priority: str | None = None  # the pods' PriorityClass (the preemption soak's)

    @property
    def smallest(self) -> int:
        return self.size

    @property
    def brief(self) -> str:
        return f"{self.name} Job {self.size} x{self.gpus}gpu {key_name(self.key)}"

    def create(self, ns: Namespace, suspend: bool) -> None:
        ns.create(self.job(suspend))

    def release(self, ns: Namespace) -> None:
        ns.patch_job(self.name, {"spec": {"suspend": False}})

    def job(self, suspend: bool) -> dict[str, Any]:
        annotations = {"phalanx.dev/topology-key": self.key} if self.key else {}
        body = gpu_job(
            self.name,
            self.size,
            labels={"phalanx.dev/managed": "true"},
            annotations=annotations,
            suspend=suspend,
            priority_class=self.priority,
        )
        container = body["spec"]["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": str(self.gpus)}, "requests": {"cpu": "2"}}
        return body


def random_gang(rng: random.Random, name: str, never: bool = False) -> GangSpec:
    """Mostly gangs that fit an empty cluster (8 nodes x 8 GPUs, 2 network blocks of 4, 4 local blocks of
    2), about one in eight that never can (more nodes than its domain has); `never`: one that never can."""
    key = rng.choice([None, NB_KEY, NB_KEY, LB_KEY])
    if rng.random() < 0.12 or never:
        size = {None: 9, NB_KEY: 5, LB_KEY: 3}[key]
        return GangSpec(name, size, 8, key)
    gpus = rng.choice([8, 8, 4, 2])
    most = {None: 4, NB_KEY: 4, LB_KEY: 2}[key] * (8 // gpus)
    size = rng.randint(1, min(most, 4))
    return GangSpec(name, size, gpus, key)


@dataclass
class Stats:
    rounds: int = 0
    gangs: int = 0
    admissions: int = 0  # gangs seen go from waiting (or new) to fully admitted
    never_fit: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    polls: int = 0  # safety checks made
    held: set[str] = field(default_factory=set)  # gangs seen waiting with room held (bounded waiting)
    settle_seconds: list[float] = field(default_factory=list)
    proxy: Mapping[str, int] = field(default_factory=dict)
    by_kind: Counter[str] = field(default_factory=Counter)  # gangs submitted, by kind
    admitted_by_kind: Counter[str] = field(default_factory=Counter)
    given_up: set[str] = field(default_factory=set)  # waiting gangs deleted by the drain with their owner
    cut: Counter[str] = field(default_factory=Counter)  # gangs a kill left mid-admission, by kind and how
    withdrawn: set[str] = field(default_factory=set)  # waiting gangs deleted between rounds (delete_some)
    deleted_while_down: int = 0  # owners deleted while the operator was down

    def lines(self) -> list[str]:
        worst = max(self.settle_seconds, default=0.0)
        mean = sum(self.settle_seconds) / len(self.settle_seconds) if self.settle_seconds else 0.0
        what = "gang Jobs" if set(self.by_kind) <= {"Job"} else "gangs"
        out = [
            f"rounds: {self.rounds}",
            f"{what} submitted: {self.gangs} ({self.never_fit} that can never fit)",
            f"admissions (gangs fully admitted): {self.admissions}",
            f"safety checks (no node over capacity, one domain per gang): {self.polls}, all passed",
            f"settled after each round: mean {mean:.1f} s, worst {worst:.1f} s",
            f"gangs that had room held for them after waiting too long: {len(self.held)}",
        ]
        if set(self.by_kind) - {"Job"}:
            kinds = ", ".join(
                f"{kind} {count} ({self.admitted_by_kind[kind]} admitted)"
                for kind, count in sorted(self.by_kind.items())
            )
            out.append(f"gangs by kind (an LWS: one per group): {kinds}")
        if self.cut:
            cut = ", ".join(f"{k} {v}" for k, v in sorted(self.cut.items()))
            out.append(f"gangs a kill left mid-admission (then finished by the restarted operator): {cut}")
        if self.deleted_while_down:
            out.append(f"owners deleted while the operator was down: {self.deleted_while_down}")
        if self.withdrawn:
            out.append(f"waiting gangs deleted between rounds (withdrawn): {len(self.withdrawn)}")
        if self.given_up:
            given_up = sorted(self.given_up)
            out.append(f"waiting gangs deleted with an owner whose other gangs ran, to drain: {given_up}")
        if self.kills:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kills.items()))
            out.append(f"operator SIGKILLs: {sum(self.kills.values())} ({kinds}); restarts: {self.restarts}")
        if self.proxy:
            out.append("API faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(self.proxy.items())))
        return out


def mid_admission(gang: Gang) -> bool:
    """Its decision is recorded and some of its pods are still gated, or still to come (a staged gang's)."""
    live = gang.live
    return gang.admission is not None and (any(gated(p) for p in live) or len(live) < gang.size)


def owners(world: World) -> dict[str, list[Gang]]:
    """The gangs by the object the user wrote (`Kind/name`): one each, but an LWS's one per group."""
    out: dict[str, list[Gang]] = {}
    for gang in world.gangs.values():
        out.setdefault(f"{gang.kind}/{gang.owner_name}", []).append(gang)
    return out


class Soak:
    def __init__(
        self,
        ns: Namespace,
        operator: OperatorProcess,
        seed: int,
        log: Callable[[str], None] = print,
        proxy: FaultProxy | None = None,
        kinds: bool = False,
    ) -> None:
        """`kinds`: rounds of Jobs, JobSets, LeaderWorkerSets and TrainJobs (their controllers must run)."""
        self.ns = ns
        self.operator = operator
        self.rng = random.Random(seed)
        self.log = log
        self.stats = Stats()
        self.admitted: set[str] = set()
        self.proxy = proxy
        self.kinds = kinds
        self.modes: list[str] = []
        self.requeued: set[str] = set()  # gangs Phalanx gave up and placed again (seen at a poll or by event)
        self.requeue_why: dict[str, str] = {}  # kind/name -> the message of its first Requeued event
        self.base_env = dict(operator.env)  # e.g. PYTHONPATH of a deliberately broken copy (bench/soak.py)
        self.unreleased: list[Submission] = []  # made at a release while the operator was down: made later
        self.deleted: set[str] = set()  # owners the soak deleted (`Kind/name`)
        self.bound: dict[str, str] = {}  # uid of every pod seen bound -> its gang
        # The kinds of the first submissions, in order (then drawn): a short run has each, whatever the draws.
        self.first_kinds: list[str] = []
        self.settle_timeout = SETTLE_TIMEOUT  # a soak whose nodes fail waits longer (soak_nodes.py)
        self.preemption = False  # gangs of several priorities (soak_preempt.py): see World.unsettled
        if kinds:
            runtimes(ns)

    # ------------------------------------------------------------------ observation
    def world(self) -> World:
        world = World.read(self.ns.api, self.ns.name, kinds=self.kinds)
        self.stats.polls += 1
        problems = self.safety(world)
        if problems:
            raise InvariantError("safety: " + "; ".join(problems))
        for gang in world.gangs.values():
            if gang.requeued:
                self.requeued.add(f"{gang.kind}/{gang.name}")
            if gang.waiting and gang.holding:
                self.stats.held.add(gang.name)
            if gang.admitted and gang.name not in self.admitted:
                self.admitted.add(gang.name)
                self.stats.admissions += 1
                self.stats.admitted_by_kind[gang.kind] += 1
        self.taken_away(world)
        return world

    def safety(self, world: World) -> list[str]:
        """What must hold at every poll (more in soak_nodes.py: nodes that shrank)."""
        return world.safety()

    def taken_away(self, world: World) -> None:
        """A pod seen bound, of a gang whose owner is still there, that is gone or going: no node fails and
        no gang has a higher priority in these soaks, so nothing but a requeue (or a bug) takes it away."""
        for gang in world.gangs.values():
            if f"{gang.kind}/{gang.owner_name}" in self.deleted:
                continue
            present = {p["metadata"]["uid"] for p in gang.live if not p["metadata"].get("deletionTimestamp")}
            for uid, owner in list(self.bound.items()):
                if owner == gang.name and uid not in present:
                    self.requeued.add(f"{gang.kind}/{gang.name} (a bound pod was taken away)")
                    del self.bound[uid]
            for pod in gang.live:
                if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                    self.bound[pod["metadata"]["uid"]] = gang.name

    def left_mid_admission(self) -> None:
        """Count what the kill (the operator is down) left between a gang's decision and its last release."""
        for gang in self.world().gangs.values():
            if not mid_admission(gang):
                continue
            how = "released in part" if gang.placed else "recorded, none released"
            staged = " (staged)" if gang.first else ""
            self.stats.cut[f"{gang.kind}{staged} {how}"] += 1

    def delete_while_down(self) -> None:
        """A user deletes one owner of the round (maybe mid-admission) while the operator is down: it learns
        of the deletion only from its listing at the restart."""
        world = self.world()
        by_owner = owners(world)
        mid = [o for o, gangs in by_owner.items() if any(self.busy(g) for g in gangs)]
        this_round = [o for o in by_owner if o.split("/", 1)[1].startswith(f"r{self.stats.rounds:03d}-")]
        choices = sorted(mid or this_round)
        if choices:
            owner = self.rng.choice(choices)
            self.stats.deleted_while_down += 1
            self.stats.withdrawn.update(
                g.name for g in world.gangs.values() if g.waiting and f"{g.kind}/{g.owner_name}" == owner
            )
            self.delete(owner)

    def busy(self, gang: Gang) -> bool:
        """A gang whose owner delete_while_down prefers: one left mid-admission by the kill."""
        return mid_admission(gang)

    def watch(self, seconds: float) -> None:
        """Check safety for a while (the operator is down or busy)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.world()
            time.sleep(POLL)

    def settle(self, what: str) -> World:
        """Wait (checking safety at every poll) until the namespace is settled, and stays so for a moment."""
        started = time.monotonic()
        deadline = started + self.settle_timeout
        reasons: list[str] = []
        calm_since: float | None = None
        while time.monotonic() < deadline:
            self.alive()
            world = self.world()
            reasons = self.unsettled(world)
            if reasons:
                calm_since = None
            elif calm_since is None:
                calm_since = time.monotonic()
            elif time.monotonic() - calm_since >= 1.5:
                problems = self.settled_problems(world) + self.requeues()
                if problems:
                    raise InvariantError(f"{what}: " + "; ".join(problems))
                self.stats.settle_seconds.append(calm_since - started)
                return world
            time.sleep(POLL)
        reasons += self.requeues()  # a requeue loop never settles: say so too
        raise InvariantError(f"{what}: not settled after {self.settle_timeout:.0f} s: {'; '.join(reasons)}")

    def unsettled(self, world: World) -> list[str]:
        """Why the namespace is not settled yet ([] when it is; more in soak_nodes.py)."""
        return world.unsettled(self.preemption)

    def settled_problems(self, world: World) -> list[str]:
        """What must hold once the namespace settled (more in soak_preempt.py)."""
        return world.settled_problems()

    def requeues(self) -> list[str]:
        """No node fails in these soaks: a requeue would mean a crash or an API fault made Phalanx give up a
        decision (or lose track of a release) instead of finishing it."""
        for event in self.ns.events("reason=Requeued"):
            involved = event["involvedObject"]
            self.requeued.add(f"{involved['kind']}/{involved['name']}")
            self.requeue_why.setdefault(f"{involved['kind']}/{involved['name']}", event.get("message", ""))
        if not self.requeued:
            return []
        why = "; ".join(f"{name}: {message}" for name, message in sorted(self.requeue_why.items()))
        return [f"requeued although no node failed: {sorted(self.requeued)} (why: {why})"]

    def alive(self) -> None:
        proc = self.operator.proc
        if proc is None or proc.poll() is not None:
            raise InvariantError(f"the operator exited on its own; log:\n{self.operator.tail()}")

    # ------------------------------------------------------------------ actions
    def submit(self, count: int, suspend: bool) -> list[Submission]:
        specs: list[Submission] = []
        for i in range(count):
            # The first gang of every fifth round never fits, so each run has some whatever the draws
            # (the draws depend on timing: which gangs a round's deletions pick).
            never = i == 0 and self.stats.rounds % 5 == 1
            name = f"r{self.stats.rounds:03d}-g{len(specs)}"
            if self.first_kinds:
                first = draw_kind(self.first_kinds.pop(0), self.rng, name, never)
                spec = first or random_gang(self.rng, name, never)
            else:
                spec = (random_kind(self.rng, name, never) if self.kinds else None) or random_gang(
                    self.rng, name, never
                )
            spec.create(self.ns, suspend)  # an LWS (no suspend) is made at the release instead
            specs.append(spec)
            self.stats.gangs += spec.gangs
            self.stats.by_kind[spec.kind] += spec.gangs
        return specs

    def unsuspend(self, specs: list[Submission]) -> None:
        """Release the round at once: resume what was created suspended, create what has no suspend."""
        for spec in specs:
            self.release(spec)

    def release(self, spec: Submission) -> None:
        """Release one: a create (an LWS) goes through Phalanx's gate webhook, which fails closed. While the
        operator is down it is made once it runs again (start); just after a start the apiserver may still
        call the webhook at the port of the process before (it reads its configuration through a watch), so
        it is tried again for a while."""
        deadline = time.monotonic() + WEBHOOK_CATCH_UP
        while True:
            try:
                spec.release(self.ns)
                return
            except ApiError as e:
                if e.status < 500:
                    raise
                if not self.operator_alive():
                    self.unreleased.append(spec)
                    return
                if "failed calling webhook" not in e.body or time.monotonic() > deadline:
                    raise
            time.sleep(POLL)

    def delete_some(self, world: World, share: float) -> None:
        """Free room for the next round: some owners whose gangs all run, and those that can never fit, go.
        With the kinds, whose gangs are larger, also some owners with a gang running and one waiting (an LWS
        group), and some whose gangs waited three rounds (withdrawn): else the running groups of two LWS
        can hold the whole cluster for good, and the gangs waiting for room pile up round after round."""
        for owner, gangs in owners(world).items():
            never = [g for g in gangs if not world.fits_empty(g) and g.waiting]
            if never or (all(g.admitted for g in gangs) and self.rng.random() < share):
                self.stats.never_fit += len(never)
                self.delete(owner)
            elif self.kinds and self.withdraws(owner, gangs, share):
                self.stats.withdrawn.update(g.name for g in gangs if g.waiting)
                self.delete(owner)

    def withdraws(self, owner: str, gangs: list[Gang], share: float) -> bool:
        """Whether a user deletes this owner of waiting gangs now (see delete_some)."""
        if any(g.admitted for g in gangs):
            return self.rng.random() < share
        submitted = int(owner.split("/", 1)[1][1:4])  # r<round>-g<i>
        return self.stats.rounds - submitted >= 3 and self.rng.random() < 0.5

    def clear(self) -> None:
        """Delete every gang and wait until their pods are gone: the next round's gangs find an empty cluster,
        so a kill point counted in admissions or pod releases is reached."""
        world = self.settle("before clearing")
        for owner, gangs in owners(world).items():
            self.stats.never_fit += sum(1 for g in gangs if g.waiting and not world.fits_empty(g))
            self.delete(owner)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while (world := self.world()).gangs or any(
            p["metadata"]["namespace"] == self.ns.name for p in world.pods
        ):
            if time.monotonic() > deadline:
                raise InvariantError(f"the gangs' pods still there {SETTLE_TIMEOUT:.0f} s after clearing")
            time.sleep(POLL)

    def delete(self, owner: str) -> None:
        """Delete an owner (`Kind/name`)."""
        kind, name = owner.split("/", 1)
        self.deleted.add(owner)
        delete_owner(self.ns.api, self.ns.name, kind, name)

    def kill(self, why: str) -> None:
        self.operator.stop(signal.SIGKILL)
        self.stats.kills[why] += 1

    def start(self, env: Mapping[str, str] | None = None) -> bool:
        """Start the operator; False if an armed switch killed it before it was ready. What could not be
        created while it was down is created once it is ready."""
        self.operator.env = {**self.base_env, **(env or {})}
        self.stats.restarts += 1
        try:
            self.operator.start()
        except RuntimeError:
            proc = self.operator.proc
            if env and proc is not None and proc.returncode == -signal.SIGKILL:
                return False
            raise
        waiting, self.unreleased = self.unreleased, []
        for spec in waiting:
            self.release(spec)
        return True

    # ------------------------------------------------------------------ rounds
    def crash_round(self, mode: str | None = None) -> None:
        """Gangs created suspended, then released at once while the operator dies at a random point (`mode`:
        a kill point chosen by the caller instead of the next of the cycle)."""
        self.stats.rounds += 1
        specs = self.submit(self.rng.randint(3, 6), suspend=True)
        if mode is None:
            if not self.modes:  # every kill point in each cycle of 5 rounds, in a random order
                self.modes = ["delay", "delay", *SWITCHES]
                self.rng.shuffle(self.modes)
            mode = self.modes.pop()
        if mode in SWITCHES:
            self.kill("while creating objects")  # to restart it armed; it may be creating PodGroups
            # At most the releases of the smallest new gang: reached whenever one new gang is admitted
            # (gangs left waiting from earlier rounds may hold the room of the others).
            smallest = min(spec.smallest for spec in specs)
            most = {"after-record": len(specs) // 2, "after-releases": smallest}.get(mode, 4)
            count = self.rng.randint(1, max(1, most))
            if self.start({SWITCHES[mode]: str(count)}):
                self.unsuspend(specs)
                self.wait_exit(20.0)
            else:
                self.unsuspend(specs)  # the validating webhook fails open while the operator is down
            if self.operator_alive():
                self.kill("delay (switch not reached)")
            else:
                self.stats.kills[mode] += 1
        else:
            self.unsuspend(specs)
            time.sleep(self.rng.uniform(0.0, 2.5))  # a random point of the admissions
            self.kill("delay")
        self.left_mid_admission()
        if self.kinds and self.rng.random() < 0.3:
            self.delete_while_down()
        self.watch(self.rng.uniform(0.0, 1.0))  # down for a while: nothing may move into a bad state
        if self.rng.random() < 0.25:  # and again, during the recovery
            self.start()
            time.sleep(self.rng.uniform(0.0, 1.5))
            self.kill("during recovery")
        self.start()
        world = self.settle(f"round {self.stats.rounds} ({mode})")
        self.log(
            f"round {self.stats.rounds}: {mode}; {world.summary()}; admissions so far {self.stats.admissions}"
        )
        if self.kinds:
            self.log("  submitted: " + "; ".join(spec.brief for spec in specs))
        self.delete_some(world, share=0.7)

    def fault_round(self) -> None:
        """Gangs created at once, with the API faulty under the operator."""
        self.stats.rounds += 1
        self.submit(self.rng.randint(3, 6), suspend=False)
        world = self.settle(f"round {self.stats.rounds}")
        self.log(f"round {self.stats.rounds}: {world.summary()}; admissions so far {self.stats.admissions}")
        if self.proxy is not None and self.rng.random() < 0.3:
            # The deletions fall into a pod watch outage that ends with 410 Gone: never seen as deletions.
            self.proxy.blackout("/api/v1/pods")
            self.delete_some(world, share=0.7)
            self.watch(self.rng.uniform(0.5, 2.0))
            self.proxy.end_blackout()
        else:
            self.delete_some(world, share=0.7)

    def drain(self) -> None:
        """Nothing lost: delete admitted gangs until every gang that can ever fit got admitted once. An owner
        of several gangs (an LWS) goes once all of them run; if every owner left has one running and one
        waiting, those go too, and their waiting gangs are counted as given up (Stats.given_up)."""
        for _ in range(40):
            world = self.settle("drain")
            left = [g for g in world.gangs.values() if g.waiting and world.fits_empty(g)]
            if not left:
                self.stats.never_fit += sum(1 for g in world.gangs.values() if g.waiting)
                break
            by_owner = owners(world)
            done = [o for o, gangs in by_owner.items() if all(g.admitted for g in gangs)]
            if not done:
                done = [o for o, gangs in by_owner.items() if any(g.admitted for g in gangs)]
                self.stats.given_up.update(g.name for o in done for g in by_owner[o] if g.waiting)
            for owner in done:
                self.delete(owner)
        else:
            raise InvariantError("gangs that fit an empty cluster still wait after 40 drains")
        if self.proxy is not None:
            self.stats.proxy = dict(self.proxy.counts())

    def operator_alive(self) -> bool:
        proc = self.operator.proc
        return proc is not None and proc.poll() is None

    def wait_exit(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.operator_alive():
            self.world()
            time.sleep(POLL / 3)
