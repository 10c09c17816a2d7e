"""`phalanx run` refuses a webhook port another instance listens on (unless replicas share certificates)."""

from __future__ import annotations

import socket

from phalanx.controller.main import run_operator, webhook_port_taken
from phalanx.controller.settings import Settings


def test_a_taken_webhook_port_fails_fast_with_a_clear_message(capsys: object) -> None:
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as Kopf's server binds
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert webhook_port_taken("127.0.0.1", port)
        settings = Settings(webhook_port=port)
        assert run_operator(settings) == 1
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert f"127.0.0.1:{port} is already in use" in err and "--webhook-cert-dir" in err
    assert not webhook_port_taken("127.0.0.1", port)
