"""The CLI tools load any kubeconfig as kubectl does: contexts, namespaces, certificates, tokens."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from phalanx import certs
from phalanx.cli import main
from phalanx.devcluster.cluster import free_port
from phalanx.tools.kube import KubeError, connect


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def pki() -> tuple[certs.KeyPair, certs.KeyPair]:
    ca = certs.make_ca("test-ca")
    return ca, certs.issue(ca, "admin", [], organization="system:masters", client=True)


def write_kubeconfig(path: Path, pki: tuple[certs.KeyPair, certs.KeyPair], server: str) -> Path:
    ca, leaf = pki
    (path.parent / "ca.crt").write_bytes(ca.cert_pem)
    (path.parent / "token").write_text("from-a-file\n")
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "embedded",
                "cluster": {"server": server, "certificate-authority-data": b64(ca.cert_pem)},
            },
            {"name": "files", "cluster": {"server": server, "certificate-authority": "ca.crt"}},
        ],
        "users": [
            {
                "name": "cert",
                "user": {"client-certificate-data": b64(leaf.cert_pem), "client-key-data": b64(leaf.key_pem)},
            },
            {"name": "token", "user": {"token": "abc"}},
            {"name": "token-file", "user": {"tokenFile": "token"}},
        ],
        "contexts": [
            {"name": "certs", "context": {"cluster": "embedded", "user": "cert", "namespace": "ml"}},
            {"name": "token", "context": {"cluster": "files", "user": "token"}},
            {"name": "token-file", "context": {"cluster": "files", "user": "token-file", "namespace": "x"}},
        ],
        "current-context": "certs",
    }
    path.write_text(json.dumps(config))
    return path


async def test_the_reader_takes_the_contexts_credentials_and_namespace(
    tmp_path: Path, pki: tuple[certs.KeyPair, certs.KeyPair]
) -> None:
    """How each credential reaches a server: tests/unit/kubeclient (a real local HTTPS server)."""
    path = write_kubeconfig(tmp_path / "config", pki, "https://127.0.0.1:6443")
    async with connect(str(path)) as reader:
        credentials = reader.api.credentials
        assert (reader.namespace, reader.server) == ("ml", "https://127.0.0.1:6443")
        assert (
            credentials.cert_data == pki[1].cert_pem.decode()
            and credentials.key_data == pki[1].key_pem.decode()
        )
        assert credentials.ca_data == pki[0].cert_pem.decode()
    async with connect(str(path), context="token") as reader:
        assert reader.namespace == "default"
        assert (reader.api.credentials.token, reader.api.credentials.ca_file) == (
            "abc",
            str(tmp_path / "ca.crt"),
        )
    async with connect(str(path), context="token-file") as reader:
        assert reader.namespace == "x"
        assert reader.api.credentials.static_token() == "from-a-file"


async def test_kubeconfig_from_the_environment(
    tmp_path: Path, pki: tuple[certs.KeyPair, certs.KeyPair], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_kubeconfig(tmp_path / "config", pki, "https://127.0.0.1:6443")
    monkeypatch.setenv("KUBECONFIG", str(path))
    async with connect(context="token") as reader:
        assert reader.api.credentials.token == "abc"


async def test_unreadable_and_unknown_configs_are_one_line_errors(
    tmp_path: Path, pki: tuple[certs.KeyPair, certs.KeyPair]
) -> None:
    with pytest.raises(KubeError, match=r"cannot read kubeconfig .*missing"):
        async with connect(str(tmp_path / "missing")):
            pass
    path = write_kubeconfig(tmp_path / "config", pki, "https://127.0.0.1:6443")
    with pytest.raises(KubeError, match=r"no context 'nope'"):
        async with connect(str(path), context="nope"):
            pass


async def test_a_cluster_that_does_not_answer_is_named(
    tmp_path: Path, pki: tuple[certs.KeyPair, certs.KeyPair]
) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    path = write_kubeconfig(tmp_path / "config", pki, server)
    async with connect(str(path)) as reader:
        with pytest.raises(KubeError, match=f"cannot reach the cluster at {server}"):
            await reader.get("/api/v1/nodes")


def test_the_commands_say_why_they_cannot_read(
    tmp_path: Path, pki: tuple[certs.KeyPair, certs.KeyPair], capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    path = str(write_kubeconfig(tmp_path / "config", pki, server))
    assert main(["where", "--kubeconfig", path]) == 1
    assert capsys.readouterr().err.startswith(f"phalanx where: cannot reach the cluster at {server}")
    assert main(["explain", "job/x", "--kubeconfig", path]) == 1
    assert capsys.readouterr().err.startswith(f"phalanx explain: cannot reach the cluster at {server}")
    assert main(["explain", "deployment/x", "--kubeconfig", path]) == 2
    assert (
        "say job/NAME, jobset/NAME, trainjob/NAME, leaderworkerset/NAME, podgroup/NAME or "
        "compositepodgroup/NAME" in capsys.readouterr().err
    )
    assert main(["topology", "check", "--kubeconfig", path]) == 2
    assert capsys.readouterr().err.startswith(f"phalanx topology check: cannot reach the cluster at {server}")
