"""Write docs/versions.md: the article's core cases with Phalanx on each Kubernetes version it promises.

For each version, one at a time (2 cores): `dev-cluster up --kubernetes-version V` (stock mode, the seed
topology; its control plane is built into .cache/k8s/V when missing), the Phalanx operator against it, then
the cases of tests/integration/test_dev_cluster_versions.py, each in a fresh namespace: a gang of 4 on 3 free
nodes waits and starts whole, a gang in one network block, preemption of a lower-priority gang, a node
failure under a running gang. A failing case is recorded with its error (the operator's log is kept); the
table is written anyway and the exit code is 1.

    python3 bench/version_matrix.py                          # all four versions, rewrite docs/versions.md
    python3 bench/version_matrix.py --versions v1.30.14 --out -
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.integration, however this file is started

from tests.integration.test_dev_cluster_versions import CASES, run_case, served_version  # noqa: E402

from phalanx.devcluster.binaries import K8S_VERSION  # noqa: E402
from phalanx.devcluster.cluster import DevCluster  # noqa: E402
from phalanx.devcluster.operator_process import OperatorProcess  # noqa: E402

VERSIONS = ("v1.30.14", "v1.33.13", K8S_VERSION, "v1.38.0-beta.0")
# A version without a pinned module is pinned first (hack/k8s-module.sh), with this Go toolchain if its
# go.mod needs a newer one than the local Go.
TOOLCHAINS = {"v1.38.0-beta.0": "go1.27.3"}


def ensure_module(version: str) -> str | None:
    """None when hack/k8s-<version> exists or could be made; else why not (what the proxy refused)."""
    if version == K8S_VERSION or (ROOT / "hack" / f"k8s-{version}" / "go.mod").is_file():
        return None
    argv = ["bash", "hack/k8s-module.sh", version, *([TOOLCHAINS[version]] if version in TOOLCHAINS else [])]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if result.returncode == 0:
        return None
    output = result.stdout + result.stderr
    refused = sorted(
        set(re.findall(r"reading https://[^/]+/(\S+?)/@v/(\S+?)\.(?:zip|info|mod): 403", output))
    )
    if refused:
        return "hack/k8s-module.sh failed: the module proxy refuses " + ", ".join(
            f"`{m}@{v}`" for m, v in refused
        )
    return "hack/k8s-module.sh failed: " + " / ".join(output.strip().splitlines()[-3:])[:400]


DOC = ROOT / "docs" / "versions.md"


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average at start {os.getloadavg()[0]:.1f}"
    )


def commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "?"


def run_version(version: str, work: Path) -> dict[str, str]:
    """Every case's line (or its failure) and the cluster's facts, for one version."""
    cells: dict[str, str] = {}
    why = ensure_module(version)
    if why:
        cells["served"] = f"**not built**: {why}"
        print(f"[{version}] {why}")
        return cells
    cluster = DevCluster(work / version)
    started = time.monotonic()
    try:
        state = cluster.up(
            kubernetes_version=version, ready_timeout=300, log=lambda m: print(f"[{version}] {m}")
        )
    except Exception as e:  # the version's row says why; the other versions still run
        cells["served"] = f"**up failed**: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        cluster.down(log=lambda _m: None)
        return cells
    cells["served"] = served_version(state)
    cells["up"] = f"{time.monotonic() - started:.1f} s"
    operator = OperatorProcess(state, work / f"operator-{version}")
    (work / f"operator-{version}").mkdir(exist_ok=True)
    try:
        began = time.monotonic()
        operator.start(timeout=180)
        cells["phalanx"] = f"ready in {time.monotonic() - began:.1f} s"
        for case in CASES:
            if operator.proc is None or operator.proc.poll() is not None:
                operator.start(timeout=180)
            t0 = time.monotonic()
            try:
                line = run_case(state, case)
                cells[case.id] = f"{line} ({time.monotonic() - t0:.0f} s)"
            except Exception as e:
                tb = traceback.extract_tb(e.__traceback__)[-1]
                where = f"{Path(tb.filename).name}:{tb.lineno}"
                cells[case.id] = f"**FAIL** at {where}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                print(traceback.format_exc(), file=sys.stderr)
            print(f"[{version}] {case.title}: {cells[case.id]}")
    except Exception as e:
        cells["phalanx"] = f"**FAIL**: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    finally:
        operator.stop()
        cells["operator log"] = str(operator.log_path)
        cluster.down(log=lambda m: print(f"[{version}] {m}"))
    return cells


def render(results: dict[str, dict[str, str]], started: dt.datetime, minutes: float, host: str) -> str:
    versions = list(results)
    rows = [("control plane (`/version`)", "served"), ("`dev-cluster up`", "up"), ("Phalanx", "phalanx")]
    rows += [(case.title, case.id) for case in CASES]
    lines = [
        "# Kubernetes versions: the article's core cases with Phalanx",
        "",
        f"Generated by `python3 bench/version_matrix.py` on {started:%Y-%m-%d %H:%M} UTC (the run took "
        f"{minutes:.1f} min). Machine: {host}. Phalanx: {commit()}.",
        "",
        "Each version: `phalanx dev-cluster up --kubernetes-version V` (stock mode, the article's 8 GPU "
        "nodes on kwok; that version's kube-apiserver, kube-controller-manager and kube-scheduler, built "
        "from `hack/k8s-V/go.mod`; etcd v3.7.3, kwok v0.8.0 and kubectl v1.37.2 for all), the Phalanx "
        "operator (`phalanx run`) against it, then the cases of "
        "`tests/integration/test_dev_cluster_versions.py`, each in a fresh namespace (CI runs them on "
        "v1.30.14; the default v1.37.2 runs the whole suite). A cell is what happened, with the case's "
        "time; **FAIL** names the file and line where the check gave up.",
        "",
        "| case | " + " | ".join(versions) + " |",
        "|---|" + "---|" * len(versions),
    ]
    for title, key in rows:
        cells = [results[v].get(key, "–").replace("|", "\\|") for v in versions]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`--mode upstream` (upstream's gang scheduling, for side-by-side runs) needs v1.37 or newer: on "
        "older versions `up` refuses it and names the missing gates. A version that cannot be pinned "
        "(hack/k8s-module.sh) says which modules the proxy refused; docs/dev-cluster.md has the details.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated, in order")
    parser.add_argument("--out", default=str(DOC), help="file to write, or - to print")
    parser.add_argument("--dir", default=None, help="work folder (default: a fresh temporary one)")
    args = parser.parse_args()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="version-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    host = machine()
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    results = {v: run_version(v, work) for v in versions}
    text = render(results, started, (time.monotonic() - t0) / 60, host)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    failed = any(
        "FAIL" in cell or "failed" in cell or "not built" in cell
        for cells in results.values()
        for cell in cells.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
