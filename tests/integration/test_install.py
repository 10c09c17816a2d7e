"""Installing Phalanx into a cluster, against the stock dev cluster's real apiserver.

- `kubectl apply --dry-run=server -f manifests/phalanx.yaml`: every object of the single-file install is
  validated (and admitted: the operator's pod meets the restricted Pod Security Standard of its namespace).
- Least privilege: the chart's ServiceAccount, ClusterRole, Role and bindings are created from the rendered
  chart; `phalanx run` runs as a local process with a token of that ServiceAccount (TokenRequest) and the
  Deployment's own flags, serving the chart's own webhook configurations (their `service` clientConfig
  reaches it through an ExternalName Service to localhost: the apiserver resolves ExternalName Services for
  webhooks, and the certificate Phalanx makes is for `<service>.<namespace>.svc`). A gang Job is admitted end
  to end under that identity, with no Forbidden in the operator's log; actions outside the role are refused;
  the chart's FlowSchema takes that identity's requests to the priority level workload-high. Twice: as the
  chart renders by default (one Deployment doing both) and with `webhook.deployment.enabled` (each of its two
  Deployments a process of its own: `--role controller` holds the Lease and admits, `--role webhooks`
  answers every review through the Service).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.cluster import ClusterState, DevCluster, free_ports
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import NB_KEY, Namespace, bound, delete_namespace, domains_of, gpu_job, new_namespace, wait_for
from .test_roles import reviews_in

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "phalanx.yaml"
CHART = ROOT / "charts" / "phalanx"
NAMESPACE = "phalanx-system"
SA = "phalanx"
CONFIG = "phalanx.dev"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def helm_binary(cluster: ClusterState) -> str:
    """The helm hack/build.sh builds next to kubectl (or $HELM)."""
    helm = os.environ.get("HELM") or str(Path(cluster.bin_dir) / "helm")
    if not os.access(helm, os.X_OK):
        pytest.skip(f"no helm at {helm}: hack/build.sh builds it")
    return helm


def kubectl(cluster: ClusterState, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def delete(api: RestClient, path: str) -> None:
    try:
        api.request("DELETE", path)
    except ApiError as e:
        if e.status != 404:
            raise


@pytest.fixture(scope="module")
def phalanx_system(stock_cluster: ClusterState) -> Iterator[str]:
    """The release namespace, as the manifest makes it (labelled for the restricted Pod Security Standard)."""
    namespace = next(d for d in documents(MANIFEST.read_text()) if d["kind"] == "Namespace")
    created = kubectl(stock_cluster, "apply", "-f", "-", stdin=json.dumps(namespace))
    assert created.returncode == 0, created.stderr
    yield NAMESPACE
    api = stock_cluster.client()
    delete(api, f"/api/v1/namespaces/{NAMESPACE}")
    wait_for(
        f"namespace {NAMESPACE} gone",
        lambda: not any(n["metadata"]["name"] == NAMESPACE for n in api.get("/api/v1/namespaces")["items"]),
        timeout=90,
    )


# ---------------------------------------------------------------------- the single-file install
@pytest.fixture
def bare_cluster(tmp_path: Path) -> Iterator[ClusterState]:
    """A cluster of its own, never touched by a Phalanx run: the session's operator has made webhook
    configurations of the same names in URL mode, which `kubectl apply` would try to merge with."""
    cluster = DevCluster(tmp_path / "bare")
    state = cluster.up(topology="1x1x1")
    try:
        namespace = next(d for d in documents(MANIFEST.read_text()) if d["kind"] == "Namespace")
        created = kubectl(state, "apply", "-f", "-", stdin=json.dumps(namespace))
        assert created.returncode == 0, created.stderr
        yield state
    finally:
        cluster.down()


def test_every_object_of_the_single_file_install_is_accepted_by_the_apiserver(
    bare_cluster: ClusterState,
) -> None:
    stock_cluster = bare_cluster
    result = kubectl(stock_cluster, "apply", "--dry-run=server", "-f", str(MANIFEST))
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    expected = documents(MANIFEST.read_text())
    lines = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(lines) == len(expected), "one answer per object"
    for doc in expected:
        assert any(f"/{doc['metadata']['name']} " in line for line in lines), doc["metadata"]["name"]
    assert "Warning" not in result.stderr, "no deprecation or Pod Security warning"

    # The absence of a Pod Security warning means something: a pod breaking the restricted standard gets one.
    deployment = next(d for d in expected if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"] = {
        "add": ["NET_ADMIN"]
    }
    worse = kubectl(stock_cluster, "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(deployment))
    assert worse.returncode == 0 and "would violate PodSecurity" in worse.stderr, worse.stderr


# ---------------------------------------------------------------------- least privilege, end to end
@dataclass
class Installed:
    docs: list[dict[str, Any]]
    webhook_port: int
    token: str
    kubeconfig: Path

    @property
    def deployments(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == "Deployment"]


def run_args(
    deployment: dict[str, Any], installed: Installed, cert_dir: Path, metrics_port: int
) -> list[str]:
    """The Deployment's `phalanx run` flags (after `run`), with a local process's addresses, not a pod's."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "run"
    local = {
        "--webhook-host": "127.0.0.1",
        "--webhook-port": str(installed.webhook_port),  # the ExternalName Service sends the apiserver here
        "--webhook-cert-dir": str(cert_dir),
        "--metrics-host": "127.0.0.1",
        "--metrics-port": str(metrics_port),
    }
    args = []
    for arg in container["args"][1:]:
        flag, _, _ = arg.partition("=")
        args.append(f"{flag}={local[flag]}" if flag in local else arg)
    return [*args, f"--kubeconfig={installed.kubeconfig}"]


