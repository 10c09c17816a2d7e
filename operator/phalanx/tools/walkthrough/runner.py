"""Playing the walk-through: select the steps, prepare the cluster, play each step (OK / FAILED / SKIP,
cleanup after each, the cluster's state at a failure) and sum up."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from phalanx.api import keys
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.topology import NETWORK_BLOCK_KEY
from phalanx.tools.walkthrough.demo import Demo, NotPlayableError, StepError
from phalanx.tools.walkthrough.facts import SEED_NODES, job_manifest, live, requests_gpus, seconds

# ---------------------------------------------------------------------- steps and the runner


class Context(Protocol):
    """What the runner needs of the demo: output and a way back to a clean namespace."""

    def say(self, text: str = "") -> None: ...

    def reset(self) -> None: ...

    def show(self, label: str = "") -> None: ...


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    run: Callable[[Demo], None] | None
    """None: not built yet (`skip` says why)."""
    skip: str = ""
    full_only: bool = False
    """Left out of the short run (CI)."""
    addon: str = ""
    """The dev-cluster addon whose controller it needs (`--addons`): skipped where its kind is not served."""


@dataclass
class Result:
    step: Step
    status: str  # OK, FAILED, SKIP
    seconds: float = 0.0
    why: str = ""


def select(steps: Sequence[Step], *, short: bool, only: Sequence[str] = ()) -> list[Step]:
    """The steps to play: all (or all but full-only ones when short), or those named in `only`, in order."""
    known = {s.id for s in steps}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise ValueError(
            f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(s.id for s in steps)}"
        )
    if only:
        return [s for s in steps if s.id in only]
    return [s for s in steps if not (short and s.full_only)]


def play(steps: Sequence[Step], ctx: Context, run_step: Callable[[Step], None]) -> list[Result]:
    """Play each step: header, run, cleanup, OK. The first failure is reported with the cluster's state
    and ends the walk-through; the cleanup runs whatever happens (Ctrl-C too)."""
    results: list[Result] = []
    for number, step in enumerate(steps, 1):
        ctx.say(f"=== [{number}/{len(steps)}] {step.id}: {step.title}")
        if step.run is None:
            ctx.say(f"SKIP {step.id}: {step.skip}")
            ctx.say()
            results.append(Result(step, "SKIP", why=step.skip))
            continue
        started = time.monotonic()
        failure: Exception | None = None
        skipped = ""
        try:
            run_step(step)
        except NotPlayableError as e:  # decided by the step itself (e.g. the kueue addon is not up)
            skipped = str(e)
        except FAILURES as e:
            failure = e
            _diagnose(ctx)
        finally:  # Ctrl-C too: the next run must not find this step's Jobs or failed nodes
            try:
                ctx.reset()
            except FAILURES as e:
                if failure is None:
                    failure = e
                else:  # the step's own failure is the one to report
                    ctx.say(f"(the cleanup failed too: {e})")
        if failure is None and skipped:
            ctx.say(f"SKIP {step.id}: {skipped}")
            ctx.say()
            results.append(Result(step, "SKIP", why=skipped))
            continue
        if failure is not None:
            ctx.say(f"FAILED {step.id}: {failure}")
            results.append(Result(step, "FAILED", time.monotonic() - started, str(failure)))
            return results
        took = time.monotonic() - started
        ctx.say(f"OK {step.id} ({seconds(took)})")
        ctx.say()
        results.append(Result(step, "OK", took))
    return results


FAILURES = (StepError, ApiError)
"""What ends a step as FAILED: an expectation not met, or the API refusing what the step asked."""


def _diagnose(ctx: Context) -> None:
    """What the cluster looks like when a step failed (best effort: the failure is what matters)."""
    ctx.say("the cluster when the step failed:")
    try:
        ctx.show("at the failure")
    except Exception as e:  # the cluster itself may be what broke
        ctx.say(f"(could not read it: {e})")


def summary(results: Sequence[Result], took: float) -> str:
    counts = Counter(r.status for r in results)
    skips = [r for r in results if r.status == "SKIP"]
    unserved = [r for r in skips if r.step.run is not None and r.step.addon]  # their SKIP lines said why
    reasons = [f"{r.step.id}: {r.why}" for r in skips if r not in unserved]
    if unserved:
        addons = ",".join(dict.fromkeys(r.step.addon for r in unserved))
        reasons.append(
            f"{', '.join(r.step.id for r in unserved)}: their kinds are not served by this cluster "
            f"(phalanx dev-cluster up --addons {addons})"
        )
    skipped = "; ".join(reasons)
    line = (
        f"walk-through: {counts['OK']} OK, {counts['SKIP']} skipped, {counts['FAILED']} failed "
        f"in {seconds(took)}"
    )
    if skipped:
        line += f" (skipped {skipped})"
    failed = [r for r in results if r.status == "FAILED"]
    if failed:
        line += f"; FAILED {failed[0].step.id}: {failed[0].why}"
    return line


# ---------------------------------------------------------------------- before the first step


def prepare(d: Demo, ready_timeout: float) -> None:
    """Check the cluster is the article's, with its GPU nodes free; start from an empty namespace; wait
    until Phalanx's webhook gates a managed Job (a dry-run create), so the first step is not a race."""
    d.say("=== before the first step: the article's nodes free, an empty namespace, Phalanx answering")
    labels = d.node_labels()
    missing = [n for n in SEED_NODES if NETWORK_BLOCK_KEY not in labels.get(n, {})]
    if missing:
        raise StepError(
            f"the walk-through needs the article's 8 nodes (phalanx dev-cluster up --topology seed); "
            f"missing or unlabelled: {', '.join(missing)}"
        )
    leftover = d.tainted(SEED_NODES)
    if leftover:
        d.say(f"healing {', '.join(leftover)}, left failed by an earlier run")
        d.failed_nodes = leftover
    busy = sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in live(d.api.get("/api/v1/pods")["items"])
        if p["metadata"]["namespace"] != d.namespace
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        and requests_gpus(p)
    )
    if busy:
        raise StepError(
            "the walk-through needs the 8 GPU nodes to itself; these pods ask for GPUs: "
            + ", ".join(busy[:8])
            + (" ..." if len(busy) > 8 else "")
            + " (delete their Jobs, or use a fresh dev cluster)"
        )
    path = f"/api/v1/namespaces/{d.namespace}"
    try:
        d.api.request("DELETE", path)
        d.say(f"deleting namespace {d.namespace}, left by an earlier run")
    except ApiError as e:
        if e.status != 404:
            raise
    d.wait(f"no namespace {d.namespace}", lambda: _absent(d.api, path), timeout=120)
    d.api.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": d.namespace}},
    )
    answer = ["no answer"]

    def gates() -> bool:
        ok, answer[0] = _webhook_answer(d)
        return ok

    try:
        d.wait("Phalanx's webhook gates a managed Job (dry run)", gates, timeout=ready_timeout)
    except StepError as e:
        raise StepError(f"{e}: {answer[0]}") from e
    d.reset()  # heals leftover failed nodes; needs Phalanx's CRDs, installed before its webhook answers


