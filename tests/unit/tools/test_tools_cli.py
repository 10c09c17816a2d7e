"""The `phalanx` command line as users meet it: --version, help on every argument, `| head` without a
traceback, the `kubectl phalanx` plugin, and `phalanx topology presets` (no cluster needed)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from phalanx.cli import SIGPIPE_EXIT, build_parser, main
from phalanx.devcluster.binaries import bin_dir
from phalanx.tools.topologies import PRESETS

ROOT = Path(__file__).resolve().parents[3]


def phalanx(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.cli", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"phalanx {version('phalanx')}\n"
    assert version("phalanx") == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def parsers(
    parser: argparse.ArgumentParser, path: str = "phalanx"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            for name, sub in action.choices.items():
                assert name in helped, f"`{path} {name}` has no help line in `{path} --help`"
                found += parsers(sub, f"{path} {name}")
    return found


def test_every_argument_of_every_sub_command_has_help() -> None:
    missing = []
    walked = parsers(build_parser())
    for path, parser in walked:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "arguments without help: " + ", ".join(missing)
    assert {p for p, _ in walked} >= {
        "phalanx explain",
        "phalanx where",
        "phalanx topology presets",
        "phalanx topology check",
        "phalanx dev-cluster fill",
        "phalanx run",
    }


def closed_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """Run phalanx with a stdout pipe whose reader is already gone (what `| head` leaves once head exits)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "phalanx.cli", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [("topology", "presets"), ("topology", "presets", "-o", "json")])
def test_a_reader_that_went_away_ends_it_quietly(args: tuple[str, ...]) -> None:
    result = closed_reader(*args)
    assert result.stderr == ""
    assert result.returncode == SIGPIPE_EXIT, "as a shell reports a program ended by SIGPIPE"


@pytest.mark.parametrize("args", [("--help",), ("explain", "--help"), ("--version",)])
def test_help_to_a_reader_that_went_away_is_quiet_too(args: tuple[str, ...]) -> None:
    assert closed_reader(*args).stderr == ""


def test_piped_into_head_it_prints_no_traceback() -> None:
    result = subprocess.run(
        f"{sys.executable} -m phalanx.cli topology presets | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.startswith("# NVIDIA Topograph") and result.stderr == ""


def test_topology_presets_prints_appliable_objects() -> None:
    every = phalanx("topology", "presets")
    assert every.returncode == 0, every.stderr
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(every.stdout)] == [p.name for p in PRESETS]
    one = phalanx("topology", "presets", "aws", "-o", "json")
    assert json.loads(one.stdout)["spec"]["levels"][0] == {
        "nodeLabel": "topology.k8s.aws/network-node-layer-1"
    }
    listed = json.loads(phalanx("topology", "presets", "-o", "json").stdout)
    assert listed["kind"] == "List" and len(listed["items"]) == len(PRESETS)
    unknown = phalanx("topology", "presets", "nope")
    assert unknown.returncode == 2 and unknown.stderr.startswith("phalanx topology presets: no preset 'nope'")


def test_topology_check_takes_one_source() -> None:
    result = phalanx("topology", "check", "a", "--preset", "oci")
    assert result.returncode == 2
    assert result.stderr == "phalanx topology check: give one of NAME, --preset or --levels\n"
    assert phalanx("topology", "check", "--preset", "nope").returncode == 2


KUBECTL = bin_dir() / "kubectl"


@pytest.mark.skipif(
    not os.access(KUBECTL, os.X_OK), reason="no kubectl: hack/build.sh builds it into .cache/"
)
def test_kubectl_runs_the_entry_point_as_its_phalanx_plugin(tmp_path: Path) -> None:
    """pyproject's `kubectl-phalanx` console script, as pip writes it, on PATH: `kubectl phalanx ...`."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["kubectl-phalanx"].partition(":")
    plugin = tmp_path / "kubectl-phalanx"
    plugin.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    plugin.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "KUBECONFIG": str(tmp_path / "none")}

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(KUBECTL), *args], capture_output=True, text=True, env=env, timeout=60)

    listed = kubectl("plugin", "list")
    assert str(plugin) in listed.stdout, listed.stdout + listed.stderr
    assert kubectl("phalanx", "--version").stdout == f"phalanx {version('phalanx')}\n"
    helped = kubectl("phalanx", "explain", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: kubectl phalanx explain")
    presets = kubectl("phalanx", "topology", "presets", "oci")
    assert yaml.safe_load(presets.stdout)["metadata"]["name"] == "oci"
