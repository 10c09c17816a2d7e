"""The `phalanx` command: run the operator, manage the local dev cluster, and the tools for any cluster."""

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
            cluster.up(
                mode=args.mode,
                topology=args.topology,
                real_node=args.real_node,
                addons=args.addons,
                kubernetes_version=args.kubernetes_version,
            )
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
            elif args.action == "load-image":
                from phalanx.devcluster import realnode

                state = load_state(Path(args.dir))
                if not state.real_node:
                    raise ClusterError(f"the cluster in {args.dir} has no real node (`up --real-node`)")
                try:
                    names = realnode.import_image(state, Path(args.archive))
                except realnode.RealNodeError as e:
                    raise ClusterError(str(e)) from e
                for name in names:
                    print(f"{name} (on {realnode.NODE_NAME}; use imagePullPolicy: Never)")
    except (ClusterError, ApiError, ValueError) as e:
        print(f"phalanx dev-cluster {args.action}: {e}", file=sys.stderr)
        return 1
    return 0


def _explain(args: argparse.Namespace) -> int:
    import asyncio

    from phalanx.tools import explain, kube

    try:
        target = explain.parse_target(args.target)
    except ValueError as e:
        print(f"phalanx explain: {e}", file=sys.stderr)
        return 2

    async def run() -> str:
        async with kube.connect(args.kubeconfig, args.context) as reader:
            facts = await explain.gather(reader, target, args.namespace or reader.namespace)
        return explain.explain(facts)

    try:
        print(asyncio.run(run()))
    except kube.KubeError as e:
        print(f"phalanx explain: {e}", file=sys.stderr)
        return 1
    return 0


def _where(args: argparse.Namespace) -> int:
    import asyncio

    from phalanx.tools import kube, where

    selector = args.selector or args.selector_arg
    levels = where.parse_levels(args.levels)

    async def run() -> str:
        async with kube.connect(args.kubeconfig, args.context) as reader:
            ns = args.namespace or reader.namespace
            path = "/api/v1/pods" if args.all_namespaces else f"/api/v1/namespaces/{ns}/pods"
            pods = await reader.list(path, {"labelSelector": selector} if selector else None)
            nodes = await reader.list("/api/v1/nodes")
        return where.where_table(pods, nodes, levels, namespaces=args.all_namespaces)

    try:
        print(asyncio.run(run()))
    except kube.KubeError as e:
        print(f"phalanx where: {e}", file=sys.stderr)
        return 1
    return 0


