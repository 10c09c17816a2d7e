"""`phalanx dev-cluster`: a real Kubernetes v1.37.2 control plane on 127.0.0.1, no containers.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as plain processes; kwok plays
the kubelet of every simulated node. Each run lives in its own folder (pki, logs, kubeconfig,
state.json with the pids), so `down` stops exactly what `up` started.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from phalanx import certs
from phalanx.devcluster import addons as addon_mod
from phalanx.devcluster import hostnet, realnode
from phalanx.devcluster.binaries import (
    CONTROL_PLANE,
    K8S_VERSION,
    MissingBinariesError,
    ensure_binaries,
    ensure_control_plane,
    minor,
)
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.procs import free_port as free_port
from phalanx.devcluster.procs import free_ports as free_ports
from phalanx.devcluster.procs import http_ok, owned, signal_group
from phalanx.devcluster.procs import pid_alive as pid_alive
from phalanx.devcluster.procs import wait as _wait
from phalanx.devcluster.state import STATE_FILE as STATE_FILE
from phalanx.devcluster.state import ClusterError as ClusterError
from phalanx.devcluster.state import ClusterState as ClusterState
from phalanx.devcluster.topology import SIMULATED_LABEL, SIMULATED_VALUE, NodeSpec, parse_topology

UPSTREAM_GATES = (
    "GenericWorkload",
    "TopologyAwareWorkloadScheduling",
    "CompositePodGroup",
    "WorkloadWithJob",
    "PodGroupPreemptionPolicy",
)
UPSTREAM_RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
MODES = ("stock", "upstream")
UPSTREAM_SINCE = 37  # the first minor with every gate of UPSTREAM_GATES


def upstream_gates(version: str) -> tuple[str, ...]:
    """The gates `--mode upstream` turns on for a control-plane version (an unknown gate is fatal to every
    component, so a version gets exactly the ones it has); a version without them is refused."""
    if minor(version) < UPSTREAM_SINCE:
        raise ClusterError(
            f"--mode upstream needs Kubernetes v1.{UPSTREAM_SINCE} or newer: {version} lacks the "
            f"workload-aware scheduling gates it turns on ({', '.join(UPSTREAM_GATES)}) and the "
            "scheduling.k8s.io v1beta1/v1alpha3 APIs; use --mode stock (Phalanx's mode) with it"
        )
    if minor(version) == UPSTREAM_SINCE:
        return UPSTREAM_GATES
    # v1.38 removed PodGroupPreemptionPolicy (the field is no longer gated): read in v1.38.0-beta.0's
    # pkg/features/kube_features.go; `up --mode upstream --kubernetes-version v1.38.0-beta.0` runs with the
    # other four (docs/versions.md).
    return tuple(g for g in UPSTREAM_GATES if g != "PodGroupPreemptionPolicy")


DEFAULT_DIR = Path(".dev-cluster")
# Process start order; `down` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class DevCluster:
    def __init__(self, directory: Path = DEFAULT_DIR) -> None:
        self.dir = directory.resolve()

    # ------------------------------------------------------------------ up
    def up(
        self,
        mode: str = "stock",
        topology: str = "seed",
        log: Callable[[str], None] = print,
        ready_timeout: float = 180.0,
        real_node: bool = False,
        addons: str | Iterable[str] = (),
        kubernetes_version: str | None = None,
        node_monitor_grace_seconds: int = 0,
    ) -> ClusterState:
        """Start a cluster; `addons`: any of jobset, lws, trainer, kueue (names or "a,b"): their real
        controllers, built when missing, running and answering on their webhooks when this returns.
        `node_monitor_grace_seconds`: kube-controller-manager's --node-monitor-grace-period (0: its default).
        A big simulated cluster on a small machine needs more than the default: kwok renews every node's
        Lease from one process, and at 5,000 nodes on 2 saturated cores renewals fall behind, so nodes are
        marked unreachable (tainted) though nothing failed."""
        if mode not in MODES:
            raise ClusterError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
        nodes = parse_topology(topology)
        version = kubernetes_version or K8S_VERSION
        try:
            minor(version)
        except MissingBinariesError as e:
            raise ClusterError(str(e)) from e
        if mode == "upstream":
            upstream_gates(version)  # refuses a version without them, before anything is built
        if real_node and version != K8S_VERSION:
            raise ClusterError(
                f"--real-node runs kubelet {K8S_VERSION}, which must not be newer than the control plane: "
                f"it works only with the default --kubernetes-version {K8S_VERSION}, not {version}"
            )
        addon_names, implied = addon_mod.parse(addons)
        addon_mod.refuse_unsupported(addon_names, version)  # before anything is built or started
        if implied:
            needs = sorted({n for n in addon_names for r in addon_mod.ADDONS[n].requires if r in implied})
            log(f"--addons: added {', '.join(implied)} ({', '.join(needs)} needs it)")
        existing = ClusterState.load(self.dir)
        if existing and any(pid_alive(p) and owned(p, self.dir) for p in existing.pids.values()):
            raise ClusterError(
                f"a dev cluster is already running in {self.dir}; run `phalanx dev-cluster down` first"
            )
        bins = ensure_binaries()
        try:
            control_plane = ensure_control_plane(version)
        except MissingBinariesError as e:
            raise ClusterError(str(e)) from e
        if real_node:
            realnode.ensure_binaries(bins)
            reason = realnode.unavailable_reason(bins)
            if reason:
                raise ClusterError(f"--real-node: {reason}")
        addon_mod.ensure_built(addon_names, log)
        sources = {name: addon_mod.source_dir(addon_mod.ADDONS[name]) for name in addon_names}
        started = time.monotonic()
        self._reset_dir()
        names = ("kube-apiserver", "etcd", "etcd-peer", "kube-controller-manager", "kube-scheduler", "kwok")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        state = ClusterState(
            dir=str(self.dir),
            mode=mode,
            topology=topology,
            bin_dir=str(bins),
            kubernetes_version=version,
            control_plane_bin_dir=str(control_plane),
            api_port=ports["kube-apiserver"],
            token=secrets.token_hex(24),
            started_at=time.time(),
            ports=ports,
            node_monitor_grace_seconds=node_monitor_grace_seconds,
        )
        self._write_files(state)
        state.save()
        try:
            with _terminate_as_exception():
                if real_node:  # the host's network first: before any Service exists
                    realnode.prepare(state, log)
                crds = self._start_control_plane(state, log, ready_timeout, addon_names, sources)
                self._create_nodes(state, nodes, log)
                self._wait_nodes_ready(state, [n.name for n in nodes], ready_timeout)
                if real_node:
                    realnode.start(state, log, ready_timeout)
                if addon_names:
                    addon_mod.start(state, addon_names, sources, crds, log, ready_timeout)
        except BaseException as e:
            log(f"dev cluster failed to start; logs are in {self.dir / 'logs'}")
            self.down(log=lambda _m: None)
            if isinstance(e, realnode.RealNodeError | hostnet.HostNetError):
                raise ClusterError(f"--real-node: {e}") from e
            raise
        state.ready_seconds = round(time.monotonic() - started, 2)
        state.save()
        real = f" + real node {realnode.NODE_NAME}" if real_node else ""
        extra = (
            f" + {', '.join(f'{n} {addon_mod.ADDONS[n].version}' for n in addon_names)}"
            if addon_names
            else ""
        )
        log(
            f"dev cluster ({mode}, Kubernetes {version}, {len(nodes)} nodes{real}{extra}) ready "
            f"in {state.ready_seconds:.1f} s"
        )
        log(f"  export KUBECONFIG={state.kubeconfig}")
        log(f"  kubectl: {state.kubectl}")
        log(f"  stop it: phalanx dev-cluster down --dir {self.dir}")
        return state

    def _reset_dir(self) -> None:
        if self.dir.exists():
            # Only ever remove what an earlier run of ours created.
            for name in ("etcd", "pki", "logs", "addons"):
                target = self.dir / name
                if target.exists():
                    subprocess.run(["rm", "-rf", str(target)], check=True)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "pki").mkdir(parents=True, exist_ok=True)

    def _write_files(self, state: ClusterState) -> None:
        pki = self.dir / "pki"
        ca = certs.make_ca("phalanx-dev-cluster-ca")
        ca.write(pki / "ca.crt", pki / "ca.key")
        serving = certs.issue(
            ca,
            "kube-apiserver",
            [
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )
        serving.write(pki / "apiserver.crt", pki / "apiserver.key")
        (pki / "sa.key").write_bytes(certs.private_key_pem())
        (pki / "sa.key").chmod(0o600)
        (self.dir / "tokens.csv").write_text(f'{state.token},admin,admin-uid,"system:masters"\n')
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "phalanx-dev",
                    "cluster": {
                        "server": f"https://127.0.0.1:{state.api_port}",
                        "certificate-authority": str(pki / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": state.token}}],
            "contexts": [{"name": "phalanx-dev", "context": {"cluster": "phalanx-dev", "user": "admin"}}],
            "current-context": "phalanx-dev",
        }
        # JSON is valid YAML, and every client reads it.
        state.kubeconfig.write_text(json.dumps(kubeconfig, indent=2))
        state.kubeconfig.chmod(0o600)
        scheduler_config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(state.kubeconfig), "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        (self.dir / "scheduler.yaml").write_text(json.dumps(scheduler_config, indent=2))
        stages = resources.files("phalanx.devcluster").joinpath("kwok/stages.yaml").read_text()
        (self.dir / "kwok-stages.yaml").write_text(stages)

    def _gates(self, state: ClusterState) -> list[str]:
        if state.mode != "upstream":
            return []
        gates = upstream_gates(state.kubernetes_version or K8S_VERSION)
        return ["--feature-gates=" + ",".join(f"{g}=true" for g in gates)]

    @staticmethod
    def _binary(state: ClusterState, name: str) -> Path:
        if name in CONTROL_PLANE and state.control_plane_bin_dir:
            return Path(state.control_plane_bin_dir) / name
        return Path(state.bin_dir) / name

    def _spawn(self, state: ClusterState, name: str, args: list[str]) -> None:
        log_path = self.dir / "logs" / f"{name}.log"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [str(self._binary(state, name.split(":")[0])), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                start_new_session=True,  # survives `phalanx dev-cluster up` returning
            )
        state.pids[name] = proc.pid
        state.save()

    def _check_alive(self, state: ClusterState) -> None:
        """A component that exited during start-up fails `up` at once, with the end of its log."""
        for name, pid in state.pids.items():
            if not pid_alive(pid):
                log_path = self.dir / "logs" / f"{name}.log"
                tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
                raise ClusterError(f"{name} exited during start-up; end of {log_path}:\n{tail}")

    def _start_control_plane(
        self,
        state: ClusterState,
        log: Callable[[str], None],
        timeout: float,
        addon_names: list[str] = (),  # type: ignore[assignment]
        sources: dict[str, Path] | None = None,
    ) -> dict[str, list[str]]:
        """etcd, apiserver, then the addons' CRDs, then KCM, scheduler and kwok. Returns the CRDs by addon."""
        d, p = self.dir, state.ports
        self._spawn(
            state,
            "etcd",
            [
                "--name=default",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd-peer']}",
                f"--initial-cluster=default=http://127.0.0.1:{p['etcd-peer']}",
                "--unsafe-no-fsync=true",
                "--auto-compaction-retention=1",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        _wait(
            "etcd /health",
            lambda: http_ok(f"http://127.0.0.1:{p['etcd']}/health", b'"health":"true"'),
            30,
            alive=lambda: self._check_alive(state),
        )
        pki = d / "pki"
        apiserver_args = [
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1",
            f"--secure-port={p['kube-apiserver']}",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            *self._gates(state),
        ]
        if state.mode == "upstream":
            apiserver_args.append(f"--runtime-config={UPSTREAM_RUNTIME_CONFIG}")
        if state.real_node:
            apiserver_args = realnode.apiserver_args(apiserver_args, self.dir)
        self._spawn(state, "kube-apiserver", apiserver_args)
        client = state.client()
        _wait(
            "kube-apiserver /readyz",
            lambda: client.get("/readyz") == "ok",
            timeout,
            alive=lambda: self._check_alive(state),
        )
        crds: dict[str, list[str]] = {}
        if addon_names:
            # Before kube-controller-manager: its garbage collector then watches the addons' kinds from
            # its first discovery (a CRD made later is seen only at the 30 s resync; until then a deleted
            # Job's Kueue Workload stays, admitted, holding quota).
            began = time.monotonic()
            crds = addon_mod.install_crds(client, addon_names, sources or {}, timeout)
            count = sum(len(c) for c in crds.values())
            took = time.monotonic() - began
            log(f"{count} addon CRDs Established in {took:.1f} s, before kube-controller-manager")
        self._spawn(
            state,
            "kube-controller-manager",
            [
                f"--kubeconfig={state.kubeconfig}",
                f"--authentication-kubeconfig={state.kubeconfig}",
                f"--authorization-kubeconfig={state.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kube-controller-manager']}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # Faster than the 5 s default so new nodes lose their not-ready taint quickly.
                "--node-monitor-period=2s",
                *(
                    [f"--node-monitor-grace-period={state.node_monitor_grace_seconds}s"]
                    if state.node_monitor_grace_seconds
                    else []
                ),
                *self._gates(state),
            ],
        )
        self._spawn(
            state,
            "kube-scheduler",
            [
                f"--config={d / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={state.kubeconfig}",
                f"--authorization-kubeconfig={state.kubeconfig}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kube-scheduler']}",
                *self._gates(state),
            ],
        )
        self._spawn(
            state,
            "kwok",
            [
                f"--kubeconfig={state.kubeconfig}",
                f"--config={d / 'kwok-stages.yaml'}",
                f"--manage-nodes-with-label-selector={SIMULATED_LABEL}={SIMULATED_VALUE}",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{p['kwok']}",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.255.0.1",
            ],
        )
        for name in ("kube-controller-manager", "kube-scheduler"):
            url = f"https://127.0.0.1:{p[name]}/healthz"
            _wait(
                f"{name} /healthz",
                lambda url=url: http_ok(url, b"ok", insecure=True),  # type: ignore[misc]
                timeout,
                alive=lambda: self._check_alive(state),
            )
        log(f"control plane up ({', '.join(COMPONENTS)})")
        return crds

    def _create_nodes(self, state: ClusterState, nodes: list[NodeSpec], log: Callable[[str], None]) -> None:
        client = state.client()

        def create(node: NodeSpec) -> None:
            body = node.manifest()
            try:
                created = client.request("POST", "/api/v1/nodes", body)
            except ApiError as e:
                if e.status != 409:
                    raise
                created = client.get(f"/api/v1/nodes/{node.name}")
            # Node create may drop status; set capacity through the status subresource.
            if not created.get("status", {}).get("allocatable", {}).get(
                "nvidia.com/gpu"
            ) and "nvidia.com/gpu" in (node.capacity):
                client.request(
                    "PATCH",
                    f"/api/v1/nodes/{node.name}/status",
                    {"status": body["status"]},
                    "application/merge-patch+json",
                )

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, nodes))
        log(f"created {len(nodes)} nodes")

    def _wait_nodes_ready(self, state: ClusterState, names: list[str], timeout: float) -> None:
        client = state.client()
        wanted = set(names)

        def all_ready() -> bool:
            items = client.get("/api/v1/nodes")["items"]
            ready = {n["metadata"]["name"] for n in items if node_schedulable(n)}
            return wanted <= ready

        _wait(
            f"{len(names)} nodes Ready and schedulable",
            all_ready,
            timeout,
            interval=0.5,
            alive=lambda: self._check_alive(state),
        )

    # ------------------------------------------------------------------ down / status
    def down(self, log: Callable[[str], None] = print, timeout: float = 15.0) -> list[str]:
        state = ClusterState.load(self.dir)
        if state is None:
            log(f"no dev cluster state in {self.dir}")
            return []
        real: list[str] = []
        if state.real_node:  # first, while the apiserver still answers: its pods go through kubelet
            real = [name for name in ("kubelet", "containerd") if name in state.pids]
            realnode.stop(state, log)
        stopped: list[str] = []
        for name in reversed(list(state.pids)):
            pid = state.pids[name]
            if pid_alive(pid) and owned(pid, self.dir):
                signal_group(pid, signal.SIGTERM)
                stopped.append(name)
        deadline = time.monotonic() + timeout
        for name in stopped:
            pid = state.pids[name]
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(pid):
                signal_group(pid, signal.SIGKILL)
        for name in stopped:
            pid = state.pids[name]
            _wait(f"{name} (pid {pid}) to exit", lambda pid=pid: not pid_alive(pid), 5)  # type: ignore[misc]
        state.pids = {}
        state.save()
        stopped = real + stopped
        log(f"stopped {', '.join(stopped) if stopped else 'nothing (no process was running)'}")
        return stopped

    def status(self) -> dict[str, Any]:
        state = ClusterState.load(self.dir)
        if state is None:
            return {"dir": str(self.dir), "running": {}, "state": "absent"}
        running = {name: pid for name, pid in state.pids.items() if pid_alive(pid) and owned(pid, self.dir)}
        info: dict[str, Any] = {
            "dir": str(self.dir),
            "mode": state.mode,
            "kubernetes_version": state.kubernetes_version or K8S_VERSION,
            "topology": state.topology,
            "kubeconfig": str(state.kubeconfig),
            "running": running,
            "stopped": sorted(set(state.pids) - set(running)),
            "real_node": state.real_node.get("node"),
            "state": "running" if running else "stopped",
        }
        if state.addons:
            info["addons"] = addon_mod.status(state)
        if "kube-apiserver" in running:
            try:
                nodes = state.client().get("/api/v1/nodes")["items"]
                info["nodes"] = len(nodes)
                info["nodes_ready"] = sum(1 for n in nodes if node_schedulable(n))
            except (OSError, ApiError) as e:
                info["api_error"] = str(e)
        return info


def node_schedulable(node: dict[str, Any]) -> bool:
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )
    blocked = node.get("spec", {}).get("unschedulable") or any(
        t.get("effect") in ("NoSchedule", "NoExecute") for t in node.get("spec", {}).get("taints", []) or []
    )
    return ready and not blocked


class Terminated(BaseException):
    """SIGTERM arrived while `up` was starting processes."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """Turn SIGTERM into an exception while `up` runs, so a killed `up` still stops what it started
    (the components run in their own sessions and would outlive it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated(f"signal {signum} during dev-cluster up")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def load_state(directory: Path = DEFAULT_DIR) -> ClusterState:
    state = ClusterState.load(directory.resolve())
    if state is None:
        raise ClusterError(f"no dev cluster in {directory}; start one with `phalanx dev-cluster up`")
    return state
