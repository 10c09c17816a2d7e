"""Admission reviews alone: how long Phalanx's Job gate takes, as the apiserver times it, by concurrency.

In the bursts of bench/scale.py the apiserver's webhook p99 mixes the review with everything else the
2-core machine does. This isolates it: one idle dev cluster, `phalanx run`, and `--creates` dry-run Job
creates (`?dryRun=All`: admitted, reviewed by the `gate-job` webhook, never stored) sent `--concurrency`
at a time, for each concurrency asked. Per concurrency it reports the webhook's latency three ways:

- *apiserver*: `apiserver_admission_webhook_admission_duration_seconds` for `gate-job`, read before and after
  (p50/p99 by the histogram's buckets: 5, 25, 100, 500 ms ... so a p99 is an interpolation inside one);
- *in process*: `phalanx_webhook_review_duration_seconds` (Kopf's admission machinery and the handler);
- *create*: the whole dry-run create as the client sees it (the apiserver's own work included), and the
  same creates with no webhook called (unlabelled, in kube-system) under the same load: the difference is
  what the webhooks add to a user's create;

and the operator's CPU seconds over the creates (from /proc), divided by the reviews: what one review costs
the loop that also runs the watches and the scheduling passes; and how often per review the admitter's main
thread was taken off the CPU while it could run (its involuntary context switches).

`--systems phalanx,kueue` measures Kueue's Job webhooks (its mutating and validating ones, both called on each
create; their Jobs carry its queue label) the same way on a cluster of its own. A scale burst saturates the
2-core machine; two ways to see the webhooks under that, without the burst's noise:
- `--load N`: N busy processes spin (at the default nice) while the creates run, so the webhook server, the
  apiserver and etcd share the CPUs with them as they share them with a burst;
- `--dedicated-cpu`: the admitter (Phalanx's operator, Kueue's manager) alone on the last CPU, every other
  process of the cluster (and the load) on the others: a webhook server on a node of its own, as in a real
  cluster, where the control plane does not run beside the webhook's pod.
`--webhook-processes N` runs Phalanx as the chart's `webhook.deployment.enabled` does: a `--role controller`
process and N `--role webhooks` processes sharing one port (SO_REUSEPORT), as its replicas share a Service.

    python bench/webhook_bench.py                               # 400 creates at 1, 8 and 32 at a time
    python bench/webhook_bench.py --concurrency 32 --creates 1000 --profile /tmp/prof
    python bench/webhook_bench.py --systems phalanx,kueue --concurrency 32 --load 2 --dedicated-cpu
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from phalanx.devcluster.http import RestClient  # noqa: E402
from scale_systems import KUEUE_LEVELS, Kueue, Phalanx, PhalanxWebhookProcess, System  # noqa: E402
from scale_watch import ApiCounters, histogram_latency, review_buckets, webhook_latency  # noqa: E402

RESULTS = ROOT / "bench" / "results"
JOB_WEBHOOKS = {"phalanx": ("gate-job",), "phalanx-webhook-process": ("gate-job",), "kueue": ("mjob", "vjob")}
"""Each system's webhooks a Job create calls (parts of their names in the apiserver's histogram)."""
SYSTEMS: dict[str, type[System]] = {"phalanx": Phalanx, "kueue": Kueue}
BLOCK = KUEUE_LEVELS[1]  # a local block: every Job asks for one


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def involuntary_switches(pid: int) -> int:
    """Times the process's threads were taken off a CPU while they could still run (/proc/<pid>/task/*/status:
    all of them, as a Go server answers on many)."""
    total = 0
    for tid in threads(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def threads(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    return []


def pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of these processes onto these CPUs (threads started later inherit it)."""
    for pid in pids:
        for tid in threads(pid):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def descendants(pid: int) -> list[int]:
    """The process and every process under it (the dev cluster's components are a runner's children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for tid in threads(current):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{tid}/children").read_text().split()]
    return found


@contextlib.contextmanager
def busy(processes: int, cpus: set[int] | None) -> Any:
    """`processes` spinning processes (the machine's other load), pinned to `cpus` when given."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    try:
        if cpus is not None:
            pin([p.pid for p in spinners], cpus)
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def dry_run_creates(
    api: RestClient, bodies: list[dict[str, Any]], concurrency: int, namespace: str = "default"
) -> list[float]:
    """POST each Job with dryRun=All, `concurrency` at a time; the seconds each create took."""
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs?dryRun=All"

    def create(body: dict[str, Any]) -> float:
        started = time.perf_counter()
        api.request("POST", path, body)
        return time.perf_counter() - started

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(create, bodies))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    system: System,
    api: RestClient,
    concurrency: int,
    creates: int,
    profile: Path | None,
    load: int,
    others: set[int] | None,
) -> dict[str, Any]:
    pids = list(system.admitters().values())
    bodies = [system.job(f"review-{concurrency}-{i}", 4, BLOCK, None) for i in range(creates)]
    dry_run_creates(api, bodies[: min(creates, concurrency * 2)], concurrency)  # connections opened
    before, own_before, cpu_before, switches_before = (
        ApiCounters.parse(api.get("/metrics")),
        system.own_metrics(),
        sum(cpu_seconds(pid) for pid in pids),
        sum(involuntary_switches(pid) for pid in pids),
    )
    spy = None
    if profile is not None and shutil.which("py-spy") and isinstance(system, Phalanx) and len(pids) == 1:
        profile.mkdir(parents=True, exist_ok=True)
        out = profile / f"webhook-c{concurrency}.txt"
        command = [
            "py-spy",
            "record",
            "--pid",
            str(pids[0]),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out),
        ]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with busy(load, others):
        started = time.perf_counter()
        took = dry_run_creates(api, bodies, concurrency)
        wall = time.perf_counter() - started
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
    switches = sum(involuntary_switches(pid) for pid in pids) - switches_before
    after, own_after = ApiCounters.parse(api.get("/metrics")), system.own_metrics()
    apiserver = webhook_latency(before, after)
    hooks = [
        next((v for name, v in apiserver.items() if part in name), {}) for part in JOB_WEBHOOKS[system.name]
    ]
    # The same creates with no webhook called (unlabelled, in kube-system, which every webhook here leaves
    # out): what the apiserver alone takes, under the same load; kept only if indeed no review was counted.
    bare_bodies = [{**b, "metadata": {"name": b["metadata"]["name"]}} for b in bodies]
    with busy(load, others):
        bare = dry_run_creates(api, bare_bodies, concurrency, namespace="kube-system")
    reviewed = webhook_latency(after, ApiCounters.parse(api.get("/metrics")))
    if any(part in name for name in reviewed for part in JOB_WEBHOOKS[system.name]):
        bare = []
    own = histogram_latency(review_buckets(own_before), review_buckets(own_after)).get("gate-job", {})
    by_process = {}
    if isinstance(system, PhalanxWebhookProcess):  # how the kernel spread the connections (SO_REUSEPORT)
        for process in system.webhook_processes:
            buckets = review_buckets(process.scrape()).get("gate-job", {})
            by_process[process.name] = buckets.get(float("inf"), 0.0)

    def each(key: str) -> str | None:
        values = [h.get(key) for h in hooks]
        return None if None in values else " + ".join(f"{v:.1f}" for v in values if v is not None)

    return {
        "system": system.name
        + (f" x{system.processes}" if isinstance(system, PhalanxWebhookProcess) else ""),
        "concurrency": concurrency,
        "creates": creates,
        "load": load,
        "dedicated_cpu": others is not None,
        "reviews": hooks[0].get("reviews"),
        "apiserver_p50_ms": each("p50_ms"),
        "apiserver_p99_ms": each("p99_ms"),
        "in_process_p50_ms": own.get("p50_ms"),
        "in_process_p99_ms": own.get("p99_ms"),
        "create_p50_ms": statistics.median(took) * 1000,
        "create_p99_ms": percentile(took, 0.99) * 1000,
        "bare_create_p50_ms": statistics.median(bare) * 1000 if bare else None,
        "bare_create_p99_ms": percentile(bare, 0.99) * 1000 if bare else None,
        "creates_per_s": creates / wall,
        "admitter_cpu_ms_per_create": cpu / creates * 1000,
        "involuntary_switches_per_create": switches / creates,
        "reviews_by_process": by_process,  # since each process started
    }


