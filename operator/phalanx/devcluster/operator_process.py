"""Run the real operator (`phalanx run`) as a separate process against a dev cluster (tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from phalanx.devcluster.cluster import ClusterState, free_port


class OperatorProcess:
    def __init__(self, cluster: ClusterState, log_dir: Path) -> None:
        self.cluster = cluster
        self.log_path = log_dir / "phalanx-operator.log"
        self.port = free_port()
        self.log_offset = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        self.port = free_port()  # a fresh port, so a stale webhook configuration cannot look ready
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "phalanx.cli",
                    "run",
                    "--kubeconfig",
                    str(self.cluster.kubeconfig),
                    "--webhook-port",
                    str(self.port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        """Ready = the webhook configuration points at this process and the loop has started."""
        api = self.cluster.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}; log:\n{self.tail()}")
            try:
                config = api.get(
                    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/phalanx.dev"
                )
                urls = [w["clientConfig"].get("url", "") for w in config.get("webhooks", [])]
                if (
                    any(f":{self.port}/" in u for u in urls)
                    and "scheduling loop started" in self.current_log()
                ):
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"operator not ready after {timeout:.0f} s; log:\n{self.tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def current_log(self) -> str:
        """What this run of the operator logged so far."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
