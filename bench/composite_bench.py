"""Benchmark of composite placement (slices): a 64-pod job in 8 slices of 8 on synthetic GPU clusters.

    python bench/composite_bench.py            # 5,000 and 50,000 nodes
    python bench/composite_bench.py --quick    # 5,000 nodes, few repetitions

Same clusters as bench/placement_bench.py (three levels bench/block, bench/rack, kubernetes.io/hostname;
8 GPUs per node, a seeded half of the nodes run one full-node pod). The job is a CompositeRequest keyed by
block, all 8 slices required; each slice is a PodGroup of 8 full-node pods keyed by rack. Cases:

- levels: the Topology's levels are known (domains are paths, BestFit inside each rack);
- no levels: the keys alone (today's single-key domains);
- busy: the same job after every block but the last one lost a third of its free nodes in each rack,
  so the search tries blocks that hold 64 pods but not 8 whole slices before it finds one that does;
- refused: 8 slices of 21 pods (a rack has 20 nodes), the whole refusal with its per-slice reasons
  included.

cold = the first decide_composite() on a fresh snapshot (it builds and caches the path columns and
filter masks), warm = later calls on the same snapshot. The table goes into docs/performance.md under
"## Composite groups (slices)".
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from phalanx.placement import (
    BoundPod,
    CompositeAdmit,
    CompositeDecision,
    CompositeRequest,
    GroupRequest,
    NodeInfo,
    PodRequest,
    Snapshot,
    decide_composite,
)
from placement_bench import BLOCK, CLUSTERS, GPU, HOST, POD, RACK, SEED, machine, make_cluster

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
SECTION = "## Composite groups (slices)"
LEVELS = (BLOCK, RACK, HOST)
GOAL_MS = 10.0


def job(slices: int, size: int, levels: tuple[str, ...]) -> CompositeRequest:
    children = tuple(
        GroupRequest(
            name=f"slice-{s}",
            pending=tuple(PodRequest(f"default/job-{s * size + i}", POD) for i in range(size)),
            min_count=size,
            topology_key=RACK,
            levels=levels,
        )
        for s in range(slices)
    )
    return CompositeRequest("job", children, slices, BLOCK, levels)


def busier(nodes: list[NodeInfo], pods: list[BoundPod]) -> list[BoundPod]:
    """In every block but the last, one more full-node pod on a third of each rack's free nodes."""
    rng = random.Random(SEED + 1)
    taken = {p.node for p in pods}
    last_block = max(n.labels[BLOCK] for n in nodes)
    racks: dict[str, list[str]] = {}
    for n in nodes:
        if n.name not in taken and n.labels[BLOCK] != last_block:
            racks.setdefault(n.labels[RACK], []).append(n.name)
    extra = [
        BoundPod(f"default/extra-{name}", name, {GPU: 8})
        for free in racks.values()
        for name in rng.sample(free, len(free) // 3 + 1)
    ]
    return pods + extra


def timed(snapshot: Snapshot, root: CompositeRequest) -> tuple[float, CompositeDecision]:
    start = time.perf_counter()
    decision = decide_composite(snapshot, root)
    return (time.perf_counter() - start) * 1000, decision


def outcome(decision: CompositeDecision) -> str:
    if isinstance(decision, CompositeAdmit):
        pods = sum(len(a.assignments) for _, a in decision.admits)
        return f"Admit {decision.domain('job')} ({pods} pods, {len(decision.admits)} slices)"
    return f"Reject ({len(decision.groups)} reasons)"


def run(size: int, repeats: int) -> list[str]:
    nodes, pods = make_cluster(CLUSTERS[size])
    cases = [
        ("levels", pods, job(8, 8, LEVELS)),
        ("no levels", pods, job(8, 8, ())),
        ("busy, levels", busier(nodes, pods), job(8, 8, LEVELS)),
        ("refused (8 x 21), levels", pods, job(8, 21, LEVELS)),
    ]
    rows = []
    for name, bound, root in cases:
        snapshot = Snapshot.build(nodes, bound)
        cold, decision = timed(snapshot, root)
        gc.disable()
        warm = [timed(snapshot, root)[0] for _ in range(repeats)]
        gc.enable()
        assert all(timed(snapshot, root)[1] == decision for _ in range(2)), "deterministic"
        ordered = sorted(warm)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        median = statistics.median(warm)
        rows.append(f"| {size:,} | {name} | {outcome(decision)} | {cold:.2f} | {median:.2f} | {p90:.2f} |")
        print(rows[-1], flush=True)
    return rows


def render(rows: list[str], quick: bool) -> str:
    lines = [
        SECTION,
        "",
        f"Measured {dt.date.today().isoformat()} on {machine()}; "
        f"`python bench/composite_bench.py{' --quick' if quick else ''}`.",
        "The clusters of the placement engine table (half the nodes busy). A 64-pod job in 8 slices of 8",
        "full-node pods: `decide_composite` with the job keyed by block and each slice by rack, all 8 slices",
        f"required (goal: under {GOAL_MS:.0f} ms median at 5,000 nodes). {load()}",
        "",
        "| nodes | case | outcome | cold ms | warm median ms | warm p90 ms |",
        "|---:|---|---|---:|---:|---:|",
        *rows,
        "",
        "- *levels*: the Topology's levels known (path domains, BestFit in each rack); *no levels*: the",
        "  keys alone. *busy*: every block but the last lost a third of each rack's free nodes (at 5,000",
        "  nodes only the last block then holds 8 whole slices; blocks with room for 64 pods but not for 8",
        "  slices are skipped by the bound on children per domain, not searched).",
        "  *refused*: no rack holds a 21-pod slice; the time includes the per-slice reasons.",
        "",
    ]
    return "\n".join(lines)


def load() -> str:
    """The machine is shared: the load average says how noisy the numbers are."""
    try:
        with open("/proc/loadavg") as f:
            return f"Load average {f.read().split()[0]} at the start (2 cores shared: p90s are noisy)."
    except OSError:
        return ""


def write_doc(section: str) -> None:
    text = DOC.read_text() if DOC.exists() else "# Performance\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 nodes only, few repetitions")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/performance.md alone")
    args = parser.parse_args(argv)
    sizes = [5_000] if args.quick else [5_000, 50_000]
    rows = [row for size in sizes for row in run(size, 10 if args.quick else 50)]
    section = render(rows, args.quick)
    print(section)
    if not args.no_write:
        write_doc(section)
        print(f"written to {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
