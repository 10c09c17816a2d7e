"""The article's scenarios, written once and run on both systems.

Each scenario runs on a fresh namespace of either a cluster in `--mode upstream` (Job `spec.scheduling`,
upstream v1.37.2's in-tree gang scheduler) or a stock cluster with Phalanx (Job annotations), and returns
what a user would see. `tests/integration/test_side_by_side.py` runs them and asserts; `bench/comparison.py`
runs them and writes docs/comparison.md.

Every step waits for the state it expects before reading. Where the point is that something must NOT
happen (a gang stays unbound), the scenario watches it for HOLD_SECONDS with `hold`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.job_policy import JobPolicy, annotations_for, upstream_scheduling
from phalanx.devcluster.cluster import ClusterState

from .kube import (
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    delete_namespace,
    domains_of,
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


@dataclass(frozen=True)
class Flavor:
    """How one system is asked for a policy, and where it reports."""

    name: str
    groups_path: str

    def job(self, name: str, count: int, policy: JobPolicy) -> dict[str, Any]:
        if self.name == "upstream":
            return gpu_job(name, count, scheduling=upstream_scheduling(policy))
        return gpu_job(
            name, count, labels={"phalanx.dev/managed": "true"}, annotations=annotations_for(policy)
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


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    run: Callable[[Flavor, Namespace], Outcome]


def gang(count: int, key: str | None = None) -> JobPolicy:
    return JobPolicy(policy="gang", min_count=count, topology_key=key, parallelism=count)


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


SCENARIOS: list[Scenario] = [
    Scenario("plain-4", "plain-4 (basic), 5 nodes busy", plain_4),
    Scenario("gang-4", "gang-4, 3 nodes free, then 4", gang_4),
    Scenario("local-2", "local-2, empty cluster", local_2),
    Scenario("local-4", "local-4 (no local block has 4 nodes)", local_4),
    Scenario("block-4", "block-4, empty cluster", block_4),
    Scenario("best-fit-lb-a1", f"block-3, busy node in lb-a1, {BEST_FIT_RUNS} runs", best_fit("was-worker")),
    Scenario("best-fit-lb-b1", f"block-3, busy node in lb-b1, {BEST_FIT_RUNS} runs", best_fit("was-worker5")),
    Scenario("suspend-resume", "gang-4 suspended, 3 nodes free, resumed", suspend_resume),
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
