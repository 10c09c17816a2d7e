"""The dev cluster as the walk-through drives it (`Demo`): create Jobs, fill and fail nodes, wait for a
state with a timeout, print the `where` table and `kubectl get podgroups`, and clean up.

Every wait polls for the state it expects and fails with what it last saw; nothing sleeps a fixed time
before reading. A "nothing happens" check (a gang stays unbound) watches for `hold_seconds`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from phalanx.api import keys
from phalanx.api.group import GROUP
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.tools import FAILURE_TAINT, fail_node, fill, heal_node
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY
from phalanx.tools.walkthrough.facts import (
    PLACEMENTS_TRIED,
    bound,
    brief,
    condition,
    describe_job,
    domains,
    level,
    live,
    partial_gangs,
    seconds,
)
from phalanx.tools.where import where_table

T = TypeVar("T")

NAMESPACE = "phalanx-demo"
PODGROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"
WORKLOADS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/workloads"
COMPOSITES = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/compositepodgroups"
OWNER_COLLECTIONS = (
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs",
    "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
    "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
)
"""The kind steps' owners (kind_steps.py), deleted with their pods between steps."""


class StepError(RuntimeError):
    """Phalanx (or the cluster) did not do what the step expects; the message says what and what was seen."""


class NotPlayableError(RuntimeError):
    """The step cannot run on this cluster (an addon it needs is not up); the message says why, and how."""


# ---------------------------------------------------------------------- pure helpers


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

    def composite(self, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.api.get(self.path(COMPOSITES) + f"/{name}")
        return body

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

    def require(self, api_version: str, kind: str, addon: str) -> None:
        """Skip the step unless the cluster serves `api_version` (the addon's CRDs are installed)."""
        try:
            self.api.get(f"/apis/{api_version}")
        except ApiError as e:
            if e.status != 404:
                raise
            raise NotPlayableError(
                f"{kind} is not served by this cluster ({api_version}): its controller is not running; "
                f"phalanx dev-cluster up --addons {addon}"
            ) from e

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
    def create(self, obj: dict[str, Any], plural: str) -> None:
        """Create an object of this namespace (`plural`: its resource, e.g. podgroups)."""
        version = obj["apiVersion"]
        base = f"/apis/{version}" if "/" in version else f"/api/{version}"
        self.api.request("POST", self.path(f"{base}/namespaces/{{ns}}/{plural}"), obj)

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
        levels = f"--levels {NETWORK_BLOCK_KEY},{LOCAL_BLOCK_KEY}"  # the dev cluster has no Topology
        self.command(f"phalanx where -n {self.namespace} {levels}" + (f"   # {label}" if label else ""))
        self.say(where_table(pods, nodes, (NETWORK_BLOCK_KEY, LOCAL_BLOCK_KEY)))
        self.say()
        if self.api.get(self.path(COMPOSITES))["items"]:
            # Full names: a cluster may also serve upstream's (scheduling.k8s.io) or Volcano's kinds.
            self.command(f"kubectl get compositepodgroups.{GROUP} -n {self.namespace}")
            self.say(self.kubectl_get(f"compositepodgroups.{GROUP}"))
            self.say()
        self.command(f"kubectl get podgroups.{GROUP} -n {self.namespace}")
        self.say(self.kubectl_get(f"podgroups.{GROUP}"))
        self.say()
        partial = partial_gangs(groups, pods)
        if partial:
            raise StepError(f"a partial gang is bound: {'; '.join(partial)}")

    def kubectl_get(self, resource: str) -> str:
        result = subprocess.run(
            [
                str(self.kubectl),
                "--kubeconfig",
                str(self.kubeconfig),
                "get",
                resource,
                "-n",
                self.namespace,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise StepError(f"kubectl get {resource} failed: {result.stderr.strip()}")
        return (result.stdout or result.stderr).rstrip()

    # -- cleaning
    def reset(self) -> None:
        """Delete every Job, pod and kind step owner (JobSet, TrainJob, LWS) of the namespace, heal failed
        nodes; wait until all are gone."""
        for node in self.failed_nodes:
            heal_node(self.api, node)
        healed, self.failed_nodes = self.failed_nodes, []
        for owners in OWNER_COLLECTIONS:  # a kind step's objects (not served: nothing to delete)
            try:  # Foreground: gone only once their Jobs/StatefulSets are, which could recreate pods
                self.api.request("DELETE", self.path(owners), {"propagationPolicy": "Foreground"})
            except ApiError as e:
                if e.status != 404:
                    raise
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
            COMPOSITES,
            WORKLOADS,
            "/api/v1/namespaces/{ns}/events",
        ):
            self.api.request("DELETE", self.path(collection))
        self.wait(
            "the namespace's Jobs, pods and PodGroups gone",
            lambda: (
                not self.owners()
                and not self.pods()
                and not self.groups()
                and not self.api.get(self.path(COMPOSITES))["items"]
            ),
        )
        if healed:
            self.wait(f"{', '.join(healed)} healed (no failure taint)", lambda: not self.tainted(healed))

    def owners(self) -> list[str]:
        """The kind steps' JobSets, TrainJobs and LeaderWorkerSets still in the namespace (Kind/name)."""
        left: list[str] = []
        for owners in OWNER_COLLECTIONS:
            try:
                items = self.api.get(self.path(owners))["items"]
            except ApiError as e:
                if e.status != 404:
                    raise
                continue
            left += [f"{o.get('kind')}/{o['metadata']['name']}" for o in items]
        return left

    def tainted(self, nodes: Iterable[str]) -> list[str]:
        return [
            n
            for n in nodes
            if any(
                t.get("key") == FAILURE_TAINT["key"]
                for t in self.api.get(f"/api/v1/nodes/{n}")["spec"].get("taints") or []
            )
        ]
