"""Webhook TLS made and kept by Phalanx (`phalanx run --webhook-secret NAME`), for the Helm chart.

- **One Secret, shared by the replicas.** `ca.crt`, `ca.key`, `tls.crt`, `tls.key` in a Secret of the
  operator's namespace. A replica that finds it absent (or unusable, or due for renewal) writes a new one;
  replicas race safely: a create that meets 409, or a replace that meets 409 (it is guarded by the
  `resourceVersion` it read), means another replica wrote first, and its content is read and used.
- **Files for Kopf.** `ca.crt`, `tls.crt`, `tls.key` (never the CA key) go into `--webhook-cert-dir` (an
  emptyDir in the pod), where Kopf's WebhookServer reads them; it re-reads them every minute and restarts
  its listener when they change. They are swapped all at once, as the kubelet writes a Secret volume:
  each name is a symlink into `..data`, a symlink to one version's folder that one rename replaces.
- **caBundle.** With `--webhook-config external`, the CA bundle goes into the `clientConfig.caBundle` of
  every webhook of Phalanx's own two configurations (by name, nothing else): a JSON patch guarded by the
  configuration's `resourceVersion`, sent only when something differs.
- **Renewal.** Checked at start and every `CHECK_SECONDS`: the serving certificate is re-issued from the
  same CA when less than a third of its lifetime is left, when it does not cover the Service's names or
  was not signed by the current CA; the CA is replaced when less than a third of its own lifetime is
  left, and the old CA stays in `ca.crt` (the caBundle) until it expires, so replicas that still serve a
  certificate of the old CA are trusted until they pick up the new one.

With cert-manager (the chart's `certManager.enabled`), none of this runs: the Secret is mounted as the
cert dir and cert-manager's CA injector fills the caBundle.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from phalanx import certs
from phalanx.controller.apply.kube import retrying
from phalanx.kubeclient import ApiClient, ApiException, resource_path

log = logging.getLogger("phalanx.webhook_tls")

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
SECRET_KEYS = (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)
SERVED_FILES = (CA_CERT, TLS_CERT, TLS_KEY)  # what Kopf's server reads; the CA key stays in the Secret
SECRET_TYPE = "kubernetes.io/tls"
CA_VALIDITY = dt.timedelta(days=10 * 365)
CERT_VALIDITY = dt.timedelta(days=365)
RENEW_WHEN_LEFT = 1 / 3  # renew when less than this fraction of a certificate's lifetime is left
CHECK_SECONDS = 60.0
CA_NAME = "phalanx-webhook-ca"
CERT_NAME = "phalanx-webhook"
JSON_PATCH = "application/json-patch+json"
DATA_LINK = "..data"


# ---------------------------------------------------------------------- pure: what is there, what is due
@dataclass(frozen=True)
class WebhookCerts:
    """The Secret's content. `ca_bundle` is the current CA first, then older CAs that are still valid."""

    ca_bundle: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> WebhookCerts | None:
        """From a Secret's base64 `data`; None when a key is missing or not base64."""
        data = data or {}
        try:
            ca_bundle, ca_key, cert, key = (
                base64.b64decode(data[name], validate=True) for name in SECRET_KEYS
            )
        except (KeyError, ValueError):
            return None
        return cls(ca_bundle=ca_bundle, ca_key=ca_key, cert=cert, key=key)

    def secret_data(self) -> dict[str, str]:
        values = (self.ca_bundle, self.ca_key, self.cert, self.key)
        return {
            name: base64.b64encode(value).decode() for name, value in zip(SECRET_KEYS, values, strict=True)
        }

    def served_files(self) -> dict[str, bytes]:
        return {CA_CERT: self.ca_bundle, TLS_CERT: self.cert, TLS_KEY: self.key}

    def ca_bundle_base64(self) -> str:
        return base64.b64encode(self.ca_bundle).decode()


def _renewal_due(cert: x509.Certificate, now: dt.datetime, left: float = RENEW_WHEN_LEFT) -> bool:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) * left


def _same_key(cert: x509.Certificate, key_pem: bytes) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki))


