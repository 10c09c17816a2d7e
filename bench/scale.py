"""Phalanx, upstream and Kueue TAS side by side at cluster scale (issue 19 item 1): bursts of gang Jobs and a
contention run, each system on a fresh dev cluster of its own, interleaved, several rounds.

    python3 bench/scale.py                                   # the full form: 1,000, 2,000, 5,000 nodes
    python3 bench/scale.py --sizes 1000 --rounds 1 --systems phalanx,upstream
    python3 bench/scale.py --sizes 2x5x10 --rounds 1         # 100 nodes, 10 Jobs: a quick check
    python3 bench/scale.py --sizes 1000 --scenarios contention
    python3 bench/scale.py --sizes 1000,2000 --systems phalanx,upstream,upstream-1.38   # and upstream's next

Every Job is Indexed, 8 pods x 8 GPUs (a whole node each), required in one local block
(`oci.oraclecloud.com/rdma.local_block_id`); a size BxRxN has B*R local blocks of N nodes.
- *burst*: one Job per local block (100 at 1,000 nodes, 200 at 2,000, 500 at 5,000), all created at once
  (a pool of concurrent POSTs); the run ends when every pod is bound.
- *contention* (at the smallest size only): 1.5 Jobs per local block (150 at 1,000 nodes) whose pods end
  30 s after they start (kwok's `sim.phalanx.dev/complete-after`), so a third of them wait for a freed block;
  the run ends when every pod has ended.

A watch on the pods records when each got its `nodeName` and ended, and checks every pod event for a partial
gang (some but not all of a gang's pods bound `--settle` seconds after its first bind, or at the end): 0 is
the only right answer. Requests are counted twice: from the apiserver's own log of every request (its
verbosity is raised to 3 through /debug/flags/v for the measured window only; the user agent names the
component) and from its `apiserver_request_total` (every client; leases and this bench's own requests left
out). Raw results go to `<out>.json` (written after every run), the table and ratios to `<out>.txt`.
Nothing here asserts a time; the exit status is 1 if a run failed, did not finish or left a partial gang.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import math
import os
import platform
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # scale_watch, scale_systems, however this file is started

import timeline  # noqa: E402
from phalanx.devcluster.binaries import K8S_VERSION  # noqa: E402
from phalanx.devcluster.cluster import ClusterState  # noqa: E402
from phalanx.devcluster.http import RestClient  # noqa: E402
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY  # noqa: E402
from scale_systems import SYSTEMS, Phalanx, System  # noqa: E402
from scale_watch import (  # noqa: E402
    ApiCounters,
    Gang,
    PodWatch,
    Recorder,
    RequestLog,
    count_diff,
    cpu_seconds,
    histogram_latency,
    lag_buckets,
    log_chunk,
    memory_mib,
    pass_totals,
    review_buckets,
    webhook_latency,
    write_counts,
)

PRESETS = {100: "2x5x10", 1000: "10x10x10", 2000: "20x10x10", 5000: "25x20x10"}
NAMESPACE = "default"
GANG = 8
READS = ("GET", "LIST", "WATCH", "LEASE")
_GRID = re.compile(r"^(\d+)x(\d+)x(\d+)$")


# ----------------------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    scenario: str  # burst | contention
    topology: str  # BxRxN
    jobs: int
    pods: int = GANG
    run_seconds: float | None = None  # contention: each pod ends this long after it started

    @property
    def nodes(self) -> int:
        b, r, n = grid(self.topology)
        return b * r * n

    @property
    def id(self) -> str:
        return f"{self.scenario}-{self.nodes}"


def grid(topology: str) -> tuple[int, int, int]:
    match = _GRID.match(topology)
    if match is None:
        raise ValueError(
            f"a size is a node count of {sorted(PRESETS)} or BxRxN (e.g. 2x5x10), not {topology!r}"
        )
    b, r, n = (int(g) for g in match.groups())
    return b, r, n


def topology_of(size: str) -> str:
    text = size.strip()
    topology = PRESETS[int(text)] if text.isdigit() and int(text) in PRESETS else text
    b, r, n = grid(topology)
    if min(b, r) < 1 or n < GANG:
        raise ValueError(f"{size}: needs at least one local block of at least {GANG} nodes")
    return topology


def build_cases(
    sizes: Sequence[str],
    scenarios: Sequence[str],
    jobs: int | None = None,
    contention_jobs: int | None = None,
    run_seconds: float = 30.0,
) -> list[Case]:
    topologies = [topology_of(s) for s in sizes]
    cases = []
    for topology in topologies:
        b, r, _ = grid(topology)
        if "burst" in scenarios:
            cases.append(Case("burst", topology, jobs or b * r))
    if "contention" in scenarios and topologies:
        smallest = min(topologies, key=lambda t: math.prod(grid(t)))
        b, r, _ = grid(smallest)
        count = contention_jobs or math.ceil(1.5 * b * r)
        cases.append(Case("contention", smallest, count, run_seconds=run_seconds))
    return cases


@dataclass
class Options:
    settle: float = 10.0  # seconds after a gang's first bind before some-but-not-all bound counts as partial
    idle: float = 10.0  # seconds the fresh cluster idles before the Jobs (start-up work settles)
    timeout: float = 1800.0  # per run, from the first create
    up_timeout: float = 900.0  # cluster and operator start
    workers: int = 16  # concurrent Job POSTs
    request_log: bool = True
    key: str = LOCAL_BLOCK_KEY
    keep: bool = False
    log: Callable[[str], None] = print
    # kube-controller-manager's --node-monitor-grace-period for clusters of at least BIG_CLUSTER nodes
    # (smaller ones keep its default, 50 s): kwok renews every node's Lease from one process, and at 5,000
    # nodes on 2 saturated cores the renewals fall behind, so nodes are marked unreachable and tainted though
    # nothing failed (seen: one pinned pod per gang refused for its node's taint, the gang requeued). The
    # same for every system.
    node_grace_seconds: int = 300
    # py-spy records each Python admitter (Phalanx's operator) over the measured window into this folder
    # (collapsed stacks, `<system>-<case>-r<round>.txt`; py-spy must be on PATH): where its CPU goes.
    profile: Path | None = None


BIG_CLUSTER = 3000


# --------------------------------------------------------------------------------------------- one run
def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def set_verbosity(state: ClusterState, level: int) -> None:
    """The apiserver's klog verbosity, changed while it runs (at 3 it logs every request with its agent)."""
    context = ssl.create_default_context(cafile=str(state.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", state.api_port, context=context, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {state.token}", "Content-Type": "text/plain"}
        conn.request("PUT", "/debug/flags/v", body=str(level).encode(), headers=headers)
        response = conn.getresponse()
        text = response.read().decode(errors="replace")
        if response.status != 200:
            raise RuntimeError(f"PUT /debug/flags/v {level}: HTTP {response.status}: {text[:200]}")
    finally:
        conn.close()


def load1() -> float:
    return os.getloadavg()[0]


@dataclass
class Sampler:
    """What the wait loop samples: the 1-min load and the admitters' RSS."""

    pids: dict[str, int]
    load_max: float = 0.0
    rss_max: dict[str, float] = field(default_factory=dict)

    def sample(self) -> None:
        self.load_max = max(self.load_max, load1())
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                rss = memory_mib(pid).get("VmRSS", 0.0)
                self.rss_max[name] = max(self.rss_max.get(name, 0.0), rss)


@dataclass
class Profiler:
    """py-spy sampling the Python admitters of a run (not Go ones: kube-scheduler, Kueue) for its measured
    window, 100 samples a second, into collapsed stacks (one line a stack and its count: grep, or any
    flame graph tool). A profiler that cannot start is said and skipped; the run goes on unprofiled."""

    procs: list[tuple[Path, subprocess.Popen[bytes]]]

    @classmethod
    def start(
        cls, folder: Path | None, pids: dict[str, int], stem: str, log: Callable[[str], None]
    ) -> Profiler | None:
        if folder is None:
            return None
        spy = shutil.which("py-spy")
        if spy is None:
            log("  --profile: py-spy is not on PATH (pip install py-spy); not profiled")
            return None
        folder.mkdir(parents=True, exist_ok=True)
        procs = []
        for name, pid in pids.items():
            if not _is_python(pid):
                continue
            path = folder / f"{stem}-{name}.txt"
            command = [spy, "record", "--pid", str(pid), "--rate", "100", "--format", "raw", "--output"]
            procs.append((path, subprocess.Popen([*command, str(path)], stdout=subprocess.DEVNULL)))
        return cls(procs)

    def stop(self) -> list[str]:
        """Ends the recordings (py-spy writes its file on SIGINT) and returns their paths."""
        for _, proc in self.procs:
            proc.send_signal(signal.SIGINT)
        written = []
        for path, proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if path.exists():
                written.append(str(path))
        return written


def _is_python(pid: int) -> bool:
    try:
        return "python" in Path(f"/proc/{pid}/exe").resolve().name
    except OSError:
        return False


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            out[name] = cpu_seconds(pid)
    return out


def create_jobs(
    api: RestClient, bodies: list[dict[str, Any]], workers: int
) -> dict[str, tuple[float, float]]:
    """POST every Job through a pool; (sent, answered) monotonic times by name."""

    def create(body: dict[str, Any]) -> tuple[str, tuple[float, float]]:
        sent = time.monotonic()
        api.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", body)
        return str(body["metadata"]["name"]), (sent, time.monotonic())

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(create, bodies))


