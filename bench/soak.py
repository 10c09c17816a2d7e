"""The full-length soaks of issue 10 (items 4 and 5); the short forms run in CI.

    python3 bench/soak.py crash --rounds 60 --seed 1     # kill -9 at random points of admissions
    python3 bench/soak.py crash-kinds --rounds 30 --seed 1   # the same with JobSets, LWS, TrainJobs and Jobs
    python3 bench/soak.py faults --rounds 40 --seed 1    # 429/5xx/409, cut watches, 410 Gone
    python3 bench/soak.py faults-kinds --rounds 20 --seed 1   # the same with JobSets, LWS, TrainJobs and Jobs
    python3 bench/soak.py nodes-kinds --rounds 25 --seed 1   # nodes fail and heal under gangs of every kind
    python3 bench/soak.py crash-preempt --rounds 20 --seed 1  # low gangs of every kind preempted by high ones
    python3 bench/soak.py crash --rounds 3 --cluster-dir /tmp/dc   # on a running dev cluster (seed topology)
    python3 bench/soak.py crash --rounds 5 --operator-path /tmp/broken/operator  # must FAIL

Brings up a stock dev cluster (seed topology; for the -kinds modes with the real JobSet, LWS and Trainer
controllers, `--addons jobset,lws,trainer`) unless --cluster-dir names a running one, runs the operator as
a process, plays the rounds of tests/integration/soak.py, checks tests/integration/invariants.py after every
round and at every poll, and prints a summary; --out also writes it (bench/results/soak-<mode>.txt).
Exit status 1 if an invariant broke.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.integration, however this file is started
sys.path.insert(0, str(ROOT / "bench"))

from tests.integration.faultproxy import FaultProxy  # noqa: E402
from tests.integration.kube import delete_namespace, new_namespace  # noqa: E402
from tests.integration.operator_fixtures import PLANNING_ERRORS  # noqa: E402
from tests.integration.soak import Soak  # noqa: E402
from tests.integration.soak_nodes import NodeSoak  # noqa: E402
from tests.integration.soak_preempt import PreemptSoak  # noqa: E402

from comparison import commit, machine  # noqa: E402
from phalanx.devcluster.cluster import ClusterState, DevCluster, load_state  # noqa: E402
from phalanx.devcluster.operator_process import OperatorProcess  # noqa: E402

KIND_ADDONS = ("jobset", "lws", "trainer")  # the controllers the -kinds modes play against


@contextlib.contextmanager
def cluster(directory: str | None, folder: Path, addons: tuple[str, ...] = ()) -> Iterator[ClusterState]:
    if directory:
        yield load_state(Path(directory))
        return
    dev = DevCluster(folder / "cluster")
    state = dev.up(
        mode="stock",
        topology="seed",
        addons=addons,
        ready_timeout=300,
        log=lambda m: print(f"[dev-cluster] {m}"),
    )
    try:
        yield state
    finally:
        dev.down(log=lambda m: print(f"[dev-cluster] {m}"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode", choices=["crash", "crash-kinds", "faults", "faults-kinds", "nodes-kinds", "crash-preempt"]
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cluster-dir", help="a running dev cluster's folder (default: bring one up)")
    parser.add_argument(
        "--node-failure-grace",
        type=float,
        default=5.0,
        help="nodes-kinds: the operator's --node-failure-grace (seconds)",
    )
    parser.add_argument("--out", help="also write the summary here")
    parser.add_argument("--log-dir", help="keep the operator's log here (default: a temporary folder)")
    parser.add_argument(
        "--operator-path",
        help="run the operator from this copy of operator/ (a deliberate bug: the soak must fail)",
    )
    args = parser.parse_args()

    started = time.monotonic()
    preempt = args.mode == "crash-preempt"
    kinds = args.mode.endswith("-kinds") or preempt
    faults = args.mode.startswith("faults")
    lines: list[str] = []
    ok = True
    with (
        tempfile.TemporaryDirectory(prefix="phalanx-soak-") as tmp,
        cluster(args.cluster_dir, Path(tmp), KIND_ADDONS if kinds else ()) as state,
    ):
        folder = Path(tmp)
        proxy = FaultProxy(state, folder, seed=args.seed) if faults else None
        extra = []
        if proxy is not None:
            proxy.start()
            extra = ["--kubeconfig", str(proxy.kubeconfig)]
        env = {"PYTHONPATH": args.operator_path} if args.operator_path else {}
        logs = Path(args.log_dir) if args.log_dir else folder
        logs.mkdir(parents=True, exist_ok=True)  # a --log-dir not made yet: made, not a crash after bring-up
        nodes = args.mode == "nodes-kinds"
        if nodes:
            extra += ["--node-failure-grace", str(args.node_failure_grace)]
        operator = OperatorProcess(state, logs, args=extra, name=f"soak-{args.mode}", env=env)
        # Only what this run's operator logs is judged (a --log-dir kept from an earlier run appends to it).
        since = operator.log_path.stat().st_size if operator.log_path.exists() else 0
        operator.start()
        ns = new_namespace(state, f"soak-{args.mode}")
        soak: Soak = (
            NodeSoak(ns, operator, args.seed, args.node_failure_grace)
            if nodes
            else PreemptSoak(ns, operator, args.seed)
            if preempt
            else Soak(ns, operator, args.seed, proxy=proxy, kinds=kinds)
        )
        try:
            for _ in range(args.rounds):
                if isinstance(soak, NodeSoak):
                    soak.node_round()
                elif isinstance(soak, PreemptSoak):
                    soak.preempt_round()
                elif not faults:
                    soak.crash_round()
                else:
                    soak.fault_round()
            soak.drain()
        except Exception:
            ok = False
            lines.append("FAILED:")
            lines.extend(traceback.format_exc().splitlines())
            print(operator.tail(20000), file=sys.stderr)
            print(ns.where(), file=sys.stderr)  # every pod of the namespace: phase, node, blocks
        finally:
            if isinstance(soak, NodeSoak):
                soak.heal_all()
            operator.stop()
            if proxy is not None:
                proxy.stop()
            # Before the namespace (and a cluster of its own) goes: the preemption soak reads its events.
            summary = soak.lines() if isinstance(soak, PreemptSoak) else soak.stats.lines()
            delete_namespace(ns, timeout=180)
            with operator.log_path.open("rb") as f:
                f.seek(since)
                log = f.read().decode(errors="replace")
            failed = sum(log.count(e) for e in PLANNING_ERRORS)
            seen = [
                f"operator log: {log.count('fault injection: SIGKILL at')} kills by a fault switch, "
                f"{log.count('was deleted while the watch was away')} deleted objects dropped from the cache "
                f"after a listing (relist.py), {failed} failed passes or units' plans"
            ]
            if failed:  # the loop goes on after one: a bug nothing else in the soak would show
                ok = False
                lines.append(
                    f"FAILED: the operator's planning raised {failed} time(s); its log: {operator.log_path}"
                )
    minutes = (time.monotonic() - started) / 60
    header = [
        f"phalanx soak {args.mode} --rounds {args.rounds} --seed {args.seed}"
        f"  ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {minutes:.1f} min)",
        f"machine: {machine()}; phalanx: {commit()}",
        "",
    ]
    text = (
        "\n".join(
            [
                *header,
                *summary,
                *(soak.nstats.lines() if isinstance(soak, NodeSoak) else []),
                *seen,
                *lines,
                "",
                "result: " + ("PASS" if ok else "FAIL"),
            ]
        )
        + "\n"
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