def _uncovered(cert: x509.Certificate, hosts: Sequence[str]) -> list[str]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return list(hosts)
    names = set(sans.get_values_for_type(x509.DNSName))
    names |= {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return [host for host in hosts if host not in names]


def renewal_reason(current: WebhookCerts | None, hosts: Sequence[str], now: dt.datetime) -> str | None:
    """Why the Secret's content must be (re)made, or None when it serves as it is."""
    if current is None:
        return "no certificate yet"
    try:
        cas = x509.load_pem_x509_certificates(current.ca_bundle)
        ca, leaf = cas[0], x509.load_pem_x509_certificate(current.cert)
        if not _same_key(ca, current.ca_key):
            return "the CA key does not match the CA"
        if _renewal_due(ca, now):
            return f"the CA expires at {ca.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
        if not _same_key(leaf, current.key):
            return "the key does not match the certificate"
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature) as e:
            return f"the certificate was not issued by the current CA ({type(e).__name__})"
        if _renewal_due(leaf, now):
            return f"the certificate expires at {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
        missing = _uncovered(leaf, hosts)
        if missing:
            return f"the certificate does not cover {', '.join(missing)}"
    except ValueError as e:
        return f"unreadable ({e})"
    return None


def renew(
    current: WebhookCerts | None,
    hosts: Sequence[str],
    now: dt.datetime,
    *,
    ca_validity: dt.timedelta = CA_VALIDITY,
    cert_validity: dt.timedelta = CERT_VALIDITY,
) -> WebhookCerts:
    """New content: the current CA kept when it is sound and not due, else a new CA (the older ones,
    while valid, stay in the bundle after it); a new serving certificate for `hosts` either way."""
    ca: certs.KeyPair | None = None
    older: list[x509.Certificate] = []
    if current is not None:
        try:
            cas = x509.load_pem_x509_certificates(current.ca_bundle)
            if _same_key(cas[0], current.ca_key) and not _renewal_due(cas[0], now):
                ca = certs.KeyPair(cas[0].public_bytes(serialization.Encoding.PEM), current.ca_key)
                older = cas[1:]
            else:
                older = cas
        except ValueError:
            pass
    if ca is None:
        ca = certs.make_ca(CA_NAME, validity=ca_validity, now=now)
    leaf = certs.issue(ca, CERT_NAME, list(hosts), validity=cert_validity, now=now)
    still_valid = [c.public_bytes(serialization.Encoding.PEM) for c in older if c.not_valid_after_utc > now]
    bundle = b"".join(dict.fromkeys([ca.cert_pem, *still_valid]))
    return WebhookCerts(ca_bundle=bundle, ca_key=ca.key_pem, cert=leaf.cert_pem, key=leaf.key_pem)


# ---------------------------------------------------------------------- files for Kopf's server
def read_files(folder: Path) -> dict[str, bytes] | None:
    try:
        return {name: (folder / name).read_bytes() for name in SERVED_FILES}
    except OSError:
        return None


def write_files(folder: Path, files: Mapping[str, bytes]) -> bool:
    """Make `folder/<name>` hold `files` (False: they already did). A reader sees all the old files or
    all the new ones: the names are symlinks into `..data`, swapped to the new version with one rename."""
    folder.mkdir(parents=True, exist_ok=True)
    if read_files(folder) == dict(files):
        return False
    version = folder / f"..{dt.datetime.now(dt.UTC):%Y_%m_%d_%H_%M_%S}.{secrets.token_hex(4)}"
    version.mkdir(mode=0o700)
    for name, content in files.items():
        path = version / name
        path.write_bytes(content)
        path.chmod(0o600)
    staging = folder / "..data_tmp"
    if staging.is_symlink() or staging.exists():
        staging.unlink()
    staging.symlink_to(version.name)
    os.replace(staging, folder / DATA_LINK)
    for name in files:
        link = folder / name
        if link.is_symlink() and os.readlink(link) == f"{DATA_LINK}/{name}":
            continue
        temporary = folder / f"..{name}.tmp"
        if temporary.is_symlink() or temporary.exists():
            temporary.unlink()
        temporary.symlink_to(f"{DATA_LINK}/{name}")
        os.replace(temporary, link)  # also over a plain file left by an earlier, plain write
    for old in folder.glob("..*"):
        if old.is_dir() and not old.is_symlink() and old.name != version.name:
            shutil.rmtree(old, ignore_errors=True)
    return True


# ---------------------------------------------------------------------- the API
async def _json(api: ApiClient, method: str, path: str, verb: str, **kwargs: Any) -> Any:
    """A request, retried; an error status raises ApiException."""
    return await retrying(lambda: api.json(method, path, **kwargs), verb=verb)


