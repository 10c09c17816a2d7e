"""`phalanx dev-cluster up --real-node`: one real kubelet v1.37.2 with containerd and runc beside the
simulated nodes, so an image (Phalanx's own, through its Helm chart) runs in real pods.

What it needs from the host (root, Debian's containerd/runc/CNI plugins/iptables: `hack/image.sh` installs
them) and every pitfall it avoids are in docs/dev-cluster.md (from ../shared/reference/real-node.md):
containerd's `restrict_oom_score_adj` (root lacks CAP_SYS_RESOURCE here), kubelet's `failCgroupV1: false`
and `cgroupfs` (hybrid cgroup v1 host, no systemd), the host's primary IP as node IP, a pause image made
locally (no registry), sockets under /run (kubelet and containerd paths must stay short). hostnet.py keeps
every packet on the machine.

Everything it starts or changes is recorded in the cluster's state.json (`real_node`, pids `containerd` and
`kubelet`) before it happens, so `down` undoes it even after a failed or killed `up`.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from phalanx import certs
from phalanx.devcluster import hostnet
from phalanx.devcluster.binaries import repo_root
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.procs import free_ports, running, stop_process
from phalanx.devcluster.state import ClusterState

NODE_NAME = "real-0"
NODE_LABEL = "phalanx.dev/real-node"
PAUSE_IMAGE = "localhost/pause:phalanx"
CNI_BIN = Path("/usr/lib/cni")
TOOLS = ("containerd", "ctr", "runc", "ip", "iptables", "ip6tables", "umount")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
# Written by kubelet or containerd whatever their configured folders (real-node.md §7): removed by `down`
# when they did not exist before `up`.
OUTSIDE = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/opt/containerd",
    "/var/lib/cni",
    "/run/netns",
)

Log = Callable[[str], None]


class RealNodeError(RuntimeError):
    pass


# ---------------------------------------------------------------------------- preflight
def ensure_binaries(bin_dir: Path) -> None:
    """kubelet and pause, built by hack/build.sh from a checkout when absent (seconds, Go cache warm)."""
    root = repo_root()
    if root and any(not os.access(bin_dir / b, os.X_OK) for b in ("kubelet", "pause")):
        subprocess.run(
            ["bash", str(root / "hack" / "build.sh"), str(bin_dir)], check=True, stdout=subprocess.DEVNULL
        )


def unavailable_reason(bin_dir: Path) -> str | None:
    """Why this host cannot run the real node, in words (None: it can)."""
    if os.geteuid() != 0:
        return "the real node needs root (containerd, kubelet, a bridge, routes and iptables rules)"
    absent = [t for t in TOOLS if shutil.which(t) is None]
    absent += [f"{CNI_BIN}/{p}" for p in CNI_PLUGINS if not (CNI_BIN / p).is_file()]
    if absent:
        return (
            f"missing {', '.join(absent)}: install Debian's containerd runc containernetworking-plugins "
            "iptables (hack/image.sh does)"
        )
    missing = [b for b in ("kubelet", "pause") if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        return f"missing {', '.join(missing)} in {bin_dir}: hack/build.sh builds them"
    return hostnet.in_use()


# ---------------------------------------------------------------------------- paths
def _short(directory: Path) -> str:
    return hashlib.sha256(str(directory).encode()).hexdigest()[:8]


def paths(directory: Path) -> dict[str, Path]:
    """Sockets and kubelet's root live under short host paths (unix sockets are limited to 108 bytes, and
    kubelet puts some under its root); the rest under the cluster's folder."""
    short = _short(directory)
    base = directory / "real-node"
    run = Path(f"/run/phalanx-real-node-{short}")
    return {
        "base": base,
        "run": run,
        "socket": run / "containerd.sock",
        "kubelet_root": Path(f"/var/lib/phalanx-real-node-{short}"),
        "containerd_root": base / "containerd" / "root",
        "containerd_state": run / "state",
        "containerd_config": base / "containerd.toml",
        "cni_conf": base / "cni" / "net.d",
        "cni_ipam": base / "cni" / "ipam",
        "kubelet_config": base / "kubelet.yaml",
        "kubeconfig": base / "kubelet.kubeconfig",
        "pki": base / "pki",
        "pod_logs": base / "pod-logs",
        "pause": base / "pause.oci.tar",
    }


