"""The article's helper scripts as functions: keep nodes busy (`fill`) and show where pods run (`where`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.topology import (
    HOSTNAME_KEY,
    LOCAL_BLOCK_KEY,
    NETWORK_BLOCK_KEY,
    SIMULATED_LABEL,
    SIMULATED_VALUE,
)

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def filler_pod(node: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"filler-{node}", "labels": {"app": "filler"}},
        "spec": {
            "nodeSelector": {HOSTNAME_KEY: node},
            "containers": [
                {
                    "name": "filler",
                    "image": PAUSE_IMAGE,
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def fill(client: RestClient, namespace: str, nodes: Iterable[str]) -> list[str]:
    """Keep each node busy with one pod that takes all 8 GPUs (fill.sh)."""
    names = []
    for node in nodes:
        pod = filler_pod(node)
        try:
            client.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        except ApiError as e:
            if e.status != 409:
                raise
        names.append(pod["metadata"]["name"])
    return names


def where_rows(
    client: RestClient, namespace: str, selector: str | None = None
) -> list[tuple[str, str, str, str, str]]:
    """(POD, PHASE, NODE, NB, LB) for each pod, sorted by name (where.sh)."""
    query = f"?labelSelector={selector}" if selector else ""
    pods = client.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
    labels = {
        n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in client.get("/api/v1/nodes")["items"]
    }
    rows = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        node = pod["spec"].get("nodeName") or ""
        node_labels = labels.get(node, {})
        rows.append(
            (
                pod["metadata"]["name"],
                pod.get("status", {}).get("phase", "-"),
                node or "-",
                node_labels.get(NETWORK_BLOCK_KEY, "-"),
                node_labels.get(LOCAL_BLOCK_KEY, "-"),
            )
        )
    return rows


def format_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    all_rows = [header, *rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows)


def where(client: RestClient, namespace: str, selector: str | None = None) -> str:
    return format_table(("POD", "PHASE", "NODE", "NB", "LB"), where_rows(client, namespace, selector))


FAILURE_TAINT = {"key": "sim.phalanx.dev/failed", "value": "true", "effect": "NoExecute"}


def fail_node(client: RestClient, node: str, how: str = "heartbeat") -> None:
    """Inject a node failure: stop its heartbeats (kwok stops managing it), or taint it NoExecute."""
    if how == "heartbeat":
        patch: dict[str, Any] = {"metadata": {"labels": {SIMULATED_LABEL: None}}}
    elif how == "taint":
        taints = client.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
        patch = {"spec": {"taints": [*taints, FAILURE_TAINT]}}
    else:
        raise ValueError(f"how must be heartbeat or taint, not {how!r}")
    client.request("PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")


def heal_node(client: RestClient, node: str) -> None:
    """Undo fail_node: heartbeats resume and the failure taint goes (node-lifecycle lifts its own taints)."""
    taints = client.get(f"/api/v1/nodes/{node}")["spec"].get("taints") or []
    kept = [t for t in taints if t.get("key") != FAILURE_TAINT["key"]]
    patch = {"metadata": {"labels": {SIMULATED_LABEL: SIMULATED_VALUE}}, "spec": {"taints": kept or None}}
    client.request("PATCH", f"/api/v1/nodes/{node}", patch, "application/merge-patch+json")
