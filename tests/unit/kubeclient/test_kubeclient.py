"""phalanx.kubeclient against a real local HTTPS server: the credentials a kubeconfig or the service account
gives are the ones that reach the server (CA verified, client certificate presented, the token of the
moment sent), errors name what is wrong, and a client with declared accesses refuses any other request
before sending it.

The server is a socket and TLS, not a stand-in for the API's behaviour: it echoes what it received. The
same client against the real apiserver is every integration test (the operator runs on it).
"""

from __future__ import annotations

import base64
import json
import ssl
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from phalanx import certs
from phalanx.kubeclient import (
    Access,
    AccessNotDeclaredError,
    ApiClient,
    ApiException,
    ConfigError,
    Credentials,
    access_of,
    load,
    resource_path,
)
from phalanx.kubeclient import client as client_module
from phalanx.kubeclient import credentials as credentials_module
from phalanx.kubeclient.client import env_proxy
from phalanx.kubeclient.credentials import ExecPlugin, from_kubeconfig, in_cluster

Pki = tuple[certs.KeyPair, certs.KeyPair, certs.KeyPair]  # CA, server, client ("admin")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def pki() -> Pki:
    ca = certs.make_ca("test-ca")
    server = certs.issue(ca, "apiserver", ["127.0.0.1", "localhost"])
    client = certs.issue(ca, "admin", [], organization="system:masters", client=True)
    return ca, server, client


