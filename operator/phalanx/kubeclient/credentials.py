"""Where requests go and who they say they are: a kubeconfig as kubectl reads it, or the service account.

A kubeconfig: `$KUBECONFIG` may list several files (the first file to name a context, cluster or user
wins, and the first `current-context` set); paths in a file are relative to that file; the cluster's
server, CA (`certificate-authority` or `-data`), `insecure-skip-tls-verify`, `tls-server-name` and
`proxy-url`; the user's client certificate and key (files or `-data`), `token` or `tokenFile`,
`username`/`password`, or an `exec` plugin (client.authentication.k8s.io v1 and v1beta1: a token or a
client certificate, re-run when it expires). Legacy `auth-provider` plugins (removed from kubectl in
1.26) are an error naming the user, not a silent anonymous client.

In cluster: `KUBERNETES_SERVICE_HOST`/`_PORT`, the service account's CA and its token file, re-read as the
kubelet rotates it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_NAMESPACE = "default"
EXEC_TIMEOUT_SECONDS = 60.0


class ConfigError(ValueError):
    """No usable credentials; the message names the file, context or field."""


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig user's `exec`: a command that prints an ExecCredential."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    cluster: Mapping[str, Any] = field(default_factory=dict)  # given to the plugin if it asks

    async def run(self) -> ExecCredential:
        """Run the plugin (no terminal: Phalanx never prompts) and read its answer."""
        info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False, "cluster": dict(self.cluster)},
        }
        env = {**os.environ, **dict(self.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            process = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise ConfigError(f"exec plugin {self.command}: {e}") from e
        try:
            async with asyncio.timeout(EXEC_TIMEOUT_SECONDS):
                out, err = await process.communicate()
        except TimeoutError as e:
            raise ConfigError(
                f"exec plugin {self.command}: no answer within {EXEC_TIMEOUT_SECONDS:g} s (stopped)"
            ) from e
        finally:
            if process.returncode is None:  # timed out or cancelled: a hung plugin is not left behind
                process.kill()
                await asyncio.shield(process.wait())
        if process.returncode != 0:
            tail = err.decode(errors="replace").strip()[-500:]
            raise ConfigError(f"exec plugin {self.command} exited {process.returncode}: {tail}")
        try:
            status = json.loads(out)["status"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"exec plugin {self.command}: no ExecCredential status in its output") from e
        return ExecCredential.of(status, self.command)


@dataclass(frozen=True)
class ExecCredential:
    token: str | None
    certificate: str | None  # PEM
    key: str | None
    expires: dt.datetime | None

    @staticmethod
    def of(status: Mapping[str, Any], command: str) -> ExecCredential:
        token = status.get("token") or None
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not (cert and key):
            raise ConfigError(f"exec plugin {command}: neither a token nor a client certificate and key")
        expires = None
        if status.get("expirationTimestamp"):
            try:
                expires = dt.datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
            except ValueError as e:
                raise ConfigError(f"exec plugin {command}: bad expirationTimestamp") from e
        return ExecCredential(token, cert or None, key or None, expires)

    def expired(self, now: dt.datetime) -> bool:
        return self.expires is not None and now >= self.expires - dt.timedelta(seconds=10)


@dataclass(frozen=True)
class Credentials:
    """One cluster and one identity. PEM data is kept as text; files are read when a request needs them
    (so a rotated token file is picked up)."""

    server: str
    source: str  # for messages: "kubeconfig /path (context c)" or "in-cluster"
    namespace: str = DEFAULT_NAMESPACE
    ca_file: str | None = None
    ca_data: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: str | None = None
    key_data: str | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    exec: ExecPlugin | None = None

    def ssl_context(self, exec_credential: ExecCredential | None = None) -> ssl.SSLContext:
        """TLS as kubectl does it: the cluster's CA (else the system's), a client certificate if any.
        Python's extra X.509 strictness is off, as Go (kubectl, client-go) has none of it."""
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert, key = self.cert_data, self.key_data
        if exec_credential is not None and exec_credential.certificate:
            cert, key = exec_credential.certificate, exec_credential.key
        if cert and key:
            _load_chain_from_text(context, cert, key)
        elif self.cert_file:
            context.load_cert_chain(self.cert_file, keyfile=self.key_file)
        return context

    def static_token(self) -> str | None:
        """The bearer token of this moment: the literal one, else the token file's (stripped, as client-go
        does: a trailing newline is no part of it)."""
        if self.token:
            return self.token.strip()
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip() or None
            except OSError as e:
                raise ConfigError(f"{self.source}: cannot read token file {self.token_file}: {e}") from e
        return None


def _load_chain_from_text(context: ssl.SSLContext, cert: str, key: str) -> None:
    """ssl loads a certificate chain from files only: write both to a private temporary folder, load,
    remove."""
    with tempfile.TemporaryDirectory(prefix="phalanx-tls-") as folder:
        cert_path, key_path = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        for path, text in ((cert_path, cert), (key_path, key)):
            path.touch(mode=0o600)
            path.write_text(text)
        context.load_cert_chain(str(cert_path), keyfile=str(key_path))