def run_case(system: System, case: Case, folder: Path, options: Options) -> dict[str, Any]:
    """Bring `system` up on a fresh cluster, play `case`, measure, take it all down. Never raises for a run
    that failed: the result says so (status != "ok")."""
    log = options.log
    result: dict[str, Any] = {
        "system": system.name,
        "case": case.id,
        "scenario": case.scenario,
        "topology": case.topology,
        "nodes": case.nodes,
        "jobs": case.jobs,
        "pods": case.jobs * case.pods,
        "run_seconds": case.run_seconds,
        "status": "error",
    }
    folder.mkdir(parents=True, exist_ok=True)
    watch: PodWatch | None = None
    verbose = False
    try:
        started = time.monotonic()
        system.node_grace_seconds = options.node_grace_seconds if case.nodes >= BIG_CLUSTER else 0
        result["node_monitor_grace_s"] = system.node_grace_seconds or None
        state = system.start(
            folder, case.topology, lambda m: log(f"  [{system.name}] {m}"), options.up_timeout
        )
        result["cluster_ready_s"] = state.ready_seconds
        result["start_s"] = round(time.monotonic() - started, 2)
        api = state.client()
        domain = {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(options.key, "")
            for n in api.get("/api/v1/nodes")["items"]
        }
        if options.idle:
            time.sleep(options.idle)  # a bench's quiet period, not a wait for a state
        names = [f"{case.scenario}-{i:04d}" for i in range(case.jobs)]
        bodies = [system.job(n, case.pods, options.key, case.run_seconds) for n in names]
        recorder = Recorder(dict.fromkeys(names, case.pods), options.settle, domain)
        watch = PodWatch(state, NAMESPACE, recorder.on_pod)
        watch.start()
        admitters = system.admitters()
        components = {**state.pids, **admitters}
        sampler = Sampler(admitters)
        idle_rss = {name: memory_mib(pid).get("VmRSS", 0.0) for name, pid in admitters.items()}
        log_path = state.path / "logs" / "kube-apiserver.log"
        if options.request_log:
            set_verbosity(state, 3)
            verbose = True
        log_start = log_path.stat().st_size
        load_start = load1()
        cpu_before = cpu_of(components)
        counters_before = ApiCounters.parse(api.get("/metrics"))
        own_before = system.own_metrics()
        reviews_before = review_buckets(own_before)
        lag_before = lag_buckets(own_before)
        passes_before = pass_totals(own_before)
        writes_before = write_counts(own_before)
        watch_requests_before = watch.requests

        profiler = Profiler.start(options.profile, admitters, f"{system.name}-{case.id}", log)
        t0 = time.monotonic()
        created = create_jobs(api, bodies, options.workers)
        created_s = time.monotonic() - t0
        deadline = t0 + options.timeout
        finished = False
        while time.monotonic() < deadline:
            sampler.sample()
            now = time.monotonic()
            recorder.check_all(now)
            ran, done = recorder.counts()
            if (done if case.run_seconds else ran) >= case.jobs:
                finished = True
                break
            time.sleep(0.25)
        end = time.monotonic()
        if profiler is not None:
            result["profile"] = profiler.stop()

        counters_after = ApiCounters.parse(api.get("/metrics"))
        own_after = system.own_metrics()
        reviews_after = review_buckets(own_after)
        lag_after = lag_buckets(own_after)
        passes_after = pass_totals(own_after)
        writes_after = write_counts(own_after)
        cpu_after = cpu_of(components)
        log_end = log_path.stat().st_size
        if verbose:
            set_verbosity(state, 0)
            verbose = False
        peak_rss = {}
        for name, pid in admitters.items():
            with contextlib.suppress(OSError):
                peak_rss[name] = memory_mib(pid).get("VmHWM", 0.0)
        watch.stop()
        recorder.check_all(time.monotonic(), final=True)

        result.update(
            measure(case, recorder, created, t0, domain)
            | {
                "status": "ok" if finished else "unfinished",
                "wall_s": round(end - t0, 3),
                "created_all_s": round(created_s, 3),
                "watch_events": recorder.events,
                "watch_restarts": watch.restarts,
                "watch_errors": watch.errors,
                "cpu_s": {k: round(cpu_after[k] - v, 2) for k, v in cpu_before.items() if k in cpu_after},
                "admitters": sorted(admitters),
                "admitter_idle_rss_mib": {k: round(v, 1) for k, v in idle_rss.items()},
                "admitter_max_rss_mib": {k: round(v, 1) for k, v in sampler.rss_max.items()},
                "admitter_peak_rss_mib": {k: round(v, 1) for k, v in peak_rss.items()},
                "load": {"start": load_start, "max": max(sampler.load_max, load_start), "end": load1()},
                "webhooks": webhook_latency(counters_before, counters_after),
                # the operator's own timing of each review, in finer buckets (Phalanx only)
                "webhooks_in_process": histogram_latency(reviews_before, reviews_after),
                # how late the operator's event loop ran what was ready (Phalanx only): a review's wait
                "loop_lag": histogram_latency(lag_before, lag_after).get("loop", {}),
                # the operator's scheduling passes in the window (Phalanx only): count, seconds
                "passes": {k: round(v - passes_before.get(k, 0.0), 3) for k, v in passes_after.items()},
                # the operator's writes in the window by action and why (Phalanx only: phalanx_writes_total)
                "writes_by_action": count_diff(writes_before, writes_after),
            }
        )
        bench_requests = 1 + len(bodies) + (watch.requests - watch_requests_before)
        admitted = result["admitted_pods"] or 1
        everything = counters_after.requests - counters_before.requests - bench_requests
        result["requests"] = {
            "all_metric": everything,
            "all_per_pod": round(everything / admitted, 3),
            "leases_metric": counters_after.leases - counters_before.leases,
            "bench_own": bench_requests,
        }
        if options.request_log:
            chunk = log_chunk(log_path, log_start, log_end)  # read once, parsed by both
            requests = RequestLog.parse(chunk)
            result["first_bind_apiserver_s"] = rounded(timeline.first_binding(timeline.parse(chunk)), 3)
            # Each Job's create as the apiserver timed it, every admission webhook it called included.
            job_creates = requests.creates.get("jobs", [])
            result["job_create_ms"] = {
                "creates": len(job_creates),
                "p50": rounded(ms(percentile(job_creates, 50)), 1),
                "p99": rounded(ms(percentile(job_creates, 99)), 1),
            }
            by_agent = requests.counts
            own = {a: v for a, v in by_agent.items() if a in system.agents}
            own_latency = [t for a in own for t in requests.write_latency.get(a, [])]
            own_all = sum(n for verbs in own.values() for verb, n in verbs.items() if verb != "LEASE")
            own_writes = sum(n for verbs in own.values() for verb, n in verbs.items() if verb not in READS)
            result["requests"].update(
                {
                    "by_agent": by_agent,
                    "own_agents": sorted(own),
                    "own": own_all,
                    "own_per_pod": round(own_all / admitted, 3),
                    "own_writes_per_pod": round(own_writes / admitted, 3),
                    "own_write_latency_p50_ms": rounded(ms(percentile(own_latency, 50))),
                    "own_write_latency_p99_ms": rounded(ms(percentile(own_latency, 99))),
                    "own_writes_by_resource": {a: requests.writes.get(a, {}) for a in sorted(own)},
                }
            )
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}".strip()
        log(f"  [{system.name}] {case.id} failed: {result['error']}")
        traceback.print_exc()
        if isinstance(system, Phalanx) and system.operator is not None:
            log(f"operator log (tail):\n{system.operator.tail()}")
    finally:
        if watch is not None:
            watch.stop()
        if verbose and system.state is not None:
            with contextlib.suppress(Exception):
                set_verbosity(system.state, 0)
        try:
            system.stop(lambda m: log(f"  [{system.name}] {m}"))
        except Exception as e:
            result["stop_error"] = str(e)
        clean = not (result.get("partial_gangs") or result.get("split_gangs") or result.get("replaced_pods"))
        if result["status"] == "ok" and clean and not options.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            result["folder"] = str(folder)
    return result