# ---------------------------------------------------------------------------- apiserver
def apiserver_args(args: list[str], directory: Path) -> list[str]:
    """The dev cluster's apiserver flags for a real node (given at start; the apiserver is never restarted):
    ServiceAccount admission on (pods get their token), kubelets reached by InternalIP with a client
    certificate, Service webhooks called at their endpoints (aggregator routing: no kube-proxy)."""
    pki = paths(directory)["pki"]
    kept = [a for a in args if a != "--disable-admission-plugins=ServiceAccount"]
    return [
        *kept,
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--enable-aggregator-routing=true",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
    ]


# ---------------------------------------------------------------------------- up
def prepare(state: ClusterState, log: Log) -> None:
    """Before the control plane starts: the host's network (before any Service exists) and the node's
    certificates. Recorded in `state.real_node` step by step."""
    directory = state.path
    p = paths(directory)
    info: dict[str, Any] = {
        "node": NODE_NAME,
        "ip": hostnet.host_ip(),
        "created": [path for path in OUTSIDE if not os.path.lexists(path)],
        "run": str(p["run"]),
        "kubelet_root": str(p["kubelet_root"]),
    }
    state.real_node = info
    state.save()
    net = hostnet.HostNet(api_port=state.api_port)

    def save() -> None:
        info["net"] = net.to_dict()
        state.save()

    try:
        hostnet.setup(net, save)
    finally:
        save()
    log(
        f"host network: bridge {hostnet.BRIDGE} {hostnet.GATEWAY}/24, unreachable {', '.join(net.routes)}, "
        f"no forwarding from pods, {hostnet.KUBERNETES_SERVICE_IP}:443 -> 127.0.0.1:{state.api_port}"
    )
    for d in ("base", "run", "kubelet_root", "cni_conf", "cni_ipam", "pki", "pod_logs"):
        p[d].mkdir(parents=True, exist_ok=True)
    ca_pem = state.ca_file.read_bytes()
    ca = certs.KeyPair(ca_pem, (state.ca_file.parent / "ca.key").read_bytes())
    # The node's identity (Node authorizer + NodeRestriction) and the apiserver's client cert for kubelets.
    certs.issue(ca, f"system:node:{NODE_NAME}", [], organization="system:nodes", client=True).write(
        p["pki"] / "node.crt", p["pki"] / "node.key"
    )
    certs.issue(ca, "kube-apiserver-kubelet-client", [], organization="system:masters", client=True).write(
        p["pki"] / "apiserver-kubelet-client.crt", p["pki"] / "apiserver-kubelet-client.key"
    )


def start(state: ClusterState, log: Log, timeout: float) -> None:
    """After the control plane: containerd, the pause image, kubelet; returns when the node is Ready."""
    directory = state.path
    p = paths(directory)
    info = state.real_node
    _write_containerd_config(p)
    _write_cni_config(p)
    _spawn(state, "containerd", ["containerd", "--config", str(p["containerd_config"])])
    _wait(
        "containerd",
        lambda: _ctr(p, "version", check=False).returncode == 0,
        30,
        state,
    )
    write_pause_image(Path(state.bin_dir) / "pause", p["pause"])
    import_image(state, p["pause"])
    kubelet_port, healthz_port = free_ports(2)
    info["kubelet_port"] = kubelet_port
    state.save()
    _write_kubelet_files(state, p, info["ip"], kubelet_port, healthz_port)
    _spawn(
        state,
        "kubelet",
        [
            str(Path(state.bin_dir) / "kubelet"),
            f"--config={p['kubelet_config']}",
            f"--kubeconfig={p['kubeconfig']}",
            f"--root-dir={p['kubelet_root']}",
            f"--cert-dir={p['pki'] / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={info['ip']}",
            f"--node-labels={NODE_LABEL}=true",
            "-v=1",
        ],
    )
    client = state.client()

    def ready() -> bool:
        node = client.get(f"/api/v1/nodes/{NODE_NAME}")
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    _wait(f"node {NODE_NAME} Ready", ready, timeout, state)
    log(f"real node {NODE_NAME} Ready ({info['ip']}, kubelet :{kubelet_port}, containerd {p['socket']})")


