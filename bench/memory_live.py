"""The operator's RSS against a real apiserver that holds 50,000 nodes and 50,000 pods (issue 19, item 3).

    python bench/memory_live.py                              # 50,000 + 50,000, both watch paths
    python bench/memory_live.py --size 5000 --paths informer

bench/memory_bench.py counts Python objects per consumer with tracemalloc; this measures what an admin
sees: `phalanx run` as its own process against the dev cluster's real etcd and kube-apiserver, its VmRSS
and its VmHWM (the peak since it started) from /proc, with Kopf's watches of Phalanx's own kinds, its
webhook server, metrics and everything else the process starts.

1. `dev-cluster up --topology 1x1x1`, then kube-controller-manager, kube-scheduler and kwok are stopped:
   at this size kwok's leases (a renewal per node every 10 s) and the node-lifecycle controller's taints
   of 50,000 nodes nobody heartbeats would be the machine's whole load and measure them, not Phalanx.
   etcd and the apiserver stay: the watch is real.
2. `--size` nodes shaped as kwok's (memory_bench.py's bodies: a zone/block/rack topology, 8 GPUs, Ready)
   and as many pods bound to them by nodeName, one per node (an Indexed Job's labels, an 8-GPU request;
   no Job object and no controller, so nothing changes them), created through the API.
3. For each watch path (`informer`, the default; `kopf`: `--no-informers`), a fresh `phalanx run`, ready
   when its cache is primed (the /readyz gate) and checked against `phalanx_cache_objects`; its RSS
   sampled for `--settle` seconds idle, then while `--churn` node status patches (a heartbeat's fresh
   condition times) and as many pod label patches stream through its watches, then `--settle` seconds
   after.

Writes bench/results/memory-live-<size>.json and the section "## Memory against a real watch" of
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from memory_bench import machine, node_body, pod_body  # noqa: E402
from memory_bench import write_doc as write_section  # noqa: E402
from phalanx.devcluster.cluster import DevCluster  # noqa: E402
from phalanx.devcluster.http import ApiError, RestClient  # noqa: E402
from phalanx.devcluster.operator_process import OperatorProcess  # noqa: E402
from phalanx.devcluster.procs import pid_alive, signal_group  # noqa: E402
from phalanx.devcluster.state import ClusterState  # noqa: E402
from scale_watch import memory_mib as vm  # noqa: E402

SECTION = "## Memory against a real watch"
RESULTS = ROOT / "bench" / "results"
NAMESPACE = "team-a"
STOPPED = ("kwok", "kube-scheduler", "kube-controller-manager")
PATHS = {"informer": (), "kopf": ("--no-informers",)}
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "ownerReferences")


def as_created(body: dict[str, Any]) -> dict[str, Any]:
    """A watch event's body as a client creates it: without what the apiserver sets (and no owner, since
    there is no Job: the garbage collector is stopped, and the pods must not look orphaned to anyone)."""
    meta = {k: v for k, v in body["metadata"].items() if k not in SERVER_SET}
    return {**body, "metadata": meta}


def quiet_control_plane(state: ClusterState, log: Callable[[str], None]) -> None:
    """Stop what would write to every node (see the docstring, step 1); etcd and the apiserver stay."""
    for name in STOPPED:
        pid = state.pids.get(name)
        if pid and pid_alive(pid):
            signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if pid_alive(pid):
                signal_group(pid, signal.SIGKILL)
    log(f"stopped {', '.join(STOPPED)}: etcd and kube-apiserver only")


def create_all(
    api: RestClient, what: str, path: str, bodies: Iterable[dict[str, Any]], log: Callable[[str], None]
) -> float:
    """POST every body (a conflict is an object there already); returns the seconds it took."""
    started = time.monotonic()
    done = 0
    lock = threading.Lock()

    def create(body: dict[str, Any]) -> None:
        nonlocal done
        try:
            api.request("POST", path, body)
        except ApiError as e:
            if e.status != 409:
                raise
        with lock:
            done += 1
            if done % 10000 == 0:
                log(f"  {done:,} {what} ({done / (time.monotonic() - started):.0f}/s)")

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, bodies))
    return time.monotonic() - started


def populate(state: ClusterState, size: int, log: Callable[[str], None]) -> dict[str, float]:
    api = state.client()
    for path, body in (
        ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
        # KCM (stopped) would create it; the ServiceAccount admission plugin refuses pods without it.
        (f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {"metadata": {"name": "default"}}),
    ):
        try:
            api.request("POST", path, body)
        except ApiError as e:
            if e.status != 409:
                raise
    nodes = create_all(api, "nodes", "/api/v1/nodes", (as_created(node_body(i)) for i in range(size)), log)
    pods = create_all(
        api,
        "pods",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        (as_created(pod_body(i)) for i in range(size)),
        log,
    )
    log(f"created {size:,} nodes in {nodes:.0f} s and {size:,} pods in {pods:.0f} s")
    return {"nodes_created_s": round(nodes, 1), "pods_created_s": round(pods, 1)}


def cache_objects(operator: OperatorProcess) -> dict[str, float]:
    out = {}
    for line in operator.scrape().splitlines():
        if line.startswith('phalanx_cache_objects{kind="'):
            kind = line.split('"')[1]
            out[kind] = float(line.rsplit(" ", 1)[1])
    return out


class Sampler:
    """VmRSS of the operator once a second in a thread: the largest and the last."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.max = 0.0
        self.last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.last = vm(self.pid)["VmRSS"]
            self.max = max(self.max, self.last)
            self._stop.wait(1.0)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def churn(api: RestClient, size: int, count: int) -> float:
    """`count` node status patches (a heartbeat: fresh condition times) and as many pod label patches,
    spread over the objects; returns the seconds it took."""
    started = time.monotonic()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def patch(i: int) -> None:
        k = i * max(1, size // count) % size
        node = node_body(k)
        for condition in node["status"]["conditions"]:
            condition["lastHeartbeatTime"] = stamp
        api.request(
            "PATCH",
            f"/api/v1/nodes/{node['metadata']['name']}/status",
            {"status": {"conditions": node["status"]["conditions"]}},
            "application/merge-patch+json",
        )
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_body(k)['metadata']['name']}",
            {"metadata": {"labels": {"bench.phalanx.dev/churn": str(i)}}},
            "application/merge-patch+json",
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(patch, range(count)))
    return time.monotonic() - started


