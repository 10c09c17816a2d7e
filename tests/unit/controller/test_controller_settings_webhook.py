"""`phalanx run`'s webhook settings for in-cluster serving: the defaults keep the dev flow, the chart's
combination is accepted, contradictions are usage errors."""

from __future__ import annotations

import pytest

from phalanx.cli import build_parser
from phalanx.controller.process.settings import Settings


def settings(argv: list[str] | None = None, env: dict[str, str] | None = None) -> Settings:
    parser = build_parser()
    args = parser.parse_args(["run", *(argv or [])])
    return Settings.from_args_and_env(args, env=env or {}, parser=args.run_parser)


def test_the_defaults_keep_kopf_managing_the_url_webhook() -> None:
    s = settings()
    assert s.webhook_config == "managed" and s.kopf_manages_webhooks
    assert s.webhook_config_name == "phalanx.dev"
    assert (s.webhook_service, s.webhook_secret, s.webhook_namespace) == (None, None, "default")
    assert s.webhook_hosts() == ["127.0.0.1", "localhost"]


def test_the_charts_flags() -> None:
    s = settings(
        [
            "--webhook-config=external",
            "--webhook-host=0.0.0.0",
            "--webhook-service=phalanx",
            "--webhook-secret=phalanx-webhook-tls",
            "--webhook-cert-dir=/var/run/phalanx/webhook-tls",
            "--no-install-crds",
        ],
        {"POD_NAMESPACE": "phalanx-system"},
    )
    assert not s.kopf_manages_webhooks
    assert s.webhook_namespace == "phalanx-system", "the pod's namespace, like the Lease's"
    assert s.webhook_hosts() == [
        "phalanx",
        "phalanx.phalanx-system",
        "phalanx.phalanx-system.svc",
        "phalanx.phalanx-system.svc.cluster.local",
    ]
    assert settings(["--webhook-namespace", "ops"], {"POD_NAMESPACE": "x"}).webhook_namespace == "ops"
    env = {"PHALANX_WEBHOOK_CONFIG": "external", "PHALANX_WEBHOOK_CERT_DIR": "/certs"}
    assert settings([], env).webhook_config == "external"
    # The flags round-trip (to start another process the same way).
    assert settings(s.to_args(), {"POD_NAMESPACE": "elsewhere"}) == s


def test_contradictions_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, expected in (
        (["--webhook-config", "both"], "'both': choose from managed, external"),
        (["--webhook-secret", "tls"], "--webhook-secret needs --webhook-service"),
        (["--webhook-config", "external"], "--webhook-config external needs --webhook-secret"),
        (["--webhook-service", "Bad_Name"], "argument --webhook-service: 'Bad_Name'"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            settings(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert expected in err, err
    # A cert-manager Secret mounted as the cert dir needs no --webhook-secret.
    assert settings(["--webhook-config", "external", "--webhook-cert-dir", "/certs"]).webhook_secret is None
