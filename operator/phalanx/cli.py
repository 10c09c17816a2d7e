"""The `phalanx` command: run the operator, manage the local dev cluster, and the tools for any cluster."""

from __future__ import annotations

import argparse
import json
import os
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

    from phalanx.tools import explain, kube, targets

    try:
        target = targets.parse_target(args.target)
    except ValueError as e:
        print(f"phalanx explain: {e}", file=sys.stderr)
        return 2

    async def run() -> str:
        async with kube.connect(args.kubeconfig, args.context) as reader:
            facts = await targets.gather(reader, target, args.namespace or reader.namespace)
        result = explain.explain(facts)
        if args.output == "json":
            return json.dumps(explain.to_json(result), indent=2)
        return explain.render(result)

    try:
        text = asyncio.run(run())
    except kube.KubeError as e:
        print(f"phalanx explain: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def _where(args: argparse.Namespace) -> int:
    import asyncio

    from phalanx.tools import kube, topologies, where

    selector = args.selector or args.selector_arg
    chosen = where.parse_levels(args.levels)

    async def run() -> str:
        async with kube.connect(args.kubeconfig, args.context) as reader:
            ns = args.namespace or reader.namespace
            path = "/api/v1/pods" if args.all_namespaces else f"/api/v1/namespaces/{ns}/pods"
            pods = await reader.list(path, {"labelSelector": selector} if selector else None)
            nodes = await reader.list("/api/v1/nodes")
            levels = chosen
            if levels is None:
                levels = topologies.default_columns(await topologies.read_topologies(reader))
        if args.output == "json":
            return json.dumps(where.where_json(pods, nodes, levels), indent=2)
        return where.where_table(pods, nodes, levels, namespaces=args.all_namespaces)

    try:
        text = asyncio.run(run())
    except kube.KubeError as e:
        print(f"phalanx where: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


def _topology(args: argparse.Namespace) -> int:
    import asyncio

    from phalanx.tools import kube, topologies

    if args.action == "presets":
        try:
            chosen = [topologies.preset(args.name)] if args.name else list(topologies.PRESETS)
        except ValueError as e:
            print(f"phalanx topology presets: {e}", file=sys.stderr)
            return 2
        if args.output == "json":
            items = [p.topology() for p in chosen]
            body = items[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": items}
            print(json.dumps(body, indent=2))
        else:
            sys.stdout.write(topologies.presets_yaml(chosen))
        return 0

    sources = [x for x in (args.name, args.preset, args.levels) if x]
    if len(sources) > 1:
        print("phalanx topology check: give one of NAME, --preset or --levels", file=sys.stderr)
        return 2
    try:
        wanted: list[tuple[str, tuple[str, ...]]] | None = None
        if args.preset:
            chosen_preset = topologies.preset(args.preset)
            wanted = [(f"preset {chosen_preset.name}", chosen_preset.levels)]
        elif args.levels:
            labels = tuple(k.strip() for k in args.levels.split(",") if k.strip())
            if not labels:
                raise ValueError("--levels: no label keys")
            wanted = [("--levels", labels)]
    except ValueError as e:
        print(f"phalanx topology check: {e}", file=sys.stderr)
        return 2

    async def run() -> list[topologies.NestingReport]:
        async with kube.connect(args.kubeconfig, args.context) as reader:
            nodes = await reader.list("/api/v1/nodes")
            todo = wanted
            if todo is None:
                found = await topologies.read_topologies(reader)
                if args.name:
                    found = [t for t in found if t.name == args.name]
                    if not found:
                        raise kube.KubeError(f"no Topology {args.name} in the cluster")
                if not found:
                    raise kube.KubeError(
                        "the cluster has no Topology (scheduling.phalanx.dev); check one with --preset NAME "
                        "or --levels KEY,KEY"
                    )
                todo = [(t.name, t.levels) for t in found]
        return [topologies.check_nesting(name, levels, nodes, paths=args.paths) for name, levels in todo]

    try:
        reports = asyncio.run(run())
    except kube.KubeError as e:
        print(f"phalanx topology check: {e}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(
            json.dumps(
                {
                    "kind": "TopologyCheck",
                    "version": 1,
                    "items": [topologies.report_json(r) for r in reports],
                },
                indent=2,
            )
        )
    else:
        print("\n\n".join(topologies.render_report(r) for r in reports))
    return 0 if all(r.nests for r in reports) else 1


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
            needs = f"  [needs --addons {step.addon}]" if step.addon else ""
            print(f"{step.id:15} {step.title}" + (f"  [skipped: {step.skip}]" if step.run is None else needs))
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


def _cluster_arguments(parser: argparse.ArgumentParser, *, namespace: bool = True) -> None:
    parser.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    if namespace:
        parser.add_argument(
            "--namespace", "-n", default=None, help="namespace (default: the context's, else default)"
        )


def _output_argument(parser: argparse.ArgumentParser, choices: tuple[str, ...] = ("text", "json")) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=choices,
        default=choices[0],
        help=f"{' or '.join(choices)} (default: {choices[0]}); docs/cli.md documents the JSON shape",
    )


# Generated Kubernetes clients the operator never uses. Kopf imports them when they are installed, only to
# recognise their model objects; kubernetes-asyncio's package loads all ~800 models on import (~34 MiB in
# every replica). Set to None in sys.modules, an import of them fails, and Kopf goes on without them.
UNUSED_CLIENTS = ("kubernetes", "kubernetes_asyncio", "pykube")


def _run(args: argparse.Namespace) -> int:
    for name in UNUSED_CLIENTS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None blocks the import
    from phalanx.controller.process.main import run_operator
    from phalanx.controller.process.settings import Settings

    return run_operator(Settings.from_args_and_env(args, parser=args.run_parser))


def version() -> str:
    """The installed package's version (pyproject.toml's), as `--version` prints it."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("phalanx")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser(prog: str = "phalanx") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"phalanx {version()}", help="print the version and exit"
    )
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
            p.add_argument("--namespace", "-n", default="default", help="namespace (default: default)")
        if action == "fill":
            p.add_argument("nodes", nargs="+", metavar="NODE", help="node names, e.g. was-worker was-worker5")
        elif action == "where":
            p.add_argument("--selector", "-l", default=None, help="label selector, e.g. job-name=gang-4")
        elif action == "load-image":
            p.add_argument("archive", help="e.g. .cache/image/phalanx-0.1.0.oci.tar")
        else:
            p.add_argument("node", help="the node's name, e.g. was-worker3")
        if action == "fail-node":
            p.add_argument(
                "--how",
                choices=("heartbeat", "taint"),
                default="heartbeat",
                help="heartbeat: stop its heartbeats (it goes NotReady); taint: a NoExecute taint (default: "
                "heartbeat)",
            )
    dev.set_defaults(func=_dev_cluster)

    from phalanx.tools.targets import target_forms

    explain = sub.add_parser(
        "explain",
        help="why a gang waits now, in plain words (or -o json)",
        description="Why a gang waits now: its PodGroups' conditions, phase and pods (every slice of a "
        "sliced Job), and for a waiting gang the placement engine run on the live cluster: per topology "
        "domain how many pods fit and what keeps the other nodes out, in the words Phalanx writes into "
        "the PodGroups' Admitted condition. Reads only.",
    )
    explain.add_argument(
        "target",
        metavar="KIND/NAME",
        help=f"what to explain: {target_forms()} (kubectl's spellings: jobs/, job.batch/, pg/, cpg/, ...)",
    )
    _cluster_arguments(explain)
    _output_argument(explain)
    explain.set_defaults(func=_explain, pipe_safe=True)

    where = sub.add_parser(
        "where",
        help="each pod with its phase, node and topology domains (the article's where.sh), any cluster",
        description="Each pod with its phase, its node and the node's topology labels, one column per "
        "label key: the levels of the cluster's Topologies (scheduling.phalanx.dev), else "
        "topology.kubernetes.io/zone. Reads only.",
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
        help="node label keys, one column each (default: the levels of the cluster's Topologies, else "
        "topology.kubernetes.io/zone; the article's keys show as NB and LB)",
    )
    _cluster_arguments(where)
    _output_argument(where)
    where.set_defaults(func=_where, pipe_safe=True)

    topology = sub.add_parser(
        "topology",
        help="ready Topology objects for common node labels, and whether a cluster's labels nest",
        description="Topologies (scheduling.phalanx.dev) for the labels platforms already write, and a check "
        "of a cluster's nodes against one.",
    )
    topology_sub = topology.add_subparsers(dest="action", required=True)
    from phalanx.tools.topologies import PRESETS

    names = ", ".join(p.name for p in PRESETS)
    presets = topology_sub.add_parser(
        "presets",
        help="print ready Topology objects (kubectl apply -f - takes them)",
        description=f"Print ready Topology objects for common label sets ({names}); each says whose labels "
        "it lists. Pipe one into kubectl apply -f -.",
    )
    presets.add_argument("name", nargs="?", metavar="NAME", help=f"only this preset: {names}")
    _output_argument(presets, ("yaml", "json"))
    presets.set_defaults(func=_topology, pipe_safe=True)
    check = topology_sub.add_parser(
        "check",
        help="do the cluster's node labels nest as a Topology says? (exit code 1 when not)",
        description="Read the cluster's nodes and say whether the labels of a Topology nest: every value "
        "of a level under one value of the level above, and no node carrying some levels but not all. Checks "
        "the named Topology of the cluster, a preset, a --levels list, or (with none) every Topology in the "
        "cluster. Exit code 0: they nest; 1: they do not; 2: nothing could be checked. Reads only.",
    )
    check.add_argument(
        "name", nargs="?", metavar="NAME", help="a Topology in the cluster (default: all of them)"
    )
    check.add_argument("--preset", metavar="PRESET", default=None, help=f"check a preset instead: {names}")
    check.add_argument(
        "--levels",
        metavar="KEY[,KEY...]",
        default=None,
        help="check these node labels, coarse to fine, instead",
    )
    check.add_argument(
        "--paths",
        action="store_true",
        help="a level's values are unique only within their parent (rack names repeated per block): Phalanx "
        "places by the path of values, so a value under several parents is no failure",
    )
    _cluster_arguments(check, namespace=False)
    _output_argument(check)
    check.set_defaults(func=_topology, pipe_safe=True)

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
    convert.set_defaults(func=_convert, pipe_safe=True)

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
    demo.set_defaults(func=_demo, pipe_safe=True)

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


SIGPIPE_EXIT = 128 + 13
"""What a shell reports for a program ended by SIGPIPE (`phalanx explain | head` once head is done)."""


def main(argv: list[str] | None = None, prog: str = "phalanx") -> int:
    """Run one command. A tool whose reader went away (`| head`) ends quietly, as kubectl does."""
    try:
        args = build_parser(prog).parse_args(argv)
        if not getattr(args, "pipe_safe", False):
            code: int = args.func(args)
            return code
        code = args.func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # Nothing more can be written; point stdout at /dev/null so the interpreter's last flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return SIGPIPE_EXIT


def kubectl_main() -> int:
    """The `kubectl-phalanx` entry point: kubectl runs it for `kubectl phalanx ...` (a kubectl plugin)."""
    return main(prog="kubectl phalanx")


if __name__ == "__main__":
    sys.exit(main())
