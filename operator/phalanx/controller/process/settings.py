"""Every knob of `phalanx run`, in one frozen object.

Each setting is a flag and an environment variable named ``PHALANX_<FLAG>`` (``--webhook-port`` is
``PHALANX_WEBHOOK_PORT``). A flag on the command line wins over its variable, a variable over the
default. A bad value, from either source, is an argparse error that names both.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.controller.process.eventloop import EVENT_LOOPS

ENV_PREFIX = "PHALANX_"
LOG_FORMATS = ("plain", "json")
WEBHOOK_CONFIG_MODES = ("managed", "external")
DEFAULT_WEBHOOK_CONFIG_NAME = "phalanx.dev"
ROLE_ALL, ROLE_CONTROLLER, ROLE_WEBHOOKS = "all", "controller", "webhooks"
ROLES = (ROLE_ALL, ROLE_CONTROLLER, ROLE_WEBHOOKS)


def default_lease_namespace(env: Mapping[str, str] | None = None) -> str:
    """The pod's own namespace (downward API `POD_NAMESPACE`), else `default`."""
    return (env if env is not None else os.environ).get("POD_NAMESPACE") or "default"


def default_identity() -> str:
    """`<hostname>_<pid>`, as client-go's leader election names a candidate."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = None
    webhook_host: str = "127.0.0.1"
    webhook_port: int = 9443
    webhook_cert_dir: str | None = None
    webhook_config: str = "managed"
    webhook_config_name: str = DEFAULT_WEBHOOK_CONFIG_NAME
    webhook_service: str | None = None
    webhook_secret: str | None = None
    webhook_namespace: str = field(default_factory=default_lease_namespace)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8080
    resync_seconds: float = 10.0
    debounce_seconds: float = 0.05
    node_failure_grace: float = 30.0
    starvation_age: float = 60.0
    leader_election: bool = False
    lease_name: str = "phalanx-leader"
    lease_namespace: str = field(default_factory=default_lease_namespace)
    identity: str = field(default_factory=default_identity)
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    api_timeout_seconds: float = 5.0  # kubeclient/client.py REQUEST_TIMEOUT_SECONDS
    api_list_timeout_seconds: float = 60.0  # apply/kube.py LIST_TIMEOUT_SECONDS
    log_format: str = "plain"
    verbose: bool = False
    namespaces: tuple[str, ...] = ()
    install_crds: bool = True
    scheduler_names: tuple[str, ...] = ()
    bind_timeout: float = 120.0
    informers: bool = True
    plan_thread: bool = False
    verify_incremental: bool = False
    event_loop: str = "auto"
    role: str = "all"

    @property
    def serves_webhooks(self) -> bool:
        """This process serves the admission webhooks (--role all or webhooks)."""
        return self.role != ROLE_CONTROLLER

    @property
    def runs_loop(self) -> bool:
        """This process runs (or competes to run) the scheduling loop (--role all or controller)."""
        return self.role != ROLE_WEBHOOKS

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_port != 0

    @property
    def stale_after_seconds(self) -> float:
        """How long the scheduling loop may go without a pass before /healthz fails."""
        return max(3 * self.resync_seconds, 60.0)

    @property
    def kopf_manages_webhooks(self) -> bool:
        """Kopf writes the webhook configurations (a `url` to this process); else they are installed
        with Phalanx (the chart) and point at its Service."""
        return self.webhook_config == "managed"

    def webhook_hosts(self) -> list[str]:
        """The names the webhook's certificate must cover: the Service's DNS names when there is one
        (the apiserver calls `<service>.<namespace>.svc`), else the listening address and localhost."""
        if self.webhook_service:
            svc, ns = self.webhook_service, self.webhook_namespace
            return [svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
        return [self.webhook_host, "localhost"]

    def watches(self, namespace: str) -> bool:
        """Whether managed Jobs in `namespace` are this operator's (all of them when none are listed)."""
        return not self.namespaces or namespace in self.namespaces

    def problems(self) -> list[str]:
        """What is inconsistent between settings (each value alone was checked when parsed)."""
        found = []
        if self.lease_duration_seconds <= self.renew_deadline_seconds:
            found.append(
                f"--lease-duration-seconds ({self.lease_duration_seconds:g}) must be greater than "
                f"--renew-deadline-seconds ({self.renew_deadline_seconds:g})"
            )
        if self.renew_deadline_seconds <= self.retry_period_seconds:
            found.append(
                f"--renew-deadline-seconds ({self.renew_deadline_seconds:g}) must be greater than "
                f"--retry-period-seconds ({self.retry_period_seconds:g})"
            )
        if self.webhook_secret and not self.webhook_service:
            found.append(
                "--webhook-secret needs --webhook-service: the certificate Phalanx makes is for "
                "<service>.<namespace>.svc"
            )
        if (
            self.serves_webhooks
            and not self.kopf_manages_webhooks
            and not (self.webhook_secret or self.webhook_cert_dir)
        ):
            found.append(
                "--webhook-config external needs --webhook-secret (Phalanx makes the certificate and puts "
                "its CA into the configurations) or --webhook-cert-dir (e.g. a mounted cert-manager Secret): "
                "a temporary CA would be unknown to the configurations"
            )
        return found

    # ------------------------------------------------------------------ flags and environment
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Add one flag per setting; every default is None, so `from_args_and_env` sees what was given."""
        defaults = Settings(
            lease_namespace="$POD_NAMESPACE or default",
            webhook_namespace="$POD_NAMESPACE or default",
            identity="<hostname>_<pid>",
        )
        for option in OPTIONS:
            default = option.show_default or _show(getattr(defaults, option.name))
            text = f"{option.help} (env {option.env}; default: {default})"
            flags = [option.flag, *option.aliases]
            if option.kind == "bool":
                parser.add_argument(
                    *flags, dest=option.name, action=argparse.BooleanOptionalAction, default=None, help=text
                )
            elif option.kind == "list":
                parser.add_argument(
                    *flags,
                    dest=option.name,
                    action="append",
                    type=_list_of(option.parse),
                    default=None,
                    metavar=option.metavar,
                    help=text + "; repeat the flag or separate with commas",
                )
            else:
                parser.add_argument(
                    *flags,
                    dest=option.name,
                    type=option.parse,
                    default=None,
                    metavar=option.metavar,
                    help=text,
                )

    @classmethod
    def from_args_and_env(
        cls,
        args: argparse.Namespace,
        env: Mapping[str, str] | None = None,
        parser: argparse.ArgumentParser | None = None,
    ) -> Settings:
        """Flag, else `PHALANX_<FLAG>`, else the default. Bad values end in `parser.error` (exit 2)
        when a parser is given, else raise ValueError."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        try:
            for option in OPTIONS:
                given = getattr(args, option.name, None)
                if given is not None:
                    values[option.name] = _flatten(given) if option.kind == "list" else given
                elif option.env in env:
                    values[option.name] = option.from_env(env[option.env])
            values.setdefault("lease_namespace", default_lease_namespace(env))
            values.setdefault("webhook_namespace", default_lease_namespace(env))
            settings = cls(**values)
            problems = settings.problems()
            if problems:
                raise ValueError("; ".join(problems))
        except ValueError as e:
            if parser is not None:
                parser.error(str(e))
            raise
        return settings

    def to_args(self) -> list[str]:
        """The flags that give these settings (to start another process the same way)."""
        argv = []
        for option in OPTIONS:
            value = getattr(self, option.name)
            if option.kind == "bool":
                argv.append(option.flag if value else "--no-" + option.flag.removeprefix("--"))
            elif option.kind == "list":
                argv.extend(x for item in value for x in (option.flag, item))
            elif value is not None:
                argv.extend([option.flag, str(value)])
        return argv


