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

from .kube import NB_KEY, Namespace, bound, gpu_job, wait_for

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
    assert "  nb-a: 3 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free" in lines
    assert (
        "  nb-b: 0 of 4 pods fit; was-worker5, was-worker6, was-worker7 and was-worker8 have "
        "0 of 8 nvidia.com/gpu free"
    ) in lines

    # The same group asked by its PodGroup name, the namespace taken from the kubeconfig's context.
    group = group_of(ns, "gang-4")
    assert group is not None
    name = group["metadata"]["name"]
    kubeconfig = context_kubeconfig(stock_cluster, ns.name, tmp_path / "kubeconfig")
    by_group = phalanx("explain", f"podgroup/{name}", "--kubeconfig", str(kubeconfig)).stdout
    assert by_group.splitlines()[0].startswith(f"podgroup/{name} in namespace {ns.name}: waiting: no ")
    assert "  nb-a: 3 of 4 pods fit; was-worker has 0 of 8 nvidia.com/gpu free" in by_group


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
    out = phalanx("where", "-n", ns.name, "--kubeconfig", kubeconfig, "job-name=gang-4").stdout
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
    out = phalanx("where", "--kubeconfig", str(kubeconfig)).stdout
    assert out.splitlines() == [
        "POD                 PHASE    NODE         NB    LB",
        "filler-was-worker3  Running  was-worker3  nb-a  lb-a2",
    ]
    env_out = subprocess.run(
        [sys.executable, "-m", "phalanx.cli", "where"],
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
