"""`phalanx demo`: the article's experiments, one after another, on the dev cluster with Phalanx running.

This module is the machinery: the demo's view of the cluster (`Demo`: create Jobs, fill and fail nodes,
wait for a state with a timeout, print the `where` table and `kubectl get podgroups`), and the runner that
plays the steps, reports each as OK / FAILED / SKIP and cleans up after each one. The steps themselves, the
article's experiments and what to notice in each, are in `walkthrough_steps`.

Every wait polls for the state it expects and fails with what it last saw; nothing sleeps a fixed time
before reading. A "nothing happens" check (a gang stays unbound) watches for `hold_seconds`.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from phalanx.api import keys
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.tools import FAILURE_TAINT, fail_node, fill, heal_node
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY
from phalanx.tools.where import where_table

T = TypeVar("T")

NAMESPACE = "phalanx-demo"
GPU = "nvidia.com/gpu"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SEED_NODES = tuple(["was-worker", *(f"was-worker{i}" for i in range(2, 9))])
PODGROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"
WORKLOADS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/workloads"
PLACEMENTS_TRIED = "placements are available"
"""In a PodGroup condition: the group was tried whole (not an early status before all its pods exist)."""


class StepError(RuntimeError):
    """Phalanx (or the cluster) did not do what the step expects; the message says what and what was seen."""


# ---------------------------------------------------------------------- pure helpers


def job_manifest(
    name: str,
    count: int,
    *,
    policy: str = "gang",
    key: str | None = None,
    priority_class: str | None = None,
    disruption_mode: str | None = None,
) -> dict[str, Any]:
    """The article's Job (Indexed, `count` pods of 8 GPUs each) in the Phalanx form: label + annotations."""
    annotations: dict[str, str] = {}
    if policy != "gang":
        annotations[keys.POLICY_ANNOTATION] = policy
    if key:
        annotations[keys.TOPOLOGY_KEY_ANNOTATION] = key
    if disruption_mode:
        annotations[keys.DISRUPTION_MODE_ANNOTATION] = disruption_mode
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "worker", "image": PAUSE_IMAGE, "resources": {"limits": {GPU: "8"}}}],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {keys.MANAGED_LABEL: keys.MANAGED_VALUE},
            "annotations": annotations,
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "template": {"spec": pod_spec},
        },
    }


def describe_job(job: Mapping[str, Any]) -> str:
    """One line saying what a Job asks for, the way a reader of the article would write it."""
    meta = job["metadata"]
    count = job["spec"]["parallelism"]
    notes = meta.get("annotations") or {}
    parts = [f"{count} pods x 8 GPUs", f"label {keys.MANAGED_LABEL}=true"]
    parts += [f"{k}={v}" for k, v in sorted(notes.items())]
    priority = job["spec"]["template"]["spec"].get("priorityClassName")
    if priority:
        parts.append(f"priorityClassName {priority}")
    return f"{meta['name']}: " + ", ".join(parts)


def live(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods not being deleted."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def bound(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in live(pods) if p["spec"].get("nodeName")]


def gated(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in live(pods)
        if any(g.get("name") == keys.ADMISSION_GATE for g in p["spec"].get("schedulingGates") or [])
    ]


def phases(pods: Iterable[Mapping[str, Any]]) -> Counter[str]:
    return Counter(str(p.get("status", {}).get("phase") or "-") for p in live(pods))


def domains(
    pods: Iterable[Mapping[str, Any]], node_labels: Mapping[str, Mapping[str, str]], key: str
) -> set[str]:
    """The `key` label values of the nodes the pods are bound to."""
    return {node_labels.get(p["spec"]["nodeName"], {}).get(key, "-") for p in bound(pods)}


def condition(group: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if not group:
        return None
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conditions if c.get("type") == kind), None)


