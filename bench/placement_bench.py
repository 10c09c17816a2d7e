"""Benchmark of the pure placement engine on synthetic GPU clusters.

    python bench/placement_bench.py            # 5,000 and 50,000 nodes
    python bench/placement_bench.py --quick    # 5,000 nodes, few repetitions

Clusters have three topology levels (bench/block, bench/rack, kubernetes.io/hostname); every
node offers 8 GPUs, 128 cpu, 1Ti memory and 110 pods, and a seeded half of them run one
full-node pod. Gangs of 8 (per rack), 64 and 512 (per block) pods each ask for a full node
(8 GPUs, 16 cpu, 128Gi). Reported per gang:

- cold: first decide() on a fresh snapshot, so it pays for the label columns, domain groups and
  filter masks the snapshot caches (what the first group of a scheduling pass pays);
- warm: later decide() calls on the same snapshot (later groups of the same pass);
- peak: tracemalloc peak for build + one decide, measured in a separate untimed run.

The table is printed and written into docs/performance.md under "## Placement engine".
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import platform
import random
import re
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from phalanx.placement import (
    Admit,
    BoundPod,
    Decision,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Snapshot,
    admitted_usage,
    decide,
)

BLOCK, RACK, HOST = "bench/block", "bench/rack", "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GIB = 2**30
SEED = 20260101
DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
SECTION = "## Placement engine"
UPSTREAM_MS = (3.7, 5.7)


@dataclass(frozen=True)
class Cluster:
    blocks: int
    racks_per_block: int
    nodes_per_rack: int

    @property
    def size(self) -> int:
        return self.blocks * self.racks_per_block * self.nodes_per_rack


CLUSTERS = {5_000: Cluster(10, 25, 20), 50_000: Cluster(25, 100, 20)}
GANGS = ((8, RACK), (64, BLOCK), (512, BLOCK))
POD = PodRequirements(requests=(("cpu", 16_000), ("memory", 128 * GIB), (GPU, 8)))


def make_cluster(c: Cluster) -> tuple[list[NodeInfo], list[BoundPod]]:
    rng = random.Random(SEED)
    nodes = []
    for b in range(c.blocks):
        for r in range(c.racks_per_block):
            for n in range(c.nodes_per_rack):
                name = f"gpu-b{b:02d}-r{r:03d}-n{n:02d}"
                nodes.append(
                    NodeInfo(
                        name=name,
                        labels={BLOCK: f"block-{b:02d}", RACK: f"rack-{b:02d}-{r:03d}", HOST: name},
                        allocatable={GPU: 8, "cpu": 128_000, "memory": 1024 * GIB, "pods": 110},
                    )
                )
    busy = rng.sample(nodes, len(nodes) // 2)
    pods = [
        BoundPod(id=f"default/busy-{i}", node=n.name, requests={GPU: 8, "cpu": 64_000, "memory": 512 * GIB})
        for i, n in enumerate(busy)
    ]
    return nodes, pods


def gang(size: int, key: str) -> GroupRequest:
    pods = tuple(PodRequest(f"default/gang-{size}-{i}", POD) for i in range(size))
    return GroupRequest(name=f"gang-{size}", pending=pods, min_count=size, topology_key=key)


def timed_decide(snapshot: Snapshot, group: GroupRequest) -> tuple[float, Decision]:
    start = time.perf_counter()
    decision = decide(snapshot, group)
    return (time.perf_counter() - start) * 1000, decision


def timed_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_mib(nodes: list[NodeInfo], pods: list[BoundPod], group: GroupRequest | None) -> float:
    gc.collect()
    tracemalloc.start()
    snapshot = Snapshot.build(nodes, pods)
    if group is not None:
        decide(snapshot, group)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def run(size: int, quick: bool) -> tuple[list[str], list[str]]:
    cluster = CLUSTERS[size]
    nodes, pods = make_cluster(cluster)
    builds = [timed_ms(lambda: Snapshot.build(nodes, pods)) for _ in range(3 if quick else 5)]
    build_row = (
        f"| {size:,} | {cluster.blocks} x {cluster.racks_per_block} x {cluster.nodes_per_rack} "
        f"| {len(pods):,} | {statistics.median(builds):.1f} | {peak_mib(nodes, pods, None):.1f} |"
    )

    rows = []
    cold_runs, warm_runs = (3, 30) if quick else (7, 200)
    for count, key in GANGS:
        group = gang(count, key)
        cold = []
        for _ in range(cold_runs):
            snapshot = Snapshot.build(nodes, pods)
            ms, decision = timed_decide(snapshot, group)
            cold.append(ms)
        warm = [timed_decide(snapshot, group)[0] for _ in range(warm_runs)]
        if isinstance(decision, Admit):
            outcome = f"Admit {decision.domain} ({len(decision.assignments)} pods)"
            usage = admitted_usage(group, decision)
            assume = f"{statistics.median(timed_ms(lambda: snapshot.assume(usage)) for _ in range(10)):.2f}"  # noqa: B023
        else:
            outcome = f"Reject ({decision.scheduled} scheduled)"
            assume = "-"
        placements = len(snapshot.domains(key))
        rows.append(
            f"| {size:,} | {count} | {key.split('/')[-1]} ({placements}) | {outcome} "
            f"| {statistics.median(cold):.2f} | {statistics.median(warm):.2f} | {percentile(warm, 0.9):.2f} "
            f"| {assume} | {peak_mib(nodes, pods, group):.1f} |"
        )
        print(rows[-1], flush=True)
    return [build_row], rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = re.search(r"model name\s*:\s*(.+)", f.read())
        cpu = model.group(1).strip() if model else cpu
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"numpy {__import__('numpy').__version__}, {platform.system()} {platform.release()}"
    )


def render(build_rows: list[str], decision_rows: list[str], quick: bool) -> str:
    today = dt.date.today().isoformat()
    lines = [
        SECTION,
        "",
        f"Measured {today} on {machine()}; `python bench/placement_bench.py{' --quick' if quick else ''}`.",
        "Synthetic clusters: every node 8 GPUs, 128 cpu, 1Ti memory, 110 pods; a seeded half of the nodes",
        "run one pod using all 8 GPUs. Each gang pod asks for 8 GPUs, 16 cpu and 128Gi;",
        "minCount = gang size.",
        "",
        "| nodes | blocks x racks x nodes | bound pods | build ms (median) | build peak MiB |",
        "|---:|---|---:|---:|---:|",
        *build_rows,
        "",
        "| nodes | gang | key (placements) | outcome | cold ms | warm median ms | warm p90 ms "
        "| assume ms | peak MiB (build + decide) |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|",
        *decision_rows,
        "",
        "- *cold*: first `decide()` on a fresh snapshot; it builds the label columns, domain groups and the",
        "  filter mask that the snapshot then caches. A scheduling pass pays this once per topology key and",
        "  pod signature; later groups in the pass (and `Snapshot.assume` results, which share the caches)",
        "  pay the *warm* cost.",
        "- *assume*: `snapshot.assume(admitted_usage(group, admit))`, which the loop runs after each Admit.",
        "- *build*: `Snapshot.build` from ready-made `NodeInfo`/`BoundPod` values; turning API objects into",
        "  those (the controller's cache) is not included.",
        "- Upstream reference (quoted, not re-measured here): kube-scheduler gang scheduling takes about",
        f"  {UPSTREAM_MS[0]}-{UPSTREAM_MS[1]} ms per pod-group attempt at 5,000 nodes (scheduler_perf, 3-pod",
        "  gangs, kubernetes test/integration/scheduler_perf/podgroup/gangscheduling). The in-tree scheduler",
        "  runs every filter and score plugin per pod, so compare orders of magnitude, not exact numbers.",
        "",
    ]
    return "\n".join(lines)


def write_doc(section: str) -> None:
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 nodes only, few repetitions")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/performance.md alone")
    args = parser.parse_args(argv)
    sizes = [5_000] if args.quick else [5_000, 50_000]
    build_rows: list[str] = []
    decision_rows: list[str] = []
    for size in sizes:
        b, d = run(size, args.quick)
        build_rows += b
        decision_rows += d
    section = render(build_rows, decision_rows, args.quick)
    print()
    print(section)
    if not args.no_write:
        write_doc(section)
        print(f"written to {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