def measure(
    case: Case,
    recorder: Recorder,
    created: dict[str, tuple[float, float]],
    t0: float,
    domain: dict[str, str],
) -> dict[str, Any]:
    """The times of one run, from the recorder's gangs (seconds from the first create)."""
    gangs = list(recorder.gangs.values())
    ran = {g.job: g.ran for g in gangs if g.ran is not None}
    complete = len(ran) == len(gangs)
    to_bound = [t - created[job][0] for job, t in ran.items() if job in created]
    spread = [g.ran - g.first_bound for g in gangs if g.ran is not None and g.first_bound is not None]
    out: dict[str, Any] = {
        "admitted_pods": len(ran) * case.pods,
        "bound_pods": sum(1 for g in gangs for p in g.pods.values() if p.bound is not None),
        "replaced_pods": sum(g.replaced() for g in gangs),
        "gangs_bound": len(ran),
        "all_bound_s": round(max(ran.values()) - t0, 3) if complete else None,
        "first_bound_s": None if recorder.first_bind is None else round(recorder.first_bind - t0, 3),
        "create_to_bound_p50_s": rounded(percentile(to_bound, 50)),
        "create_to_bound_p99_s": rounded(percentile(to_bound, 99)),
        "bind_spread_p50_s": rounded(percentile(spread, 50)),
        "bind_spread_max_s": rounded(max(spread) if spread else None),
        "partial_gangs": recorder.partial_gangs(),
        "split_gangs": recorder.split_gangs(),
    }
    out["pods_per_s"] = round(case.jobs * case.pods / out["all_bound_s"], 2) if out["all_bound_s"] else None
    if case.run_seconds:
        done = [g.done for g in gangs if g.done is not None]
        out["makespan_s"] = round(max(done) - t0, 3) if len(done) == len(gangs) else None
        gaps = refill_gaps(gangs, domain, case.pods)
        out["refills"] = len(gaps)
        out["refill_p50_s"] = rounded(percentile(gaps, 50))
        out["refill_p99_s"] = rounded(percentile(gaps, 99))
    out["per_job"] = {
        g.job: {
            "created": rounded(created[g.job][0] - t0) if g.job in created else None,
            "first_bound": rounded(g.first_bound - t0) if g.first_bound is not None else None,
            "all_bound": rounded(g.ran - t0) if g.ran is not None else None,
            "all_ended": rounded(g.done - t0) if g.done is not None else None,
            "domains": sorted({domain.get(n, "?") for n in g.nodes()}),
            "pods": [
                {
                    "name": p.name,
                    "node": p.node,
                    "bound": rounded(p.bound - t0) if p.bound is not None else None,
                    "ended": rounded(p.ended - t0) if p.ended is not None else None,
                    "phase": p.phase,
                    "deleted": p.deleted,
                }
                for p in g.pods.values()
            ],
        }
        for g in gangs
    }
    return out


