"""`phalanx where`: each pod with its phase, node and topology domains (the article's where.sh), any cluster.

The table is the dev cluster's (`phalanx dev-cluster where`, same `format_table`). Its topology columns are
the cluster's own: the levels of its Topologies (scheduling.phalanx.dev), else topology.kubernetes.io/zone,
which nearly every cloud node carries; `--levels` chooses others. `-o json` gives the same rows as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from phalanx.bodies import mapping
from phalanx.devcluster.tools import format_table
from phalanx.devcluster.topology import ISLAND_KEY, LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY

ARTICLE_LEVELS = (NETWORK_BLOCK_KEY, LOCAL_BLOCK_KEY)
SCHEMA_VERSION = 1
# The article's column names for its RDMA keys; other keys are named by their last word.
KNOWN_HEADERS = {NETWORK_BLOCK_KEY: "NB", LOCAL_BLOCK_KEY: "LB", ISLAND_KEY: "ISLAND"}


def level_header(key: str) -> str:
    """The column name of a label key: NB and LB for the article's keys, else e.g. ZONE for …/zone."""
    if key in KNOWN_HEADERS:
        return KNOWN_HEADERS[key]
    return key.rsplit("/", 1)[-1].upper() or key.upper()


def parse_levels(values: Iterable[str] | None) -> tuple[str, ...] | None:
    """Label keys from repeated and/or comma-separated --levels values (None: not given, the cluster's)."""
    if values is None:
        return None
    keys = [k.strip() for v in values for k in v.split(",")]
    return tuple(k for k in keys if k)


def where_rows(
    pods: Iterable[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
    levels: Sequence[str] = ARTICLE_LEVELS,
    *,
    namespaces: bool = False,
) -> list[tuple[str, ...]]:
    """One row per pod, sorted (by namespace and) name: [NAMESPACE,] POD, PHASE, NODE, one cell per level."""
    rows = []
    for pod in pods:
        meta, spec, status = (
            mapping(pod.get("metadata")),
            mapping(pod.get("spec")),
            mapping(pod.get("status")),
        )
        node = str(spec.get("nodeName") or "")
        labels = node_labels.get(node, {})
        row = (
            str(meta.get("name", "")),
            str(status.get("phase") or "-"),
            node or "-",
            *(labels.get(key) or "-" for key in levels),
        )
        rows.append((str(meta.get("namespace", "")), *row) if namespaces else row)
    return sorted(rows)


def where_table(
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    levels: Sequence[str] = ARTICLE_LEVELS,
    *,
    namespaces: bool = False,
) -> str:
    header = ("POD", "PHASE", "NODE", *(level_header(k) for k in levels))
    if namespaces:
        header = ("NAMESPACE", *header)
    return format_table(header, where_rows(pods, _node_labels(nodes), levels, namespaces=namespaces))


def _node_labels(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        str(mapping(n.get("metadata")).get("name", "")): dict(mapping(n.get("metadata")).get("labels") or {})
        for n in nodes
    }


def where_json(
    pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], levels: Sequence[str]
) -> dict[str, Any]:
    """The documented `-o json` shape (docs/cli.md): one item per pod, its node's value of every level
    (None when the pod has no node or the node lacks the label)."""
    labels = _node_labels(nodes)
    items = []
    for ns, pod, phase, node, *_ in where_rows(pods, labels, levels, namespaces=True):
        items.append(
            {
                "namespace": ns,
                "pod": pod,
                "phase": None if phase == "-" else phase,
                "node": None if node == "-" else node,
                "domains": {key: labels.get(node, {}).get(key) for key in levels},
            }
        )
    return {"kind": "PodPlacementList", "version": SCHEMA_VERSION, "levels": list(levels), "items": items}
