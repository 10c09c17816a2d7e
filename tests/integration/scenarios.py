"""The article's scenarios, written once and run on both systems.

Each scenario runs on a fresh namespace of either a cluster in `--mode upstream` (Job `spec.scheduling`,
upstream v1.37.2's in-tree gang scheduler) or a stock cluster with Phalanx (Job annotations), and returns
what a user would see. `tests/integration/test_side_by_side.py` runs them and asserts; `bench/comparison.py`
runs them and writes docs/comparison.md.

Every step waits for the state it expects before reading. Where the point is that something must NOT
happen (a gang stays unbound), the scenario watches it for HOLD_SECONDS with `hold`.

The preemption scenarios use the PriorityClasses of PRIORITY_CLASSES (cluster-scoped: created if absent,
never deleted, so scenarios and tests that share a cluster agree on them); a Job's priority is its pod
template's priorityClassName on both systems.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.job_policy import DisruptionModeKind, JobPolicy, annotations_for, upstream_scheduling
from phalanx.devcluster.cluster import ClusterState

from .kube import (
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    delete_namespace,
    domains_of,
    ensure_priority_class,
    gpu_job,
    hold,
    new_namespace,
    pod_condition,
    wait_for,
)

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
PHALANX_GROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"
UPSTREAM_GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
HOLD_SECONDS = 3.0
"""How long a "nothing happens" check watches (a gang stays unbound, a pod stays Pending)."""
BEST_FIT_RUNS = 6
# Both systems say "N/K placements are available" once they tried the whole group (not before all
# of its pods exist), so this marks a decision rather than an early, partial status.
PLACEMENTS_TRIED = "placements are available"
PRIORITY_CLASSES = {"low": 100, "middle": 500, "high": 1000}
"""The article's two classes and one between them."""
REPLACEMENT_SECONDS = 150.0
"""How long, from the preemptor's creation, a scenario waits for a preempted Job's new pods. Upstream they
come after the Job controller's failure backoff: 10 s, doubled per failure counted at once (80 s after 4)."""
CHEAPEST_RUNS = 4
LOW_GANGS = ("low-a", "low-b")


@dataclass(frozen=True)
class Flavor:
    """How one system is asked for a policy, and where it reports."""

    name: str
    groups_path: str

    def job(self, name: str, count: int, policy: JobPolicy) -> dict[str, Any]:
        """The Job asking this system for `policy`; its priority is the pod template's class on both."""
        priority = policy.priority_class_name
        if self.name == "upstream":
            return gpu_job(name, count, scheduling=upstream_scheduling(policy), priority_class=priority)
        return gpu_job(
            name,
            count,
            labels={"phalanx.dev/managed": "true"},
            annotations=annotations_for(policy),
            priority_class=priority,
        )

    def condition(self, ns: Namespace, kind: str) -> dict[str, Any] | None:
        for group in ns.get(self.groups_path)["items"]:
            for cond in group.get("status", {}).get("conditions", []):
                if cond["type"] == kind:
                    return dict(cond)
        return None


UPSTREAM = Flavor("upstream", UPSTREAM_GROUPS)
PHALANX = Flavor("phalanx", PHALANX_GROUPS)


@dataclass
class Outcome:
    """What a user sees (`line`, the table cell) and the facts the test checks beyond it."""

    line: str
    domains: list[set[str]] = field(default_factory=list)
    """The topology domains of each bound placement (one per run)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Anything else a check needs (the preemption scenarios: what became of each gang)."""


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    run: Callable[[Flavor, Namespace], Outcome]


def gang(
    count: int, key: str | None = None, *, mode: DisruptionModeKind = "single", priority: str | None = None
) -> JobPolicy:
    return JobPolicy(
        policy="gang",
        min_count=count,
        topology_key=key,
        parallelism=count,
        disruption_mode=mode,
        priority_class_name=priority,
    )


def phases(ns: Namespace, job: str) -> collections.Counter[str]:
    return collections.Counter(p["status"].get("phase", "-") for p in ns.job_pods(job))