def service_account_kubeconfig(cluster: ClusterState, token: str, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
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
                "users": [{"name": SA, "user": {"token": token}}],
                "contexts": [{"name": SA, "context": {"cluster": "dev", "user": SA, "namespace": NAMESPACE}}],
                "current-context": SA,
            }
        )
    )
    path.chmod(0o600)
    return path


@pytest.fixture(
    params=[(), ("webhook.deployment.enabled=true",)], ids=["one-deployment", "webhook-deployment"]
)
def installed(
    request: pytest.FixtureRequest,
    stock_cluster: ClusterState,
    phalanx: OperatorProcess,
    phalanx_system: str,
    tmp_path: Path,
) -> Iterator[Installed]:
    """The chart's objects but its Deployments, on the cluster; the webhook Service an ExternalName to
    localhost, the others left out. Rendered as by default (one Deployment doing both) and with the webhooks
    in a Deployment of their own. The session's operator (which writes a Kopf-managed configuration of the
    same name) is stopped meanwhile."""
    phalanx.stop()
    api = stock_cluster.client()
    (webhook_port,) = free_ports(1)
    sets = [f"service.webhookPort={webhook_port}", *request.param]
    rendered = subprocess.run(
        [
            helm_binary(stock_cluster),
            "template",
            "phalanx",
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--include-crds",
            *[arg for value in sets for arg in ("--set", value)],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = documents(rendered.stdout)
    kinds = {d["kind"] for d in docs}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= kinds
    # Kopf's managed configuration of the session's operator goes; the chart's takes its name.
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        delete(api, f"{ADMISSION}/{kind}/{CONFIG}")
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == SA)
    external = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service["metadata"]["name"], "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    objects = [d for d in docs if d["kind"] not in ("Deployment", "Service")] + [external]
    applied = kubectl(
        stock_cluster,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": objects}),
    )
    assert applied.returncode == 0, applied.stderr
    established = kubectl(
        stock_cluster,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *[f"crd/{d['metadata']['name']}" for d in docs if d["kind"] == "CustomResourceDefinition"],
    )
    assert established.returncode == 0, established.stderr
    token = api.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SA}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    kubeconfig = service_account_kubeconfig(stock_cluster, token, tmp_path / "phalanx-sa.kubeconfig")
    try:
        yield Installed(docs, webhook_port, token, kubeconfig)
    finally:
        # Everything but the CRDs (the session's operator uses them) and the namespace (the module's).
        ours = [d for d in objects if d["kind"] not in ("CustomResourceDefinition", "Namespace")]
        removed = kubectl(
            stock_cluster,
            "delete",
            "--ignore-not-found",
            "-f",
            "-",
            stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": ours}),
        )
        assert removed.returncode == 0, removed.stderr
        delete(api, f"/api/v1/namespaces/{NAMESPACE}/secrets/phalanx-webhook-tls")
        delete(api, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/phalanx-leader")
        phalanx.start()  # its Kopf-managed configuration again


@dataclass
class Local:
    """One of the chart's Deployments run as a local process with its own flags, as the chart's identity."""

    deployment: str
    args: list[str]
    identity: str
    url: str  # its metrics/health server
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text()[-6000:]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        print(f"log of {self.deployment}: {self.log_path}")


def start_local(deployment: dict[str, Any], installed: Installed, tmp_path: Path, metrics_port: int) -> Local:
    name = deployment["metadata"]["name"]
    identity = f"{name}-lp-0"
    args = run_args(deployment, installed, tmp_path / f"{name}-webhook-tls", metrics_port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_") and k != "KUBECONFIG"}
    env.update({"PYTHONUNBUFFERED": "1", "POD_NAMESPACE": NAMESPACE, "PHALANX_IDENTITY": identity})
    print(f"{name}: phalanx run", " ".join(args))
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "phalanx.cli", "run", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    return Local(name, args, identity, f"http://127.0.0.1:{metrics_port}", log_path, process)


def reviews(url: str) -> float:
    """Admission reviews the process at `url` answered."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        return reviews_in(response.read().decode())


def status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            code: int = response.status
            return code
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def dispatched_by_level(metrics: str, flow_schema: str) -> dict[str, float]:
    """apiserver_flowcontrol_dispatched_requests_total of one FlowSchema, by priority level."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if (
                s.name == "apiserver_flowcontrol_dispatched_requests_total"
                and s.labels.get("flow_schema") == flow_schema
            ):
                level = s.labels.get("priority_level", "?")
                out[level] = out.get(level, 0.0) + float(s.value)
    return out


def forbidden(api: RestClient, method: str, path: str, body: Any = None) -> bool:
    try:
        api.request(method, path, body)
    except ApiError as e:
        return e.status == 403
    return False


def test_phalanx_admits_a_gang_as_the_charts_service_account_and_nothing_more(
    stock_cluster: ClusterState, installed: Installed, tmp_path: Path
) -> None:
    admin = stock_cluster.client()
    as_phalanx = RestClient(stock_cluster.api_port, installed.token, str(stock_cluster.ca_file))
    review = as_phalanx.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )["status"]["userInfo"]
    assert review["username"] == f"system:serviceaccount:{NAMESPACE}:{SA}"
    assert "system:masters" not in review["groups"]

    # Every process's metrics port picked at once, and none the webhook port (picked by the fixture, free
    # until its process binds it): a CI run once had a metrics server take it first.
    deployments = installed.deployments
    ports = [p for p in free_ports(len(deployments) + 1) if p != installed.webhook_port][: len(deployments)]
    processes = [
        start_local(d, installed, tmp_path, port) for d, port in zip(deployments, ports, strict=True)
    ]
    (leader,) = [p for p in processes if "--leader-election" in p.args]
    ns: Namespace | None = None
    try:
        secret_path = f"/api/v1/namespaces/{NAMESPACE}/secrets/phalanx-webhook-tls"

        def ready() -> bool:
            for p in processes:
                assert p.process.poll() is None, p.log()
                if status(f"{p.url}/readyz") != 200:
                    return False
            try:
                ca = admin.get(secret_path)["data"]["ca.crt"]
                bundles = [
                    w["clientConfig"].get("caBundle")
                    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
                    for w in admin.get(f"{ADMISSION}/{kind}/{CONFIG}")["webhooks"]
                ]
            except ApiError:
                return False
            lease = admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/phalanx-leader")
            configs = [d for d in installed.docs if d["kind"].endswith("WebhookConfiguration")]
            webhooks = sum(len(d["webhooks"]) for d in configs)
            return bundles == [ca] * webhooks and lease["spec"].get("holderIdentity") == leader.identity

        started = time.monotonic()
        wait_for("phalanx ready: Secret made, caBundle injected, Lease held", ready, timeout=90)
        print(f"ready as {SA} in {time.monotonic() - started:.1f} s")

        # A gang through the chart's webhook (Service clientConfig, Phalanx's own TLS) and scheduling loop.
        ns = new_namespace(stock_cluster, "least-privilege")
        job = gpu_job(
            "gang-2",
            2,
            labels={"phalanx.dev/managed": "true"},
            annotations={"phalanx.dev/topology-key": NB_KEY},
        )
        created = ns.create(job)
        gates = created["spec"]["template"]["spec"].get("schedulingGates") or []
        assert {"name": "phalanx.dev/admission"} in gates, "the gate webhook was called"
        pods = wait_for(
            "both pods of the gang bound",
            lambda: ps if len(bound(ps := ns.job_pods("gang-2"))) == 2 else None,
            timeout=60,
        )
        assert len(domains_of(admin, pods, NB_KEY)) == 1
        groups = ns.get("/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups")["items"]
        (group,) = groups
        admitted = next(c for c in group["status"]["conditions"] if c["type"] == "Admitted")
        assert admitted["status"] == "True", admitted
        assert any(e.get("reportingComponent") == "phalanx" for e in ns.events()), "Events posted"

        # API Priority and Fairness: the chart's FlowSchema took the operator's requests to workload-high
        # (without it they would be under `service-accounts`, in workload-low).
        flow = admin.get(f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{SA}")
        dangling = next(c for c in flow["status"]["conditions"] if c["type"] == "Dangling")
        assert dangling["status"] == "False", dangling
        levels = dispatched_by_level(admin.get("/metrics"), flow_schema=SA)
        assert levels.get("workload-high", 0) > 0 and set(levels) == {"workload-high"}, levels

        # The PodGroup validator answers through the Service too: a hand edit of the gang size is refused.
        with pytest.raises(ApiError) as refused:
            ns.api.request(
                "PATCH",
                f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/podgroups/{group['metadata']['name']}",
                {"spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}},
                "application/merge-patch+json",
            )
        assert refused.value.status == 422 and "follows its Job" in refused.value.body

        # Outside the role: refused (dry runs, so nothing would happen if they were not).
        node = admin.get("/api/v1/nodes")["items"][0]["metadata"]["name"]
        assert forbidden(as_phalanx, "DELETE", f"/api/v1/nodes/{node}?dryRun=All")
        assert forbidden(as_phalanx, "GET", "/api/v1/namespaces/kube-system/secrets")
        assert forbidden(as_phalanx, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/someone-elses")
        assert forbidden(as_phalanx, "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/gang-2?dryRun=All")
        assert forbidden(
            as_phalanx,
            "PATCH",
            f"{ADMISSION}/validatingwebhookconfigurations/someone-elses.example.com",
            {"metadata": {"labels": {"x": "y"}}},
        )
        assert forbidden(
            as_phalanx,
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
            "podgroups.scheduling.phalanx.dev?dryRun=All",
        )
        assert as_phalanx.get(secret_path)["metadata"]["name"] == "phalanx-webhook-tls", "its own: allowed"

        # Each Deployment's reviews: with the webhooks in a Deployment of their own, its process answered them
        # all and the controller's none.
        answered = {p.deployment: reviews(p.url) for p in processes}
        assert sum(answered.values()) > 0
        if len(processes) == 2:
            assert answered == {"phalanx": 0, "phalanx-webhooks": answered["phalanx-webhooks"]}, answered

        for p in processes:
            log = p.log()
            for word in ("Forbidden", "forbidden", " 403", "Not enough permissions"):
                assert word not in log, f"{word!r} in the log of {p.deployment}:\n{log[-6000:]}"
    finally:
        for p in processes:
            p.stop()
        if ns is not None:
            delete_namespace(ns)


# ---------------------------------------------------------------------- helm install / uninstall
def test_helm_uninstall_removes_the_webhook_configurations_and_keeps_the_crds(
    stock_cluster: ClusterState, phalanx: OperatorProcess, phalanx_system: str
) -> None:
    """The release's lifecycle with the real helm (the dev cluster's simulated kubelet only pretends to run
    the pods: this is about what Helm installs and removes, not about Phalanx in a pod)."""
    helm = helm_binary(stock_cluster)
    api = stock_cluster.client()
    phalanx.stop()
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        delete(api, f"{ADMISSION}/{kind}/{CONFIG}")  # Kopf's: Helm adopts nothing it did not make

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [helm, "--kubeconfig", str(stock_cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=180,
        )

    try:
        installed = run(
            "install", "phalanx", str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", "120s"
        )
        assert installed.returncode == 0, installed.stderr
        assert "phalanx.dev/managed" in installed.stdout, "NOTES.txt tells how to label a Job"
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            config = api.get(f"{ADMISSION}/{kind}/{CONFIG}")
            assert config["metadata"]["annotations"]["meta.helm.sh/release-name"] == "phalanx"
        deployment = api.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/phalanx")
        assert deployment["status"].get("readyReplicas") == 2

        # A caBundle (Phalanx's doing in a real cluster) survives an upgrade that changes the webhooks.
        bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
        api.request(
            "PATCH",
            f"{ADMISSION}/mutatingwebhookconfigurations/{CONFIG}",
            [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}],
            "application/json-patch+json",
        )
        upgrade_args = ("upgrade", "phalanx", str(CHART), "--namespace", NAMESPACE, "--reuse-values")
        upgraded = run(*upgrade_args, "--set", "webhook.timeoutSeconds=7", "--wait", "--timeout", "120s")
        assert upgraded.returncode == 0, upgraded.stderr
        webhooks = api.get(f"{ADMISSION}/mutatingwebhookconfigurations/{CONFIG}")["webhooks"]
        (gate,) = [w for w in webhooks if w["name"] == f"gate-job.{CONFIG}"]
        assert gate["timeoutSeconds"] == 7 and gate["clientConfig"].get("caBundle") == bundle

        # The webhooks into a Deployment of their own and back, by upgrades: the operator's Deployment keeps
        # its (immutable) selector, the webhook Service's endpoints become the webhook Deployment's pods.
        def endpoints() -> set[str]:
            slices = api.get(
                f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"
                "?labelSelector=kubernetes.io/service-name=phalanx"
            )["items"]
            return {
                e["targetRef"]["name"]
                for s in slices
                for e in s.get("endpoints") or []
                if (e.get("conditions") or {}).get("ready")
            }

        deployments = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
        split = run(*upgrade_args, "--set", "webhook.deployment.enabled=true", "--wait", "--timeout", "120s")
        assert split.returncode == 0, split.stderr
        assert api.get(f"{deployments}/phalanx-webhooks")["status"].get("readyReplicas") == 2
        controller = api.get(f"{deployments}/phalanx")
        assert controller["status"].get("readyReplicas") == 2
        assert "--role=controller" in controller["spec"]["template"]["spec"]["containers"][0]["args"]
        serving = wait_for(
            "the webhook Service's endpoints: the two webhook pods",
            lambda: (
                e
                if len(e := endpoints()) == 2 and all(n.startswith("phalanx-webhooks-") for n in e)
                else None
            ),
            timeout=60,
        )
        print("webhook endpoints", sorted(serving))
        joined = run(
            *upgrade_args, "--set", "webhook.deployment.enabled=false", "--wait", "--timeout", "120s"
        )
        assert joined.returncode == 0, joined.stderr
        with pytest.raises(ApiError) as gone:
            api.get(f"{deployments}/phalanx-webhooks")
        assert gone.value.status == 404
        wait_for(
            "the webhook Service's endpoints: the operator's pods again",
            lambda: (e := endpoints()) and not any(n.startswith("phalanx-webhooks-") for n in e),
            timeout=60,
        )

        uninstalled = run("uninstall", "phalanx", "--namespace", NAMESPACE, "--wait")
        assert uninstalled.returncode == 0, uninstalled.stderr
        for path in (
            f"{ADMISSION}/mutatingwebhookconfigurations/{CONFIG}",
            f"{ADMISSION}/validatingwebhookconfigurations/{CONFIG}",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/phalanx",
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/phalanx",
        ):
            with pytest.raises(ApiError) as gone:
                api.get(path)
            assert gone.value.status == 404, path
        for plural in ("workloads", "podgroups", "compositepodgroups"):
            crd = api.get(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.scheduling.phalanx.dev"
            )
            assert crd["metadata"]["name"].startswith(plural), "CRDs stay (crds/ of the chart)"
    finally:
        run("uninstall", "phalanx", "--namespace", NAMESPACE, "--wait", "--ignore-not-found")
        phalanx.start()