def refill_gaps(gangs: Sequence[Gang], domain: dict[str, str], size: int) -> list[float]:
    """For each gang that ran in a domain that had been too full for it: from the moment the domain last
    had room for it (enough of its nodes free of other gangs' pods; one pod takes a whole node) to the
    moment it ran. Gangs that found their domain free from the start (the first wave) are not refills."""
    capacity: dict[str, int] = defaultdict(int)
    for value in domain.values():
        capacity[value] += 1
    # domain -> (time, -1 a pod ended / +1 a pod bound, its Job)
    occupancy: dict[str, list[tuple[float, int, str]]] = defaultdict(list)
    for gang in gangs:
        for pod in gang.pods.values():
            if pod.bound is not None:
                occupancy[domain.get(pod.node, "?")].append((pod.bound, 1, gang.job))
                if pod.ended is not None:
                    occupancy[domain.get(pod.node, "?")].append((pod.ended, -1, gang.job))
    gaps = []
    for gang in gangs:
        places = {domain.get(n, "?") for n in gang.nodes()}
        if gang.ran is None or len(places) != 1:
            continue
        place = places.pop()
        others = sorted((t, d) for t, d, job in occupancy[place] if t <= gang.ran and job != gang.job)
        used, blocked, room_since = 0, False, 0.0
        for t, delta in others:  # at one instant, ends (-1) before binds (+1)
            used += delta
            if capacity[place] - used < size:
                blocked, room_since = True, math.inf
            elif room_since == math.inf:
                room_since = t
        if blocked and room_since != math.inf:
            gaps.append(gang.ran - room_since)
    return gaps


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# ----------------------------------------------------------------------------------------------- table
COLUMNS: list[tuple[str, str, Callable[[dict[str, Any]], float | None]]] = [
    ("all bound s", "{:.2f}", lambda r: r.get("all_bound_s")),
    ("pods/s", "{:.1f}", lambda r: r.get("pods_per_s")),
    ("c→b p50 s", "{:.2f}", lambda r: r.get("create_to_bound_p50_s")),
    ("c→b p99 s", "{:.2f}", lambda r: r.get("create_to_bound_p99_s")),
    ("first bound s", "{:.2f}", lambda r: r.get("first_bound_s")),
    ("first bind (apiserver) s", "{:.2f}", lambda r: r.get("first_bind_apiserver_s")),
    ("makespan s", "{:.1f}", lambda r: r.get("makespan_s")),
    ("refill p50 s", "{:.2f}", lambda r: r.get("refill_p50_s")),
    ("refill p99 s", "{:.2f}", lambda r: r.get("refill_p99_s")),
    ("own req/pod", "{:.2f}", lambda r: r.get("requests", {}).get("own_per_pod")),
    ("own writes/pod", "{:.2f}", lambda r: r.get("requests", {}).get("own_writes_per_pod")),
    ("all req/pod", "{:.2f}", lambda r: r.get("requests", {}).get("all_per_pod")),
    (
        "admitter CPU s",
        "{:.1f}",
        lambda r: sum(r.get("cpu_s", {}).get(a, 0.0) for a in r.get("admitters", [])),
    ),
    ("admitter peak RSS MiB", "{:.0f}", lambda r: sum(r.get("admitter_peak_rss_mib", {}).values()) or None),
    (
        "webhook p99 ms",
        "{:.0f}",
        lambda r: max((w["p99_ms"] or 0.0 for w in r.get("webhooks", {}).values()), default=None),
    ),
    ("Job create p50 ms", "{:.0f}", lambda r: r.get("job_create_ms", {}).get("p50")),
    ("Job create p99 ms", "{:.0f}", lambda r: r.get("job_create_ms", {}).get("p99")),
    (
        "in-process review p99 ms",
        "{:.1f}",
        lambda r: max((w["p99_ms"] or 0.0 for w in r.get("webhooks_in_process", {}).values()), default=None),
    ),
    ("loop lag p99 ms", "{:.0f}", lambda r: r.get("loop_lag", {}).get("p99_ms")),
    ("load 1m start/max", "", lambda r: None),
    (
        "partial gangs",
        "{:.0f}",
        lambda r: len(r.get("partial_gangs", [])) if r.get("status") == "ok" else None,
    ),
    ("split gangs", "{:.0f}", lambda r: len(r.get("split_gangs", [])) if r.get("status") == "ok" else None),
    ("replaced pods", "{:.0f}", lambda r: r.get("replaced_pods") if r.get("status") == "ok" else None),
]
RATIO_COLUMNS = (
    "all bound s",
    "c→b p50 s",
    "c→b p99 s",
    "first bound s",
    "first bind (apiserver) s",
    "makespan s",
    "refill p50 s",
    "refill p99 s",
    "own req/pod",
    "all req/pod",
)


