"""The `phalanx` command: run the operator, and manage the local dev cluster."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _dev_cluster(args: argparse.Namespace) -> int:
    from phalanx.devcluster import tools
    from phalanx.devcluster.cluster import ClusterError, DevCluster, load_state
    from phalanx.devcluster.http import ApiError

    cluster = DevCluster(Path(args.dir))
    try:
        if args.action == "up":
            cluster.up(mode=args.mode, topology=args.topology)
        elif args.action == "down":
            cluster.down()
        elif args.action == "status":
            info = cluster.status()
            print(json.dumps(info, indent=2))
            return 0 if info["state"] == "running" else 3
        else:
            state = cluster.status()["state"]
            if state == "absent":
                raise ClusterError(f"no dev cluster in {args.dir}; start one with `phalanx dev-cluster up`")
            if state != "running":
                raise ClusterError(
                    f"the cluster in {args.dir} is stopped; start it with "
                    f"`phalanx dev-cluster up --dir {args.dir}`"
                )
            client = load_state(Path(args.dir)).client()
            if args.action == "fill":
                print("\n".join(tools.fill(client, args.namespace, args.nodes)))
            elif args.action == "where":
                print(tools.where(client, args.namespace, args.selector))
            elif args.action == "fail-node":
                tools.fail_node(client, args.node, args.how)
            elif args.action == "heal-node":
                tools.heal_node(client, args.node)
    except (ClusterError, ApiError, ValueError) as e:
        print(f"phalanx dev-cluster {args.action}: {e}", file=sys.stderr)
        return 1
    return 0


def _run(args: argparse.Namespace) -> int:
    from phalanx.controller.main import run_operator
    from phalanx.controller.settings import Settings

    return run_operator(Settings.from_args_and_env(args, parser=args.run_parser))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phalanx", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser(
        "dev-cluster", help="a local Kubernetes v1.37.2 control plane with simulated GPU nodes"
    )
    dev_sub = dev.add_subparsers(dest="action", required=True)
    for action, text in (
        ("up", "start it"),
        ("down", "stop every process it started"),
        ("status", "what runs"),
    ):
        p = dev_sub.add_parser(action, help=text)
        p.add_argument(
            "--dir", default=".dev-cluster", help="work folder of this cluster (default: .dev-cluster)"
        )
        if action == "up":
            p.add_argument(
                "--mode",
                choices=("stock", "upstream"),
                default="stock",
                help="stock: no workload-aware scheduling gates (what Phalanx is for); "
                "upstream: v1.37's gang/topology gates on, for side-by-side runs",
            )
            p.add_argument(
                "--topology",
                default="seed",
                help="seed: the article's 8 nodes in 2 network blocks x 2 local blocks; "
                "BxRxN: B network blocks x R local blocks x N nodes",
            )
    helpers = {
        "fill": "keep nodes busy with a pod taking all 8 GPUs (the article's fill.sh)",
        "where": "each pod with its node, network block and local block (the article's where.sh)",
        "fail-node": "inject a node failure: stop its heartbeats, or taint it NoExecute",
        "heal-node": "undo fail-node",
    }
    for action, text in helpers.items():
        p = dev_sub.add_parser(action, help=text)
        p.add_argument(
            "--dir", default=".dev-cluster", help="work folder of this cluster (default: .dev-cluster)"
        )
        if action in ("fill", "where"):
            p.add_argument("--namespace", "-n", default="default")
        if action == "fill":
            p.add_argument("nodes", nargs="+")
        elif action == "where":
            p.add_argument("--selector", "-l", default=None, help="label selector, e.g. job-name=gang-4")
        else:
            p.add_argument("node")
        if action == "fail-node":
            p.add_argument("--how", choices=("heartbeat", "taint"), default="heartbeat")
    dev.set_defaults(func=_dev_cluster)

    from phalanx.controller.settings import PRECEDENCE, Settings

    run = sub.add_parser(
        "run",
        help="run the Phalanx operator",
        description="Run the Phalanx operator: the Job admission webhook and the scheduling loop.",
        epilog=PRECEDENCE,
    )
    Settings.add_arguments(run)
    run.set_defaults(func=_run, run_parser=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
