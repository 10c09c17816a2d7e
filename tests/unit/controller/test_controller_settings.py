"""`phalanx run` settings: defaults, environment variables, flag precedence, clear errors."""

from __future__ import annotations

import argparse
import os
import re
import socket
from pathlib import Path

import pytest

from phalanx.cli import build_parser
from phalanx.controller.process.settings import OPTIONS, Settings


def settings(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    parser = build_parser()
    args = parser.parse_args(["run", *(argv or [])])
    return Settings.from_args_and_env(args, env=env or {}, parser=args.run_parser)


def test_defaults() -> None:
    s = settings()
    assert s.kubeconfig is None
    assert (s.webhook_host, s.webhook_port, s.webhook_cert_dir) == ("127.0.0.1", 9443, None)
    assert (s.metrics_host, s.metrics_port, s.metrics_enabled) == ("127.0.0.1", 8080, True)
    assert (s.resync_seconds, s.debounce_seconds) == (10.0, 0.05)
    assert s.leader_election is False
    assert (s.lease_name, s.lease_namespace) == ("phalanx-leader", "default")
    assert s.identity == f"{socket.gethostname()}_{os.getpid()}"
    assert (s.lease_duration_seconds, s.renew_deadline_seconds, s.retry_period_seconds) == (15, 10, 2)
    assert (s.log_format, s.verbose, s.namespaces, s.install_crds) == ("plain", False, (), True)
    assert s.stale_after_seconds == 60.0
    assert s.watches("anything")


def test_the_dataclass_defaults_match_the_parsed_defaults() -> None:
    assert settings() == Settings(lease_namespace="default", identity=settings().identity)


def test_every_field_has_a_flag_and_a_variable() -> None:
    help_text = build_parser().parse_args(["run"]).run_parser.format_help()
    for option in OPTIONS:
        assert option.flag in help_text
        assert option.env in help_text
    assert "A flag on the command line wins over its variable, a variable over the default" in " ".join(
        help_text.split()
    )


OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def _documented_flags() -> dict[str, str]:
    """flag -> environment variable, from the table under "Flags and environment variables"."""
    text = OPERATIONS.read_text()
    section = text.split("## Flags and environment variables", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        flags_cell, env_cell = line.split(" | ")[:2]
        flags = re.findall(r"`(--(?:\[no-\])?[a-z0-9-]+)", flags_cell)
        assert len(flags) == 1, line
        (env,) = re.findall(r"`(PHALANX_[A-Z0-9_]+)`", env_cell)
        rows[flags[0].replace("[no-]", "")] = env
    return rows


def test_docs_operations_lists_every_flag_of_phalanx_run_with_its_variable() -> None:
    """README promises docs/operations.md covers every flag and variable: its table is the real parser's."""
    run = build_parser().parse_args(["run"]).run_parser
    flags = {
        flag
        for action in run._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help" and not flag.startswith("--no-")
    }
    assert flags == {option.flag for option in OPTIONS}
    assert _documented_flags() == {option.flag: option.env for option in OPTIONS}


def test_environment_variables() -> None:
    s = settings(
        env={
            "PHALANX_KUBECONFIG": "/etc/kube/config",
            "PHALANX_WEBHOOK_PORT": "10443",
            "PHALANX_METRICS_PORT": "0",
            "PHALANX_RESYNC_SECONDS": "30",
            "PHALANX_LEADER_ELECTION": "true",
            "PHALANX_IDENTITY": "replica-a",
            "PHALANX_LOG_FORMAT": "json",
            "PHALANX_VERBOSE": "1",
            "PHALANX_NAMESPACES": "ml, research",
            "PHALANX_INSTALL_CRDS": "false",
            "POD_NAMESPACE": "phalanx-system",
        }
    )
    assert s.kubeconfig == "/etc/kube/config"
    assert s.webhook_port == 10443
    assert s.metrics_port == 0 and not s.metrics_enabled
    assert s.resync_seconds == 30.0 and s.stale_after_seconds == 90.0
    assert s.leader_election is True
    assert s.identity == "replica-a"
    assert s.log_format == "json" and s.verbose is True
    assert s.namespaces == ("ml", "research")
    assert s.watches("ml") and not s.watches("default")
    assert s.install_crds is False
    assert s.lease_namespace == "phalanx-system", "the pod's namespace is the Lease's default"


def test_a_flag_wins_over_its_variable_which_wins_over_the_default() -> None:
    env = {
        "PHALANX_WEBHOOK_PORT": "10443",
        "PHALANX_LEASE_NAMESPACE": "from-env",
        "POD_NAMESPACE": "pod-ns",
        "PHALANX_INSTALL_CRDS": "false",
        "PHALANX_NAMESPACES": "a,b",
    }
    s = settings(
        ["--webhook-port", "11443", "--install-crds", "--namespaces", "c", "--namespaces", "d,c"], env
    )
    assert s.webhook_port == 11443
    assert s.install_crds is True
    assert s.namespaces == ("c", "d")
    assert s.lease_namespace == "from-env"
    assert settings(["--lease-namespace", "from-flag"], env).lease_namespace == "from-flag"
    assert settings([], {"POD_NAMESPACE": "pod-ns"}).lease_namespace == "pod-ns"
    assert settings(["--no-install-crds", "-v"]).install_crds is False
    assert settings(["-v"]).verbose is True


def test_a_bad_flag_on_the_command_line_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, expected in (
        (["--webhook-port", "abc"], "argument --webhook-port: not a port number: 'abc'"),
        (["--webhook-port", "0"], "argument --webhook-port: port 0 is not in 1..65535"),
        (["--metrics-port", "70000"], "argument --metrics-port: port 70000 is not in 0..65535"),
        (["--resync-seconds", "0"], "argument --resync-seconds: '0' seconds: must be a finite number > 0"),
        (["--debounce-seconds", "-1"], "must be a finite number >= 0"),
        (["--log-format", "yaml"], "argument --log-format: 'yaml': choose from plain, json"),
        (["--namespaces", "ML"], "argument --namespaces: 'ML': must consist of lower case"),
        (["--lease-name", "a_b"], "argument --lease-name: 'a_b'"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            settings(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "usage: phalanx run" in err
        assert expected in err, err


def test_a_bad_environment_variable_is_an_argparse_error_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for env, expected in (
        ({"PHALANX_WEBHOOK_PORT": "x"}, "environment variable PHALANX_WEBHOOK_PORT (for --webhook-port)"),
        ({"PHALANX_LEADER_ELECTION": "maybe"}, "'maybe' is not a boolean"),
        ({"PHALANX_RESYNC_SECONDS": "nan"}, "PHALANX_RESYNC_SECONDS"),
        ({"PHALANX_LOG_FORMAT": "xml"}, "'xml': choose from plain, json"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            settings([], env)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "phalanx run: error:" in err and expected in err, err


def test_a_flag_hides_a_bad_variable() -> None:
    assert settings(["--webhook-port", "9000"], {"PHALANX_WEBHOOK_PORT": "x"}).webhook_port == 9000


def test_inconsistent_lease_timings_are_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        settings(["--lease-duration-seconds", "5", "--renew-deadline-seconds", "10"])
    assert "--lease-duration-seconds (5) must be greater than --renew-deadline-seconds (10)" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        settings(["--renew-deadline-seconds", "2", "--retry-period-seconds", "2"])
    assert "--renew-deadline-seconds (2) must be greater than --retry-period-seconds (2)" in (
        capsys.readouterr().err
    )


def test_without_a_parser_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="PHALANX_METRICS_PORT"):
        Settings.from_args_and_env(argparse.Namespace(), env={"PHALANX_METRICS_PORT": "-1"})


def test_paths_are_made_absolute() -> None:
    s = settings(["--kubeconfig", "kc", "--webhook-cert-dir", "certs"])
    assert s.kubeconfig == os.path.abspath("kc")
    assert s.webhook_cert_dir == os.path.abspath("certs")


def test_to_args_round_trips() -> None:
    original = settings(
        ["--namespaces", "a,b", "--leader-election", "--metrics-port", "0", "--identity", "me"],
        {"POD_NAMESPACE": "x"},
    )
    assert settings(original.to_args()) == original