def partial_gangs(groups: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Gang Jobs with some but fewer than minCount pods bound: what Phalanx must never admit."""
    per_job = Counter(str(p["metadata"].get("labels", {}).get("job-name", "")) for p in bound(pods))
    found = []
    for group in groups:
        gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
        job = (group["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL)
        if gang is None or not job:
            continue
        have, need = per_job.get(str(job), 0), int(gang.get("minCount") or 0)
        if 0 < have < need:
            found.append(f"{job}: {have} of {need} pods bound")
    return found


def brief(value: object, limit: int = 400) -> str:
    """A value for a failure message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


# ---------------------------------------------------------------------- the demo's view of the cluster


@dataclass
class Demo:
    """The dev cluster as the walk-through drives it: one namespace, the seed nodes, real kubectl."""

    api: RestClient
    kubectl: Path
    kubeconfig: Path
    out: TextIO
    namespace: str = NAMESPACE
    short: bool = False
    hold_seconds: float = 2.0
    timeout: float = 60.0
    failed_nodes: list[str] = field(default_factory=list)
    """Nodes a step failed, healed by `reset`."""

    # -- output
    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def command(self, text: str) -> None:
        """What the user would type for this action (the demo does it through the API)."""
        self.say(f"$ {text}")

    def notice(self, text: str) -> None:
        self.say(f"notice: {text}")

    def ok(self, text: str) -> None:
        self.say(f"  ok: {text}")

    # -- reading
    def path(self, template: str) -> str:
        return template.replace("{ns}", self.namespace)

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(self.path("/api/v1/namespaces/{ns}/pods"))["items"]
        return items

    def job_pods(self, job: str) -> list[Mapping[str, Any]]:
        return live(p for p in self.pods() if p["metadata"].get("labels", {}).get("job-name") == job)

    def groups(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(self.path(PODGROUPS))["items"]
        return items

    def group_of(self, job: str) -> dict[str, Any] | None:
        return next(
            (g for g in self.groups() if (g["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL) == job),
            None,
        )

    def group_status(self, job: str) -> dict[str, Any]:
        status: dict[str, Any] = (self.group_of(job) or {}).get("status") or {}
        return status

    def job(self, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.api.get(self.path(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}"))
        return body

    def node_labels(self) -> dict[str, dict[str, str]]:
        return {
            n["metadata"]["name"]: dict(n["metadata"].get("labels") or {})
            for n in self.api.get("/api/v1/nodes")["items"]
        }

    def domains(self, pods: Iterable[Mapping[str, Any]], key: str = NETWORK_BLOCK_KEY) -> set[str]:
        return domains(pods, self.node_labels(), key)

    def events(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(self.path("/api/v1/namespaces/{ns}/events"))["items"]
        return [
            e
            for e in items
            if e["involvedObject"].get("kind") == kind
            and (name is None or e["involvedObject"]["name"] == name)
        ]

    # -- waiting
    def wait(
        self, what: str, probe: Callable[[], T | None], timeout: float | None = None, *, quiet: bool = False
    ) -> T:
        """Poll until `probe` returns something truthy; StepError with `what` and the last value if not."""
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        last: object = None
        while True:
            try:
                value = probe()
            except ApiError as e:
                last = e
            else:
                last = value
                if value:
                    if not quiet:
                        self.ok(f"{what} ({seconds(time.monotonic() - started)})")
                    return value
            if time.monotonic() - started >= limit:
                raise StepError(f"timed out after {limit:.0f} s waiting for {what}; last seen: {brief(last)}")
            time.sleep(0.25)

    def hold(self, what: str, probe: Callable[[], bool]) -> None:
        """`probe` must stay true for hold_seconds: something that must NOT happen, watched for a while."""
        deadline = time.monotonic() + self.hold_seconds
        while time.monotonic() < deadline:
            if not probe():
                raise StepError(f"{what} stopped holding")
            time.sleep(0.25)
        self.ok(f"{what} (watched {self.hold_seconds:.0f} s)")

    def check(self, holds: bool, what: str, seen: object = None) -> None:
        if not holds:
            raise StepError(f"expected {what}" + ("" if seen is None else f"; seen: {brief(seen)}"))
        self.ok(what)

    def wait_bound(
        self, job: str, count: int, key: str | None = None, timeout: float | None = None
    ) -> list[Mapping[str, Any]]:
        """`count` pods of `job` bound (in one `key` domain if given) and its PodGroup Running there."""
        where = f" in one {level(key)}" if key else ""

        def probe() -> list[Mapping[str, Any]] | None:
            pods = self.job_pods(job)
            if len(bound(pods)) != count or len(pods) != count:
                return None
            if key and len(self.domains(pods, key)) != 1:
                return None
            return pods if self.group_status(job).get("phase") == "Running" else None

        return self.wait(f"{count} {job} pods bound{where}, its PodGroup Running", probe, timeout)

    def wait_waiting(self, job: str, count: int, kind: str = "PodGroupInitiallyScheduled") -> dict[str, Any]:
        """All `count` pods of `job` exist, none bound, and the group's `kind` condition says it was tried
        whole and does not fit; then watch that nothing binds."""

        def probe() -> dict[str, Any] | None:
            pods = self.job_pods(job)
            if len(pods) != count or bound(pods):
                return None
            cond = condition(self.group_of(job), kind)
            if cond and cond["status"] == "False" and PLACEMENTS_TRIED in cond.get("message", ""):
                return cond
            return None

        cond = self.wait(f"{job}: {kind}=False, tried whole, 0 of {count} pods bound", probe)
        self.hold(f"no {job} pod binds", lambda: not bound(self.job_pods(job)))
        return cond

    # -- acting
    def create_job(self, job: dict[str, Any]) -> None:
        self.command(f"kubectl apply -f {job['metadata']['name']}.yaml   # {describe_job(job)}")
        self.api.request("POST", self.path("/apis/batch/v1/namespaces/{ns}/jobs"), job)

    def patch_job(self, name: str, patch: dict[str, Any], shown: str) -> None:
        self.command(shown)
        self.api.request(
            "PATCH",
            self.path(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}"),
            patch,
            "application/merge-patch+json",
        )

    def delete_job(self, name: str) -> None:
        """Delete a Job and wait until its pods and PodGroup are gone."""
        self.command(f"kubectl delete job {name}")
        self.api.request(
            "DELETE",
            self.path(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}"),
            {"propagationPolicy": "Background"},
        )
        # Its PodGroup and Workload would follow by garbage collection, which on a fresh cluster only
        # watches the CRDs after its next discovery (up to 30 s): delete them by their label too.
        for collection in (PODGROUPS, WORKLOADS):
            self.api.request("DELETE", self.path(collection) + f"?labelSelector={keys.JOB_NAME_LABEL}={name}")
        self.wait(
            f"{name}'s pods and PodGroup gone",
            lambda: (
                not [p for p in self.pods() if p["metadata"].get("labels", {}).get("job-name") == name]
                and self.group_of(name) is None
            ),
        )

    def fill(self, *nodes: str) -> None:
        """The article's fill.sh: a pod taking all 8 GPUs on each node."""
        self.command(f"phalanx dev-cluster fill -n {self.namespace} {' '.join(nodes)}")
        fill(self.api, self.namespace, nodes)
        self.wait(
            f"fillers running on {len(nodes)} node(s)",
            lambda: all(
                any(
                    p["metadata"]["name"] == f"filler-{n}" and p.get("status", {}).get("phase") == "Running"
                    for p in live(self.pods())
                )
                for n in nodes
            ),
        )

    def unfill(self, *nodes: str) -> None:
        for node in nodes:
            self.command(f"kubectl delete pod filler-{node}")
            self.api.request("DELETE", self.path(f"/api/v1/namespaces/{{ns}}/pods/filler-{node}"))
        names = {f"filler-{n}" for n in nodes}
        self.wait(
            f"filler pod(s) on {', '.join(nodes)} gone",
            lambda: not names & {p["metadata"]["name"] for p in self.pods()},
        )

    def fail_node(self, node: str) -> None:
        """The article's `kubectl taint node NODE example.com/failed=true:NoExecute`."""
        self.command(f"phalanx dev-cluster fail-node --how taint {node}   # taints it NoExecute")
        self.failed_nodes.append(node)
        fail_node(self.api, node, how="taint")

    # -- showing
    def show(self, label: str = "") -> None:
        """The where table and `kubectl get podgroups` once no pod is terminating; a partial gang fails."""
        self.wait(
            "no pod terminating",
            lambda: not [p for p in self.pods() if p["metadata"].get("deletionTimestamp")],
            quiet=True,
        )
        pods, groups = self.pods(), self.groups()
        nodes = self.api.get("/api/v1/nodes")["items"]
        self.say()
        self.command(f"phalanx where -n {self.namespace}" + (f"   # {label}" if label else ""))
        self.say(where_table(pods, nodes, (NETWORK_BLOCK_KEY, LOCAL_BLOCK_KEY)))
        self.say()
        self.command(f"kubectl get podgroups -n {self.namespace}")
        self.say(self.kubectl_get_podgroups())
        self.say()
        partial = partial_gangs(groups, pods)
        if partial:
            raise StepError(f"a partial gang is bound: {'; '.join(partial)}")

    def kubectl_get_podgroups(self) -> str:
        result = subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.kubeconfig),
                "get",
                "podgroups",
                "-n",
                self.namespace,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise StepError(f"kubectl get podgroups failed: {result.stderr.strip()}")
        return (result.stdout or result.stderr).rstrip()

    # -- cleaning
    def reset(self) -> None:
        """Delete every Job and pod of the namespace, heal failed nodes; wait until all are gone."""
        for node in self.failed_nodes:
            heal_node(self.api, node)
        healed, self.failed_nodes = self.failed_nodes, []
        base = self.path("/apis/batch/v1/namespaces/{ns}/jobs")
        for job in self.api.get(base)["items"]:
            name = job["metadata"]["name"]
            try:
                self.api.request("DELETE", f"{base}/{name}", {"propagationPolicy": "Background"})
            except ApiError as e:
                if e.status != 404:
                    raise
        # PodGroups and Workloads too (see delete_job), and old events, so the next step reads only its own.
        for collection in (
            "/api/v1/namespaces/{ns}/pods",
            PODGROUPS,
            WORKLOADS,
            "/api/v1/namespaces/{ns}/events",
        ):
            self.api.request("DELETE", self.path(collection))
        self.wait(
            "the namespace's Jobs, pods and PodGroups gone", lambda: not self.pods() and not self.groups()
        )
        if healed:
            self.wait(f"{', '.join(healed)} healed (no failure taint)", lambda: not self.tainted(healed))

    def tainted(self, nodes: Iterable[str]) -> list[str]:
        return [
            n
            for n in nodes
            if any(
                t.get("key") == FAILURE_TAINT["key"]
                for t in self.api.get(f"/api/v1/nodes/{n}")["spec"].get("taints") or []
            )
        ]


def level(key: str) -> str:
    return {NETWORK_BLOCK_KEY: "network block", LOCAL_BLOCK_KEY: "local block"}.get(key, key)


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
        try:
            try:
                run_step(step)
            except FAILURES:
                _diagnose(ctx)
                raise
            finally:
                ctx.reset()
        except FAILURES as e:
            ctx.say(f"FAILED {step.id}: {e}")
            results.append(Result(step, "FAILED", time.monotonic() - started, str(e)))
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
    skipped = "; ".join(f"{r.step.id}: {r.why}" for r in results if r.status == "SKIP")
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


def requests_gpus(pod: Mapping[str, Any]) -> bool:
    containers = [*(pod["spec"].get("containers") or []), *(pod["spec"].get("initContainers") or [])]
    return any(
        GPU in ((c.get("resources") or {}).get(kind) or {})
        for c in containers
        for kind in ("limits", "requests")
    )


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
    d.reset()  # heals leftover failed nodes
    answer = ["no answer"]

    def gates() -> bool:
        ok, answer[0] = _webhook_answer(d)
        return ok

    try:
        d.wait("Phalanx's webhook gates a managed Job (dry run)", gates, timeout=ready_timeout)
    except StepError as e:
        raise StepError(f"{e}: {answer[0]}") from e


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
    results = play(steps, d, lambda step: step.run(d) if step.run else None)
    try:
        d.api.request("DELETE", f"/api/v1/namespaces/{d.namespace}")
    except ApiError as e:
        if e.status != 404:
            raise
    d.say(summary(results, time.monotonic() - started))
    return 1 if any(r.status == "FAILED" for r in results) else 0
