"""Where the Kubernetes binaries live, and building them from the Go module proxy when missing.

The default version (K8S_VERSION) comes with etcd, kwok, kubectl, kubelet and pause (hack/build.sh); another
control-plane version (`up --kubernetes-version`) only adds its kube-apiserver, kube-controller-manager and
kube-scheduler, built from its pinned module hack/k8s-<version>/ into .cache/k8s/<version>/bin.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

K8S_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.3"
KWOK_VERSION = "v0.8.0"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_VERSION = re.compile(r"^v1\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$")


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


def minor(version: str) -> int:
    """1.<minor> of a Kubernetes version such as v1.30.14 or v1.38.0-beta.0."""
    match = _VERSION.match(version)
    if not match:
        raise MissingBinariesError(f"--kubernetes-version must look like v1.30.14, not {version!r}")
    return int(match.group(1))


def available_versions() -> list[str]:
    """The versions this checkout can build: the default one, and one per pinned module hack/k8s-<version>."""
    root = repo_root()
    found = {K8S_VERSION}
    if root:
        found |= {
            p.name.removeprefix("k8s-") for p in (root / "hack").glob("k8s-v*") if (p / "go.mod").is_file()
        }
    return sorted(found, key=lambda v: (minor(v), v))


def control_plane_dir(version: str) -> Path:
    if version == K8S_VERSION:
        return bin_dir()
    override = os.environ.get("PHALANX_CONTROL_PLANE_DIR")  # a folder holding <version>/bin
    if override:
        return Path(override) / version / "bin"
    root = repo_root()
    return (root if root else Path.home()) / ".cache" / "k8s" / version / "bin"


def ensure_control_plane(version: str, build: bool = True) -> Path:
    """The folder with that version's kube-apiserver, -controller-manager and -scheduler, built when
    missing (hack/build.sh --kubernetes-version; minutes when cold)."""
    minor(version)
    if version == K8S_VERSION:
        return ensure_binaries(build)
    directory = control_plane_dir(version)
    absent = [b for b in CONTROL_PLANE if not os.access(directory / b, os.X_OK)]
    if not absent:
        return directory
    root = repo_root()
    if root is None or not build:
        raise MissingBinariesError(
            f"missing {', '.join(absent)} {version} in {directory}; build them with "
            f"hack/build.sh --kubernetes-version {version} from a Phalanx checkout"
        )
    if not (root / "hack" / f"k8s-{version}" / "go.mod").is_file():
        raise MissingBinariesError(
            f"no pinned module for Kubernetes {version} (hack/k8s-{version}/go.mod); this checkout has "
            f"{', '.join(available_versions())}. Make one with hack/k8s-module.sh {version}"
        )
    print(
        f"building {', '.join(absent)} {version} into {directory} (hack/build.sh)",
        file=sys.stderr,
        flush=True,
    )
    subprocess.run(
        ["bash", str(root / "hack" / "build.sh"), "--kubernetes-version", version, str(directory)], check=True
    )
    absent = [b for b in CONTROL_PLANE if not os.access(directory / b, os.X_OK)]
    if absent:
        raise MissingBinariesError(f"hack/build.sh finished but {', '.join(absent)} are still missing")
    return directory