class Echo:
    """Answers every request with what it saw: method, path, query, Authorization, body, client cert CN."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in peer["subject"]) if peer else {}
        seen = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "authorization": request.headers.get("Authorization"),
            "content_type": request.headers.get("Content-Type"),
            "body": await request.text(),
            "client": subject.get("commonName"),
        }
        self.seen.append(seen)
        if request.path.endswith("/missing"):
            return web.json_response(
                {"kind": "Status", "code": 404, "message": "pods missing not found"}, status=404
            )
        return web.json_response(seen)


@pytest.fixture
async def https(tmp_path: Path, pki: Pki) -> AsyncIterator[tuple[str, Echo]]:
    ca, server, _ = pki
    ca.write(tmp_path / "srv-ca.crt", tmp_path / "srv-ca.key")
    server.write(tmp_path / "srv.crt", tmp_path / "srv.key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "srv-ca.crt"))
    context.load_cert_chain(str(tmp_path / "srv.crt"), str(tmp_path / "srv.key"))
    context.verify_mode = ssl.CERT_OPTIONAL  # a client certificate when there is one, else a token
    echo = Echo()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo.handle)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server(ssl=context)
    try:
        yield f"https://127.0.0.1:{test_server.port}", echo
    finally:
        await test_server.close()


def kubeconfig(folder: Path, pki: Pki, server: str, **extra_users: dict[str, Any]) -> Path:
    ca, _, client = pki
    (folder / "ca.crt").write_bytes(ca.cert_pem)
    (folder / "token").write_text("from-a-file\n")
    users = {
        "cert": {"client-certificate-data": b64(client.cert_pem), "client-key-data": b64(client.key_pem)},
        "token": {"token": "abc"},
        "token-file": {"tokenFile": "token"},  # relative: to the kubeconfig's folder
        **extra_users,
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "embedded",
                "cluster": {"server": server, "certificate-authority-data": b64(ca.cert_pem)},
            },
            {"name": "files", "cluster": {"server": server, "certificate-authority": "ca.crt"}},
        ],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [
            {"name": "certs", "context": {"cluster": "embedded", "user": "cert", "namespace": "ml"}},
            *(
                {"name": name, "context": {"cluster": "files", "user": name}}
                for name in users
                if name != "cert"
            ),
        ],
        "current-context": "certs",
    }
    path = folder / "config"
    path.write_text(json.dumps(config))
    return path


async def whoami(credentials: Credentials) -> dict[str, Any]:
    async with ApiClient(credentials) as api:
        seen: dict[str, Any] = await api.json("GET", "/api/v1/namespaces/ns/pods/p")
    return seen


async def test_a_kubeconfigs_embedded_client_certificate_and_ca_reach_the_server(
    tmp_path: Path, pki: Pki, https: tuple[str, Echo]
) -> None:
    server, _ = https
    credentials = load(str(kubeconfig(tmp_path, pki, server)), in_cluster_first=True)
    assert (credentials.namespace, credentials.server) == ("ml", server)
    seen = await whoami(credentials)
    assert seen["client"] == "admin" and seen["authorization"] is None


@pytest.mark.parametrize(
    ("context", "header"), [("token", "Bearer abc"), ("token-file", "Bearer from-a-file")]
)
async def test_tokens_and_token_files_are_sent_stripped(
    tmp_path: Path, pki: Pki, https: tuple[str, Echo], context: str, header: str
) -> None:
    server, _ = https
    credentials = from_kubeconfig([str(kubeconfig(tmp_path, pki, server))], context)
    assert credentials.ca_file == str(tmp_path / "ca.crt") and credentials.namespace == "default"
    seen = await whoami(credentials)
    assert seen["authorization"] == header and seen["client"] is None


async def test_an_exec_plugin_gives_the_token(tmp_path: Path, pki: Pki, https: tuple[str, Echo]) -> None:
    plugin = tmp_path / "bin" / "credential"
    plugin.parent.mkdir()
    plugin.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['spec']['interactive'] is False, info\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "                  'status': {'token': sys.argv[1] + os.environ['SUFFIX']}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "./bin/credential",  # relative to the kubeconfig, as client-go resolves it
            "args": ["exec-"],
            "env": [{"name": "SUFFIX", "value": "token"}],
        }
    }
    server, _ = https
    path = kubeconfig(tmp_path, pki, server, plugin=exec_user)
    seen = await whoami(from_kubeconfig([str(path)], "plugin"))
    assert seen["authorization"] == "Bearer exec-token"


async def test_a_server_the_ca_does_not_vouch_for_is_refused(
    tmp_path: Path, pki: Pki, https: tuple[str, Echo]
) -> None:
    server, echo = https
    other = certs.make_ca("another-ca")
    credentials = Credentials(server=server, source="test", ca_data=other.cert_pem.decode(), token="abc")
    with pytest.raises(ssl.SSLCertVerificationError):
        await whoami(credentials)
    assert echo.seen == []  # the token never left


async def test_several_kubeconfigs_merge_the_first_wins(
    tmp_path: Path, pki: Pki, https: tuple[str, Echo]
) -> None:
    server, _ = https
    first = tmp_path / "a"
    first.mkdir()
    (first / "config").write_text(
        json.dumps({"current-context": "token", "users": [{"name": "token", "user": {"token": "wins"}}]})
    )
    second = kubeconfig(tmp_path, pki, server)
    credentials = load(f"{first / 'config'}:{second}", in_cluster_first=False)
    assert credentials.source.endswith("(context token)")
    assert (await whoami(credentials))["authorization"] == "Bearer wins"


def test_what_is_wrong_with_a_kubeconfig_is_named(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ConfigError, match=r"cannot read kubeconfig .*missing"):
        from_kubeconfig([str(tmp_path / "missing")])
    path = kubeconfig(tmp_path, pki, "https://127.0.0.1:1", legacy={"auth-provider": {"name": "gcp"}})
    with pytest.raises(ConfigError, match=r"no context 'nope'"):
        from_kubeconfig([str(path)], "nope")
    with pytest.raises(ConfigError, match=r"user 'legacy' uses an auth-provider plugin"):
        from_kubeconfig([str(path)], "legacy")
    broken = tmp_path / "broken"
    broken.write_text(
        json.dumps({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "gone"}}]})
    )
    with pytest.raises(ConfigError, match=r"names cluster 'gone', which is not there"):
        from_kubeconfig([str(broken)])


async def test_in_cluster_reads_the_service_account_and_picks_up_a_rotated_token(
    tmp_path: Path, pki: Pki, https: tuple[str, Echo], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, echo = https
    host, port = server.removeprefix("https://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_bytes(pki[0].cert_pem)
    (tmp_path / "namespace").write_text("phalanx-system")
    credentials = in_cluster(tmp_path)
    assert (credentials.server, credentials.namespace) == (server, "phalanx-system")
    async with ApiClient(credentials) as api:
        await api.json("GET", "/api/v1/nodes")
        (tmp_path / "token").write_text("rotated")
        monkeypatch.setattr(client_module, "TOKEN_FILE_REREAD_SECONDS", -1.0)  # as if a minute went by
        await api.json("GET", "/api/v1/nodes")
    assert [s["authorization"] for s in echo.seen] == ["Bearer first", "Bearer rotated"]


async def test_an_error_answer_is_an_api_exception_with_the_status_message(
    https: tuple[str, Echo], pki: Pki
) -> None:
    server, _ = https
    credentials = Credentials(server=server, source="test", ca_data=pki[0].cert_pem.decode(), token="abc")
    async with ApiClient(credentials) as api:
        with pytest.raises(ApiException) as raised:
            await api.json("GET", "/api/v1/namespaces/ns/pods/missing")
        seen = await api.json(
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            body={"a": 1},
            content_type="application/merge-patch+json",
        )
    assert raised.value.status == 404 and raised.value.status_message() == "pods missing not found"
    assert "GET /api/v1/namespaces/ns/pods/missing: (404) pods missing not found" in str(raised.value)
    assert (seen["content_type"], json.loads(seen["body"])) == ("application/merge-patch+json", {"a": 1})


async def test_a_client_with_declared_accesses_refuses_any_other_before_sending(
    https: tuple[str, Echo], pki: Pki
) -> None:
    server, echo = https
    credentials = Credentials(server=server, source="test", ca_data=pki[0].cert_pem.decode(), token="abc")
    allowed = {Access("", "pods", "patch")}
    async with ApiClient(credentials, allowed=allowed) as api:
        await api.json("PATCH", resource_path("", "v1", "pods", namespace="ns", name="p"), body={})
        with pytest.raises(
            AccessNotDeclaredError, match=r"DELETE /api/v1/namespaces/ns/pods/p needs core/pods delete"
        ):
            await api.json("DELETE", resource_path("", "v1", "pods", namespace="ns", name="p"))
    assert [s["method"] for s in echo.seen] == ["PATCH"]


@pytest.mark.parametrize(
    ("method", "path", "query", "access"),
    [
        ("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j", None, Access("batch", "jobs", "patch")),
        ("GET", "/api/v1/pods", {"watch": "true"}, Access("", "pods", "watch")),
        ("GET", "/api/v1/pods", [("limit", "500")], Access("", "pods", "list")),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction", None, Access("", "pods/eviction", "create")),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            None,
            Access("coordination.k8s.io", "leases", "update"),
        ),
        ("GET", "/api/v1/namespaces/ns", None, Access("", "namespaces", "get")),
        ("DELETE", "/apis/x.io/v1/things", None, Access("x.io", "things", "deletecollection")),
        ("PATCH", "/apis/x.io/v1/topologies/t/status", None, Access("x.io", "topologies/status", "patch")),
    ],
)
def test_the_access_of_a_request(method: str, path: str, query: Any, access: Access) -> None:
    assert access_of(method, path, query) == access


@pytest.mark.parametrize("namespace", [None, "ns"])
@pytest.mark.parametrize("name", [None, "a.b-c"])
@pytest.mark.parametrize("sub", [None, "status"])
@pytest.mark.parametrize(("group", "plural"), [("", "pods"), ("scheduling.phalanx.dev", "podgroups")])
def test_access_of_reads_back_what_resource_path_builds(
    namespace: str | None, name: str | None, sub: str | None, group: str, plural: str
) -> None:
    if sub and not name:
        return  # a subresource is of a named object
    path = resource_path(group, "v1", plural, namespace=namespace, name=name, subresource=sub)
    verb = "get" if name else "list"
    assert access_of("GET", path) == Access(group, plural + (f"/{sub}" if sub else ""), verb)


@pytest.mark.parametrize(
    ("server", "env", "expected"),
    [
        ("https://api.example.com:6443", {}, None),
        ("https://api.example.com:6443", {"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ("https://api.example.com:6443", {"https_proxy": "http://proxy:3128"}, "http://proxy:3128"),
        ("http://api.example.com:8080", {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("http://api.example.com:8080", {"HTTP_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        (
            "https://api.example.com:6443",
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".example.com"},
            None,
        ),
        (
            "https://api.example.com:6443",
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "other.org"},
            "http://proxy:3128",
        ),
        ("https://127.0.0.1:6443", {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("https://[::1]:6443", {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("https://localhost:6443", {"HTTPS_PROXY": "http://proxy:3128"}, None),
    ],
)
def test_the_environments_proxy_is_chosen_as_client_go_chooses_it(
    server: str, env: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env_proxy(server) == expected


async def test_an_exec_plugin_that_hangs_is_stopped_and_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin that never answers is killed when its time is up (each retry would start another), and the
    error says what happened."""
    monkeypatch.setattr(credentials_module, "EXEC_TIMEOUT_SECONDS", 1.0)
    pidfile = tmp_path / "pid"
    plugin = ExecPlugin("/bin/sh", ("-c", f"echo $$ > {pidfile}; exec sleep 600"))
    with pytest.raises(ConfigError, match=r"no answer within 1 s \(stopped\)"):
        await plugin.run()
    assert not Path(f"/proc/{int(pidfile.read_text())}").exists()  # killed and reaped