def event_loop(log_path: Path) -> str:
    """The event loop the operator said it runs on (main.py logs `event loop: <name>` at its start)."""
    if not log_path.exists():
        return "unknown"
    found = re.findall(r"event loop: (\w+)", log_path.read_text(errors="replace"))
    return found[-1] if found else "unknown"


def measure_path(
    state: ClusterState,
    folder: Path,
    path: str,
    size: int,
    settle: float,
    count: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    operator = OperatorProcess(state, folder, PATHS[path], name=f"phalanx-{path}")
    started = time.monotonic()
    operator.start(timeout=1800)
    ready = time.monotonic() - started
    assert operator.proc is not None
    pid = operator.proc.pid
    try:
        primed = vm(pid)
        held = cache_objects(operator)
        # The dev cluster's own node is one more; the pods are exactly these.
        if held.get("Node", 0) < size or held.get("Pod", 0) < size:
            raise RuntimeError(f"{path}: the cache holds {held} after ready, expected {size:,} of each")
        with Sampler(pid) as idle:
            time.sleep(settle)  # sampling RSS over a span, not waiting for a state
        with Sampler(pid) as busy:
            churn_s = churn(state.client(), size, count)
        with Sampler(pid) as after:
            time.sleep(settle)
        peak = vm(pid)["VmHWM"]
    finally:
        operator.stop()
    row = {
        "path": path,
        "event_loop": event_loop(operator.log_path),
        "ready_s": round(ready, 1),
        "cache_objects": held,
        "rss_primed_mib": round(primed["VmRSS"], 1),
        "rss_idle_mib": round(idle.last, 1),
        "rss_churn_max_mib": round(busy.max, 1),
        "rss_after_churn_mib": round(after.last, 1),
        "peak_mib": round(peak, 1),
        "churn_patches": 2 * count,
        "churn_s": round(churn_s, 1),
    }
    log(f"{path}: {row}")
    return row


def table(document: dict[str, Any]) -> str:
    size = document["size"]
    lines = [
        "| watch path | ready (list + prime) | RSS primed | RSS idle | RSS max during churn | RSS after"
        " | peak (VmHWM) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in document["paths"]:
        label = "informer (default)" if r["path"] == "informer" else "Kopf (`--no-informers`)"
        label += f", {r.get('event_loop', 'asyncio')}"  # runs before the field was recorded were on asyncio
        lines.append(
            f"| {label} | {r['ready_s']:.0f} s | {r['rss_primed_mib']:.0f} MiB | {r['rss_idle_mib']:.0f} MiB"
            f" | {r['rss_churn_max_mib']:.0f} MiB | {r['rss_after_churn_mib']:.0f} MiB"
            f" | {r['peak_mib']:.0f} MiB |"
        )
    cp = document["control_plane_rss_mib"]
    lines += [
        "",
        f"{size:,} nodes and {size:,} pods in the apiserver (created in"
        f" {document['nodes_created_s']:.0f} s and"
        f" {document['pods_created_s']:.0f} s); churn: {document['paths'][0]['churn_patches']:,} patches"
        f" (half node status, half pod labels) per path; apiserver {cp['kube-apiserver']:.0f} MiB, etcd"
        f" {cp['etcd']:.0f} MiB RSS at the end.",
    ]
    return "\n".join(lines)


def write_doc(document: dict[str, Any]) -> None:
    text = (
        f"{SECTION}\n\n`python bench/memory_live.py --size {document['size']}` on {document['machine']}, "
        f"{document['date']}, commit {document['commit']}: `phalanx run` against the dev cluster's real etcd "
        "and apiserver (its other components stopped, so nothing else writes; see the script's docstring), "
        "RSS from /proc, everything the process holds (Kopf, its watches of Phalanx's kinds, the webhook "
        "server, the cache).\n\n" + table(document) + "\n"
    )
    write_section(text, SECTION)


def git_commit() -> str:
    import subprocess

    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=50000, help="nodes, and as many pods")
    parser.add_argument("--paths", default="informer,kopf", help="watch paths: informer, kopf")
    parser.add_argument(
        "--settle", type=float, default=20.0, help="seconds of idle sampling, before and after"
    )
    parser.add_argument("--churn", type=int, default=5000, help="node status patches (and as many pod ones)")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown watch paths {sorted(unknown)}; known: {', '.join(PATHS)}")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    folder = Path(tempfile.mkdtemp(prefix="phalanx-memory-live-"))
    cluster = DevCluster(folder / "cluster")
    try:
        state = cluster.up(topology="1x1x1", log=log)
        quiet_control_plane(state, log)
        document: dict[str, Any] = {
            "size": args.size,
            "machine": machine(),
            "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": git_commit(),
            **populate(state, args.size, log),
        }
        document["paths"] = [
            measure_path(state, folder, p, args.size, args.settle, args.churn, log) for p in paths
        ]
        document["control_plane_rss_mib"] = {
            name: round(vm(state.pids[name])["VmRSS"], 1) for name in ("kube-apiserver", "etcd")
        }
    finally:
        cluster.down(log=log)
    print(table(document))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"memory-live-{args.size}.json").write_text(json.dumps(document, indent=2) + "\n")
    if not args.no_doc:
        write_doc(document)


if __name__ == "__main__":
    main()