def median_of(results: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = [v for r in results if r.get("status") == "ok" and (v := pick(r)) is not None]
    return statistics.median(values) if values else None


def table(results: list[dict[str, Any]], systems: Sequence[str]) -> str:
    header = ["case", "system", "runs", *[c[0] for c in COLUMNS]]
    lines = ["| " + " | ".join(header) + " |", "|---|---|---:|" + "---:|" * len(COLUMNS)]
    for case in dict.fromkeys(r["case"] for r in results):
        for system in systems:
            runs = [r for r in results if r["case"] == case and r["system"] == system]
            if not runs:
                continue
            ok = [r for r in runs if r.get("status") == "ok"]
            cells = [case, system, f"{len(ok)}/{len(runs)}"]
            for name, fmt, pick in COLUMNS:
                if name.startswith("load"):
                    loads = [r["load"] for r in ok]
                    cells.append(
                        " ".join(f"{x['start']:.1f}/{x['max']:.1f}" for x in loads) if loads else "-"
                    )
                    continue
                value = median_of(runs, pick)
                cells.append("-" if value is None else fmt.format(value))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(results: list[dict[str, Any]]) -> list[str]:
    """Phalanx's medians over upstream's and Kueue's (below 1: Phalanx is faster or does less)."""
    picks = {name: pick for name, _, pick in COLUMNS}
    lines = []
    for case in dict.fromkeys(r["case"] for r in results):
        mine = [r for r in results if r["case"] == case and r["system"] == "phalanx"]
        for other in ("upstream", "upstream-1.38", "kueue"):
            theirs = [r for r in results if r["case"] == case and r["system"] == other]
            parts = []
            for name in RATIO_COLUMNS:
                a, b = median_of(mine, picks[name]), median_of(theirs, picks[name])
                if a is not None and b:
                    parts.append(f"{name} {a / b:.2f}×")
            if parts:
                lines.append(f"- {case}, Phalanx / {other}: " + ", ".join(parts))
    return lines


def writes_per_gang(results: list[dict[str, Any]]) -> list[str]:
    """Per run that counted them, the operator's writes per Job (one gang each) by action and why, the most
    first: what its requests per pod are spent on."""
    lines = []
    for r in results:
        writes, jobs = r.get("writes_by_action") or {}, r.get("jobs") or 0
        if not writes or not jobs:
            continue
        parts = ", ".join(f"{k} {v / jobs:.2f}" for k, v in sorted(writes.items(), key=lambda kv: -kv[1]))
        lines.append(f"- {r['case']} {r['system']} round {r['round']}: {parts}")
    return lines


# ------------------------------------------------------------------------------------------------ main
def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = 0.0
    with contextlib.suppress(OSError, StopIteration):
        memory = next(
            int(line.split()[1]) / 2**20
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory, 1),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "kubernetes": K8S_VERSION,
    }


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM stops like Ctrl-C, so the `finally` of a run takes its cluster down."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def schedule(cases: list[Case], systems: list[str], rounds: int) -> list[tuple[int, Case, str]]:
    """Round r runs every case on every system, the systems' order rotated by r (interleaved)."""
    plan: list[tuple[int, Case, str]] = []
    for r in range(rounds):
        order = systems[r % len(systems) :] + systems[: r % len(systems)]
        for case in cases:
            plan.extend((r, case, s) for s in order)
    return plan


