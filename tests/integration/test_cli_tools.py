"""`phalanx explain`, `phalanx where` and `phalanx convert` on the stock dev cluster, as a user runs them."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx import certs
from phalanx.devcluster.cluster import ClusterState

from .kube import LB_KEY, NB_KEY, Namespace, bound, gpu_job, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "tests" / "data" / "article"
FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
MANAGED = {"phalanx.dev/managed": "true"}
GROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"


def phalanx(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The `phalanx` command in a new process, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "phalanx.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def group_of(ns: Namespace, job: str) -> dict[str, Any] | None:
    for group in ns.get(GROUPS)["items"]:
        if group["metadata"].get("labels", {}).get("phalanx.dev/job-name") == job:
            return dict(group)
    return None


def admitted_reason(ns: Namespace, job: str) -> str | None:
    group = group_of(ns, job)
    for cond in (group or {}).get("status", {}).get("conditions", []):
        if cond["type"] == "Admitted":
            return str(cond["reason"])
    return None


def test_explain_of_a_waiting_gang_names_the_closest_domain_and_the_blocking_resource(
    stock_cluster: ClusterState, ns: Namespace, tmp_path: Path
) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(gpu_job("gang-4", 4, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-4 Unschedulable", lambda: admitted_reason(ns, "gang-4") == "Unschedulable")

    out = phalanx(
        "explain", "job/gang-4", "-n", ns.name, "--kubeconfig", str(stock_cluster.kubeconfig)
    ).stdout
    print(out)
    lines = out.splitlines()
    assert lines[0] == (
        f"job/gang-4 in namespace {ns.name}: waiting: no {NB_KEY} domain has room for 4 pods at once; "
        "the closest is nb-a, with room for 3"
    )
    assert "  Phase: Unschedulable" in lines
    assert "  Pods: 4 (0 bound, 0 released, 4 held by phalanx.dev/admission)" in lines
    assert any(
        line.startswith("  Admitted: False (Unschedulable): pod group is unschedulable") for line in lines
    )
    # The engine's diagnosis, per domain: the words of the PodGroup's Admitted condition.
    assert "  nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in lines
    assert "  nb-b: 0 of 4 pods fit (4 nodes: Insufficient nvidia.com/gpu)" in lines
    admitted = next(c for c in group_of(ns, "gang-4")["status"]["conditions"] if c["type"] == "Admitted")  # type: ignore[index]
    assert "nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in admitted["message"]

    # The same group asked by its PodGroup name, the namespace taken from the kubeconfig's context.
    group = group_of(ns, "gang-4")
    assert group is not None
    name = group["metadata"]["name"]
    kubeconfig = context_kubeconfig(stock_cluster, ns.name, tmp_path / "kubeconfig")
    by_group = phalanx("explain", f"podgroup/{name}", "--kubeconfig", str(kubeconfig)).stdout
    assert by_group.splitlines()[0].startswith(f"podgroup/{name} in namespace {ns.name}: waiting: no ")
    assert "  nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in by_group

    # -o json: the documented shape, from the same cluster.
    body = json.loads(
        phalanx(
            "explain",
            "job/gang-4",
            "-n",
            ns.name,
            "-o",
            "json",
            "--kubeconfig",
            str(stock_cluster.kubeconfig),
        ).stdout
    )
    assert (body["kind"], body["version"], body["state"]) == ("Explanation", 1, "waiting")
    assert body["target"] == {"kind": "job", "name": "gang-4", "namespace": ns.name}
    assert [g["name"] for g in body["groups"]] == [name]
    assert (
        body["placement"]["domains"][0]["summary"]
        == "nb-a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)"
    )
    assert body["placement"]["domains"][0]["reasons"] == [
        {"reason": "Insufficient nvidia.com/gpu", "nodes": 1}
    ]


def test_explain_of_an_admitted_job_says_admitted(stock_cluster: ClusterState, ns: Namespace) -> None:
    ns.create(gpu_job("gang-2", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-2 bound", lambda: len(bound(ns.job_pods("gang-2"))) == 2)
    wait_for("gang-2 admitted", lambda: admitted_reason(ns, "gang-2") == "Admitted")

    out = phalanx(
        "explain", "job/gang-2", "-n", ns.name, "--kubeconfig", str(stock_cluster.kubeconfig)
    ).stdout
    print(out)
    first = out.splitlines()[0]
    assert re.fullmatch(
        rf"job/gang-2 in namespace {ns.name}: admitted in {re.escape(NB_KEY)}=nb-[ab]: 2 of 2 pods bound",
        first,
    ), first
    assert "  Admitted: True (Admitted)" in out
    assert "Placement now" not in out


def test_explain_of_a_missing_job_fails_with_one_line(stock_cluster: ClusterState, ns: Namespace) -> None:
    result = phalanx(
        "explain", "job/nope", "-n", ns.name, "--kubeconfig", str(stock_cluster.kubeconfig), check=False
    )
    assert result.returncode == 1
    assert result.stderr == f"phalanx explain: job nope not found in namespace {ns.name}\n"


def test_where_prints_the_articles_table(stock_cluster: ClusterState, ns: Namespace) -> None:
    ns.create(gpu_job("gang-4", 4, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for(
        "gang-4 running",
        lambda: [p["status"].get("phase") for p in ns.job_pods("gang-4")] == ["Running"] * 4,
    )
    kubeconfig = str(stock_cluster.kubeconfig)
    article = f"--levels={NB_KEY},{LB_KEY}"
    out = phalanx("where", "-n", ns.name, "--kubeconfig", kubeconfig, article, "job-name=gang-4").stdout
    print(out)
    assert out == ns.where("job-name=gang-4") + "\n"  # the dev cluster's where.sh, byte for byte
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "PHASE", "NODE", "NB", "LB"]
    assert len(lines) == 5
    assert len({line.split()[3] for line in lines[1:]}) == 1  # one network block

    everywhere = phalanx(
        "where",
        "-A",
        "-l",
        "job-name=gang-4",
        "--levels",
        "kubernetes.io/hostname",
        "--kubeconfig",
        kubeconfig,
    ).stdout
    rows = everywhere.splitlines()
    assert rows[0].split() == ["NAMESPACE", "POD", "PHASE", "NODE", "HOSTNAME"]
    assert all(row.split()[0] == ns.name and row.split()[3] == row.split()[4] for row in rows[1:])


def context_kubeconfig(cluster: ClusterState, namespace: str, path: Path) -> Path:
    """A kubeconfig of another shape than the dev cluster's: a client certificate (CN admin, O
    system:masters) signed by the cluster's CA, everything embedded, and a namespace in the context."""
    pki = Path(cluster.dir) / "pki"
    ca = certs.KeyPair((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    client = certs.issue(ca, "admin", [], organization="system:masters", client=True)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dev",
                "cluster": {
                    "server": f"https://127.0.0.1:{cluster.api_port}",
                    "certificate-authority-data": b64(ca.cert_pem),
                },
            }
        ],
        "users": [
            {
                "name": "admin-cert",
                "user": {
                    "client-certificate-data": b64(client.cert_pem),
                    "client-key-data": b64(client.key_pem),
                },
            }
        ],
        "contexts": [
            {"name": "dev", "context": {"cluster": "dev", "user": "admin-cert", "namespace": namespace}}
        ],
        "current-context": "dev",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_where_with_a_client_certificate_kubeconfig_and_its_contexts_namespace(
    stock_cluster: ClusterState, ns: Namespace, tmp_path: Path
) -> None:
    ns.fill("was-worker3")
    kubeconfig = context_kubeconfig(stock_cluster, ns.name, tmp_path / "kubeconfig")
    out = phalanx("where", "--kubeconfig", str(kubeconfig), f"--levels={NB_KEY},{LB_KEY}").stdout
    assert out.splitlines() == [
        "POD                 PHASE    NODE         NB    LB",
        "filler-was-worker3  Running  was-worker3  nb-a  lb-a2",
    ]
    env_out = subprocess.run(
        [sys.executable, "-m", "phalanx.cli", "where", f"--levels={NB_KEY},{LB_KEY}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        check=True,
    ).stdout
    assert env_out == out


def test_convert_piped_to_kubectl_apply_gang_schedules_the_articles_job(
    stock_cluster: ClusterState, ns: Namespace
) -> None:
    """The documented `phalanx convert -f job.yaml | kubectl apply -f -`, and why it is needed."""
    env = {**os.environ, "KUBECONFIG": str(stock_cluster.kubeconfig)}
    kubectl = str(stock_cluster.kubectl)
    # As written for upstream, a stock apiserver takes the Job and drops spec.scheduling without a word.
    dry = subprocess.run(
        [
            kubectl,
            "create",
            "-n",
            ns.name,
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            str(ARTICLE / "gang-4.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert "scheduling" not in json.loads(dry.stdout)["spec"]
    assert dry.stderr == ""

    ns.fill(*FIVE_BUSY)
    piped = subprocess.run(
        f"{sys.executable} -m phalanx.cli convert -f {ARTICLE / 'gang-4.yaml'} "
        f"| {kubectl} apply -n {ns.name} -f -",
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert piped.stdout == "job.batch/gang-4 created\n", piped.stderr
    wait_for("the converted gang-4 Unschedulable", lambda: admitted_reason(ns, "gang-4") == "Unschedulable")
    assert not bound(ns.job_pods("gang-4"))  # a gang: none of the 3 free nodes is taken
    ns.unfill("was-worker")
    wait_for("gang-4 bound", lambda: len(bound(ns.job_pods("gang-4"))) == 4)
    group = group_of(ns, "gang-4")
    assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}


def test_the_gpu_advertising_command_of_the_install_doc_runs(stock_cluster: ClusterState) -> None:
    """docs/kind.md's loop (the article's add-gpus.sh) against a real apiserver: it is valid as written."""
    text = (ROOT / "docs" / "kind.md").read_text()
    match = re.search(r"<!-- add-gpus -->\n```sh\n(.*?)```", text, re.S)
    assert match, "docs/kind.md lost its add-gpus block"
    kubectl_dir = str(Path(stock_cluster.kubectl).parent)
    env = {
        **os.environ,
        "KUBECONFIG": str(stock_cluster.kubeconfig),
        "PATH": f"{kubectl_dir}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", match.group(1)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("patched") == 8, result.stdout
    nodes = stock_cluster.client().get("/api/v1/nodes")["items"]
    assert {n["status"]["capacity"]["nvidia.com/gpu"] for n in nodes} == {"8"}


# ---------------------------------------------------------------------- issue 20: the CLI for any cluster
ISLAND_KEY = "oci.oraclecloud.com/rdma.hpc_island_id"
TOPOLOGIES = "/apis/scheduling.phalanx.dev/v1beta1/topologies"
CHART = ROOT / "charts" / "phalanx"


def kubectl(
    cluster: ClusterState,
    *args: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    kubeconfig: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """The built kubectl, as the cluster's admin (or with another kubeconfig)."""
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def delete_quietly(cluster: ClusterState, path: str) -> None:
    from phalanx.devcluster.http import ApiError

    try:
        cluster.client().request("DELETE", path)
    except ApiError as e:
        if e.status != 404:
            raise


def test_where_takes_its_columns_from_the_clusters_topologies_else_the_zone(
    stock_cluster: ClusterState, ns: Namespace
) -> None:
    ns.fill("was-worker3")
    kubeconfig = str(stock_cluster.kubeconfig)
    plain = phalanx("where", "-n", ns.name, "--kubeconfig", kubeconfig).stdout.splitlines()
    assert plain == [
        "POD                 PHASE    NODE         ZONE",
        "filler-was-worker3  Running  was-worker3  -",
    ]
    # The documented way to make one: a preset piped into kubectl apply.
    preset = phalanx("topology", "presets", "oci").stdout
    applied = kubectl(stock_cluster, "apply", "-f", "-", stdin=preset)
    assert applied.returncode == 0 and applied.stdout == "topology.scheduling.phalanx.dev/oci created\n", (
        applied.stderr
    )
    try:
        out = phalanx("where", "-n", ns.name, "--kubeconfig", kubeconfig).stdout.splitlines()
        assert out == [
            "POD                 PHASE    NODE         ISLAND  NB    LB",
            "filler-was-worker3  Running  was-worker3  isl-1   nb-a  lb-a2",
        ]
        body = json.loads(phalanx("where", "-n", ns.name, "-o", "json", "--kubeconfig", kubeconfig).stdout)
        assert body["levels"] == [ISLAND_KEY, NB_KEY, LB_KEY]
        assert body["items"] == [
            {
                "namespace": ns.name,
                "pod": "filler-was-worker3",
                "phase": "Running",
                "node": "was-worker3",
                "domains": {ISLAND_KEY: "isl-1", NB_KEY: "nb-a", LB_KEY: "lb-a2"},
            }
        ]
        # The Topology in the cluster nests on the article's nodes.
        checked = phalanx("topology", "check", "oci", "--kubeconfig", kubeconfig)
        print(checked.stdout)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.splitlines()[0] == "Topology oci (3 levels), 8 nodes:"
        every = phalanx("topology", "check", "--kubeconfig", kubeconfig)
        assert every.returncode == 0 and "Topology oci (3 levels)" in every.stdout
    finally:
        delete_quietly(stock_cluster, f"{TOPOLOGIES}/oci")


def test_topology_check_reads_the_nodes_and_fails_on_labels_that_do_not_nest(
    stock_cluster: ClusterState,
) -> None:
    kubeconfig = str(stock_cluster.kubeconfig)
    good = phalanx("topology", "check", "--preset", "oci", "--kubeconfig", kubeconfig, check=False)
    print(good.stdout)
    assert good.returncode == 0, good.stdout + good.stderr
    assert f"  {NB_KEY}    2 values  8 nodes" in good.stdout.splitlines()
    assert good.stdout.splitlines()[-1].startswith("The labels nest: ")
    backwards = phalanx(
        "topology", "check", "--levels", f"{LB_KEY},{NB_KEY}", "--kubeconfig", kubeconfig, check=False
    )
    print(backwards.stdout)
    assert backwards.returncode == 1
    assert (
        f"  {NB_KEY}=nb-a is under 2 values of {LB_KEY}: lb-a1 (2 nodes: was-worker, was-worker2); "
        in backwards.stdout
    )
    absent = phalanx(
        "topology", "check", "--preset", "gke", "-o", "json", "--kubeconfig", kubeconfig, check=False
    )
    assert absent.returncode == 1
    (report,) = json.loads(absent.stdout)["items"]
    assert report["nests"] is False and report["completeNodes"] == 0 and len(report["unlabelledNodes"]) == 8
    missing = phalanx("topology", "check", "no-such-topology", "--kubeconfig", kubeconfig, check=False)
    assert missing.returncode == 2
    assert missing.stderr == "phalanx topology check: no Topology no-such-topology in the cluster\n"


def test_a_sliced_job_is_explained_slice_by_slice(stock_cluster: ClusterState, ns: Namespace) -> None:
    ns.fill("was-worker", "was-worker5")  # each network block keeps one local block of 2 free nodes
    job = gpu_job(
        "sliced",
        4,
        labels=MANAGED,
        annotations={
            "phalanx.dev/topology-key": NB_KEY,
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": LB_KEY,
        },
    )
    ns.create(job)
    composites = f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/compositepodgroups"

    def waiting() -> bool:
        items = stock_cluster.client().get(composites)["items"]
        return bool(items) and any(
            c["type"] == "Admitted" and c["reason"] == "Unschedulable"
            for c in items[0].get("status", {}).get("conditions", [])
        )

    wait_for("the sliced Job's tree Unschedulable", waiting, timeout=120)
    result = phalanx("explain", "job/sliced", "-n", ns.name, "--kubeconfig", str(stock_cluster.kubeconfig))
    print(result.stdout)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        f"job/sliced in namespace {ns.name}: waiting: composite group is unschedulable: "
        f"2 of 2 child groups must fit in one domain of {NB_KEY}"
    )
    assert sum(line.startswith("  CompositePodGroup: ") for line in lines) == 1
    slices = [line for line in lines if line.startswith("  PodGroup: ")]
    assert len(slices) == 2 and all(f"(Gang, minCount 2, topology {LB_KEY})" in line for line in slices)
    assert (
        sum(
            line.startswith("    Pods: 2 (0 bound, 0 released, 2 held by phalanx.dev/admission)")
            for line in lines
        )
        == 2
    )
    assert sum(line.startswith("    Now: ") for line in lines) == 2
    body = json.loads(
        phalanx(
            "explain",
            "job/sliced",
            "-n",
            ns.name,
            "-o",
            "json",
            "--kubeconfig",
            str(stock_cluster.kubeconfig),
        ).stdout
    )
    assert len(body["composites"]) == 1 and len(body["groups"]) == 2
    assert all(g["now"] and g["parent"] == body["composites"][0]["name"] for g in body["groups"])
    assert body["pods"]["gated"] == 4 and body["unassignedPods"] == 0


def test_explain_into_a_closed_pipe_and_head_is_quiet(stock_cluster: ClusterState, ns: Namespace) -> None:
    ns.create(gpu_job("gang-2", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-2 admitted", lambda: admitted_reason(ns, "gang-2") == "Admitted")
    argv = [
        sys.executable,
        "-m",
        "phalanx.cli",
        "explain",
        "job/gang-2",
        "-n",
        ns.name,
        "--kubeconfig",
        str(stock_cluster.kubeconfig),
    ]
    read, write = os.pipe()
    os.close(read)  # what `| head` leaves once head is done
    try:
        closed = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert closed.stderr == "" and closed.returncode == 141
    headed = subprocess.run(
        " ".join(argv) + " | head -1", shell=True, capture_output=True, text=True, timeout=60
    )
    assert headed.stderr == "" and headed.stdout.startswith(f"job/gang-2 in namespace {ns.name}: admitted")


def plugin_path(tmp_path: Path) -> Path:
    """pyproject's kubectl-phalanx console script, as pip writes it, in a folder for PATH."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["kubectl-phalanx"].partition(":")
    folder = tmp_path / "bin"
    folder.mkdir()
    plugin = folder / "kubectl-phalanx"
    plugin.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    plugin.chmod(0o755)
    return folder


def test_kubectl_phalanx_explain_runs_the_plugin(
    stock_cluster: ClusterState, ns: Namespace, tmp_path: Path
) -> None:
    ns.create(gpu_job("gang-2", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-2 admitted", lambda: admitted_reason(ns, "gang-2") == "Admitted")
    env = {**os.environ, "PATH": f"{plugin_path(tmp_path)}:{os.environ['PATH']}"}
    result = subprocess.run(
        [
            str(stock_cluster.kubectl),
            "phalanx",
            "explain",
            "job/gang-2",
            "-n",
            ns.name,
            "--kubeconfig",
            str(stock_cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"job/gang-2 in namespace {ns.name}: admitted in {NB_KEY}=nb-")
    direct = phalanx("explain", "job/gang-2", "-n", ns.name, "--kubeconfig", str(stock_cluster.kubeconfig))
    assert result.stdout == direct.stdout


# ---------------------------------------------------------------------- kubectl get podgroups
def test_kubectl_get_podgroups_shows_the_owner_and_the_pod_counts(
    stock_cluster: ClusterState, ns: Namespace
) -> None:
    ns.create(gpu_job("gang-2", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))

    def counted() -> bool:
        group = group_of(ns, "gang-2") or {}
        return group.get("status", {}).get("scheduled") == 2 and group["status"].get("phase") == "Running"

    wait_for("gang-2 running with 2 scheduled", counted, timeout=120)
    name = group_of(ns, "gang-2")["metadata"]["name"]  # type: ignore[index]
    table = kubectl(stock_cluster, "get", "podgroups.scheduling.phalanx.dev", "-n", ns.name)
    print(table.stdout)
    assert table.returncode == 0, table.stderr
    header, row = (line.split() for line in table.stdout.splitlines())
    columns = ["NAME", "OWNER", "POLICY", "MIN", "SCHEDULED", "SUCCEEDED", "WAITING", "STATUS", "DOMAIN"]
    assert header == [*columns, "AGE"]
    assert row[:9] == [name, "Job/gang-2", "Gang", "2", "2", "0", "0", "Running", row[8]] and row[8] in (
        "nb-a",
        "nb-b",
    )
    wide = kubectl(stock_cluster, "get", "pg", "-n", ns.name, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["WORKLOAD", "AGE"]
    workloads = kubectl(stock_cluster, "get", "workloads.scheduling.phalanx.dev", "-n", ns.name).stdout
    assert "gang-2" in workloads


# ---------------------------------------------------------------------- roles for users
def helm_binary() -> str:
    from phalanx.devcluster.binaries import bin_dir

    helm = os.environ.get("HELM") or str(bin_dir() / "helm")
    if not os.access(helm, os.X_OK):
        pytest.skip(f"no helm at {helm}: hack/build.sh builds it")
    return helm


def render_chart(*sets: str, show: str = "templates/userroles.yaml") -> list[dict[str, Any]]:
    """The chart's users' roles, as helm renders them."""
    argv = [
        helm_binary(),
        "template",
        "phalanx",
        str(CHART),
        "-n",
        "phalanx-system",
        "--show-only",
        show,
    ]
    for value in sets:
        argv += ["--set", value]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def service_account_kubeconfig(cluster: ClusterState, ns: str, sa: str, path: Path) -> Path:
    api = cluster.client()
    api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
    )
    token = api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "dev",
                "cluster": {
                    "server": f"https://127.0.0.1:{cluster.api_port}",
                    "certificate-authority": str(cluster.ca_file),
                },
            }
        ],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "dev", "user": sa, "namespace": ns}}],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def can_list_podgroups(kubeconfig: Path, cluster: ClusterState, ns: str) -> bool:
    result = kubectl(cluster, "get", "podgroups.scheduling.phalanx.dev", "-n", ns, kubeconfig=kubeconfig)
    if result.returncode != 0:
        assert "forbidden" in result.stderr, result.stderr
    return result.returncode == 0


def test_a_service_account_bound_to_view_lists_podgroups_once_the_chart_aggregates_them(
    stock_cluster: ClusterState, ns: Namespace, tmp_path: Path
) -> None:
    ns.create(gpu_job("gang-2", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-2 has a PodGroup", lambda: group_of(ns, "gang-2"))
    kubeconfig = service_account_kubeconfig(stock_cluster, ns.name, "reader", tmp_path / "reader.kubeconfig")
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns.name}],
    }
    ns.create(binding, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns.name}/rolebindings")
    view = next(d for d in render_chart() if d["metadata"]["name"] == "phalanx-view")
    delete_quietly(stock_cluster, "/apis/rbac.authorization.k8s.io/v1/clusterroles/phalanx-view")
    # Without the chart's role, the built-in view knows nothing of Phalanx's kinds.
    wait_for(
        "view without Phalanx's kinds",
        lambda: not can_list_podgroups(kubeconfig, stock_cluster, ns.name),
        timeout=60,
    )
    applied = kubectl(stock_cluster, "apply", "-f", "-", stdin=json.dumps(view))
    assert applied.returncode == 0, applied.stderr
    try:
        # kube-controller-manager's clusterrole-aggregation controller copies the rules into view.
        wait_for(
            "view aggregates podgroups",
            lambda: can_list_podgroups(kubeconfig, stock_cluster, ns.name),
            timeout=120,
        )
        listed = kubectl(
            stock_cluster, "get", "podgroups.scheduling.phalanx.dev", "-o", "name", kubeconfig=kubeconfig
        )
        assert listed.returncode == 0, listed.stderr
        out = listed.stdout
        assert out == f"podgroup.scheduling.phalanx.dev/{group_of(ns, 'gang-2')['metadata']['name']}\n"  # type: ignore[index]
        # Only in its own namespace (a RoleBinding), and read only.
        other = kubectl(
            stock_cluster, "get", "podgroups.scheduling.phalanx.dev", "-n", "default", kubeconfig=kubeconfig
        )
        assert other.returncode != 0 and "forbidden" in other.stderr
        delete = kubectl(
            stock_cluster,
            "delete",
            "podgroups.scheduling.phalanx.dev",
            "--all",
            "--dry-run=server",
            kubeconfig=kubeconfig,
        )
        assert delete.returncode != 0 and "forbidden" in delete.stderr
    finally:
        delete_quietly(stock_cluster, "/apis/rbac.authorization.k8s.io/v1/clusterroles/phalanx-view")


def test_the_explain_role_is_all_the_read_only_tools_need(
    stock_cluster: ClusterState, ns: Namespace, tmp_path: Path
) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(gpu_job("gang-4", 4, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    wait_for("gang-4 Unschedulable", lambda: admitted_reason(ns, "gang-4") == "Unschedulable")
    kubeconfig = service_account_kubeconfig(
        stock_cluster, ns.name, "explainer", tmp_path / "explainer.kubeconfig"
    )
    subject = [
        "rbac.explain.subjects[0].kind=ServiceAccount",
        "rbac.explain.subjects[0].name=explainer",
        f"rbac.explain.subjects[0].namespace={ns.name}",
    ]
    docs = [d for d in render_chart(*subject) if d["metadata"]["name"] == "phalanx-explain"]
    assert {d["kind"] for d in docs} == {"ClusterRole", "ClusterRoleBinding"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return phalanx(*args, "--kubeconfig", str(kubeconfig), check=False)

    before = run("explain", "job/gang-4")
    assert before.returncode == 1 and "HTTP 403" in before.stderr
    applied = kubectl(
        stock_cluster,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
    )
    assert applied.returncode == 0, applied.stderr
    try:
        explained = wait_for(
            "explain as the bound account",
            lambda: r if (r := run("explain", "job/gang-4")).returncode == 0 else None,
        )
        assert explained.stdout.splitlines()[0].startswith(
            f"job/gang-4 in namespace {ns.name}: waiting: no {NB_KEY} domain"
        )
        assert run("where", "-A").returncode == 0
        assert run("topology", "check", "--preset", "oci").returncode == 0
        # Read only: the role writes nothing.
        patch = kubectl(stock_cluster, "delete", "job", "gang-4", "--dry-run=server", kubeconfig=kubeconfig)
        assert patch.returncode != 0 and "forbidden" in patch.stderr
    finally:
        for plural in ("clusterrolebindings", "clusterroles"):
            delete_quietly(stock_cluster, f"/apis/rbac.authorization.k8s.io/v1/{plural}/phalanx-explain")


def test_the_charts_notes_name_podgroups_fully(stock_cluster: ClusterState) -> None:
    """NOTES.txt as helm prints it after an install (client-side dry run: nothing is created)."""
    result = subprocess.run(
        [
            helm_binary(),
            "install",
            "notes",  # a release and configuration name of its own: the session's Phalanx has phalanx.dev
            str(CHART),
            "-n",
            "phalanx-system",
            "--set",
            "webhook.configurationName=notes.phalanx.dev",
            "--dry-run=client",
            "--kubeconfig",
            str(stock_cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    print(notes)
    assert "kubectl get podgroups.scheduling.phalanx.dev -n <namespace>" in notes
    assert "kubectl get podgroups " not in notes
    assert (
        "(ClusterRole\nnotes-phalanx-view; edit and admin may also create hand-made ones: notes-phalanx-edit)"
        in notes
    )
    assert "bind ClusterRole notes-phalanx-explain to who runs it" in notes
