"""Helpers of the chart tests: the real helm binary, rendering, picking objects out of the result."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.devcluster.binaries import bin_dir

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "phalanx"
NAMESPACE = "phalanx-system"


def helm_binary() -> str | None:
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    built = bin_dir() / "helm"
    if os.access(built, os.X_OK):
        return str(built)
    return shutil.which("helm")


HELM = helm_binary()
needs_helm = pytest.mark.skipif(HELM is None, reason="no helm binary: hack/build.sh builds it into .cache/")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def render(*sets: str) -> list[dict[str, Any]]:
    argv = ["template", "phalanx", str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        argv += ["--set", value]
    result = helm(*argv)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def container(docs: list[dict[str, Any]], deployment: str | None = None) -> dict[str, Any]:
    """The phalanx container of the Deployment (of the one named `deployment` when there are two)."""
    spec = one(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    (phalanx,) = spec["containers"]
    result: dict[str, Any] = phalanx
    return result


def settings_of(docs: list[dict[str, Any]], deployment: str | None = None) -> Any:
    """The Settings `phalanx run` makes of the Deployment's args, with the pod's environment."""
    from phalanx.cli import build_parser
    from phalanx.controller.process.settings import Settings

    c = container(docs, deployment)
    assert c["command"] == ["phalanx"] and c["args"][0] == "run"
    parser = build_parser()
    args = parser.parse_args(c["args"])
    env = {"POD_NAMESPACE": NAMESPACE, "PHALANX_IDENTITY": "phalanx-0"}
    return Settings.from_args_and_env(args, env=env)  # raises ValueError on any inconsistency


OPERATOR = "phalanx"
"""The release's full name: the operator's own ClusterRole and Role (the users' roles have suffixes)."""


def rules_of(docs: list[dict[str, Any]], kind: str, name: str | None = OPERATOR) -> list[dict[str, Any]]:
    """The rules of the `kind` objects named `name` (None: of all of them)."""
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return [rule for d in found for rule in d["rules"]]


def verbs(rules: list[dict[str, Any]], group: str, resource: str) -> dict[str, set[str]]:
    """verb -> resourceNames ('*' when any name) granted on group/resource."""
    granted: dict[str, set[str]] = {}
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            for verb in rule["verbs"]:
                granted.setdefault(verb, set()).update(rule.get("resourceNames") or ["*"])
    return granted