def report(document: dict[str, Any]) -> str:
    results, systems = document["runs"], document["systems"]
    m = document["machine"]
    lines = [
        f"# bench/scale.py, {document['started']}",
        "",
        f"Command: `{document['command']}`",
        f"Machine: {m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, {m['kernel']}, "
        f"Python {m['python']}; "
        f"Kubernetes {m['kubernetes']}; commit {document['commit']}; "
        f"load average at the start {document['load_at_start']:.2f}.",
        "Systems: " + "; ".join(f"{s}: {SYSTEMS[s].title}" for s in systems if s in SYSTEMS) + ".",
        "",
        table(results, systems),
        "",
        *ratios(results),
    ]
    spent = writes_per_gang(results)
    if spent:
        lines += ["", "Phalanx's writes per Job by action and why (its `phalanx_writes_total`):", *spent]
    if document["skipped"]:
        lines += ["", *document["skipped"]]
    problems = [
        f"- {r['case']} {r['system']} round {r['round']}: {r.get('status')} {r.get('error', '')} "
        f"partial={r.get('partial_gangs', [])} split={r.get('split_gangs', [])} "
        f"replaced pods={r.get('replaced_pods')} (logs: {r.get('folder', '-')})"
        for r in results
        if r.get("status") != "ok" or r.get("partial_gangs") or r.get("split_gangs") or r.get("replaced_pods")
    ]
    if problems:
        lines += ["", "Problems:", *problems]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000,2000,5000", help="node counts of the presets or BxRxN, comma-separated"
    )
    parser.add_argument(
        "--scenarios", default="burst,contention", help="burst, contention (at the smallest size)"
    )
    parser.add_argument(
        "--systems",
        default="phalanx,upstream,kueue",
        help=f"any of {', '.join(SYSTEMS)} (plain: no gangs at all, the control that shows partial gangs)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, help="burst Jobs (default: one per local block)")
    parser.add_argument("--contention-jobs", type=int, help="contention Jobs (default: 1.5 per local block)")
    parser.add_argument("--run-seconds", type=float, default=30.0, help="contention: how long each pod runs")
    parser.add_argument(
        "--settle", type=float, default=Options.settle, help="partial-gang grace after a first bind"
    )
    parser.add_argument(
        "--idle", type=float, default=Options.idle, help="seconds a fresh cluster idles first"
    )
    parser.add_argument(
        "--timeout", type=float, default=Options.timeout, help="per run, from the first create"
    )
    parser.add_argument("--workers", type=int, default=Options.workers, help="concurrent Job creates")
    parser.add_argument(
        "--node-grace",
        type=int,
        default=Options.node_grace_seconds,
        help=f"kube-controller-manager --node-monitor-grace-period, s, at {BIG_CLUSTER}+ nodes (0: default)",
    )
    parser.add_argument(
        "--no-request-log",
        action="store_true",
        help="do not raise the apiserver's verbosity to count by agent",
    )
    parser.add_argument("--workdir", default="/tmp/phalanx-scale", help="clusters live here (one at a time)")
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy records Phalanx's operator in each measured window into this folder (collapsed stacks)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep every run's folder (logs), not only failures'"
    )
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M")
    parser.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / f"scale-{stamp}"), help="<out>.json, .txt"
    )
    args = parser.parse_args(argv)

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"--systems: unknown {unknown}; known: {', '.join(SYSTEMS)}")
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if set(scenarios) - {"burst", "contention"}:
        parser.error("--scenarios: burst and/or contention")
    try:
        cases = build_cases(
            args.sizes.split(","), scenarios, args.jobs, args.contention_jobs, args.run_seconds
        )
    except ValueError as e:
        parser.error(str(e))
    skipped = []
    for name in list(systems):
        reason = SYSTEMS[name]().unavailable()
        if reason:
            print(reason)
            skipped.append(reason)
            systems.remove(name)
    options = Options(
        settle=args.settle,
        idle=args.idle,
        timeout=args.timeout,
        workers=args.workers,
        node_grace_seconds=args.node_grace,
        request_log=not args.no_request_log,
        keep=args.keep,
        profile=args.profile,
    )
    out = Path(args.out)
    # <out>.json and <out>.txt, the dots of <out> kept (--out …-upstream-1.38 is not a suffix to replace)
    json_path, text_path = out.parent / f"{out.name}.json", out.parent / f"{out.name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python3 bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "commit": git_commit(),
        "load_at_start": load1(),
        "systems": systems,
        "cases": [asdict(c) | {"id": c.id, "nodes": c.nodes} for c in cases],
        "options": {
            k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items() if k != "log"
        },
        "skipped": skipped,
        "runs": [],
    }
    plan = schedule(cases, systems, args.rounds)
    with terminate_as_interrupt():
        for index, (round_, case, name) in enumerate(plan, start=1):
            print(
                f"[{index}/{len(plan)}] round {round_ + 1}: {case.id} "
                f"({case.topology}, {case.jobs} Jobs) on {name}"
            )
            folder = Path(args.workdir) / f"r{round_ + 1}-{case.id}-{name}"
            result = run_case(SYSTEMS[name](), case, folder, options) | {"round": round_ + 1}
            document["runs"].append(result)
            json_path.write_text(json.dumps(document, indent=1) + "\n")
            brief = {
                k: result.get(k)
                for k in (
                    "status",
                    "all_bound_s",
                    "first_bound_s",
                    "create_to_bound_p50_s",
                    "makespan_s",
                    "refill_p50_s",
                    "partial_gangs",
                )
            }
            print(f"  -> {brief}")
    text = report(document)
    text_path.write_text(text)
    print()
    print(text)
    print(f"wrote {json_path} and {text_path}")
    failed = [
        r
        for r in document["runs"]
        if r.get("status") != "ok" or r.get("partial_gangs") or r.get("split_gangs")
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