COLUMNS = (
    ("system", "system", "{}"),
    ("concurrency", "at a time", "{:d}"),
    ("load", "busy processes", "{:d}"),
    ("dedicated_cpu", "admitter on a CPU of its own", "{}"),
    ("reviews", "creates reviewed", "{:.0f}"),
    ("apiserver_p50_ms", "webhook(s) p50 ms (apiserver)", "{}"),
    ("apiserver_p99_ms", "webhook(s) p99 ms (apiserver)", "{}"),
    ("in_process_p50_ms", "in-process p50 ms", "{:.2f}"),
    ("in_process_p99_ms", "in-process p99 ms", "{:.2f}"),
    ("create_p50_ms", "create p50 ms", "{:.1f}"),
    ("create_p99_ms", "create p99 ms", "{:.1f}"),
    ("bare_create_p50_ms", "no-webhook create p50 ms", "{:.1f}"),
    ("bare_create_p99_ms", "no-webhook create p99 ms", "{:.1f}"),
    ("creates_per_s", "creates/s", "{:.0f}"),
    ("admitter_cpu_ms_per_create", "admitter CPU ms/create", "{:.2f}"),
    ("involuntary_switches_per_create", "admitter preempted /create", "{:.2f}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|" + "---:|" * len(COLUMNS),
    ]
    for row in rows:
        cells = ["-" if row.get(key) is None else fmt.format(row[key]) for key, _, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", default="1,8,32", help="creates in flight, comma-separated")
    parser.add_argument("--creates", type=int, default=400, help="dry-run creates per concurrency")
    parser.add_argument("--topology", default="2x2x4", help="the dev cluster's (zones x blocks x nodes)")
    parser.add_argument("--operator-arg", action="append", default=[], help="one more `phalanx run` flag")
    parser.add_argument("--profile", type=Path, help="py-spy the operator during each concurrency, here")
    parser.add_argument("--systems", default="phalanx", help="phalanx, kueue (comma-separated)")
    parser.add_argument(
        "--webhook-processes",
        type=int,
        default=0,
        help="phalanx: that many `--role webhooks` processes on one port beside a `--role controller` "
        "(0: one process doing both)",
    )
    parser.add_argument("--load", type=int, default=0, help="busy processes while the creates run")
    parser.add_argument(
        "--dedicated-cpu",
        action="store_true",
        help="the admitter alone on the last CPU, the cluster and the load on the others",
    )
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    parser.add_argument("--out", default=str(RESULTS / f"webhook-{stamp}"), help="<out>.json, .txt")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SYSTEMS))
    if unknown:
        parser.error(f"--systems: unknown {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    cpus = sorted(os.sched_getaffinity(0))
    if args.dedicated_cpu and len(cpus) < 2:
        parser.error("--dedicated-cpu needs two CPUs or more")

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    rows = []
    for name in names:
        folder = Path(tempfile.mkdtemp(prefix="phalanx-webhook-bench-"))
        system: System
        if name != "phalanx":
            system = SYSTEMS[name]()
        elif args.webhook_processes:
            system = PhalanxWebhookProcess(args.webhook_processes)
        else:
            system = Phalanx(tuple(args.operator_arg))
        try:
            state = system.start(folder, args.topology, log, 300.0)
            api = state.client()
            others = None
            if args.dedicated_cpu:
                admitters = list(system.admitters().values())
                others = set(cpus[:-1])
                pin([pid for runner in state.pids.values() for pid in descendants(runner)], others)
                pin([os.getpid()], others)  # this bench's clients too
                pin(admitters, {cpus[-1]})
                log(f"admitter {admitters} on CPU {cpus[-1]}, the cluster on CPUs {sorted(others)}")
            for concurrency in levels:
                rows.append(measure(system, api, concurrency, args.creates, args.profile, args.load, others))
                log(json.dumps(rows[-1]))
        finally:
            system.stop(log)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    header = (
        f"# bench/webhook_bench.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
        f"Command: `python3 bench/webhook_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
        f"commit {commit.stdout.strip() or 'unknown'}; dev cluster `{args.topology}`, idle but for the "
        f"creates and {args.load} busy processes.\n"
    )
    text = header + "\n" + table(rows) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "operator_args": args.operator_arg, "cpus": cpus}, indent=2) + "\n"
    )
    out.with_suffix(".txt").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
