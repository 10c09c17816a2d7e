"""Measure `phalanx dev-cluster`: time to a Ready cluster, memory per component, and whether a large
simulated cluster stays Ready (with the CPU it costs).

    python bench/devcluster_bench.py --topology seed --runs 3
    python bench/devcluster_bench.py --topology 10x10x10 --hold 300

Prints a markdown table; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from phalanx.devcluster.cluster import DevCluster, node_schedulable

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topology", default="seed")
    parser.add_argument("--mode", default="stock")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to watch every node stay Ready")
    args = parser.parse_args()

    up_times = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="phalanx-bench-") as folder:
            cluster = DevCluster(Path(folder))
            state = cluster.up(mode=args.mode, topology=args.topology, log=lambda _m: None, ready_timeout=600)
            up_times.append(state.ready_seconds)
            print(f"run {run + 1}: Ready in {state.ready_seconds:.1f} s")
            last = run == args.runs - 1
            if last:
                time.sleep(10)  # let start-up work settle before reading memory
                cpu0 = {name: cpu_seconds(pid) for name, pid in state.pids.items()}
                started = time.monotonic()
                not_ready_seen = 0
                checks = 0
                client = state.client()
                while time.monotonic() - started < args.hold:
                    nodes = client.get("/api/v1/nodes")["items"]
                    bad = [n["metadata"]["name"] for n in nodes if not node_schedulable(n)]
                    checks += 1
                    if bad:
                        not_ready_seen += 1
                        print(
                            f"  {len(bad)} nodes not Ready/schedulable at +{time.monotonic() - started:.0f} s"
                        )
                    time.sleep(10)
                elapsed = max(time.monotonic() - started, 1e-9)
                print()
                print(f"| component | RSS MiB | CPU % of one core over {elapsed:.0f} s |")
                print("|---|---:|---:|")
                total_rss = 0.0
                for name, pid in state.pids.items():
                    rss = rss_mib(pid)
                    total_rss += rss
                    cpu = (cpu_seconds(pid) - cpu0[name]) / elapsed * 100 if args.hold else float("nan")
                    print(f"| {name} | {rss:.0f} | {cpu:.1f} |")
                print(f"| total | {total_rss:.0f} | |")
                if args.hold:
                    print(
                        f"\nnode readiness checked {checks} times over {elapsed:.0f} s; "
                        f"checks with a node not Ready: {not_ready_seen}"
                    )
            cluster.down(log=lambda _m: None)
    print(f"\nReady in: median {statistics.median(up_times):.1f} s over {len(up_times)} run(s): {up_times}")


if __name__ == "__main__":
    main()
