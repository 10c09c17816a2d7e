"""What a dev cluster run records about itself (state.json): the one thing every devcluster module shares.

cluster.py writes it, and realnode.py, addons.py, operator_process.py and the CLI read it; keeping it here,
below all of them, is what lets those modules import each other in one direction only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from phalanx.devcluster.http import RestClient

STATE_FILE = "state.json"


class ClusterError(RuntimeError):
    pass


@dataclass
class ClusterState:
    dir: str
    mode: str
    topology: str
    # etcd, kwok, kubectl (and kubelet, pause for a real node): always the default version's build.
    bin_dir: str
    api_port: int
    token: str
    pids: dict[str, int] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0
    ready_seconds: float = 0.0
    # `up --real-node`: what realnode.py started and changed on the host (empty without it).
    real_node: dict[str, Any] = field(default_factory=dict)
    # The control plane's version and where its kube-apiserver, -controller-manager and -scheduler are
    # (`up --kubernetes-version`); empty in a state written before these fields existed: the default.
    kubernetes_version: str = ""
    control_plane_bin_dir: str = ""
    # `up --addons`: per addon, what addons.py started (see addons.AddonState); empty without them.
    addons: dict[str, dict[str, Any]] = field(default_factory=dict)
    # kube-controller-manager's --node-monitor-grace-period in seconds (0: its default, 50 s): how long a
    # node may go without renewing its Lease before it is marked unreachable and tainted.
    node_monitor_grace_seconds: int = 0

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def kubeconfig(self) -> Path:
        return self.path / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.path / "pki" / "ca.crt"

    @property
    def kubectl(self) -> Path:
        return Path(self.bin_dir) / "kubectl"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def client(self) -> RestClient:
        return RestClient(self.api_port, self.token, str(self.ca_file))

    def save(self) -> None:
        # Write and rename: a reader (status, a test polling for pids) never sees a half-written file.
        partial = self.path / f".{STATE_FILE}.tmp"
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.replace(self.path / STATE_FILE)

    @classmethod
    def load(cls, directory: Path) -> ClusterState | None:
        path = directory / STATE_FILE
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))