# ---------------------------------------------------------------------- value parsers
def _show(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(value) or "all"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _port(allow_zero: bool) -> Callable[[str], int]:
    low = 0 if allow_zero else 1

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
        if not low <= value <= 65535:
            raise argparse.ArgumentTypeError(f"port {value} is not in {low}..65535")
        return value

    return parse


def _seconds(minimum: float, inclusive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
            raise argparse.ArgumentTypeError(f"{text!r} seconds: must be a finite number {bound}")
        return value

    return parse


def _text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _path(text: str) -> str:
    return os.path.abspath(os.path.expanduser(_text(text)))


def _dns_label(text: str) -> str:
    from phalanx.api.formats import dns_label_problems  # here: pydantic would slow every `phalanx` command

    problems = dns_label_problems(text)
    if problems:
        raise argparse.ArgumentTypeError(f"{text!r}: {'; '.join(problems)}")
    return text


def _dns_subdomain(text: str) -> str:
    from phalanx.api.formats import dns_subdomain_problems

    problems = dns_subdomain_problems(text)
    if problems:
        raise argparse.ArgumentTypeError(f"{text!r}: {'; '.join(problems)}")
    return text


def _webhook_config(text: str) -> str:
    if text not in WEBHOOK_CONFIG_MODES:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(WEBHOOK_CONFIG_MODES)}")
    return text


def _identity(text: str) -> str:
    text = _text(text)
    if len(text) > 128:  # an Event's reportingInstance and a Lease's holderIdentity allow 128
        raise argparse.ArgumentTypeError(f"{text[:20]!r}…: at most 128 characters")
    return text


def _one_of(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(choices)}")
        return text

    return parse


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false, 1/0, yes/no, on/off)")


