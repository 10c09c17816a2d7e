"""`phalanx run` refuses a webhook port another instance listens on (unless replicas share certificates)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import kopf
import pytest

from phalanx.controller.process import main
from phalanx.controller.process.main import run_operator, webhook_port_taken
from phalanx.controller.process.settings import Settings


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


def test_connections_left_in_time_wait_by_a_stopped_instance_do_not_count_as_taken() -> None:
    """A stopped instance's accepted connections linger in TIME-WAIT after it closed them (the apiserver's
    webhook calls); a restart must not take them for a second instance (issue 16)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Kopf's server binds
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end goes to TIME-WAIT
        client.recv(1)
        client.close()
    assert time_wait_on(port), "the test needs a connection in TIME-WAIT on the port"
    assert not webhook_port_taken("127.0.0.1", port)


def time_wait_on(port: int) -> bool:
    """Whether /proc/net/tcp shows a socket on 127.0.0.1:<port> in TIME-WAIT (state 06)."""
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return any(row[1] == f"0100007F:{port:04X}" and row[3] == "06" for row in rows)


def test_when_kopf_stops_on_its_own_the_process_is_made_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watcher that failed for good stops Kopf without a signal: whatever threads are left, a hard exit is
    armed so no live-looking husk remains (the kubelet or the supervisor starts a fresh process)."""
    armed: list[str] = []

    async def spawn_tasks(**_: Any) -> list[Any]:
        return []

    async def failing_run_tasks(*_: Any, **__: Any) -> None:
        raise RuntimeError("a watcher failed for good")

    async def returning_run_tasks(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(main.kopf, "spawn_tasks", spawn_tasks)
    monkeypatch.setattr(main, "exit_soon", lambda why, after=0.0: armed.append(why))
    monkeypatch.setattr(main.kopf, "run_tasks", failing_run_tasks)
    with pytest.raises(RuntimeError):
        asyncio.run(main.operate(kopf.OperatorRegistry()))
    assert armed and "a watcher failed for good" in armed[0]

    armed.clear()
    monkeypatch.setattr(main.kopf, "run_tasks", returning_run_tasks)
    assert asyncio.run(main.operate(kopf.OperatorRegistry())) == 1
    assert armed == ["Kopf stopped on its own"]


def test_exit_soon_arms_a_daemon_timer() -> None:
    timer = main.exit_soon("test", after=3600)
    try:
        assert timer.daemon and timer.is_alive()
    finally:
        timer.cancel()
