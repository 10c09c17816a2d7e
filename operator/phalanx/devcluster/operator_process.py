"""Run the real operator (`phalanx run`) as a separate process against a dev cluster (tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.procs import free_port, free_ports
from phalanx.devcluster.state import ClusterState


class OperatorProcess:
    def __init__(
        self,
        cluster: ClusterState,
        log_dir: Path,
        args: Sequence[str] = (),
        *,
        name: str = "phalanx-operator",
        webhook_port: int | None = None,
        env: Mapping[str, str] | None = None,
        serves_webhooks: bool = True,
    ) -> None:
        """`name` names the log file; `webhook_port` pins the webhook's port (replicas that share one,
        leader election); `env` adds environment variables (e.g. PHALANX_<FLAG>); without
        `serves_webhooks` (`--role controller`) readiness does not wait for a webhook configuration."""
        self.serves_webhooks = serves_webhooks
        self.cluster = cluster
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.args = list(args)  # more `phalanx run` flags
        self.fixed_port = webhook_port
        self.env = dict(env or {})
        self.port = webhook_port or free_port()
        self.metrics_port = free_port()
        self.log_offset = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        """Base URL of /metrics, /healthz and /readyz."""
        return f"http://127.0.0.1:{self.metrics_port}"

    def start(self, timeout: float = 60.0) -> None:
        # Fresh ports, so a stale webhook configuration or a previous process cannot look ready.
        self.port, self.metrics_port = free_ports(2)
        if self.fixed_port:
            self.port = self.fixed_port
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
                    "--metrics-port",
                    str(self.metrics_port),
                    *self.args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()  # a process that never got ready is not left behind
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Ready = the webhook configuration points at this process and /readyz says yes (CRDs installed,
        cache primed, webhook listening; the loop starts with the primed cache)."""
        api = self.cluster.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}; log:\n{self.tail()}")
            try:
                if self.serves_webhooks:
                    config = api.get(
                        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/phalanx.dev"
                    )
                    urls = [w["clientConfig"].get("url", "") for w in config.get("webhooks", [])]
                    pointed = any(f":{self.port}/" in u for u in urls)
                else:
                    pointed = True  # --role controller serves none: readiness alone says it is up
                if pointed and self.http_status("/readyz") == 200:
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

    def _get(self, path: str) -> tuple[int, str] | None:
        """Status and body of a GET on the metrics server (a failing probe's too), or None if it does not
        answer."""
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=2) as response:
                return int(response.status), response.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError:
            return None

    def http_status(self, path: str) -> int | None:
        """The status code of a GET on the metrics server, or None if it does not answer."""
        answer = self._get(path)
        return None if answer is None else answer[0]

    def http_get(self, path: str) -> str | None:
        """The body of a GET on the metrics server (a probe's detail also when it fails), or None if it
        does not answer."""
        answer = self._get(path)
        return None if answer is None else answer[1]

    def scrape(self) -> str:
        """The /metrics text."""
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5) as response:
            text: str = response.read().decode()
            return text

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


def lease_holder(cluster: ClusterState, namespace: str, name: str) -> str | None:
    """Who holds the leader Lease (`holderIdentity`): None if nobody does or it does not exist."""
    try:
        lease = cluster.client().get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    except ApiError as e:
        if e.status == 404:
            return None
        raise
    holder: str | None = (lease.get("spec") or {}).get("holderIdentity") or None
    return holder