def _list_of(parse: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse_list(text: str) -> list[Any]:
        return [parse(item.strip()) for item in text.split(",") if item.strip()]

    return parse_list


def _flatten(lists: Sequence[Sequence[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for sub in lists for item in sub))


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    parse: Callable[[str], Any] = _text
    kind: str = "value"  # value | bool | list
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    show_default: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def from_env(self, text: str) -> Any:
        try:
            if self.kind == "bool":
                return _bool(text)
            if self.kind == "list":
                return _flatten([_list_of(self.parse)(text)])
            return self.parse(text)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"environment variable {self.env} (for {self.flag}): {e}") from None


OPTIONS: tuple[Option, ...] = (
    Option(
        "kubeconfig", "kubeconfig file; unset: in-cluster config, then $KUBECONFIG", _path, metavar="FILE"
    ),
    Option(
        "webhook_host",
        "address the webhook listens on and the apiserver reaches it at",
        _text,
        metavar="ADDR",
    ),
    Option("webhook_port", "port of the admission webhook (HTTPS)", _port(False), metavar="PORT"),
    Option(
        "webhook_cert_dir",
        "folder with ca.crt, tls.crt and tls.key for the webhook, created there if it is empty, so that "
        "replicas can share one; unset: a new CA and certificate in a temporary folder at each start",
        _path,
        metavar="DIR",
    ),
    Option(
        "webhook_config",
        "who writes the Mutating/ValidatingWebhookConfigurations: managed = Kopf, pointing them at this "
        "process's URL (development); external = they are installed with Phalanx (the Helm chart) and "
        "point at its Service",
        _webhook_config,
        metavar="{managed,external}",
    ),
    Option(
        "webhook_config_name",
        "name of the two webhook configurations (Kopf's when managed; with --webhook-secret, the ones "
        "whose caBundle Phalanx keeps up to date)",
        _dns_subdomain,
        metavar="NAME",
    ),
    Option(
        "webhook_service",
        "the Service in front of the webhook (in --webhook-namespace): the certificate Phalanx makes "
        "covers <service>.<namespace>.svc",
        _dns_label,
        metavar="NAME",
    ),
    Option(
        "webhook_secret",
        "a Secret (in --webhook-namespace) with the webhook's CA and certificate, made by Phalanx if absent, "
        "renewed before expiry and written into --webhook-cert-dir; with --webhook-config external its CA "
        "is put into the configurations' caBundle. Unset: the files of --webhook-cert-dir are used",
        _dns_subdomain,
        metavar="NAME",
    ),
    Option(
        "webhook_namespace",
        "namespace of --webhook-service and --webhook-secret",
        _dns_label,
        metavar="NS",
        show_default="$POD_NAMESPACE, else default",
    ),
    Option("metrics_host", "address of the /metrics, /healthz and /readyz endpoints", _text, metavar="ADDR"),
    Option(
        "metrics_port", "port of /metrics, /healthz and /readyz; 0 disables them", _port(True), metavar="PORT"
    ),
    Option(
        "resync_seconds", "a scheduling pass runs at least this often", _seconds(0, False), metavar="SECONDS"
    ),
    Option(
        "debounce_seconds",
        "wait this long after a change so a burst of events makes one pass (not after a quiet spell at "
        "least this long: the first change then is planned at once)",
        _seconds(0, True),
        metavar="SECONDS",
    ),
    Option(
        "node_failure_grace",
        "a running gang left below its min-count with no room for the rest in its domain (a node failed) "
        "is requeued whole after this long; 0 = at once",
        _seconds(0, True),
        metavar="SECONDS",
    ),
    Option(
        "starvation_age",
        "a gang that has waited this long while smaller gangs of the same or lower priority took the room "
        "it needs gets that room held for it as it frees (bounded waiting; the gangs after it backfill "
        "elsewhere); 0 = as soon as it waits",
        _seconds(0, True),
        metavar="SECONDS",
    ),
    Option("leader_election", "run the scheduling loop only while holding a Lease", kind="bool"),
    Option("lease_name", "name of the leader Lease", _dns_subdomain, metavar="NAME"),
    Option(
        "lease_namespace",
        "namespace of the leader Lease",
        _dns_label,
        metavar="NS",
        show_default="$POD_NAMESPACE, else default",
    ),
    Option(
        "identity",
        "this replica's name in the Lease and in Events",
        _identity,
        metavar="ID",
        show_default="<hostname>_<pid>",
    ),
    Option(
        "lease_duration_seconds",
        "how long a Lease lasts without renewal before another replica may take it",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "renew_deadline_seconds",
        "the leader gives up leading if it could not renew for this long",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "retry_period_seconds",
        "how often candidates try to take or renew the Lease",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "api_timeout_seconds",
        "deadline of one attempt of each of the controller's API requests (a request that got no answer "
        "is tried once more, then its unit backs off; Kopf's own requests keep Kopf's timeouts)",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "api_list_timeout_seconds",
        "deadline of one attempt of a LIST of a whole kind (priming the cache, relisting after a watch gap)",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "log_format", "plain text, or one JSON object per line", _one_of(LOG_FORMATS), metavar="{plain,json}"
    ),
    Option(
        "verbose", "debug logging, including every watch event Kopf handles", kind="bool", aliases=("-v",)
    ),
    Option(
        "namespaces",
        "namespaces whose managed Jobs this operator admits (nodes and pods are always watched "
        "cluster-wide: every pod takes capacity)",
        _dns_label,
        kind="list",
        metavar="NS[,NS…]",
    ),
    Option("install_crds", "server-side apply the CRDs at start", kind="bool"),
    Option(
        "scheduler_names",
        "schedulers besides default-scheduler (kube-scheduler) that bind the pods Phalanx releases pinned "
        "to their nodes; a gang whose pods name any other schedulerName is refused at creation",
        _dns_subdomain,
        kind="list",
        metavar="NAME[,NAME…]",
        show_default="none: default-scheduler only",
    ),
    Option(
        "bind_timeout",
        "released pods that no scheduler binds within this long are rolled back: their gang is requeued "
        "whole, as when kube-scheduler refuses them",
        _seconds(0, False),
        metavar="SECONDS",
    ),
    Option(
        "informers",
        "watch nodes and pods with Phalanx's own list-then-watch instead of Kopf's (watch/informer.py: no "
        "per-event copies or per-object memories); off: Kopf watches every kind",
        kind="bool",
    ),
    Option(
        "plan_thread",
        "plan each pass on a thread of its own, from a copy of what it reads, so the event loop goes on "
        "answering admission reviews and applying watch events meanwhile (loop/scheduler.py); off (the "
        "default until interleaved runs show it helps more than the loop's lag): plan in the loop",
        kind="bool",
    ),
    Option(
        "verify_incremental",
        "plan every pass whole as well and log an error where the incremental plan (units of unchanged "
        "owners and settled units not planned again) differs, then use the whole plan: a check for tests, "
        "at the cost of a whole plan per pass",
        kind="bool",
    ),
    Option(
        "event_loop",
        "the process's event loop: uvloop (a shorter tail of webhook answers under a burst, less memory), "
        "asyncio (Python's own), or auto: uvloop where it is installed, else asyncio",
        _one_of(EVENT_LOOPS),
        metavar="{auto,uvloop,asyncio}",
    ),
    Option(
        "role",
        "what this process does: all (the scheduling loop and the admission webhooks), controller (the "
        "loop and the watches it needs, no webhook server), or webhooks (the webhook server and a cache of "
        "only what the reviews read: no pods, no loop), so the webhooks can run with replicas and resources "
        "of their own beside the leader's loop (docs/design.md, What runs where)",
        _one_of(ROLES),
        metavar="{all,controller,webhooks}",
    ),
)

assert [o.name for o in OPTIONS] == [f.name for f in dataclasses.fields(Settings)], "one option per field"

PRECEDENCE = (
    "Every flag has an environment variable PHALANX_<FLAG> (--webhook-port: PHALANX_WEBHOOK_PORT; "
    "booleans take true/false, lists take commas). A flag on the command line wins over its "
    "variable, a variable over the default."
)
