"""Admission reviews alone: how long Phalanx's Job gate takes, as the apiserver times it, by concurrency.

In the bursts of bench/scale.py the apiserver's webhook p99 mixes the review with everything else the
2-core machine does. This isolates it: one idle dev cluster, `phalanx run`, and `--creates` dry-run Job
creates (`?dryRun=All`: admitted, reviewed by the `gate-job` webhook, never stored) sent `--concurrency`
at a time, for each concurrency asked. Per concurrency it reports the webhook's latency three ways:

- *apiserver*: `apiserver_admission_webhook_admission_duration_seconds` for `gate-job`, read before and after
  (p50/p99 by the histogram's buckets: 5, 25, 100, 500 ms ... so a p99 is an interpolation inside one);
- *in process*: `phalanx_webhook_review_duration_seconds` (Kopf's admission machinery and the handler);
- *create*: the whole dry-run create as the client sees it (the apiserver's own work included);

and the operator's CPU seconds over the creates (from /proc), divided by the reviews: what one review costs
the loop that also runs the watches and the scheduling passes.

    python bench/webhook_bench.py                               # 400 creates at 1, 8 and 32 at a time
    python bench/webhook_bench.py --concurrency 32 --creates 1000 --profile /tmp/prof
"""

from __future__ import annotations

import argparse
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
from scale_systems import KUEUE_LEVELS, Phalanx  # noqa: E402
from scale_watch import ApiCounters, histogram_latency, review_buckets, webhook_latency  # noqa: E402

RESULTS = ROOT / "bench" / "results"
GATE = "gate-job"
BLOCK = KUEUE_LEVELS[1]  # a local block: every Job asks for one


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dry_run_creates(api: RestClient, bodies: list[dict[str, Any]], concurrency: int) -> list[float]:
    """POST each Job with dryRun=All, `concurrency` at a time; the seconds each create took."""
    path = "/apis/batch/v1/namespaces/default/jobs?dryRun=All"

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
    system: Phalanx, api: RestClient, concurrency: int, creates: int, profile: Path | None
) -> dict[str, Any]:
    assert system.operator is not None and system.operator.proc is not None
    pid = system.operator.proc.pid
    bodies = [system.job(f"review-{concurrency}-{i}", 4, BLOCK, None) for i in range(creates)]
    dry_run_creates(api, bodies[: min(creates, concurrency * 2)], concurrency)  # connections opened
    before, own_before, cpu_before = (
        ApiCounters.parse(api.get("/metrics")),
        system.own_metrics(),
        cpu_seconds(pid),
    )
    spy = None
    if profile is not None and shutil.which("py-spy"):
        profile.mkdir(parents=True, exist_ok=True)
        out = profile / f"webhook-c{concurrency}.txt"
        command = [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out),
        ]
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    took = dry_run_creates(api, bodies, concurrency)
    wall = time.perf_counter() - started
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    cpu = cpu_seconds(pid) - cpu_before
    after, own_after = ApiCounters.parse(api.get("/metrics")), system.own_metrics()
    apiserver = webhook_latency(before, after)
    gate = next((v for name, v in apiserver.items() if GATE in name), {})
    own = histogram_latency(review_buckets(own_before), review_buckets(own_after)).get(GATE, {})
    return {
        "concurrency": concurrency,
        "creates": creates,
        "reviews": gate.get("reviews"),
        "apiserver_p50_ms": gate.get("p50_ms"),
        "apiserver_p99_ms": gate.get("p99_ms"),
        "in_process_p50_ms": own.get("p50_ms"),
        "in_process_p99_ms": own.get("p99_ms"),
        "create_p50_ms": statistics.median(took) * 1000,
        "create_p99_ms": percentile(took, 0.99) * 1000,
        "creates_per_s": creates / wall,
        "operator_cpu_ms_per_review": cpu / creates * 1000,
    }


COLUMNS = (
    ("concurrency", "at a time", "{:d}"),
    ("reviews", "reviews", "{:.0f}"),
    ("apiserver_p50_ms", "apiserver p50 ms", "{:.1f}"),
    ("apiserver_p99_ms", "apiserver p99 ms", "{:.1f}"),
    ("in_process_p50_ms", "in-process p50 ms", "{:.2f}"),
    ("in_process_p99_ms", "in-process p99 ms", "{:.2f}"),
    ("create_p50_ms", "create p50 ms", "{:.1f}"),
    ("create_p99_ms", "create p99 ms", "{:.1f}"),
    ("creates_per_s", "creates/s", "{:.0f}"),
    ("operator_cpu_ms_per_review", "operator CPU ms/review", "{:.2f}"),
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
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    parser.add_argument("--out", default=str(RESULTS / f"webhook-{stamp}"), help="<out>.json, .txt")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    folder = Path(tempfile.mkdtemp(prefix="phalanx-webhook-bench-"))
    system = Phalanx(tuple(args.operator_arg))
    rows = []
    try:
        state = system.start(folder, args.topology, log, 300.0)
        api = state.client()
        for concurrency in levels:
            rows.append(measure(system, api, concurrency, args.creates, args.profile))
            log(json.dumps(rows[-1]))
    finally:
        system.stop(log)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    header = (
        f"# bench/webhook_bench.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n"
        f"Command: `python3 bench/webhook_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n"
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
        f"commit {commit.stdout.strip() or 'unknown'}; idle dev cluster `{args.topology}`.\n"
    )
    text = header + "\n" + table(rows) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps({"rows": rows, "operator_args": args.operator_arg}, indent=2) + "\n"
    )
    out.with_suffix(".txt").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
