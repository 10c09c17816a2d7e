"""The dev cluster tells its own live processes from dead or foreign ones (devcluster/procs.py), also in
the instant after `subprocess.Popen` returns, when the child may still be inside execve and its
/proc/PID/cmdline reads empty (that made `up --real-node` take a starting containerd for dead in CI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from phalanx.devcluster.procs import owned, running


def _spawn(marker: Path) -> subprocess.Popen[bytes]:
    # The folder is in the command line as the dev cluster's components carry theirs.
    return subprocess.Popen(
        ["sh", "-c", "sleep 30", str(marker)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_a_process_just_spawned_is_running_and_ours(tmp_path: Path) -> None:
    missed = []
    for i in range(150):
        proc = _spawn(tmp_path / "component")
        try:
            if not running(proc.pid, tmp_path):
                missed.append(i)
        finally:
            proc.kill()
            proc.wait()
    assert missed == [], f"taken for dead or foreign right after Popen: spawns {missed}"


def test_another_folder_and_a_dead_process_are_not_ours(tmp_path: Path) -> None:
    proc = _spawn(tmp_path / "a" / "component")
    try:
        assert running(proc.pid, tmp_path / "a")
        assert not owned(proc.pid, tmp_path / "b")
    finally:
        proc.kill()
        proc.wait()
    assert not running(proc.pid, tmp_path / "a")


def test_free_ports_are_distinct_bindable_and_outside_the_ephemeral_range(tmp_path: Path) -> None:
    """No outgoing connection's source port can take one between its pick and its server's bind."""
    import socket

    from phalanx.devcluster.procs import PORT_FLOOR, _ephemeral_low, free_ports

    low = _ephemeral_low()
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))  # a port the kernel handed out: in its ephemeral range
    try:
        ports = free_ports(50)
    finally:
        held.close()
    assert len(set(ports)) == 50
    if low - PORT_FLOOR >= 1000:
        assert all(PORT_FLOOR <= p < low for p in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))  # still free
    fake = tmp_path / "range"
    fake.write_text("1024\t60999\n")
    assert _ephemeral_low(fake) == 1024
    fake.write_text("garbage")
    assert _ephemeral_low(fake) == 32768
