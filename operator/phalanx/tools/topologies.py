"""Topologies for the CLI tools: ready ones for the label sets platforms already write, the ones in a
cluster, and whether a cluster's node labels nest the way a Topology says.

Users should not hand-write a Topology for labels their platform already puts on nodes (`phalanx topology
presets`), and a Topology whose labels do not form a tree silently makes odd domains, so `phalanx topology
check` reads the nodes and says where they do not: a value of a level found under more than one value of
the level above (levels in the wrong order, or values that are unique only within their parent), and
nodes that carry some of the levels but not all (they are in no domain of the Topology). Pure but for
`read_topologies`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from phalanx.api import conditions as api_conditions
from phalanx.api.group import API_VERSION, TOPOLOGIES
from phalanx.api.topology import ACTIVE, Topology, TopologyLevel, TopologySpec
from phalanx.bodies import mapping
from phalanx.tools.kube import NotFoundError, Reader

ZONE_KEY = "topology.kubernetes.io/zone"
"""The one topology label nearly every cloud node carries: `where`'s column when no Topology exists."""
TOPOLOGIES_PATH = f"/apis/{API_VERSION}/{TOPOLOGIES}"


@dataclass(frozen=True)
class Preset:
    """A ready Topology for labels a platform (or a tool) writes on its nodes."""

    name: str
    levels: tuple[str, ...]
    """Node labels, coarse to fine."""
    source: str
    """Who writes the labels, in one line."""

    def topology(self) -> dict[str, Any]:
        """The Topology object, ready to apply (validated by the API model, as the CRD would)."""
        spec = TopologySpec(levels=[TopologyLevel(node_label=label) for label in self.levels])
        body = Topology(metadata={"name": self.name}, spec=spec).to_api()
        body.pop("status", None)
        return body


PRESETS: tuple[Preset, ...] = (
    Preset(
        "topograph",
        ("fabric.topograph.run/tier-2", "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0"),
        "NVIDIA Topograph (v1, engine k8s): switch tiers, tier-0 the leaf switch closest to the node",
    ),
    Preset(
        "topograph-accelerator",
        ("accelerator.topograph.run/domain", "accelerator.topograph.run/sub-domain"),
        "NVIDIA Topograph (v1, engine k8s): the accelerator (NVLink) domain and the sub-domain within it",
    ),
    Preset(
        "gke",
        (
            "cloud.google.com/gce-topology-block",
            "cloud.google.com/gce-topology-subblock",
            "cloud.google.com/gce-topology-host",
        ),
        "GKE: the compact-placement block, sub-block and host of accelerator VMs",
    ),
    Preset(
        "aws",
        (
            "topology.k8s.aws/network-node-layer-1",
            "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3",
        ),
        "Amazon EKS: EC2 instance topology, layer-1 the farthest network node, layer-3 the closest",
    ),
    Preset(
        "oci",
        (
            "oci.oraclecloud.com/rdma.hpc_island_id",
            "oci.oraclecloud.com/rdma.network_block_id",
            "oci.oraclecloud.com/rdma.local_block_id",
        ),
        "Oracle OKE RDMA clusters (the article's labels): HPC island, network block, local block",
    ),
    Preset(
        "zone",
        ("topology.kubernetes.io/region", ZONE_KEY),
        "any cloud: the well-known region and zone labels",
    ),
)


def preset(name: str) -> Preset:
    for candidate in PRESETS:
        if candidate.name == name:
            return candidate
    known = ", ".join(p.name for p in PRESETS)
    raise ValueError(f"no preset {name!r}; the presets are {known}")


def presets_yaml(presets: Iterable[Preset]) -> str:
    """The presets as a YAML stream, each with a comment saying whose labels it lists."""
    docs = []
    for p in presets:
        text = yaml.safe_dump(p.topology(), sort_keys=False)
        docs.append(f"# {p.source}\n{text}")
    return "---\n".join(docs)