def _convert(args: argparse.Namespace) -> int:
    from phalanx.tools.convert import ConvertError, convert_text

    outputs = []
    try:
        for name in args.filename:
            text = sys.stdin.read() if name == "-" else Path(name).read_text()
            result = convert_text(text, "stdin" if name == "-" else name)
            for warning in result.warnings:
                print(f"phalanx convert: warning: {warning}", file=sys.stderr)
            outputs.append(result.text)
    except ConvertError as e:
        for problem in e.problems:
            print(f"phalanx convert: {problem}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"phalanx convert: {e}", file=sys.stderr)
        return 1
    joined = ""
    for text in outputs:
        if joined and text.strip():
            joined += "" if joined.endswith("\n") else "\n"
            joined += "---\n"
        joined += text
    sys.stdout.write(joined)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from phalanx.devcluster.cluster import DevCluster, load_state
    from phalanx.tools.walkthrough import runner as walkthrough
    from phalanx.tools.walkthrough.demo import Demo
    from phalanx.tools.walkthrough.steps import STEPS

    try:
        steps = walkthrough.select(
            STEPS, short=args.short, only=[s for v in args.steps or [] for s in v.split(",")]
        )
    except ValueError as e:
        print(f"phalanx demo: {e}", file=sys.stderr)
        return 2
    if args.list:
        for step in steps:
            print(f"{step.id:15} {step.title}" + (f"  [skipped: {step.skip}]" if step.run is None else ""))
        return 0
    if DevCluster(Path(args.dir)).status()["state"] != "running":
        print(
            f"phalanx demo: no running dev cluster in {args.dir}; start one with "
            f"`phalanx dev-cluster up --dir {args.dir}` (or run ./hack/demo.sh)",
            file=sys.stderr,
        )
        return 1
    state = load_state(Path(args.dir))
    demo = Demo(
        api=state.client(),
        kubectl=state.kubectl,
        kubeconfig=state.kubeconfig,
        out=sys.stdout,
        namespace=args.namespace,
        short=args.short,
    )
    return walkthrough.walk(demo, steps, ready_timeout=args.ready_timeout)


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--namespace", "-n", default=None, help="namespace (default: the context's, else default)"
    )


def _run(args: argparse.Namespace) -> int:
    from phalanx.controller.process.main import run_operator
    from phalanx.controller.process.settings import Settings

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
                "racks: the same with a rack label (topology.phalanx.dev/rack) repeating under both blocks; "
                "BxRxN: B network blocks x R local blocks x N nodes",
            )
            p.add_argument(
                "--real-node",
                action="store_true",
                help="also one real kubelet (node real-0) with containerd, for real pods (root; changes the "
                "host's network, undone by down: docs/dev-cluster.md)",
            )
            p.add_argument(
                "--kubernetes-version",
                default=None,
                metavar="VERSION",
                help="the control plane's version (default v1.37.2); another one with a pinned module "
                "hack/k8s-VERSION (v1.30.14, v1.33.13) is built into .cache/k8s/VERSION when "
                "missing (minutes); --mode upstream needs v1.37 or newer",
            )
            p.add_argument(
                "--addons",
                default="",
                metavar="NAMES",
                help="comma-separated real controllers to run beside it: jobset (v0.11.1), lws (v0.8.0), "
                "trainer (Kubeflow Trainer v2.2.0; adds jobset), kueue (v0.17.0); built into .cache/addons "
                "when missing (minutes), webhooks on 127.0.0.1 (docs/dev-cluster.md)",
            )
    helpers = {
        "fill": "keep nodes busy with a pod taking all 8 GPUs (the article's fill.sh)",
        "where": "each pod with its node, network block and local block (the article's where.sh)",
        "fail-node": "inject a node failure: stop its heartbeats, or taint it NoExecute",
        "heal-node": "undo fail-node",
        "load-image": "import an OCI archive (hack/image.sh's) into the real node's containerd",
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
        elif action == "load-image":
            p.add_argument("archive", help="e.g. .cache/image/phalanx-0.1.0.oci.tar")
        else:
            p.add_argument("node")
        if action == "fail-node":
            p.add_argument("--how", choices=("heartbeat", "taint"), default="heartbeat")
    dev.set_defaults(func=_dev_cluster)

    explain = sub.add_parser(
        "explain",
        help="why a Job's gang waits now, in plain words",
        description="Why a Job's gang waits now: its PodGroup's conditions, phase and pods, and for a "
        "waiting gang the placement engine run on the live cluster (per topology domain how many pods fit, "
        "and what blocks the other nodes). Reads only.",
    )
    explain.add_argument("target", metavar="job/NAME|podgroup/NAME")
    _cluster_arguments(explain)
    explain.set_defaults(func=_explain)

    where = sub.add_parser(
        "where",
        help="each pod with its phase, node and topology domains (the article's where.sh), any cluster",
        description="Each pod with its phase, its node and the node's topology labels, one column per "
        "label key. Reads only.",
    )
    where.add_argument("selector_arg", nargs="?", metavar="SELECTOR", help="label selector, as where.sh")
    where.add_argument("--selector", "-l", default=None, help="label selector, e.g. job-name=gang-4")
    where.add_argument(
        "--all-namespaces", "-A", action="store_true", help="pods of every namespace (adds NAMESPACE)"
    )
    where.add_argument(
        "--levels",
        action="append",
        default=None,
        metavar="KEY[,KEY...]",
        help="node label keys, one column each (default: oci.oraclecloud.com/rdma.network_block_id,"
        "oci.oraclecloud.com/rdma.local_block_id, shown as NB and LB)",
    )
    _cluster_arguments(where)
    where.set_defaults(func=_where)

    convert = sub.add_parser(
        "convert",
        help="rewrite Jobs written for upstream's spec.scheduling in the Phalanx form",
        description="Rewrite Jobs (and CronJobs) that use upstream Kubernetes 1.37's spec.scheduling "
        "(gate WorkloadWithJob) in the Phalanx form: the label phalanx.dev/managed and phalanx.dev/* "
        "annotations, spec.scheduling dropped. A stock apiserver silently drops spec.scheduling, so apply "
        "the converted file: phalanx convert -f job.yaml | kubectl apply -f -. Other documents pass "
        "through unchanged. Nothing is written if anything cannot be converted.",
    )
    convert.add_argument(
        "--filename", "-f", action="append", required=True, metavar="FILE", help="YAML file; - for stdin"
    )
    convert.set_defaults(func=_convert)

    demo = sub.add_parser(
        "demo",
        help="the article's experiments, one after another, on the dev cluster with Phalanx running",
        description="Play the article's experiments on the dev cluster (phalanx dev-cluster up) with Phalanx "
        "running (phalanx run): plain vs gang, topology, best fit, preemption, node failure, suspend/resume. "
        "After each: the where table, kubectl get podgroups, and what to notice. Each step waits for what "
        "Phalanx must do and fails loudly if it does not; each cleans up after itself. Exit code 0 if every "
        "step passed. ./hack/demo.sh runs it.",
    )
    demo.add_argument(
        "--dir", default=".dev-cluster", help="work folder of the dev cluster (default: .dev-cluster)"
    )
    demo.add_argument("--short", action="store_true", help="fewer repeats, no optional steps (CI)")
    demo.add_argument(
        "--steps", action="append", default=None, metavar="ID[,ID...]", help="play only these steps"
    )
    demo.add_argument("--list", action="store_true", help="list the steps and exit")
    demo.add_argument(
        "--namespace",
        "-n",
        default="phalanx-demo",
        help="namespace it works in, emptied (default: phalanx-demo)",
    )
    demo.add_argument(
        "--ready-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for Phalanx's webhook to answer before the first step (default: 60)",
    )
    demo.set_defaults(func=_demo)

    from phalanx.controller.process.settings import PRECEDENCE, Settings

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
