"""Issue 18's cases where upstream v1.37 and Phalanx differ, written once and run on both systems:
a large gang behind a stream of small ones (bounded waiting), a high-priority tree behind low-priority
gangs (trees preempt), and a job keyed to a domain it can never fit (`topology-mode: auto`).

`bench/comparison.py` runs them for its rows of docs/comparison.md (one cluster at a time); Phalanx's side
of each is asserted by its own integration test (test_bounded_waiting.py, test_gang_semantics.py). Each
scenario is bounded (a stream of at most STREAM_SECONDS, a wait of at most WAIT_SECONDS): not reaching a
state within the bound is an outcome, written in the row.
"""

from __future__ import annotations

import random
import time
from typing import Any

from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, bound, domains_of, hold, wait_for
from .scenarios import (
    HOLD_SECONDS,
    LOW_GANGS,
    PHALANX,
    Flavor,
    Outcome,
    Scenario,
    ensure_priority_classes,
    gang,
    names,
    seconds,
    wait_bound,
)
from .slice_scenarios import (
    PHALANX_SLICES,
    SLICES,
    UPSTREAM_SLICES,
    composite,
    placement,
    pod_group,
    slice_pod,
    slice_pods,
    where_placed,
    workload,
)

STREAM_SECONDS = 150.0
"""How long the stream of small gangs runs at most while the large gang waits (Phalanx's default
--starvation-age is 60 s)."""
WAIT_SECONDS = 90.0
SEED = 18


def _big(flavor: Flavor) -> dict[str, Any]:
    """8 pods of 4 GPUs in one network block (two per node: a whole block)."""
    job = flavor.job("big-8", 8, gang(8, NB_KEY))
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU_KEY] = "4"
    return job


def _small(flavor: Flavor, name: str, run: int) -> dict[str, Any]:
    """2 pods of 8 GPUs anywhere, each ending `run` seconds after it starts (the simulated kubelet)."""
    job = flavor.job(name, 2, gang(2))
    job["spec"]["template"]["metadata"]["annotations"]["sim.phalanx.dev/complete-after"] = f"{run}s"
    return job


def starvation(flavor: Flavor, ns: Namespace) -> Outcome:
    """A seeded stream of 2-pod gangs keeps two waiting at any time and every node busy; then an 8-pod
    gang of the same priority that needs a whole network block. Does it start while the stream goes on?"""
    rng = random.Random(SEED)
    made: list[str] = []

    def feed() -> int:
        pods = ns.pods()
        waiting = sum(
            1
            for name in made
            if len(bound([p for p in pods if p["metadata"].get("labels", {}).get("job-name") == name])) < 2
        )
        while waiting < 2:
            name = f"small-{len(made):03d}"
            ns.create(_small(flavor, name, rng.choice([3, 4, 5, 6])))
            made.append(name)
            waiting += 1
        return sum(
            1
            for p in pods
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
        )

    wait_for("every node busy with small gangs", lambda: feed() >= 8, timeout=120)
    ns.create(_big(flavor))
    created, before = time.monotonic(), len(made)

    def started() -> bool:
        feed()
        return len(bound(ns.job_pods("big-8"))) == 8

    try:
        wait_for("big-8 bound", started, timeout=STREAM_SECONDS, interval=0.5)
    except AssertionError:
        placed = len(bound(ns.job_pods("big-8")))
        line = (
            f"big-8 not started after {STREAM_SECONDS:.0f} s ({placed} of 8 bound) while "
            f"{len(made) - before} small gangs were made after it"
        )
        return Outcome(line, facts={"started": False, "small": len(made) - before})
    took = time.monotonic() - created
    block = ", ".join(sorted(domains_of(ns.api, ns.job_pods("big-8"), NB_KEY)))
    made_after = len(made) - before
    line = f"big-8 started in {block} {seconds(took)} after its creation, {made_after} small gangs made since"
    return Outcome(line, facts={"started": True, "seconds": took, "small": len(made) - before})


