"""The systems bench/scale.py compares, each brought up on a fresh dev cluster of its own, asked for the
same gangs in its own words: Phalanx (stock cluster + the operator, Job annotations), upstream v1.37.2's
in-tree gang scheduling (`--mode upstream`, the Job's `spec.scheduling`, as docs/comparison.md's upstream
rows) and Kueue's Topology-Aware Scheduling (the dev cluster's `kueue` addon, pod-template TAS annotation).

A runner is pluggable: `unavailable()` says why it cannot run here (Kueue needs `DevCluster.up(addons=...)`,
which the `addons` branch adds) and the bench skips it with that line instead of setting Kueue up itself.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.integration.kube (the article's Job), however this is started

from tests.integration.kube import gpu_job  # noqa: E402

from phalanx.api.job_policy import JobPolicy, annotations_for, upstream_scheduling  # noqa: E402
from phalanx.api.keys import MANAGED_LABEL, MANAGED_VALUE  # noqa: E402
from phalanx.devcluster.binaries import MissingBinariesError, ensure_control_plane  # noqa: E402
from phalanx.devcluster.cluster import ClusterState, DevCluster, free_port  # noqa: E402
from phalanx.devcluster.http import ApiError, RestClient  # noqa: E402
from phalanx.devcluster.operator_process import OperatorProcess  # noqa: E402

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
COMPLETE_AFTER = "sim.phalanx.dev/complete-after"  # kwok ends a running pod after this long (stages.yaml)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
KUEUE_LEVELS = (
    "oci.oraclecloud.com/rdma.network_block_id",
    "oci.oraclecloud.com/rdma.local_block_id",
    "kubernetes.io/hostname",
)


def run_annotations(run_seconds: float | None) -> dict[str, str]:
    return {COMPLETE_AFTER: f"{run_seconds:g}s"} if run_seconds else {}


def gang_policy(pods: int, key: str) -> JobPolicy:
    return JobPolicy(policy="gang", min_count=pods, topology_key=key, parallelism=pods)


class System:
    """One system under test on one fresh cluster: start, the Job it needs, its own processes, stop."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    mode: ClassVar[str] = "stock"
    version: ClassVar[str | None] = None  # its control plane's Kubernetes version (None: the default)
    agents: ClassVar[tuple[str, ...]] = ()
    """The user agents (first token) of the system's own admission component, in the apiserver's log."""

    def __init__(self) -> None:
        self.cluster: DevCluster | None = None
        self.state: ClusterState | None = None
        self.node_grace_seconds = 0  # kube-controller-manager --node-monitor-grace-period (0: its default)

    def unavailable(self) -> str | None:
        """Why this system cannot run in this checkout (None: it can)."""
        return None

    def start(self, folder: Path, topology: str, log: Callable[[str], None], timeout: float) -> ClusterState:
        self.cluster = DevCluster(folder / "cluster")
        self.state = self._up(self.cluster, topology, log, timeout)
        self._after_up(folder, log, timeout)
        return self.state

    def _up(
        self, cluster: DevCluster, topology: str, log: Callable[[str], None], timeout: float
    ) -> ClusterState:
        return cluster.up(
            mode=self.mode,
            topology=topology,
            log=log,
            ready_timeout=timeout,
            node_monitor_grace_seconds=self.node_grace_seconds,
            kubernetes_version=self.version,
        )

    def _after_up(self, folder: Path, log: Callable[[str], None], timeout: float) -> None:
        return None

    def admitters(self) -> dict[str, int]:
        """The processes that decide admission (name -> pid): their CPU seconds and RSS are reported."""
        return {}

    def own_metrics(self) -> str:
        """The admission component's own /metrics text ("" when it has none the bench reads)."""
        return ""

    def job(self, name: str, pods: int, key: str, run_seconds: float | None) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self, log: Callable[[str], None]) -> None:
        if self.cluster is not None:
            self.cluster.down(log=log)