# ---------------------------------------------------------------------- loading
def load(kubeconfig: str | None = None, context: str | None = None, *, in_cluster_first: bool) -> Credentials:
    """An explicit kubeconfig wins. Then the operator (`in_cluster_first`) takes the service account if it
    runs in a pod, else $KUBECONFIG / ~/.kube/config; the tools the other way round, as kubectl does."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig.split(os.pathsep), context)
    files = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    default = Path.home() / ".kube" / "config"
    if not files and default.is_file():
        files = [str(default)]
    if in_cluster_first and in_pod():
        return in_cluster()
    if files:
        return from_kubeconfig(files, context)
    if context:
        raise ConfigError(f"context {context}: no kubeconfig ($KUBECONFIG and ~/.kube/config are unset)")
    if in_pod():
        return in_cluster()
    raise ConfigError(
        "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod (no KUBERNETES_SERVICE_HOST)"
    )


def in_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT"))


def in_cluster(folder: Path = SERVICE_ACCOUNT) -> Credentials:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
    token, ca = folder / "token", folder / "ca.crt"
    for path in (token, ca):
        if not path.is_file():
            raise ConfigError(f"in-cluster: {path} is missing (no service account token mounted?)")
    try:
        namespace = (folder / "namespace").read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        namespace = DEFAULT_NAMESPACE
    server_host = f"[{host}]" if ":" in host else host
    return Credentials(
        server=f"https://{server_host}:{port}",
        source="in-cluster",
        namespace=namespace,
        ca_file=str(ca),
        token_file=str(token),
    )


def from_kubeconfig(files: Sequence[str], context: str | None = None) -> Credentials:
    merged = _merge([Path(os.path.expanduser(f)) for f in files if f])
    name = context or merged.current_context
    where = f"kubeconfig {os.pathsep.join(files)}"
    if not name:
        raise ConfigError(f"{where}: no current-context (and no context given)")
    if name not in merged.contexts:
        raise ConfigError(f"{where}: no context {name!r}")
    ctx, _ = merged.contexts[name]
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in merged.clusters:
        raise ConfigError(f"{where}: context {name!r} names cluster {cluster_name!r}, which is not there")
    cluster, cluster_dir = merged.clusters[cluster_name]
    user, user_dir = merged.users.get(user_name, ({}, cluster_dir)) if user_name else ({}, cluster_dir)
    if user_name and user_name not in merged.users:
        raise ConfigError(f"{where}: context {name!r} names user {user_name!r}, which is not there")
    if user.get("auth-provider"):
        raise ConfigError(
            f"{where}: user {user_name!r} uses an auth-provider plugin, which kubectl dropped in 1.26; "
            "use an exec plugin"
        )
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"{where}: cluster {cluster_name!r} has no server")
    source = f"{where} (context {name})"
    return Credentials(
        server=server.rstrip("/"),
        source=source,
        namespace=str(ctx.get("namespace") or DEFAULT_NAMESPACE),
        ca_file=_path(cluster.get("certificate-authority"), cluster_dir),
        ca_data=_b64(cluster.get("certificate-authority-data"), source, "certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy_url=cluster.get("proxy-url") or None,
        cert_file=_path(user.get("client-certificate"), user_dir),
        key_file=_path(user.get("client-key"), user_dir),
        cert_data=_b64(user.get("client-certificate-data"), source, "client-certificate-data"),
        key_data=_b64(user.get("client-key-data"), source, "client-key-data"),
        token=user.get("token") or None,
        token_file=_path(user.get("tokenFile"), user_dir),
        username=user.get("username") or None,
        password=user.get("password") or None,
        exec=_exec(user.get("exec"), user_dir, cluster, source),
    )


@dataclass
class _Merged:
    current_context: str | None = None
    contexts: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)


def _merge(paths: Sequence[Path]) -> _Merged:
    merged = _Merged()
    for path in paths:
        if not path.is_file() and len(paths) > 1:
            continue  # kubectl skips a listed file that does not exist
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read kubeconfig {path}: {e}") from e
        if not isinstance(document, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        merged.current_context = merged.current_context or document.get("current-context") or None
        for key, into, inner in (
            ("contexts", merged.contexts, "context"),
            ("clusters", merged.clusters, "cluster"),
            ("users", merged.users, "user"),
        ):
            for item in document.get(key) or []:
                if isinstance(item, dict) and item.get("name") and item["name"] not in into:
                    into[item["name"]] = (dict(item.get(inner) or {}), path.parent)
    return merged


def _path(value: Any, base: Path) -> str | None:
    if not value:
        return None
    path = Path(os.path.expanduser(str(value)))
    return str(path if path.is_absolute() else base / path)


def _b64(value: Any, source: str, key: str) -> str | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{source}: {key} is not base64 of a PEM text") from e


def _exec(value: Any, base: Path, cluster: Mapping[str, Any], source: str) -> ExecPlugin | None:
    if not value:
        return None
    if not isinstance(value, dict) or not value.get("command"):
        raise ConfigError(f"{source}: exec needs a command")
    command = str(value["command"])
    if os.sep in command and not os.path.isabs(command):
        command = str(base / command)  # as client-go: a relative path is relative to the kubeconfig
    env = tuple((str(e["name"]), str(e.get("value", ""))) for e in value.get("env") or [] if e.get("name"))
    return ExecPlugin(
        command=command,
        args=tuple(str(a) for a in value.get("args") or []),
        env=env,
        api_version=str(value.get("apiVersion") or "client.authentication.k8s.io/v1"),
        cluster={
            "server": cluster.get("server"),
            "insecure-skip-tls-verify": cluster.get("insecure-skip-tls-verify"),
        },
    )