# ---------------------------------------------------------------------- the cluster's Topologies


@dataclass(frozen=True)
class ClusterTopology:
    name: str
    levels: tuple[str, ...]
    active: bool
    """False when its Active condition says another Topology owns one of its labels (Phalanx ignores it)."""


def cluster_topologies(bodies: Iterable[Mapping[str, Any]]) -> list[ClusterTopology]:
    """The Topologies read from the API, by name; ones that do not parse are skipped."""
    found = []
    for body in bodies:
        try:
            spec = TopologySpec.model_validate(body.get("spec") or {})
        except ValueError:
            continue
        conditions = mapping(body.get("status")).get("conditions") or []
        active = not any(
            mapping(c).get("type") == ACTIVE and mapping(c).get("status") == api_conditions.FALSE
            for c in conditions
        )
        found.append(ClusterTopology(str(mapping(body.get("metadata")).get("name", "")), spec.labels, active))
    return sorted(found, key=lambda t: t.name)


async def read_topologies(reader: Reader) -> list[ClusterTopology]:
    """The cluster's Topologies (none when Phalanx's CRDs are not installed)."""
    try:
        return cluster_topologies(await reader.list(TOPOLOGIES_PATH))
    except NotFoundError:
        return []


def levels_of_key(topologies: Sequence[ClusterTopology], key: str | None) -> tuple[str, ...]:
    """The levels of the active Topology that lists `key` (the engine then places by paths), else ()."""
    if key is None:
        return ()
    return next((t.levels for t in topologies if t.active and key in t.levels), ())


def default_columns(topologies: Sequence[ClusterTopology]) -> tuple[str, ...]:
    """`where`'s columns: every level of the active Topologies (by name, coarse to fine), the hostname
    left out (NODE shows it); with none, topology.kubernetes.io/zone."""
    columns: list[str] = []
    for t in topologies:
        if t.active:
            columns.extend(label for label in t.levels if label not in columns and label != HOSTNAME)
    return tuple(columns) or (ZONE_KEY,)


HOSTNAME = "kubernetes.io/hostname"


# ---------------------------------------------------------------------- do the labels nest?


@dataclass(frozen=True)
class Misfit:
    """A value of one level found under several values of the level above."""

    level: str
    value: str
    parent_level: str
    parents: tuple[tuple[str, tuple[str, ...]], ...]
    """(parent value, its nodes that carry this value), most nodes first."""


@dataclass(frozen=True)
class Partial:
    """A node that carries some of the levels, not all."""

    node: str
    has: tuple[str, ...]
    lacks: tuple[str, ...]


@dataclass(frozen=True)
class LevelCount:
    label: str
    values: int
    nodes: int


@dataclass(frozen=True)
class NestingReport:
    name: str
    levels: tuple[str, ...]
    nodes: int
    complete: int
    """Nodes that carry every level (the ones in a domain of each level)."""
    counts: tuple[LevelCount, ...]
    misfits: tuple[Misfit, ...]
    partial: tuple[Partial, ...]
    unlabelled: tuple[str, ...] = field(default=())
    """Nodes with none of the levels: outside this Topology, which is not an error."""
    paths: bool = False
    """Values unique only within their parent are accepted (misfits are then notes, not failures)."""

    @property
    def nests(self) -> bool:
        return self.complete > 0 and not self.partial and (self.paths or not self.misfits)