def tree_preemption(flavor: Flavor, ns: Namespace) -> Outcome:
    """low-a and low-b (4 pods, priority low) fill both network blocks; then the article's hand-made
    slices (2 slices of 2 pods, each in a local block, both in one network block) with pods of priority
    high. A plain gang of that priority would preempt one low gang."""
    ensure_priority_classes(ns)
    slices = PHALANX_SLICES if flavor is PHALANX else UPSTREAM_SLICES
    originals: dict[str, set[str]] = {}
    for name in LOW_GANGS:
        ns.create(flavor.job(name, 4, gang(4, NB_KEY, priority="low")))
        originals[name] = names(wait_bound(ns, name, 4))
    ns.create(workload(slices.workload_api))
    ns.create(composite(slices.composite_api))
    for g in SLICES:
        ns.create(pod_group(g, slices.workload_api))
    for g in SLICES:
        for i in (0, 1):
            pod = slice_pod(g, i, upstream=flavor is not PHALANX)
            pod["spec"]["priorityClassName"] = "high"
            ns.create(pod)
    created = time.monotonic()

    def running() -> bool:
        pods = slice_pods(ns)
        return len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods)

    try:
        wait_for("the slices Running", running, timeout=WAIT_SECONDS)
        took: float | None = time.monotonic() - created
    except AssertionError:
        took = None
    fates = []
    for name in LOW_GANGS:
        gone = len(originals[name] - names(ns.job_pods(name)))
        fates.append(f"{name}: {gone} of 4 pods gone" if gone else f"{name}: untouched")
    if took is None:
        placed = len(bound(slice_pods(ns)))
        line = f"slices not Running after {WAIT_SECONDS:.0f} s ({placed} of 4 bound); " + "; ".join(fates)
        return Outcome(line, facts={"running": False, "fates": fates})
    blocks, networks = placement(ns)
    line = f"{where_placed(blocks, networks)}, Running {seconds(took)} after the last pod; " + "; ".join(
        fates
    )
    return Outcome(line, [networks], {"running": True, "fates": fates})


def auto_never_fits(flavor: Flavor, ns: Namespace) -> Outcome:
    """A 3-pod job keyed to local blocks (2 nodes each): it can never fit one. Phalanx: topology-mode
    auto; upstream has no auto mode, so the same job as required (its only strict form)."""
    job = flavor.job("local-3", 3, gang(3, LB_KEY))
    if flavor is PHALANX:
        job["metadata"]["annotations"]["phalanx.dev/topology-mode"] = "auto"
    ns.create(job)
    try:
        pods = wait_bound(ns, "local-3", 3, timeout=WAIT_SECONDS)
    except AssertionError:
        hold("no local-3 pod bound", lambda: not bound(ns.job_pods("local-3")), seconds=HOLD_SECONDS)
        cond = flavor.condition(ns, "PodGroupInitiallyScheduled")
        said = f" ({cond['status']}/{cond['reason']}: {cond['message']})" if cond else ""
        return Outcome(f"0 bound after {WAIT_SECONDS:.0f} s{said}", facts={"bound": 0})
    local = ", ".join(sorted(domains_of(ns.api, pods, LB_KEY)))
    block = ", ".join(sorted(domains_of(ns.api, pods, NB_KEY)))
    cond = flavor.condition(ns, "Admitted")
    note = ""
    if cond and "auto:" in cond.get("message", ""):
        note = " (" + cond["message"][cond["message"].index("auto:") :].rstrip(")") + ")"
    return Outcome(f"3 bound in {local} ({block}){note}", [domains_of(ns.api, pods, NB_KEY)], {"bound": 3})


SEMANTICS_SCENARIOS: list[Scenario] = [
    Scenario(
        "starvation",
        "bounded waiting: a stream of 2-pod gangs (two waiting at any time, every node busy), then an 8-pod "
        "gang of the same priority needing a whole network block",
        starvation,
    ),
    Scenario(
        "tree-preemption",
        "trees preempt: low-a and low-b (priority low) fill both network blocks, then the hand-made slices "
        "with pods of priority high",
        tree_preemption,
    ),
    Scenario(
        "auto",
        "a 3-pod job keyed to local blocks (2 nodes each), which it can never fit: Phalanx "
        "`topology-mode: auto`, upstream required (it has no auto)",
        auto_never_fits,
    ),
]