def _absent(api: RestClient, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as e:
        if e.status == 404:
            return True
        raise
    return False


def _webhook_answer(d: Demo) -> tuple[bool, str]:
    """Whether a dry-run create of a managed Job comes back with Phalanx's gate in its pod template."""
    job = job_manifest("phalanx-ready-check", 1)
    try:
        created = d.api.request("POST", d.path("/apis/batch/v1/namespaces/{ns}/jobs?dryRun=All"), job)
    except ApiError as e:
        return False, str(e)
    gates = created["spec"]["template"]["spec"].get("schedulingGates") or []
    if any(g.get("name") == keys.ADMISSION_GATE for g in gates):
        return True, "gated"
    return False, "the Job came back without the gate: Phalanx's webhook is not installed"


def walk(d: Demo, steps: Sequence[Step], ready_timeout: float = 60.0) -> int:
    """The whole walk-through: prepare, play `steps`, delete the namespace, print the summary; 0 if all OK."""
    started = time.monotonic()
    try:
        prepare(d, ready_timeout)
    except FAILURES as e:
        d.say(f"FAILED before the first step: {e}")
        d.say("is Phalanx running against this cluster? (phalanx run --kubeconfig …; hack/demo.sh starts it)")
        return 1
    d.say()
    try:
        results = play(steps, d, lambda step: step.run(d) if step.run else None)
    except KeyboardInterrupt:
        d.say(
            f"interrupted: the step was cleaned up; namespace {d.namespace} is left for the next run to empty"
        )
        return 130
    try:
        d.api.request("DELETE", f"/api/v1/namespaces/{d.namespace}")
    except ApiError as e:
        if e.status != 404:
            raise
    d.say(summary(results, time.monotonic() - started))
    return 1 if any(r.status == "FAILED" for r in results) else 0