def _write_containerd_config(p: dict[str, Path]) -> None:
    # restrict_oom_score_adj: kubelet asks -998 for sandboxes, which needs CAP_SYS_RESOURCE (root lacks it
    # here: runc fails "can't get final child's PID from pipe").
    p["containerd_config"].write_text(
        f"""version = 2
root = "{p["containerd_root"]}"
state = "{p["containerd_state"]}"
disabled_plugins = ["io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "{p["socket"]}"
[ttrpc]
  address = "{p["socket"]}.ttrpc"
[debug]
  address = "{p["run"] / "debug.sock"}"
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc")}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{p["cni_conf"]}"
    max_conf_num = 1
"""
    )


def _write_cni_config(p: dict[str, Path]) -> None:
    # isGateway false: the bridge's address is hostnet's, and the plugin then leaves ip_forward alone; no
    # ipMasq, no portmap: the CNI plugins touch no iptables rule.
    conf = {
        "cniVersion": "1.0.0",
        "name": "phalanx-real-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": hostnet.BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(p["cni_ipam"]),
                    "ranges": [[{"subnet": hostnet.POD_SUBNET, "gateway": hostnet.GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }
    (p["cni_conf"] / "10-phalanx.conflist").write_text(json.dumps(conf, indent=2))


def _write_kubelet_files(state: ClusterState, p: dict[str, Path], ip: str, port: int, healthz: int) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dev",
                "cluster": {
                    "server": f"https://127.0.0.1:{state.api_port}",
                    "certificate-authority": str(state.ca_file),
                },
            }
        ],
        "users": [
            {
                "name": NODE_NAME,
                "user": {
                    "client-certificate": str(p["pki"] / "node.crt"),
                    "client-key": str(p["pki"] / "node.key"),
                },
            }
        ],
        "contexts": [{"name": "node", "context": {"cluster": "dev", "user": NODE_NAME}}],
        "current-context": "node",
    }
    p["kubeconfig"].write_text(json.dumps(kubeconfig, indent=2))
    p["kubeconfig"].chmod(0o600)
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # v1.37 refuses a cgroup v1 host unless told
        "cgroupDriver": "cgroupfs",  # PID 1 is not systemd
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{p['socket']}",
        # The apiserver dials the InternalIP (never loopback: "nodeIP can't be loopback address").
        "address": ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        # Only the apiserver (its client cert, from the dev cluster's CA) reaches the kubelet API.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(state.ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        # No KUBE-FIREWALL/KUBE-IPTABLES-HINT chains (kubelet makes them for kube-proxy, which is not run):
        # the host's iptables stay as hostnet.py leaves them.
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "clusterDomain": "cluster.local",
        "podLogsDir": str(p["pod_logs"]),
    }
    p["kubelet_config"].write_text(json.dumps(config, indent=2))