def check_nesting(
    name: str, levels: Sequence[str], nodes: Iterable[Mapping[str, Any]], *, paths: bool = False
) -> NestingReport:
    """Whether the nodes' labels form the tree `levels` describes (coarse to fine)."""
    labelled: list[tuple[str, dict[str, str]]] = []
    for node in nodes:
        meta = mapping(node.get("metadata"))
        labels = {str(k): str(v) for k, v in mapping(meta.get("labels")).items()}
        labelled.append((str(meta.get("name", "")), labels))
    labelled.sort()
    partial, unlabelled = [], []
    complete = 0
    for node_name, labels in labelled:
        has = tuple(level for level in levels if level in labels)
        if len(has) == len(levels):
            complete += 1
        elif has:
            partial.append(Partial(node_name, has, tuple(level for level in levels if level not in labels)))
        else:
            unlabelled.append(node_name)
    counts = tuple(
        LevelCount(
            level,
            len({labels[level] for _, labels in labelled if level in labels}),
            sum(1 for _, labels in labelled if level in labels),
        )
        for level in levels
    )
    misfits = []
    for upper, lower in itertools.pairwise(levels):
        under: dict[str, dict[str, list[str]]] = {}
        for node_name, labels in labelled:
            if upper in labels and lower in labels:
                under.setdefault(labels[lower], {}).setdefault(labels[upper], []).append(node_name)
        for value, parents in sorted(under.items()):
            if len(parents) > 1:
                ranked = sorted(parents.items(), key=lambda item: (-len(item[1]), item[0]))
                misfits.append(Misfit(lower, value, upper, tuple((p, tuple(n)) for p, n in ranked)))
    return NestingReport(
        name,
        tuple(levels),
        len(labelled),
        complete,
        counts,
        tuple(misfits),
        tuple(partial),
        tuple(unlabelled),
        paths,
    )


MAX_NAMES = 5


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def render_report(report: NestingReport) -> str:
    lines = [
        f"Topology {report.name} ({_plural(len(report.levels), 'level')}), {_plural(report.nodes, 'node')}:"
    ]
    width = max(len(c.label) for c in report.counts)
    for c in report.counts:
        lines.append(
            f"  {c.label.ljust(width)}  {_plural(c.values, 'value'):>10}  {_plural(c.nodes, 'node')}"
        )
    if report.complete == 0:
        lines.append("No node carries all of its labels: no domain of it exists in this cluster.")
    elif report.nests:
        verdict = "The labels nest: every value of a level is under one value of the level above"
        if report.misfits:
            verdict = "The labels nest as paths (a value may repeat under different parents)"
        lines.append(f"{verdict}; {_plural(report.complete, 'node')} carry every level.")
    else:
        lines.append("The labels do not nest:")
    for m in report.misfits:
        parents = "; ".join(f"{value} ({_plural(len(n), 'node')}: {_names(n)})" for value, n in m.parents)
        lines.append(f"  {m.level}={m.value} is under {len(m.parents)} values of {m.parent_level}: {parents}")
    if report.misfits and not report.paths:
        lines.append(
            "  (levels in the wrong order, or values unique only within their parent: Phalanx places by the "
            "path of values, so the latter works; --paths accepts it)"
        )
    for p in report.partial:
        lines.append(f"  {p.node} has {', '.join(p.has)} but not {', '.join(p.lacks)}: it is in no domain")
    if report.unlabelled:
        lines.append(
            f"{_plural(len(report.unlabelled), 'node')} carry none of its labels (outside this Topology): "
            f"{_names(report.unlabelled)}"
        )
    return "\n".join(lines)


def report_json(report: NestingReport) -> dict[str, Any]:
    """The documented `-o json` shape of one checked Topology (docs/cli.md)."""
    return {
        "name": report.name,
        "levels": list(report.levels),
        "nests": report.nests,
        "nodes": report.nodes,
        "completeNodes": report.complete,
        "counts": [{"label": c.label, "values": c.values, "nodes": c.nodes} for c in report.counts],
        "misfits": [
            {
                "level": m.level,
                "value": m.value,
                "parentLevel": m.parent_level,
                "parents": [{"value": v, "nodes": list(n)} for v, n in m.parents],
            }
            for m in report.misfits
        ],
        "partialNodes": [
            {"node": p.node, "has": list(p.has), "lacks": list(p.lacks)} for p in report.partial
        ],
        "unlabelledNodes": list(report.unlabelled),
    }
