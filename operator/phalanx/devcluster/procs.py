"""Processes and ports of a dev cluster: free loopback ports, liveness by pid, ownership by command line,
signals to a process group, polling until a state is reached. Shared by cluster.py, realnode.py and
addons.py (none of them imports another's helpers).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.state import ClusterError


def free_port() -> int:
    return free_ports(1)[0]


PORT_FLOOR = 20000  # free ports are picked from here to the kernel's ephemeral range


def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports, all held open until every port is picked (so none repeats), and below
    the kernel's ephemeral range: a port the kernel hands out is also any outgoing connection's source port,
    which can take it between this pick and its server's bind (a restarted operator once found its webhook
    port so taken). Where that range starts too low to leave room, the kernel picks."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = rng.randrange(PORT_FLOOR, low) if low - PORT_FLOOR >= 1000 else 0
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def owned(pid: int, directory: Path, settle: float = 2.0) -> bool:
    """Guard against pid reuse: our processes carry the cluster folder in their command line.

    Right after `subprocess.Popen` returns, the child may still be inside execve: the kernel releases a
    vfork parent before the new argv is in place, and /proc/PID/cmdline reads empty meanwhile (seen in
    about a quarter of spawns under load, which made `up --real-node` take a starting containerd for
    dead). An empty command line of a live process is waited on for up to `settle` seconds; only a
    non-empty one that lacks the folder means "not ours" (kernel threads stay empty and are not ours)."""
    deadline = time.monotonic() + settle
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if raw or time.monotonic() >= deadline or not pid_alive(pid):
            break
        time.sleep(0.005)
    return str(directory) in raw.replace(b"\0", b" ").decode(errors="replace")


def running(pid: int, directory: Path) -> bool:
    """Alive and still ours (not a reused pid)."""
    return pid_alive(pid) and owned(pid, directory)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group a component leads (it was started in a session of its own)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def stop_process(pid: int, directory: Path, grace: float = 20.0) -> None:
    """Stop the component `pid` leads, if it is still ours: SIGTERM to its group, SIGKILL after `grace`
    seconds, and return once it has exited."""
    if not running(pid, directory):
        return
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        signal_group(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)


def wait(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    interval: float = 0.1,
    alive: Callable[[], None] | None = None,
) -> None:
    """Poll `check` until true; `alive` raises when a process we wait on has died (fail at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            if check():
                return
        except (OSError, ApiError):
            pass
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")


def http_ok(url: str, expect: bytes, insecure: bool = False) -> bool:
    """GET `url` answers 200 with `expect` in its body. `insecure`: local health endpoints with a
    self-signed certificate only."""
    context = None
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        body: bytes = response.read()
        return response.status == 200 and expect in body
