"""Phalanx in its own pods, installed by its Helm chart, on a real node (issue 8, items 3 and 5).

A dev cluster of its own with `--real-node` (the seed's 8 simulated GPU nodes + kubelet v1.37.2 on
containerd):
hack/image.sh builds the image from the Dockerfile (podman, no registry), it is imported into the node's
containerd, and `helm install` puts the chart's two replicas on the real node. Then, with Phalanx running in
those pods under the chart's ServiceAccount, its webhook called through its Service with the certificate it
made in its Secret:
- a gang Job is admitted whole in one network block of the simulated nodes; one that cannot fit stays gated;
- deleting the leader's pod hands the Lease over, and the other replica admits the next gang;
- the ServiceAccount is refused what its role does not grant (auth can-i, and real requests with the pod's
  own token: 403);
- the host reaches its own bridge address (loopback is not leaving);
- no packet leaves the machine: service addresses are unreachable on the host, a pod's connection to an
  outside address is dropped before any interface sends it, with the host's ip_forward off and on (iptables
  counters);
- `down` leaves the host as it found it.

Needs root (containerd, kubelet, a bridge, iptables). CI runs as root on Debian 12; elsewhere it skips,
saying so.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster import hostnet, realnode
from phalanx.devcluster.cluster import ClusterState, DevCluster
from phalanx.devcluster.http import ApiError, RestClient

from .kube import NB_KEY, Namespace, bound, delete_namespace, domains_of, hold, new_namespace, wait_for
from .test_phalanx_admission import condition, group_of, managed_job, wait_bound, wait_condition
from .test_roles import reviews_in

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the real node needs root (containerd, kubelet, iptables)"),
]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "phalanx"
NAMESPACE = "phalanx-system"
SA = "phalanx"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SA}"
CONFIG = "phalanx.dev"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/phalanx-leader"
OUTSIDE = "198.51.100.7"  # TEST-NET-2: routed by the default route, never answered
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass
class RealCluster:
    cluster: DevCluster
    state: ClusterState
    image: str

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.state.kubectl), "--kubeconfig", str(self.state.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(self.state.bin_dir) / "helm"), "--kubeconfig", str(self.state.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def phalanx_pods(self, name: str = "phalanx") -> list[dict[str, Any]]:
        """The pods of the chart's Deployment whose app.kubernetes.io/name is `name` (phalanx-webhooks: the
        webhook Deployment's), but those going away."""
        items: list[dict[str, Any]] = self.state.client().get(
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/name={name}"
        )["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self, name: str = "phalanx") -> list[dict[str, Any]]:
        return [
            p
            for p in self.phalanx_pods(name)
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
        ]

    def exec_python(self, pod: str, code: str) -> subprocess.CompletedProcess[str]:
        return self.kubectl("exec", "-n", NAMESPACE, pod, "--", "python3", "-c", code, timeout=60)


def timed(what: str, started: float) -> None:
    print(f"[real node] {what} in {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    started = time.monotonic()
    built = subprocess.run(
        ["bash", str(ROOT / "hack" / "image.sh")], capture_output=True, text=True, timeout=1800
    )
    print(built.stderr)
    assert built.returncode == 0, f"hack/image.sh failed:\n{built.stderr[-4000:]}"
    archive = Path(built.stdout.strip().splitlines()[-1])
    timed("image built (hack/image.sh)", started)

    started = time.monotonic()
    cluster = DevCluster(Path(tmp_path_factory.mktemp("real-node")) / "cluster")
    state = cluster.up(topology="seed", real_node=True, log=lambda m: print(f"[dev-cluster real] {m}"))
    try:
        timed("dev cluster with the real node up", started)
        started = time.monotonic()
        loaded = subprocess.run(
            [
                sys.executable,
                "-m",
                "phalanx.cli",
                "dev-cluster",
                "load-image",
                "--dir",
                str(state.path),
                str(archive),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert loaded.returncode == 0, loaded.stderr
        (image,) = [line.split()[0] for line in loaded.stdout.splitlines() if "phalanx" in line]
        timed(f"{image} imported into the node's containerd", started)
        yield RealCluster(cluster, state, image)
    finally:
        cluster.down(log=lambda m: print(f"[dev-cluster real] {m}"))


@pytest.fixture(scope="module")
def release(real: RealCluster) -> Iterator[RealCluster]:
    """`helm install` with the image on the real node only (the simulated nodes run nothing for real)."""
    repository, tag = real.image.rsplit(":", 1)
    selector = realnode.NODE_LABEL.replace(".", "\\.")  # helm's --set path: dots in a key escaped
    started = time.monotonic()
    installed = real.helm(
        "install",
        "phalanx",
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set-string",
        f"nodeSelector.{selector}=true",
        "--wait",
        "--timeout",
        "240s",
    )
    if installed.returncode != 0:
        print(real.kubectl("get", "pods,events", "-n", NAMESPACE, "-o", "wide").stdout)
    assert installed.returncode == 0, installed.stderr
    timed("helm install --wait", started)
    yield real


def lease_holder(api: RestClient) -> str | None:
    try:
        holder: str | None = api.get(LEASE)["spec"].get("holderIdentity")
    except ApiError:
        return None
    return holder


def ready_phalanx(real: RealCluster) -> tuple[list[dict[str, Any]], str]:
    """Both replicas Ready and one of them holding the Lease (after an install or a handover)."""

    def probe() -> tuple[list[dict[str, Any]], str] | None:
        pods = real.ready_pods()
        holder = lease_holder(real.state.client())
        names = {p["metadata"]["name"] for p in pods}
        return (pods, holder) if len(pods) == 2 and holder in names else None

    return wait_for("2 Ready replicas, one holding the Lease", probe, timeout=120)


@pytest.fixture
def ns(release: RealCluster, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    namespace = new_namespace(release.state, request.node.name)
    # ServiceAccount admission is on with a real node: pods wait for the namespace's default account.
    wait_for(
        "the namespace's default ServiceAccount",
        lambda: _exists(namespace.api, f"/api/v1/namespaces/{namespace.name}/serviceaccounts/default"),
        timeout=30,
    )
    yield namespace
    delete_namespace(namespace)


def _exists(api: RestClient, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return True


# ---------------------------------------------------------------------- Phalanx in its pods
def test_phalanx_runs_in_two_pods_on_the_real_node_as_its_service_account(release: RealCluster) -> None:
    api = release.state.client()
    pods, holder = ready_phalanx(release)
    assert {p["spec"]["nodeName"] for p in pods} == {realnode.NODE_NAME}, "the simulated nodes run none"
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == SA
        (status,) = pod["status"]["containerStatuses"]
        assert status["image"].endswith(release.image.split("/", 1)[1]) and status["ready"]
        assert pod["status"]["podIP"].startswith("10.85.0."), "a real pod on the node's bridge"
    print(f"leader: {holder}")

    # Who Phalanx is, asked from inside its pod with its own mounted token through the `kubernetes` Service.
    review = release.exec_python(
        pods[0]["metadata"]["name"],
        "import json, os, ssl, urllib.request as u\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "url = 'https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews' % "
        "(os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])\n"
        "review = {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'}\n"
        "body = json.dumps(review).encode()\n"
        "req = u.Request(url, body, {'Authorization': 'Bearer ' + open(sa + '/token').read(),"
        " 'Content-Type': 'application/json'})\n"
        "ctx = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "print(json.dumps(json.load(u.urlopen(req, context=ctx, timeout=10))['status']['userInfo']))",
    )
    assert review.returncode == 0, review.stderr
    user = json.loads(review.stdout)
    print(user)
    assert user["username"] == SA_USER
    assert "system:masters" not in user["groups"]

    # The webhook goes through the Service, with the CA of the Secret Phalanx made.
    secret = api.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/phalanx-webhook-tls")
    assert secret["metadata"].get("annotations", {}).get("meta.helm.sh/release-name") is None, "not Helm's"
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for hook in api.get(f"{ADMISSION}/{kind}/{CONFIG}")["webhooks"]:
            config = hook["clientConfig"]
            assert "url" not in config and config["service"]["name"] == "phalanx", hook["name"]
            assert config["caBundle"] == secret["data"]["ca.crt"], hook["name"]
    everywhere = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    assert {p["spec"].get("nodeName") for p in everywhere} == {realnode.NODE_NAME}, "none on a simulated node"


# ---------------------------------------------------------------------- gangs
def test_a_gang_is_admitted_whole_in_one_network_block(release: RealCluster, ns: Namespace) -> None:
    ready_phalanx(release)
    created = ns.create(managed_job("block-4", 4, NB_KEY))
    gates = created["spec"]["template"]["spec"].get("schedulingGates") or []
    assert {"name": "phalanx.dev/admission"} in gates, "the gate webhook (in the pods, via the Service) ran"
    pods = wait_bound(ns, "block-4", 4, timeout=90)
    print(ns.where("job-name=block-4"))
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    assert realnode.NODE_NAME not in {p["spec"]["nodeName"] for p in pods}
    wait_condition(ns, "block-4", "Admitted", "True")


def test_a_gang_that_cannot_fit_stays_wholly_gated(release: RealCluster, ns: Namespace) -> None:
    ready_phalanx(release)
    ns.create(managed_job("block-5", 5, NB_KEY))  # a network block has 4 nodes
    admitted = wait_condition(ns, "block-5", "Admitted", "False", "Unschedulable", timeout=90)
    print(admitted["message"])
    pods = wait_for(
        "5 block-5 pods", lambda: ps if len(ps := ns.job_pods("block-5")) == 5 else None, timeout=60
    )

    def all_gated() -> bool:
        current = ns.job_pods("block-5")
        return not bound(current) and all(
            {"name": "phalanx.dev/admission"} in (p["spec"].get("schedulingGates") or []) for p in current
        )

    assert all_gated(), pods
    hold("all 5 block-5 pods gated, none bound", all_gated, seconds=5)


def test_deleting_the_leaders_pod_hands_over_and_the_other_replica_admits(
    release: RealCluster, ns: Namespace
) -> None:
    api = release.state.client()
    _, leader = ready_phalanx(release)
    print(
        "replicas:",
        {p["metadata"]["name"]: p["metadata"]["creationTimestamp"] for p in release.phalanx_pods()},
    )
    release.state.client().request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{leader}")
    started = time.monotonic()
    new = wait_for(
        "the Lease held by another replica",
        lambda: h if (h := lease_holder(api)) not in (None, leader) else None,
        timeout=90,
    )
    # The stopping leader releases the Lease: the running replica or the Deployment's replacement (whichever
    # asks first) takes it, well before the 15 s lease would expire.
    timed(f"leadership {leader} -> {new}", started)
    live = {p["metadata"]["name"]: p["metadata"]["creationTimestamp"] for p in release.phalanx_pods()}
    print("replicas now:", live)
    assert new in live and leader not in live

    ns.create(managed_job("after-handover", 2, NB_KEY))
    pods_after = wait_bound(ns, "after-handover", 2, timeout=90)
    assert len(domains_of(ns.api, pods_after, NB_KEY)) == 1
    admitted = condition(group_of(ns, "after-handover"), "Admitted")
    assert admitted and admitted["status"] == "True"
    holder = lease_holder(api)
    assert holder == new
    # The Admitted Event names the replica that decided: the new leader, not the deleted pod.
    reporters = {
        e.get("reportingInstance")
        for e in ns.events_until(
            "an Admitted event",
            lambda evs: any(e["reason"] == "Admitted" and e.get("reportingComponent") for e in evs),
        )
        if e["reason"] == "Admitted" and e.get("reportingComponent")
    }
    assert reporters == {new}, reporters
    ready_phalanx(release)  # two replicas again


# ---------------------------------------------------------------------- the webhooks' own Deployment
METRICS = (
    "import urllib.request as u\n"
    "print(u.urlopen('http://127.0.0.1:8080/metrics', timeout=10).read().decode())"
)


def reviews_in_pod(release: RealCluster, pod: str) -> float:
    """The admission reviews the process in `pod` answered, from its own /metrics."""
    scraped = release.exec_python(pod, METRICS)
    assert scraped.returncode == 0, scraped.stderr
    return reviews_in(scraped.stdout)


def test_the_webhooks_in_a_deployment_of_their_own_gate_and_the_controller_admits(
    release: RealCluster, ns: Namespace
) -> None:
    """`helm upgrade --set webhook.deployment.enabled=true`: two `--role webhooks` pods behind the Service
    gate the Job, the two `--role controller` pods (one leader) admit it; then back to one Deployment."""
    upgrade = ("upgrade", "phalanx", str(CHART), "--namespace", NAMESPACE, "--reuse-values", "--wait")
    split = release.helm(*upgrade, "--set", "webhook.deployment.enabled=true", "--timeout", "240s")
    assert split.returncode == 0, split.stderr
    try:
        controllers, leader = ready_phalanx(release)  # app.kubernetes.io/name=phalanx: the controllers
        api = release.state.client()
        webhook_pods = wait_for(
            "2 Ready webhook pods",
            lambda: ps if len(ps := release.ready_pods("phalanx-webhooks")) == 2 else None,
            timeout=180,
        )
        for pod in controllers:
            assert "--role=controller" in pod["spec"]["containers"][0]["args"]
        hooks = [p["metadata"]["name"] for p in webhook_pods]
        before = {pod: reviews_in_pod(release, pod) for pod in hooks}

        created = ns.create(managed_job("split-2", 2, NB_KEY))
        assert {"name": "phalanx.dev/admission"} in (
            created["spec"]["template"]["spec"].get("schedulingGates") or []
        )
        pods = wait_bound(ns, "split-2", 2, timeout=90)
        assert len(domains_of(ns.api, pods, NB_KEY)) == 1
        wait_condition(ns, "split-2", "Admitted", "True")

        answered = {pod: reviews_in_pod(release, pod) - before[pod] for pod in hooks}
        assert sum(answered.values()) >= 1, answered  # the Job's gate (and the PodGroup's validation)
        for pod in controllers:
            assert reviews_in_pod(release, pod["metadata"]["name"]) == 0, "no webhook server"
        assert lease_holder(api) == leader
    finally:
        joined = release.helm(*upgrade, "--set", "webhook.deployment.enabled=false", "--timeout", "240s")
        assert joined.returncode == 0, joined.stderr
    ready_phalanx(release)


# ---------------------------------------------------------------------- least privilege
FORBIDDEN = (
    ("delete", "nodes", None),
    ("get", "secrets", "kube-system"),
    ("delete", "jobs", "default"),
    ("create", "clusterrolebindings", None),
)


def test_the_service_account_is_refused_what_its_role_does_not_grant(release: RealCluster) -> None:
    for verb, resource, namespace in FORBIDDEN:
        where = ["-n", namespace] if namespace else []
        answer = release.kubectl("auth", "can-i", verb, resource, *where, f"--as={SA_USER}")
        assert answer.stdout.strip() == "no", (verb, resource, answer.stdout, answer.stderr)
    allowed = release.kubectl("auth", "can-i", "list", "nodes", f"--as={SA_USER}")
    assert allowed.stdout.strip() == "yes", "the check tells yes from no"

    # Real requests with the token the pod itself runs with.
    pods, _ = ready_phalanx(release)
    token = release.kubectl("exec", "-n", NAMESPACE, pods[0]["metadata"]["name"], "--", "cat", TOKEN)
    assert token.returncode == 0, token.stderr
    as_phalanx = RestClient(release.state.api_port, token.stdout.strip(), str(release.state.ca_file))
    node = as_phalanx.get("/api/v1/nodes")["items"][0]["metadata"]["name"]  # allowed: read nodes
    for method, path in (
        ("DELETE", f"/api/v1/nodes/{node}?dryRun=All"),
        ("GET", "/api/v1/namespaces/kube-system/secrets"),
        ("GET", "/api/v1/secrets"),
    ):
        with pytest.raises(ApiError) as refused:
            as_phalanx.request(method, path)
        assert refused.value.status == 403, (method, path, refused.value)
        assert SA_USER in refused.value.body


# ---------------------------------------------------------------------- nothing leaves the machine
def _rule(action: str, table: str, chain: str, *spec: str) -> None:
    subprocess.run(
        [
            "iptables",
            "-w",
            "-t",
            table,
            action,
            chain,
            *spec,
            "-m",
            "comment",
            "--comment",
            "phalanx-real-node-test",
        ],
        check=True,
    )


def _packets(table: str, chain: str, needle: str) -> int:
    out = subprocess.run(
        ["iptables", "-w", "-t", table, "-L", chain, "-v", "-n", "-x"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(
        int(line.split()[0])
        for line in out.splitlines()
        if needle in line and "phalanx-real-node-test" in line
    )


def test_service_and_kwok_addresses_are_unreachable_on_the_host(release: RealCluster) -> None:
    # No kube-proxy: without these routes a ClusterIP would go out of the default route.
    for address in ("10.0.0.1", "10.0.0.200", "10.244.3.4", "10.255.0.1"):
        route = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True)
        # An `unreachable` route: the kernel refuses at once (EHOSTUNREACH), nothing is queued for a link.
        assert route.returncode != 0 and "No route to host" in route.stderr, (address, route)


def test_the_host_reaches_its_own_bridge_address(release: RealCluster) -> None:
    """The host talking to 10.85.0.1 goes out of `lo` with a pod-range source: it stays in the machine, so the
    last-resort rule lets it through (it once dropped it, and counted it as a packet leaving)."""
    with socket.socket() as server:
        server.bind((hostnet.GATEWAY, 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=10) as client:
            accepted, peer = server.accept()
            with accepted:
                client.sendall(b"ping")
                assert accepted.recv(4) == b"ping"
    assert peer[0] == hostnet.GATEWAY
    assert _leaving_dropped() == 0, _leave_rules()


def _leave_rules() -> str:
    return "\n".join(line for _, line in hostnet.counters("mangle", hostnet.LEAVE_CHAIN))


def _leaving_dropped() -> int:
    return sum(packets for packets, line in hostnet.counters("mangle", hostnet.LEAVE_CHAIN) if "DROP" in line)


def _dropped_forwards() -> int:
    return sum(packets for packets, _ in hostnet.counters("filter", hostnet.FILTER_CHAIN))


@pytest.mark.parametrize("forwarding", ["as found", "on"])
def test_a_pods_packets_to_an_outside_address_never_leave(release: RealCluster, forwarding: str) -> None:
    """Seen arriving from the bridge, never sent out of any interface: with the host's ip_forward as found
    (0 on a fresh Debian: the kernel drops them) and turned on (as Docker or a router would have it: then the
    FORWARD rule drops them). ip_forward is put back as it was."""
    sysctl = "net.ipv4.ip_forward"
    before = hostnet.read_sysctl(sysctl)
    pods, _ = ready_phalanx(release)
    seen = ("mangle", "PREROUTING", "-i", hostnet.BRIDGE, "-d", f"{OUTSIDE}/32")
    sent = ("mangle", "POSTROUTING", "-d", f"{OUTSIDE}/32")
    _rule("-I", *seen)
    _rule("-I", *sent)
    try:
        if forwarding == "on":
            hostnet.write_sysctl(sysctl, "1")
        dropped = _dropped_forwards()
        attempt = release.exec_python(
            pods[0]["metadata"]["name"],
            "import socket\n"
            "for port in (80, 443):\n"
            "    try:\n"
            f"        socket.create_connection(('{OUTSIDE}', port), timeout=3); print('CONNECTED', port)\n"
            "    except OSError as e:\n"
            "        print('refused', port, e)\n",
        )
        print(attempt.stdout, attempt.stderr)
        assert attempt.returncode == 0 and "CONNECTED" not in attempt.stdout
        arrived = _packets("mangle", "PREROUTING", OUTSIDE)
        left = _packets("mangle", "POSTROUTING", OUTSIDE)
        forwarded_and_dropped = _dropped_forwards() - dropped
        print(
            f"ip_forward={hostnet.read_sysctl(sysctl)}: pod -> {OUTSIDE}: {arrived} packets from the bridge, "
            f"{forwarded_and_dropped} dropped by {hostnet.FILTER_CHAIN}, {left} sent out"
        )
        assert arrived >= 2, "the pod really tried (the counter sees its SYNs)"
        assert left == 0, "nothing was sent to the outside address by any interface"
        if forwarding == "on":
            assert forwarded_and_dropped >= arrived, "with forwarding on, the FORWARD rule is what stops them"
    finally:
        if hostnet.read_sysctl(sysctl) != before:
            hostnet.write_sysctl(sysctl, before)
        _rule("-D", *seen)
        _rule("-D", *sent)
    # The last-resort rules (a pod-range packet leaving by an interface other than the bridge or loopback)
    # never had to act; their counts by protocol, and what stayed on loopback, say which packet if one did.
    assert _leaving_dropped() == 0, _leave_rules()


# ---------------------------------------------------------------------- teardown
def host_traces() -> dict[str, Any]:
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    rules6 = subprocess.run(["ip6tables-save"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(
        ["ip", "route", "show", "type", "unreachable"], capture_output=True, text=True
    ).stdout
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if "phalanx-real-node" in line or "/real-node/" in line]
    return {
        "rules": [
            line for line in (rules + rules6).splitlines() if hostnet.COMMENT in line or "KUBE-" in line
        ],
        "bridge": Path(f"/sys/class/net/{hostnet.BRIDGE}").exists(),
        "routes": [
            r for r in routes.splitlines() if r.split()[1] in (hostnet.SERVICE_CIDR, *hostnet.KWOK_RANGES)
        ],
        "mounts": mounts,
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")),
        "run": sorted(str(p) for p in Path("/run").glob("phalanx-real-node-*")),
    }


def test_down_removes_the_node_and_every_host_change(real: RealCluster) -> None:
    before = host_traces()
    assert before["bridge"] and before["rules"] and before["routes"], before
    started = time.monotonic()
    real.cluster.down(log=lambda m: print(f"[dev-cluster real] {m}"))
    timed("down", started)
    after = host_traces()
    print(after)
    assert after == {"rules": [], "bridge": False, "routes": [], "mounts": [], "cgroups": [], "run": []}
    assert not any(str(real.state.path) in " ".join(p) for p in _processes())


def _processes() -> list[list[str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().decode(errors="replace").split("\0"))
            except OSError:
                continue
    return found