# ---------------------------------------------------------------------------- images
def _blob(layout: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    layout["blobs/sha256/" + digest[7:]] = data
    return digest


def write_pause_image(binary: Path, archive: Path) -> None:
    """An OCI archive of the pause image: one layer with /pause (no registry, no podman needed)."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entry = tar.gettarinfo(str(binary), arcname="pause")
        entry.uid = entry.gid = 0
        entry.uname = entry.gname = ""
        entry.mtime = 0
        entry.mode = 0o755
        with open(binary, "rb") as f:
            tar.addfile(entry, f)
    layer = layer_buf.getvalue()
    compressed = gzip.compress(layer, mtime=0)
    blobs: dict[str, bytes] = {}
    config = json.dumps(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(blobs, config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _blob(blobs, compressed),
                    "size": len(compressed),
                }
            ],
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _blob(blobs, manifest),
                "size": len(manifest),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {"io.containerd.image.name": PAUSE_IMAGE},
            }
        ],
    }
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps(index).encode(),
        **blobs,
    }
    with tarfile.open(archive, "w") as tar:
        for name, data in files.items():
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))


def import_image(state: ClusterState, archive: Path) -> list[str]:
    """Import an OCI archive (e.g. hack/image.sh's) into the node's containerd, namespace k8s.io, where
    kubelet finds it (pods use `imagePullPolicy: Never` or IfNotPresent). Returns the image names."""
    out = _ctr(paths(state.path), "images", "import", str(archive)).stdout
    names = [line.split()[1] for line in out.splitlines() if line.startswith("unpacking ")]
    if not names:
        raise RealNodeError(f"ctr imported no named image from {archive}:\n{out}")
    return names


# ---------------------------------------------------------------------------- down
def stop(state: ClusterState, log: Log) -> list[str]:
    """Undo everything `prepare` and `start` did, in order; tolerant of what never happened. Returns the
    problems met (the teardown goes on past each)."""
    info = state.real_node
    if not info:
        return []
    p = paths(state.path)
    problems: list[str] = []
    client = state.client()
    kubelet = state.pids.get("kubelet")
    containerd = state.pids.get("containerd")
    if kubelet and _alive(kubelet, state.path) and containerd and _alive(containerd, state.path):
        # The pods go while kubelet runs, so it tears down their sandboxes, networks and volumes.
        with contextlib.suppress(OSError, ApiError):
            client.request(
                "PATCH",
                f"/api/v1/nodes/{NODE_NAME}",
                {"spec": {"unschedulable": True}},
                "application/merge-patch+json",
            )
            pods = client.get(f"/api/v1/pods?fieldSelector=spec.nodeName={NODE_NAME}")["items"]
            for pod in pods:
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    client.request(
                        "DELETE",
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                    )
        # Stopped, not yet removed: kubelet stops a deleted pod's containers and sandbox (its network torn
        # down, its veth gone from the bridge) at once, but garbage-collects the records only every minute.
        try:
            _wait("the real node's pods stopped", lambda: not _tasks(p) and not _bridge_ports(), 60, None)
        except RealNodeError as e:
            problems.append(str(e))
    _stop_pid(state, "kubelet")
    if containerd and _alive(containerd, state.path):
        running = _tasks(p)
        if running:  # kubelet did not stop them (sandbox networks may stay behind)
            problems.append(f"{len(running)} containers still running after kubelet: killed with ctr")
        for cid in _containers(p):
            _ctr(p, "tasks", "kill", "-s", "SIGKILL", cid, check=False)
            _ctr(p, "tasks", "rm", "-f", cid, check=False)
            _ctr(p, "containers", "rm", cid, check=False)
    _stop_pid(state, "containerd")
    problems += _unmount_under(Path(info.get("kubelet_root", p["kubelet_root"])), state.path / "real-node")
    _remove_cgroups()
    for path in (Path(info.get("kubelet_root", p["kubelet_root"])), Path(info.get("run", p["run"]))):
        shutil.rmtree(path, ignore_errors=True)
    _remove_outside(info.get("created", []), p["pod_logs"])
    if "net" in info:
        net = hostnet.HostNet.from_dict(info["net"])
        problems += hostnet.undo(net)
        info["net"] = net.to_dict()
    state.real_node = {}
    state.save()
    for problem in problems:
        log(f"real node teardown: {problem}")
    log(f"real node {NODE_NAME} removed (kubelet, containerd, bridge, routes, iptables rules)")
    return problems


def _tasks(p: dict[str, Path]) -> list[str]:
    """Containers with a live process."""
    result = _ctr(p, "tasks", "ls", check=False)
    if result.returncode != 0:
        return []
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    return [row[0] for row in rows if len(row) >= 3 and row[2] != "STOPPED"]


def _bridge_ports() -> list[str]:
    ports = Path(f"/sys/class/net/{hostnet.BRIDGE}/brif")
    return [port.name for port in ports.iterdir()] if ports.is_dir() else []


def _containers(p: dict[str, Path]) -> list[str]:
    result = _ctr(p, "containers", "ls", "-q", check=False)
    return result.stdout.split() if result.returncode == 0 else []


def _unmount_under(*roots: Path) -> list[str]:
    """kubelet bind-mounts its root onto itself (rshared) and leaves it; volumes may stay after a kill."""
    problems = []
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if any(point == str(r) or point.startswith(f"{r}/") for r in roots):
                mounts.append(point)
    for point in sorted(set(mounts), key=len, reverse=True):
        result = subprocess.run(["umount", point], capture_output=True, text=True)
        if result.returncode != 0:
            result = subprocess.run(["umount", "-l", point], capture_output=True, text=True)
            if result.returncode != 0:
                problems.append(f"umount {point}: {result.stderr.strip()}")
    return problems


def _remove_cgroups() -> None:
    """kubelet's cgroups (cgroupfs driver), leaf first; a cgroup still holding a process stays."""
    for top in glob.glob("/sys/fs/cgroup/*/kubepods") + glob.glob("/sys/fs/cgroup/kubepods"):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def _remove_outside(created: list[str], pod_logs: Path) -> None:
    """What kubelet and containerd wrote outside their folders: only under paths absent before `up`, and
    the symlinks in /var/log/containers that point into this cluster's pod logs."""
    with contextlib.suppress(OSError):
        for link in Path("/var/log/containers").iterdir():
            if link.is_symlink() and str(os.readlink(link)).startswith(str(pod_logs)):
                link.unlink()
    with contextlib.suppress(OSError):
        Path("/var/lib/kubelet/device-plugins/kubelet.sock").unlink()
    for top in created:
        if not os.path.isdir(top) or os.path.ismount(top):
            continue
        # Empty folders only (bottom-up), and sockets: a file someone else put there stays.
        for dirpath, _dirs, files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
            for name in files:
                path = os.path.join(dirpath, name)
                with contextlib.suppress(OSError):
                    if Path(path).is_socket() or Path(path).is_symlink():
                        os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


# ---------------------------------------------------------------------------- processes
def _ctr(p: dict[str, Path], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["ctr", "--address", str(p["socket"]), "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise RealNodeError(f"ctr {' '.join(args)}: {result.stderr.strip()}")
    return result


def _spawn(state: ClusterState, name: str, argv: list[str]) -> None:
    log_path = state.path / "logs" / f"{name}.log"
    env = dict(os.environ)
    # containerd finds runc and the shim on PATH; kubelet calls mount/umount.
    env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state.path,
            env=env,
            start_new_session=True,
        )
    state.pids[name] = proc.pid
    state.save()


def _alive(pid: int, directory: Path) -> bool:
    return running(pid, directory)


def _stop_pid(state: ClusterState, name: str, timeout: float = 20.0) -> None:
    pid = state.pids.get(name)
    if pid:
        stop_process(pid, state.path, grace=timeout)
    state.pids.pop(name, None)
    state.save()


def _wait(what: str, check: Callable[[], bool], timeout: float, state: ClusterState | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state is not None:
            for name in ("containerd", "kubelet"):
                pid = state.pids.get(name)
                if pid and not _alive(pid, state.path):
                    log_path = state.path / "logs" / f"{name}.log"
                    raise RealNodeError(f"{name} exited; end of {log_path}:\n{log_path.read_text()[-2000:]}")
        try:
            if check():
                return
        except (OSError, ApiError, RealNodeError):
            pass
        time.sleep(0.25)
    raise RealNodeError(f"timed out after {timeout:.0f} s waiting for {what}")