class Phalanx(System):
    name = "phalanx"
    title = "Phalanx (stock cluster + operator)"
    # Kopf's client and the operator's own (phalanx.kubeclient); OpenAPI-Generator is kubernetes-asyncio's,
    # the operator's client before 2026-12-03, for a run of an older commit.
    agents = ("kopf", "phalanx", "OpenAPI-Generator")

    def __init__(self, operator_args: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.operator: OperatorProcess | None = None
        self.operator_args = operator_args

    def _after_up(self, folder: Path, log: Callable[[str], None], timeout: float) -> None:
        assert self.state is not None
        self.operator = OperatorProcess(self.state, folder, self.operator_args)
        started = time.monotonic()
        self.operator.start(timeout=timeout)
        log(f"operator ready in {time.monotonic() - started:.1f} s (log {self.operator.log_path})")

    def admitters(self) -> dict[str, int]:
        if self.operator is None or self.operator.proc is None:
            return {}
        return {"phalanx-operator": self.operator.proc.pid}

    def own_metrics(self) -> str:
        return self.operator.scrape() if self.operator is not None else ""

    def job(self, name: str, pods: int, key: str, run_seconds: float | None) -> dict[str, Any]:
        return gpu_job(
            name,
            pods,
            labels={MANAGED_LABEL: MANAGED_VALUE},
            annotations=annotations_for(gang_policy(pods, key)),
            pod_annotations=run_annotations(run_seconds),
        )

    def stop(self, log: Callable[[str], None]) -> None:
        try:
            if self.operator is not None:
                self.operator.stop()
        finally:
            super().stop(log)


class Upstream(System):
    name = "upstream"
    title = "upstream v1.37.2 (in-tree gang scheduling)"
    mode = "upstream"
    agents = ("kube-scheduler",)

    def admitters(self) -> dict[str, int]:
        assert self.state is not None
        pid = self.state.pids.get("kube-scheduler")
        return {"kube-scheduler": pid} if pid else {}

    def job(self, name: str, pods: int, key: str, run_seconds: float | None) -> dict[str, Any]:
        return gpu_job(
            name,
            pods,
            scheduling=upstream_scheduling(gang_policy(pods, key)),
            pod_annotations=run_annotations(run_seconds),
        )


class Upstream138(Upstream):
    """Upstream's next release, v1.38.0-beta.0 (built by `hack/build.sh --kubernetes-version
    v1.38.0-beta.0`, 10 to 15 min cold, never by the bench): the same Job `spec.scheduling`, now
    `scheduling.k8s.io/v1`'s types, on its own control plane (etcd, kwok and kubectl stay v1.37.2's)."""

    name = "upstream-1.38"
    title = "upstream v1.38.0-beta.0 (in-tree gang scheduling)"
    version: ClassVar[str] = "v1.38.0-beta.0"

    def unavailable(self) -> str | None:
        try:
            ensure_control_plane(self.version, build=False)
        except MissingBinariesError as e:
            return str(e)
        return None


class Kueue(System):
    """Kueue v0.17 TAS through `DevCluster.up(addons=("kueue",))`; this bench adds only its queue objects
    (Topology of the dev cluster's levels, a flavor, a ClusterQueue with the whole cluster's GPUs as quota,
    a LocalQueue), as the recipe in ../shared/reference/kueue-on-dev-cluster.md does."""

    name = "kueue"
    title = "Kueue v0.17 TAS"
    agents = ("kueue", "manager")

    def unavailable(self) -> str | None:
        if "addons" not in inspect.signature(DevCluster.up).parameters:
            return (
                "kueue: skipped: this checkout's DevCluster.up has no `addons` parameter "
                "(`phalanx dev-cluster up --addons kueue` comes with the addons branch; "
                "rerun once it is merged)"
            )
        return None

    def _up(
        self, cluster: DevCluster, topology: str, log: Callable[[str], None], timeout: float
    ) -> ClusterState:
        up: Any = cluster.up  # `addons` exists only once the addons branch is merged (checked by unavailable)
        state: ClusterState = up(
            mode=self.mode,
            topology=topology,
            log=log,
            ready_timeout=timeout,
            addons=("kueue",),
            node_monitor_grace_seconds=self.node_grace_seconds,
        )
        return state

    def _after_up(self, folder: Path, log: Callable[[str], None], timeout: float) -> None:
        assert self.state is not None
        api = self.state.client()
        nodes = len(api.get("/api/v1/nodes")["items"])
        for path, body in kueue_objects(nodes * GPUS_PER_NODE):
            try:
                api.request("POST", path, body)
            except ApiError as e:
                if e.status != 409:
                    raise
        wait_active(api, timeout)
        log(
            "kueue queue objects ready "
            "(Topology rdma, ResourceFlavor gpu-h100, ClusterQueue cq, LocalQueue lq)"
        )

    def admitters(self) -> dict[str, int]:
        assert self.state is not None
        found = {name: pid for name, pid in self.state.pids.items() if "kueue" in name}
        return found or find_processes("kueue", self.state.dir)

    def job(self, name: str, pods: int, key: str, run_seconds: float | None) -> dict[str, Any]:
        return gpu_job(
            name,
            pods,
            labels={KUEUE_QUEUE_LABEL: "lq"},
            pod_annotations={KUEUE_REQUIRED_TOPOLOGY: key, **run_annotations(run_seconds)},
        )


class Plain(Upstream):
    """The control: the same Jobs with no gang scheduling at all (stock kube-scheduler, pod by pod). Where
    not every pod fits it leaves partial gangs, which shows the recorder sees them; never a default system."""

    name = "plain"
    title = "kube-scheduler alone, no gangs (control)"
    mode = "stock"

    def job(self, name: str, pods: int, key: str, run_seconds: float | None) -> dict[str, Any]:
        return gpu_job(name, pods, pod_annotations=run_annotations(run_seconds))


def kueue_objects(gpus: int) -> list[tuple[str, dict[str, Any]]]:
    def obj(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if namespace:
            meta["namespace"] = namespace
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}

    quota = [{"name": GPU, "nominalQuota": str(gpus)}]
    return [
        (
            f"{KUEUE_API}/topologies",
            obj("Topology", "rdma", {"levels": [{"nodeLabel": k} for k in KUEUE_LEVELS]}),
        ),
        (
            f"{KUEUE_API}/resourceflavors",
            obj(
                "ResourceFlavor",
                "gpu-h100",
                {"nodeLabels": {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"}, "topologyName": "rdma"},
            ),
        ),
        (
            f"{KUEUE_API}/clusterqueues",
            obj(
                "ClusterQueue",
                "cq",
                {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {"coveredResources": [GPU], "flavors": [{"name": "gpu-h100", "resources": quota}]}
                    ],
                },
            ),
        ),
        (
            f"{KUEUE_API}/namespaces/default/localqueues",
            obj("LocalQueue", "lq", {"clusterQueue": "cq"}, namespace="default"),
        ),
    ]


def wait_active(api: RestClient, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = api.get(f"{KUEUE_API}/clusterqueues/cq").get("status", {}).get("conditions", [])
            if any(c.get("type") == "Active" and c.get("status") == "True" for c in last):
                return
        except ApiError as e:
            last = str(e)
        time.sleep(0.5)
    raise RuntimeError(f"ClusterQueue cq not Active after {timeout:.0f} s: {last}")


def find_processes(word: str, folder: str) -> dict[str, int]:
    """Processes whose command line names `word` and the cluster folder (an addon of this cluster)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if word in cmdline and folder in cmdline:
            found[f"{word}-{entry.name}"] = int(entry.name)
    return found


class PhalanxPlanThread(Phalanx):
    """Phalanx with `--plan-thread` (plan() on a thread of its own), to run beside the default in one
    invocation: the rounds interleave, so both see the same machine."""

    name = "phalanx-plan-thread"
    title = "Phalanx, --plan-thread"

    def __init__(self) -> None:
        super().__init__(("--plan-thread",))


class PhalanxWebhookProcess(Phalanx):
    """Phalanx as two processes: `--role webhooks` (the webhook server, a cache of what the reviews read)
    and `--role controller` (the loop and its watches), to run beside the one-process default. With
    `processes` > 1, that many webhook processes share one port (Kopf's server binds it with SO_REUSEPORT:
    the kernel spreads the apiserver's connections over them) and one certificate folder, as the replicas
    of the chart's webhook Deployment share its Service."""

    name = "phalanx-webhook-process"
    title = "Phalanx, webhooks in a process of their own"

    def __init__(self, processes: int = 1) -> None:
        super().__init__(("--role", "controller"))
        self.processes = processes
        self.webhook_processes: list[OperatorProcess] = []

    def _after_up(self, folder: Path, log: Callable[[str], None], timeout: float) -> None:
        assert self.state is not None
        shared: tuple[str, ...] = ()
        port = None
        if self.processes > 1:
            port = free_port()
            shared = ("--webhook-cert-dir", str(folder / "webhook-certs"))
        started = time.monotonic()
        for i in range(self.processes):  # one after the other: the first makes the shared certificate
            name = "phalanx-webhooks" if self.processes == 1 else f"phalanx-webhooks-{i}"
            process = OperatorProcess(
                self.state, folder, ("--role", "webhooks", *shared), name=name, webhook_port=port
            )
            self.webhook_processes.append(process)
            process.start(timeout=timeout)
            log(f"{name} ready in {time.monotonic() - started:.1f} s")
        self.operator = OperatorProcess(self.state, folder, self.operator_args, serves_webhooks=False)
        self.operator.start(timeout=timeout)
        log(f"operator ready in {time.monotonic() - started:.1f} s (log {self.operator.log_path})")

    def admitters(self) -> dict[str, int]:
        found = super().admitters()
        for process in self.webhook_processes:
            if process.proc is not None:
                found[process.name] = process.proc.pid
        return found

    def own_metrics(self) -> str:
        # The webhook processes' first: where they and the controller have a series (pass counters at 0
        # there), the controller's, read last, is the one kept; histograms (review times, loop lag) add up.
        hooks = "".join(process.scrape() for process in self.webhook_processes)
        return hooks + super().own_metrics()

    def stop(self, log: Callable[[str], None]) -> None:
        try:
            for process in self.webhook_processes:
                process.stop()
        finally:
            super().stop(log)


class PhalanxWebhookProcesses(PhalanxWebhookProcess):
    """Two webhook processes on one port beside the controller: the chart's `webhook.deployment.enabled`
    with its two replicas, on one machine."""

    name = "phalanx-webhook-processes"
    title = "Phalanx, webhooks in two processes of their own"

    def __init__(self) -> None:
        super().__init__(processes=2)


SYSTEMS: dict[str, type[System]] = {
    "phalanx": Phalanx,
    "phalanx-plan-thread": PhalanxPlanThread,
    "phalanx-webhook-process": PhalanxWebhookProcess,
    "phalanx-webhook-processes": PhalanxWebhookProcesses,
    "upstream": Upstream,
    "upstream-1.38": Upstream138,
    "kueue": Kueue,
    "plain": Plain,
}