def count_phases(ns: Namespace, job: str) -> str:
    counts = phases(ns, job)
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items(), key=lambda kv: kv[0] != "Running"))


def wait_bound(ns: Namespace, job: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    return wait_for(
        f"{count} {job} pods bound",
        lambda: ps if len(bound(ps := ns.job_pods(job))) == count else None,
        timeout=timeout,
    )


def hold_unbound(ns: Namespace, job: str, why: str) -> None:
    hold(f"no {job} pod bound ({why})", lambda: not bound(ns.job_pods(job)), seconds=HOLD_SECONDS)


def wait_unschedulable(flavor: Flavor, ns: Namespace, job: str) -> str:
    """Wait for the group's PodGroupInitiallyScheduled=False once it tried placing every pod; its text."""

    def probe() -> dict[str, Any] | None:
        cond = flavor.condition(ns, "PodGroupInitiallyScheduled")
        if cond and cond["status"] == "False" and PLACEMENTS_TRIED in cond.get("message", ""):
            return cond
        return None

    cond = wait_for(f"{job}: PodGroupInitiallyScheduled=False after trying its placements", probe)
    return f"{cond['status']}/{cond['reason']}: {cond['message']}"


def why_waiting(flavor: Flavor, ns: Namespace, job: str) -> str | None:
    """Where the system says why a started-once group waits: a PodGroup condition, else a pod's."""
    admitted = flavor.condition(ns, "Admitted")
    if admitted and admitted["status"] == "False" and PLACEMENTS_TRIED in admitted.get("message", ""):
        return f"Admitted={admitted['status']}/{admitted['reason']}"
    for pod in ns.job_pods(job):
        cond = pod_condition(pod, "PodScheduled")
        if cond and cond.get("reason") == "Unschedulable" and PLACEMENTS_TRIED in cond.get("message", ""):
            return f"the pods' PodScheduled={cond['status']}/{cond['reason']}"
    return None


def ensure_priority_classes(ns: Namespace) -> None:
    """Create PRIORITY_CLASSES where absent; one of the same name with another value is an error."""
    for name, value in PRIORITY_CLASSES.items():
        ensure_priority_class(ns.api, name, value)


def names(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def is_gated(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("schedulingGates"))


def seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


@dataclass
class GangFate:
    """What became of a running gang once a higher-priority group arrived."""

    job: str
    size: int
    domain: str
    """Where it ran."""
    deleted: int = 0
    """Its pods from before that are gone or going."""
    running: int = 0
    new_pending: int = 0
    new_gated: int = 0
    new_after: float | None = None
    """Seconds from the preemptor's creation until its new pods existed; None if none came in time."""
    failed: int = 0
    """The Job's status.failed."""

    @property
    def partial(self) -> bool:
        """Left running below its size: it holds nodes and cannot work."""
        return 0 < self.running < self.size

    def line(self) -> str:
        if not self.deleted:
            return f"{self.job} ({self.domain}): {self.running} Running, untouched"
        text = (
            f"{self.job} ({self.domain}): {self.deleted} of {self.size} pods deleted, {self.running} Running"
        )
        if self.partial:
            text += f" (a partial gang holding {self.running} nodes)"
        if self.new_after is None:
            text += f", no new pods within {REPLACEMENT_SECONDS:.0f} s"
        else:
            gated = ", gated" if self.new_gated and self.new_gated == self.new_pending else ""
            text += (
                f"; its {self.new_pending} new pods came {seconds(self.new_after)} after high-2 was created"
                f" and stay Pending{gated}"
            )
        return text + f"; status.failed {self.failed}"


def gang_fate(ns: Namespace, job: str, domain: str, originals: set[str], since: float) -> GangFate:
    """Read what became of `job`; if some of its pods went, wait (bounded) for the Job's new ones first."""
    fate = GangFate(job, len(originals), domain)
    fate.deleted = len(originals - names(ns.job_pods(job)))
    if fate.deleted:

        def replaced() -> list[dict[str, Any]] | None:
            new = [p for p in ns.job_pods(job) if p["metadata"]["name"] not in originals]
            return new if len(new) >= fate.deleted else None

        try:
            wait_for(
                f"{job}'s new pods",
                replaced,
                timeout=max(since + REPLACEMENT_SECONDS - time.monotonic(), 0.0),
                interval=0.5,
            )
            fate.new_after = time.monotonic() - since
        except AssertionError:
            pass  # recorded as "no new pods"
        else:
            hold(
                f"{job}'s new pods stay unbound (no room left)",
                lambda: not bound([p for p in ns.job_pods(job) if p["metadata"]["name"] not in originals]),
                seconds=HOLD_SECONDS,
            )
    pods = ns.job_pods(job)
    new = [p for p in pods if p["metadata"]["name"] not in originals]
    fate.running = sum(p["status"].get("phase") == "Running" for p in bound(pods))
    fate.new_pending = sum(p["status"].get("phase", "Pending") == "Pending" for p in new)
    fate.new_gated = sum(is_gated(p) for p in new)
    job_body = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job}")
    fate.failed = int(job_body.get("status", {}).get("failed") or 0)
    return fate


# ---------------------------------------------------------------------- the scenarios


def plain_4(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.fill(*FIVE_BUSY)
    ns.create(flavor.job("plain-4", 4, JobPolicy(policy="basic", min_count=None, parallelism=4)))

    def three_run_one_unschedulable() -> bool:
        pods = ns.job_pods("plain-4")
        running = sum(p["status"].get("phase") == "Running" for p in pods)
        refused = [
            p for p in pods if (c := pod_condition(p, "PodScheduled")) and c.get("reason") == "Unschedulable"
        ]
        return len(pods) == 4 and running == 3 and len(refused) == 1

    wait_for("3 plain-4 pods running and the 4th reported unschedulable", three_run_one_unschedulable)
    hold(
        "3 plain-4 pods Running, the 4th Pending",
        lambda: phases(ns, "plain-4") == {"Running": 3, "Pending": 1},
        seconds=HOLD_SECONDS,
    )
    return Outcome(count_phases(ns, "plain-4"))


def gang_4(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.fill(*FIVE_BUSY)
    ns.create(flavor.job("gang-4", 4, gang(4)))
    message = wait_unschedulable(flavor, ns, "gang-4")
    hold_unbound(ns, "gang-4", "3 free nodes, minCount 4")
    ns.unfill("was-worker")
    pods = wait_bound(ns, "gang-4", 4, timeout=90)
    return Outcome(f"0 bound with 3 free nodes ({message}); after freeing one: {len(bound(pods))} bound")


def local_2(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.create(flavor.job("local-2", 2, gang(2, LB_KEY)))
    domains = domains_of(ns.api, wait_bound(ns, "local-2", 2), LB_KEY)
    return Outcome(f"2 bound in {', '.join(sorted(domains))}", [domains])


def local_4(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.create(flavor.job("local-4", 4, gang(4, LB_KEY)))
    message = wait_unschedulable(flavor, ns, "local-4")
    hold_unbound(ns, "local-4", "no local block has 4 nodes")
    return Outcome(f"0 bound ({message})")


def block_4(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.create(flavor.job("block-4", 4, gang(4, NB_KEY)))
    domains = domains_of(ns.api, wait_bound(ns, "block-4", 4), NB_KEY)
    return Outcome(f"4 bound in {', '.join(sorted(domains))}", [domains])


def best_fit(busy: str) -> Callable[[Flavor, Namespace], Outcome]:
    def run(flavor: Flavor, ns: Namespace) -> Outcome:
        ns.fill(busy)
        chosen: list[set[str]] = []
        for i in range(BEST_FIT_RUNS):
            name = f"block-3-{i}"
            ns.create(flavor.job(name, 3, gang(3, NB_KEY)))
            chosen.append(domains_of(ns.api, wait_bound(ns, name, 3), NB_KEY))
            ns.api.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{ns.name}/jobs/{name}",
                {"propagationPolicy": "Foreground"},
            )
            wait_for(f"{name} gone", lambda name=name: not ns.pods(f"job-name={name}"), timeout=60)
        counts = collections.Counter(",".join(sorted(d)) for d in chosen)
        line = ", ".join(f"{domain} {n}/{BEST_FIT_RUNS}" for domain, n in sorted(counts.items()))
        return Outcome(line, chosen)

    return run


def suspend_resume(flavor: Flavor, ns: Namespace) -> Outcome:
    ns.create(flavor.job("gang-4", 4, gang(4)))
    wait_bound(ns, "gang-4", 4)
    ns.patch_job("gang-4", {"spec": {"suspend": True}})
    wait_for("gang-4 pods gone", lambda: not ns.pods("job-name=gang-4"), timeout=60)
    ns.fill(*FIVE_BUSY)
    ns.patch_job("gang-4", {"spec": {"suspend": False}})
    wait_for("4 gang-4 pods again", lambda: len(ns.job_pods("gang-4")) == 4)
    why = wait_for(
        "gang-4 said to wait, after trying its placements", lambda: why_waiting(flavor, ns, "gang-4")
    )
    hold_unbound(ns, "gang-4", "resumed with 3 free nodes, minCount 4")
    initial = flavor.condition(ns, "PodGroupInitiallyScheduled") or {}
    line = f"0 bound; PodGroupInitiallyScheduled={initial.get('status')}/{initial.get('reason')}"
    admitted = flavor.condition(ns, "Admitted")
    if admitted:
        line += f"; Admitted={admitted['status']}/{admitted['reason']}: {admitted['message']}"
    else:
        line += f"; no PodGroup condition says why it waits (only {why})"
    return Outcome(line)


def article_preemption(mode: DisruptionModeKind) -> Callable[[Flavor, Namespace], Outcome]:
    """The article's case: low-a and low-b fill both network blocks, then high-2 needs one local block."""

    def run(flavor: Flavor, ns: Namespace) -> Outcome:
        ensure_priority_classes(ns)
        originals: dict[str, set[str]] = {}
        blocks: dict[str, str] = {}
        for name in LOW_GANGS:
            ns.create(flavor.job(name, 4, gang(4, NB_KEY, mode=mode, priority="low")))
            pods = wait_bound(ns, name, 4)
            originals[name] = names(pods)
            blocks[name] = ",".join(sorted(domains_of(ns.api, pods, NB_KEY)))
        ns.create(flavor.job("high-2", 2, gang(2, LB_KEY, priority="high")))
        created = time.monotonic()
        high_pods = wait_bound(ns, "high-2", 2, timeout=90)
        high = domains_of(ns.api, high_pods, LB_KEY)
        high_block = ", ".join(sorted(domains_of(ns.api, high_pods, NB_KEY)))
        fates = [gang_fate(ns, name, blocks[name], originals[name], created) for name in LOW_GANGS]
        victims = [f for f in fates if f.deleted]
        line = f"high-2 in {', '.join(sorted(high))} ({high_block}); " + "; ".join(
            f.line() for f in victims + [f for f in fates if not f.deleted]
        )
        return Outcome(line, [high], {"fates": fates, "high_block": high_block})

    return run


def free_block_fits(flavor: Flavor, ns: Namespace) -> Outcome:
    """low-a takes one network block; high-2 fits in a free local block of the other: nothing is evicted."""
    ensure_priority_classes(ns)
    ns.create(flavor.job("low-a", 4, gang(4, NB_KEY, priority="low")))
    low_pods = wait_bound(ns, "low-a", 4)
    originals = names(low_pods)
    block = domains_of(ns.api, low_pods, NB_KEY)
    ns.create(flavor.job("high-2", 2, gang(2, LB_KEY, priority="high")))
    high_pods = wait_bound(ns, "high-2", 2, timeout=90)
    high = domains_of(ns.api, high_pods, LB_KEY)
    hold(
        "low-a keeps its 4 pods (nothing evicted)",
        lambda: names(bound(ns.job_pods("low-a"))) == originals,
        seconds=HOLD_SECONDS,
    )
    high_block = domains_of(ns.api, high_pods, NB_KEY)
    line = (
        f"low-a in {', '.join(sorted(block))}; high-2 in {', '.join(sorted(high))} "
        f"({', '.join(sorted(high_block))}); 0 pods evicted"
    )
    return Outcome(line, [high], {"low_block": block, "high_block": high_block})


def cheapest_victim(flavor: Flavor, ns: Namespace) -> Outcome:
    """middle and low (4 pods each) fill one network block each; high-2 needs one local block, and
    taking either gang's would do: which goes, over CHEAPEST_RUNS runs."""
    ensure_priority_classes(ns)
    seen: collections.Counter[str] = collections.Counter()
    chosen: list[set[str]] = []
    runs: list[dict[str, int]] = []
    for i in range(CHEAPEST_RUNS):
        jobs = {"middle": f"middle-{i}", "low": f"low-{i}"}
        originals = {}
        for label, name in jobs.items():
            ns.create(flavor.job(name, 4, gang(4, NB_KEY, priority=label)))
            originals[label] = names(wait_bound(ns, name, 4))
        high = f"high-2-{i}"
        ns.create(flavor.job(high, 2, gang(2, LB_KEY, priority="high")))
        chosen.append(domains_of(ns.api, wait_bound(ns, high, 2, timeout=90), LB_KEY))
        gone = {label: len(originals[label] - names(ns.job_pods(jobs[label]))) for label in jobs}
        runs.append(gone)
        for label, count in gone.items():
            if count:
                seen[f"{label} ({count} of 4 pods)"] += 1
        for name in [*jobs.values(), high]:
            ns.api.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{ns.name}/jobs/{name}",
                {"propagationPolicy": "Foreground"},
            )
        wait_for(f"run {i}'s pods gone", lambda: not ns.pods(), timeout=60)
    line = "goes: " + ", ".join(f"{what} {n}/{CHEAPEST_RUNS}" for what, n in sorted(seen.items()))
    return Outcome(line, chosen, {"runs": runs})


SCENARIOS: list[Scenario] = [
    Scenario("plain-4", "plain-4 (basic), 5 nodes busy", plain_4),
    Scenario("gang-4", "gang-4, 3 nodes free, then 4", gang_4),
    Scenario("local-2", "local-2, empty cluster", local_2),
    Scenario("local-4", "local-4 (no local block has 4 nodes)", local_4),
    Scenario("block-4", "block-4, empty cluster", block_4),
    Scenario("best-fit-lb-a1", f"block-3, busy node in lb-a1, {BEST_FIT_RUNS} runs", best_fit("was-worker")),
    Scenario("best-fit-lb-b1", f"block-3, busy node in lb-b1, {BEST_FIT_RUNS} runs", best_fit("was-worker5")),
    Scenario("suspend-resume", "gang-4 suspended, 3 nodes free, resumed", suspend_resume),
    Scenario(
        "preempt-single",
        "preemption, `single`: low-a and low-b (4 pods, priority low) fill nb-a and nb-b, then high-2 "
        "(local block, priority high)",
        article_preemption("single"),
    ),
    Scenario("preempt-all", "preemption, `all`: the same with disruptionMode all", article_preemption("all")),
    Scenario(
        "preempt-free-block",
        "no preemption needed: low-a fills one network block, then high-2",
        free_block_fits,
    ),
    Scenario(
        "preempt-cheapest",
        f"cheapest victim: gangs of priority middle and low fill one network block each, then high-2; "
        f"{CHEAPEST_RUNS} runs",
        cheapest_victim,
    ),
]


def run_in(cluster: ClusterState, flavor: Flavor, scenario: Scenario) -> Outcome:
    """Run one scenario in a fresh namespace, deleted (and its pods gone) afterwards."""
    ns = new_namespace(cluster, f"{flavor.name}-{scenario.id}")
    try:
        outcome = scenario.run(flavor, ns)
    finally:
        delete_namespace(ns)
    print(f"[{flavor.name}] {scenario.title}: {outcome.line}")
    return outcome