async def inject_ca_bundle(api: ApiClient, name: str, ca_bundle_b64: str) -> list[str]:
    """Put the CA bundle into every webhook of the Mutating and Validating configurations called `name`
    (only those). Returns the kinds that were patched; a configuration not there (yet) is skipped."""
    kinds = (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    )
    patched = []
    for kind, plural in kinds:
        path = resource_path("admissionregistration.k8s.io", "v1", plural, name=name)
        for _ in range(3):  # a concurrent edit fails the resourceVersion test: read again
            try:
                config = await _json(api, "GET", path, "get")
            except ApiException as e:
                if e.status != 404:
                    raise
                log.warning("%s %s not found: its caBundle is set once it exists", kind, name)
                break
            ops: list[dict[str, Any]] = [
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle_b64}
                for i, webhook in enumerate(config.get("webhooks") or [])
                if (webhook.get("clientConfig") or {}).get("caBundle") != ca_bundle_b64
            ]
            if not ops:
                break
            version = config["metadata"]["resourceVersion"]
            body = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *ops]
            try:
                await _json(api, "PATCH", path, "patch", body=body, content_type=JSON_PATCH)
            except ApiException as e:
                if e.status in (409, 422):  # the resourceVersion test failed: edited meanwhile
                    continue
                raise
            log.info("caBundle of %s %s set (%d webhooks)", kind, name, len(ops))
            patched.append(kind)
            break
        else:
            log.warning("%s %s kept changing: its caBundle is set at the next check", kind, name)
    return patched


class WebhookTLS:
    """Keeps the webhook's Secret, the files Kopf serves and (optionally) the caBundle of Phalanx's own
    webhook configurations in line; `ensure()` once at start, then `run()` in the background."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        secret: str,
        hosts: Sequence[str],
        folder: Path,
        *,
        inject_into: str | None = None,
        ca_validity: dt.timedelta = CA_VALIDITY,
        cert_validity: dt.timedelta = CERT_VALIDITY,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.api = api
        self.collection = resource_path("", "v1", "secrets", namespace=namespace)
        self.path = resource_path("", "v1", "secrets", namespace=namespace, name=secret)
        self.namespace = namespace
        self.secret = secret
        self.hosts = list(hosts)
        self.folder = folder
        self.inject_into = inject_into
        self.ca_validity = ca_validity
        self.cert_validity = cert_validity
        self.clock = clock

    async def _read(self) -> dict[str, Any] | None:
        try:
            secret: dict[str, Any] = await _json(self.api, "GET", self.path, "get")
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return secret

    def _body(self, made: WebhookCerts, existing: Mapping[str, Any] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.secret, "namespace": self.namespace}
        if existing is None:
            metadata["labels"] = {"app.kubernetes.io/managed-by": "phalanx"}
            secret_type = SECRET_TYPE
        else:
            old = existing.get("metadata") or {}
            metadata.update(
                {
                    k: old[k]
                    for k in ("labels", "annotations", "resourceVersion", "ownerReferences")
                    if k in old
                }
            )
            secret_type = existing.get("type") or SECRET_TYPE  # immutable
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": secret_type,
            "data": made.secret_data(),
        }

    async def _write(self, body: dict[str, Any], create: bool) -> None:
        if create:
            await _json(self.api, "POST", self.collection, "create", body=body)
        else:
            await _json(self.api, "PUT", self.path, "update", body=body)

    async def reconcile_secret(self) -> WebhookCerts:
        """The Secret's content, made or renewed first if due (by this replica, or by another that won)."""
        for _ in range(5):
            existing = await self._read()
            current = WebhookCerts.from_secret_data(existing.get("data") if existing else None)
            now = self.clock()
            why = renewal_reason(current, self.hosts, now)
            if why is None:
                assert current is not None
                return current
            made = renew(
                current, self.hosts, now, ca_validity=self.ca_validity, cert_validity=self.cert_validity
            )
            body = self._body(made, existing)
            try:
                await self._write(body, create=existing is None)
            except ApiException as e:
                if e.status == 409:  # another replica wrote it first: use its content
                    continue
                raise
            log.info(
                "webhook certificate in Secret %s/%s %s: %s",
                self.namespace,
                self.secret,
                "made" if existing is None else "renewed",
                why,
            )
            return made
        raise RuntimeError(f"Secret {self.namespace}/{self.secret} kept changing under us")

    async def ensure(self) -> WebhookCerts:
        """Secret, files, caBundle: each brought in line (cheap when nothing changed)."""
        made = await self.reconcile_secret()
        if write_files(self.folder, made.served_files()):
            log.info("webhook certificate written to %s", self.folder)
        if self.inject_into:
            await inject_ca_bundle(self.api, self.inject_into, made.ca_bundle_base64())
        return made

    async def run(self, interval: float = CHECK_SECONDS) -> None:
        """`ensure()` every `interval` seconds until cancelled; failures are logged and retried."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.ensure()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("webhook certificate check failed (next in %.0f s): %r", interval, e)
