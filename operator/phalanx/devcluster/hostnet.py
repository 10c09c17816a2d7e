"""The host's network for the dev cluster's real node: a pod bridge whose packets never leave the machine.

Without kube-proxy a ClusterIP is just an address the host would send out of its default route. So, before
any Service is used:
- the service range (and kwok's made-up pod and node addresses) get `unreachable` routes: the host refuses
  them at once instead of sending them away;
- a pod's `kubernetes` Service address (10.0.0.1:443) is DNATed to the apiserver on 127.0.0.1, which
  `route_localnet` allows on the pod bridge only (the apiserver keeps listening on loopback alone);
- nothing from the pod bridge is forwarded (pods have no egress), and a last rule drops any packet from
  the pod range that would go out of another interface (loopback, the host talking to itself, is not out).
Every change is recorded in a `HostNet` so `undo` removes exactly it (rules by their spec, routes, the bridge,
the sysctls' previous values).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BRIDGE = "cni-phalanx0"
POD_SUBNET = "10.85.0.0/24"
GATEWAY = "10.85.0.1"
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
# kwok's simulated pods and nodes carry these addresses (cluster.py); nothing may ever be sent to them.
KWOK_RANGES = ("10.244.0.0/16", "10.255.0.0/24")
COMMENT = "phalanx dev-cluster real node"
FILTER_CHAIN = "PHALANX-REAL-NODE"
# mangle: a pod-range packet about to go out by an interface other than the bridge and loopback is dropped
# here, counted by protocol (the tests print the counts when one ever has to act).
LEAVE_CHAIN = "PHALANX-REAL-NODE-LEAVE"
# A kernel booted with ipv6.disable=1 has neither the sysctls nor ip6tables' tables.
IPV6 = Path("/proc/sys/net/ipv6").is_dir()


class HostNetError(RuntimeError):
    pass


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise HostNetError(f"{' '.join(args)}: {(result.stderr or result.stdout).strip()}")
    return result


def host_ip() -> str:
    """The address of the interface the default route uses (the node's InternalIP)."""
    routes = json.loads(run("ip", "-j", "-4", "route", "show", "default").stdout or "[]")
    if not routes:
        raise HostNetError("no IPv4 default route: cannot tell the host's primary address")
    links = json.loads(run("ip", "-j", "-4", "addr", "show", "dev", routes[0]["dev"]).stdout)
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("family") == "inet":
                return str(info["local"])
    raise HostNetError(f"no IPv4 address on {routes[0]['dev']}")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctl(name: str) -> str:
    return _sysctl_path(name).read_text().strip()


def write_sysctl(name: str, value: str) -> None:
    try:
        _sysctl_path(name).write_text(value)
    except OSError as e:
        raise HostNetError(f"sysctl {name}={value}: {e}") from e


@dataclass
class HostNet:
    """What `setup` changed on the host (kept in the cluster's state.json for `undo`)."""

    api_port: int
    bridge_created: bool = False
    routes: list[str] = field(default_factory=list)
    # (table, chain, rule) with `-A`/`-D` left out; ip6tables rules start with "6:" in the table.
    rules: list[list[str]] = field(default_factory=list)
    chains: list[list[str]] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostNet:
        return cls(**data)


def in_use() -> str | None:
    """Why this host's bridge or ranges cannot be taken, if so: another real node holds them, or the host
    itself uses an address inside them (an `unreachable` route would cut it off, e.g. its DNS server)."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        return f"the bridge {BRIDGE} exists (another `dev-cluster up --real-node` runs on this host?)"
    ours = [ipaddress.ip_network(c) for c in (POD_SUBNET, SERVICE_CIDR, *KWOK_RANGES)]
    used: list[tuple[str, str]] = []
    for route in json.loads(run("ip", "-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        if route.get("dst") not in (None, "default"):
            used.append((route["dst"], f"route {route['dst']} ({route.get('type', 'unicast')})"))
        if route.get("gateway"):
            used.append((route["gateway"], f"gateway {route['gateway']}"))
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            if line.startswith("nameserver") and len(line.split()) > 1:
                used.append((line.split()[1], f"nameserver {line.split()[1]}"))
    for text, what in used:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        for cidr in ours:
            if network.version == cidr.version and network.overlaps(cidr):
                return f"the host uses {what}, inside {cidr} which the real node takes"
    return None


def _iptables(table: str) -> tuple[str, str]:
    if table.startswith("6:"):
        return "ip6tables", table[2:]
    return "iptables", table


def setup(net: HostNet, save: Any = None) -> None:
    """Make the changes, recording each in `net` as soon as it is made (`save()` after each, so a failed
    or killed `up` is still undone by `down`)."""

    def saved() -> None:
        if save is not None:
            save()

    reason = in_use()
    if reason:
        raise HostNetError(reason)
    # The pod bridge, made here rather than by the CNI plugin, so its rules and sysctls exist before any pod.
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    net.bridge_created = True
    saved()
    run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    write_sysctl(f"net.ipv4.conf.{BRIDGE}.route_localnet", "1")  # the DNAT to the apiserver on 127.0.0.1
    if IPV6:  # pods are IPv4 only: no link-local chatter either
        write_sysctl(f"net.ipv6.conf.{BRIDGE}.disable_ipv6", "1")
    run("ip", "link", "set", BRIDGE, "up")

    for cidr in (SERVICE_CIDR, *KWOK_RANGES):
        run("ip", "route", "add", "unreachable", cidr)
        net.routes.append(cidr)
        saved()

    # ip_forward is left as found (the CNI config has isGateway false, so the plugin does not turn it on;
    # `undo` puts back the value seen here if something changed it); the rules below hold whatever its value.
    net.sysctls["net.ipv4.ip_forward"] = read_sysctl("net.ipv4.ip_forward")
    saved()

    def chain(table: str, name: str) -> None:
        tool, t = _iptables(table)
        run(tool, "-w", "-t", t, "-N", name)
        net.chains.append([table, name])
        saved()

    def rule(table: str, chain_name: str, *spec: str, insert: bool = False) -> None:
        tool, t = _iptables(table)
        full = [*spec, "-m", "comment", "--comment", COMMENT]
        run(tool, "-w", "-t", t, "-I" if insert else "-A", chain_name, *full)
        net.rules.append([table, chain_name, *full])
        saved()

    for table in ("filter", "6:filter") if IPV6 else ("filter",):
        chain(table, FILTER_CHAIN)
        rule(table, FILTER_CHAIN, "-j", "DROP")
        rule(table, "FORWARD", "-i", BRIDGE, "-j", FILTER_CHAIN, insert=True)
        rule(table, "FORWARD", "-o", BRIDGE, "-j", FILTER_CHAIN, insert=True)
    # Last line of defence, counted by the tests: a pod-range packet about to leave by another interface.
    # Loopback is not leaving: the host talking to its own bridge address (10.85.0.1) goes out of `lo` with
    # that source, and dropping it cut the host off from itself (and counted as if a packet had left).
    chain("mangle", LEAVE_CHAIN)
    rule("mangle", LEAVE_CHAIN, "-o", BRIDGE, "-j", "RETURN")
    rule("mangle", LEAVE_CHAIN, "-o", "lo", "-j", "RETURN")
    for protocol in ("tcp", "udp", "icmp"):
        rule("mangle", LEAVE_CHAIN, "-p", protocol, "-j", "DROP")
    rule("mangle", LEAVE_CHAIN, "-j", "DROP")
    rule("mangle", "POSTROUTING", "-s", POD_SUBNET, "-j", LEAVE_CHAIN, insert=True)
    rule(
        "nat",
        "PREROUTING",
        "-i",
        BRIDGE,
        "-d",
        f"{KUBERNETES_SERVICE_IP}/32",
        "-p",
        "tcp",
        "--dport",
        "443",
        "-j",
        "DNAT",
        "--to-destination",
        f"127.0.0.1:{net.api_port}",
        insert=True,
    )


def undo(net: HostNet) -> list[str]:
    """Remove what `setup` recorded; tolerant of anything already gone. Returns the errors (not raised:
    the rest of the teardown still runs)."""
    errors: list[str] = []
    for table, chain_name, *spec in reversed(net.rules):
        tool, t = _iptables(table)
        result = run(tool, "-w", "-t", t, "-D", chain_name, *spec, check=False)
        if (
            result.returncode != 0
            and "does not exist" not in result.stderr
            and "No chain" not in result.stderr
        ):
            errors.append(result.stderr.strip())
    net.rules = []
    for table, name in reversed(net.chains):
        tool, t = _iptables(table)
        result = run(tool, "-w", "-t", t, "-X", name, check=False)
        if result.returncode != 0 and "No chain" not in result.stderr and "not exist" not in result.stderr:
            errors.append(result.stderr.strip())
    net.chains = []
    for cidr in reversed(net.routes):
        run("ip", "route", "del", "unreachable", cidr, check=False)
    net.routes = []
    if net.bridge_created and Path(f"/sys/class/net/{BRIDGE}").exists():
        result = run("ip", "link", "del", BRIDGE, check=False)
        if result.returncode != 0:
            errors.append(result.stderr.strip())
    net.bridge_created = False
    for name, value in net.sysctls.items():
        try:
            if read_sysctl(name) != value:
                write_sysctl(name, value)
        except (OSError, HostNetError) as e:
            errors.append(f"{name}: {e}")
    net.sysctls = {}
    return errors


def counters(table: str, chain_name: str) -> list[tuple[int, str]]:
    """(packets, rule text) of a chain's rules that carry our comment (for the isolation tests)."""
    tool, t = _iptables(table)
    out = run(tool, "-w", "-t", t, "-L", chain_name, "-v", "-n", "-x").stdout
    rows = []
    for line in out.splitlines()[2:]:
        parts = line.split()
        if parts and parts[0].isdigit() and COMMENT in line:
            rows.append((int(parts[0]), line))
    return rows
