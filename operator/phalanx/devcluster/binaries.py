"""Where the Kubernetes binaries live, and building them from the Go module proxy when missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
KWOK_VERSION = "v0.8.0"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")


class MissingBinariesError(RuntimeError):
    pass


def repo_root() -> Path | None:
    """The Phalanx checkout this package runs from (it holds hack/build.sh), if any."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "hack" / "build.sh").is_file():
            return parent
    return None


def bin_dir() -> Path:
    override = os.environ.get("PHALANX_BIN_DIR")
    if override:
        return Path(override)
    root = repo_root()
    base = root if root else Path.home()
    return base / ".cache" / "k8s" / f"{K8S_VERSION}-etcd{ETCD_VERSION}-kwok{KWOK_VERSION}" / "bin"


def missing(directory: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]


def ensure_binaries(build: bool = True) -> Path:
    """Return the folder with every binary, building the missing ones (minutes when cold)."""
    directory = bin_dir()
    absent = missing(directory)
    if not absent:
        return directory
    root = repo_root()
    if not build or root is None:
        raise MissingBinariesError(
            f"missing {', '.join(absent)} in {directory}; build them with hack/build.sh "
            "from a Phalanx checkout (Go >= 1.26 and the Go module proxy), or set PHALANX_BIN_DIR"
        )
    print(f"building {', '.join(absent)} into {directory} (hack/build.sh)", file=sys.stderr, flush=True)
    subprocess.run(["bash", str(root / "hack" / "build.sh"), str(directory)], check=True)
    absent = missing(directory)
    if absent:
        raise MissingBinariesError(f"hack/build.sh finished but {', '.join(absent)} are still missing")
    return directory
