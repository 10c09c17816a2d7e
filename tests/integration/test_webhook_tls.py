"""Webhook TLS managed by Phalanx, against a real apiserver: two replicas racing for the Secret agree on one
CA, its CA goes into (only) the named webhook configurations, an expiring certificate or CA is renewed, and
a caBundle that went missing comes back at the next check."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from phalanx import certs
from phalanx.controller.process.webhook_tls import WebhookCerts, WebhookTLS, read_files
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import RestClient
from phalanx.kubeclient import ApiClient, load

from .kube import Namespace, delete_namespace, new_namespace

pytestmark = pytest.mark.integration

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
KINDS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
SECRET = "webhook-tls"


@pytest.fixture
async def api(stock_cluster: ClusterState) -> AsyncIterator[ApiClient]:
    """Phalanx's own client, as the operator makes it; the tests read back through the dev cluster's."""
    async with ApiClient(load(str(stock_cluster.kubeconfig), in_cluster_first=True)) as api_client:
        yield api_client


@pytest.fixture
def tls_ns(stock_cluster: ClusterState) -> Iterator[Namespace]:
    ns = new_namespace(stock_cluster, "webhook-tls")
    yield ns
    delete_namespace(ns)


def webhook(name: str, ns: str) -> dict[str, Any]:
    """A webhook that never matters: it matches only ConfigMaps with a label nobody sets, and fails open."""
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}
        ],
        "objectSelector": {"matchLabels": {"phalanx.dev/webhook-tls-test": "never"}},
        "clientConfig": {"service": {"name": "phalanx", "namespace": ns, "port": 443, "path": "/x"}},
    }


@pytest.fixture
def configurations(stock_cluster: ClusterState, tls_ns: Namespace) -> Iterator[str]:
    """Two Mutating and two Validating configurations: ours (named like the chart's, with a random prefix)
    and a bystander of another name that must keep no caBundle."""
    api = stock_cluster.client()
    suffix = uuid.uuid4().hex[:6]
    ours, other = f"tls-{suffix}.phalanx.dev", f"other-{suffix}.example.com"
    for kind_path, kind in zip(
        KINDS, ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"), strict=True
    ):
        for name, count in ((ours, 2), (other, 1)):
            api.request(
                "POST",
                f"{ADMISSION}/{kind_path}",
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": name},
                    "webhooks": [webhook(f"w{i}.{name}", tls_ns.name) for i in range(count)],
                },
            )
    yield ours
    for kind_path in KINDS:
        for name in (ours, other):
            api.request("DELETE", f"{ADMISSION}/{kind_path}/{name}")


def ca_bundles(api: RestClient, name: str) -> list[str | None]:
    return [
        w["clientConfig"].get("caBundle")
        for kind_path in KINDS
        for w in api.get(f"{ADMISSION}/{kind_path}/{name}")["webhooks"]
    ]


def secret_of(ns: Namespace) -> tuple[WebhookCerts | None, str]:
    secret = ns.get(f"/api/v1/namespaces/{{ns}}/secrets/{SECRET}")
    return WebhookCerts.from_secret_data(secret.get("data")), secret["metadata"]["resourceVersion"]


def put_secret(ns: Namespace, content: WebhookCerts) -> None:
    """An administrator's (or a clock's) doing: the Secret now holds `content`."""
    secret = ns.get(f"/api/v1/namespaces/{{ns}}/secrets/{SECRET}")
    secret["data"] = content.secret_data()
    ns.api.request("PUT", f"/api/v1/namespaces/{ns.name}/secrets/{SECRET}", secret)


def leaf(content: WebhookCerts) -> x509.Certificate:
    return x509.load_pem_x509_certificate(content.cert)


async def test_replicas_share_one_secret_whose_ca_goes_into_the_named_configurations_and_is_renewed(
    api: ApiClient, tls_ns: Namespace, configurations: str, tmp_path: Path
) -> None:
    admin = tls_ns.api
    other = configurations.replace("tls-", "other-").replace(".phalanx.dev", ".example.com")
    hosts = ["phalanx", f"phalanx.{tls_ns.name}", f"phalanx.{tls_ns.name}.svc"]

    def replica(name: str) -> WebhookTLS:
        return WebhookTLS(api, tls_ns.name, SECRET, hosts, tmp_path / name, inject_into=configurations)

    a, b = replica("a"), replica("b")

    # Two replicas start at once: one creates the Secret, the other meets 409 and uses it.
    made_a, made_b = await asyncio.gather(a.ensure(), b.ensure())
    assert made_a == made_b
    stored, version = secret_of(tls_ns)
    assert stored == made_a
    assert read_files(tmp_path / "a") == read_files(tmp_path / "b") == made_a.served_files()
    assert ca_bundles(admin, configurations) == [made_a.ca_bundle_base64()] * 4
    assert ca_bundles(admin, other) == [None, None], "only our own configurations are touched"
    secret = tls_ns.get(f"/api/v1/namespaces/{{ns}}/secrets/{SECRET}")
    assert secret["type"] == "kubernetes.io/tls"

    # Nothing due: nothing written.
    assert await a.ensure() == made_a
    assert secret_of(tls_ns)[1] == version

    # The serving certificate has a quarter of its life left: re-issued from the same CA (no caBundle change).
    ca = certs.KeyPair(made_a.ca_bundle, made_a.ca_key)
    now = dt.datetime.now(dt.UTC)
    old_leaf = certs.issue(ca, "phalanx-webhook", hosts, now=now - dt.timedelta(days=274))
    put_secret(tls_ns, WebhookCerts(made_a.ca_bundle, made_a.ca_key, old_leaf.cert_pem, old_leaf.key_pem))
    renewed = await b.ensure()
    assert renewed.ca_bundle == made_a.ca_bundle and renewed.cert != old_leaf.cert_pem
    assert leaf(renewed).not_valid_after_utc > now + dt.timedelta(days=364)
    assert secret_of(tls_ns)[0] == renewed
    assert read_files(tmp_path / "b") == renewed.served_files()
    assert await a.ensure() == renewed, "the other replica picks the renewal up"
    assert read_files(tmp_path / "a") == renewed.served_files()
    assert ca_bundles(admin, configurations) == [made_a.ca_bundle_base64()] * 4

    # The CA itself is near its end: a new CA, the old one still trusted beside it until it expires.
    old_ca = certs.make_ca("phalanx-webhook-ca", now=now - dt.timedelta(days=300))  # 365 days of validity
    old_ca_leaf = certs.issue(old_ca, "phalanx-webhook", hosts)
    put_secret(
        tls_ns, WebhookCerts(old_ca.cert_pem, old_ca.key_pem, old_ca_leaf.cert_pem, old_ca_leaf.key_pem)
    )
    rotated = await a.ensure()
    bundle = x509.load_pem_x509_certificates(rotated.ca_bundle)
    assert len(bundle) == 2 and bundle[1] == x509.load_pem_x509_certificate(old_ca.cert_pem)
    leaf(rotated).verify_directly_issued_by(bundle[0])
    assert ca_bundles(admin, configurations) == [base64.b64encode(rotated.ca_bundle).decode()] * 4

    # A configuration replaced without its caBundle (an upgrade, a hand edit): the next check restores it.
    admin.request(
        "PATCH",
        f"{ADMISSION}/mutatingwebhookconfigurations/{configurations}",
        [{"op": "remove", "path": "/webhooks/1/clientConfig/caBundle"}],
        "application/json-patch+json",
    )
    assert ca_bundles(admin, configurations)[1] is None
    checks = asyncio.create_task(a.run(interval=0.2))
    try:
        for _ in range(100):
            if ca_bundles(admin, configurations) == [rotated.ca_bundle_base64()] * 4:
                break
            await asyncio.sleep(0.1)
        assert ca_bundles(admin, configurations) == [rotated.ca_bundle_base64()] * 4
    finally:
        checks.cancel()
        await asyncio.wait({checks})
