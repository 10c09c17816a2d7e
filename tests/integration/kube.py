"""Test-side helpers around the real API: namespaces, Jobs, polling, the `where` table."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError, RestClient
from phalanx.devcluster.tools import fill, where

T = TypeVar("T")

GPU_KEY = "nvidia.com/gpu"
NB_KEY = "oci.oraclecloud.com/rdma.network_block_id"
MERGE_PATCH = "application/merge-patch+json"
LB_KEY = "oci.oraclecloud.com/rdma.local_block_id"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.25) -> T:
    """Poll until probe returns something truthy; fail with `what` and the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last value: {last!r}")


def hold(what: str, probe: Callable[[], bool], seconds: float, interval: float = 0.5) -> None:
    """Assert that probe stays true for `seconds` (a thing that must NOT happen, watched for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(interval)


class Namespace:
    def __init__(self, cluster: ClusterState, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.api: RestClient = cluster.client()

    # -- objects
    def create(self, obj: dict[str, Any], path: str | None = None) -> dict[str, Any]:
        api_version = obj["apiVersion"]
        plural = obj["kind"].lower() + "s"
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        result: dict[str, Any] = self.api.request(
            "POST", path or f"{base}/namespaces/{self.name}/{plural}", obj
        )
        return result

    def get(self, path: str) -> Any:
        return self.api.get(path.replace("{ns}", self.name))

    def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        query = f"?labelSelector={selector}" if selector else ""
        items: list[dict[str, Any]] = self.api.get(f"/api/v1/namespaces/{self.name}/pods{query}")["items"]
        return items

    def job_pods(self, job: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(f"job-name={job}") if not p["metadata"].get("deletionTimestamp")]

    def delete_pod(self, name: str) -> None:
        self.api.request("DELETE", f"/api/v1/namespaces/{self.name}/pods/{name}")

    def patch_job(self, name: str, patch: dict[str, Any]) -> None:
        self.api.request(
            "PATCH",
            f"/apis/batch/v1/namespaces/{self.name}/jobs/{name}",
            patch,
            "application/merge-patch+json",
        )

    def events(self, field_selector: str = "") -> list[dict[str, Any]]:
        query = f"?fieldSelector={field_selector}" if field_selector else ""
        items: list[dict[str, Any]] = self.api.get(f"/api/v1/namespaces/{self.name}/events{query}")["items"]
        return items

    def events_until(
        self, what: str, ok: Callable[[list[dict[str, Any]]], bool], timeout: float = 60.0
    ) -> list[dict[str, Any]]:
        """The namespace's events once `ok` holds for them: an event is posted beside the writes it tells
        of (after the releases), so a test that saw the pods bind waits for it rather than reading once."""
        return wait_for(what, lambda: evs if ok(evs := self.events()) else None, timeout=timeout)

    # -- the article's scripts
    def fill(self, *nodes: str) -> None:
        fill(self.api, self.name, nodes)
        wait_for(
            f"fillers on {nodes} running",
            lambda: (
                all(p["status"].get("phase") == "Running" for p in self.pods("app=filler"))
                and len(self.pods("app=filler")) >= len(nodes)
            ),
            timeout=30,
        )

    def unfill(self, node: str) -> None:
        self.delete_pod(f"filler-{node}")

    def where(self, selector: str | None = None) -> str:
        return where(self.api, self.name, selector)


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def pod_condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The pod's status condition of type `kind` (e.g. PodScheduled), if it has one."""
    return next((dict(c) for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def node_labels(api: RestClient) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in api.get("/api/v1/nodes")["items"]}


def relabel(api: RestClient, node: str, value: str) -> None:
    """Move a node to network block `value` (its label, as a topology label corrected)."""
    api.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {NB_KEY: value}}}, MERGE_PATCH)


def domains_of(api: RestClient, pods: list[dict[str, Any]], key: str) -> set[str]:
    labels = node_labels(api)
    return {labels[p["spec"]["nodeName"]].get(key, "-") for p in bound(pods)}


def new_namespace(cluster: ClusterState, prefix: str) -> Namespace:
    slug = re.sub(r"[^a-z0-9]+", "-", prefix.lower())[:40].strip("-") or "t"
    name = f"{slug}-{uuid.uuid4().hex[:5]}"
    cluster.client().request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return Namespace(cluster, name)


def delete_namespace(ns: Namespace, timeout: float = 90.0) -> None:
    """Delete and wait until its pods are gone, so the next test starts on free nodes.

    Its pods are deleted at once (grace 0) right after the namespace: a terminating namespace takes no new
    pods, so no controller makes them again, and the namespace controller's own graceful pass took ~6 s per
    test that had pods running."""
    try:
        ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}")
    except ApiError as e:
        if e.status != 404:
            raise
    try:
        ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}/pods", {"gracePeriodSeconds": 0})
    except ApiError as e:
        if e.status != 404:
            raise
    wait_for(f"pods of namespace {ns.name} gone", lambda: not ns.pods() or None, timeout=timeout)


def gpu_job(
    name: str,
    count: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduling: dict[str, Any] | None = None,
    priority_class: str | None = None,
    pod_annotations: dict[str, str] | None = None,
    suspend: bool = False,
) -> dict[str, Any]:
    """The article's Job: Indexed, `count` pods, each taking a whole 8-GPU node."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "worker", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU_KEY: "8"}}}
        ],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": count,
        "parallelism": count,
        "backoffLimit": 6,
        "template": {"metadata": {"annotations": dict(pod_annotations or {})}, "spec": pod_spec},
    }
    if scheduling:
        spec["scheduling"] = scheduling
    if suspend:
        spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": spec,
    }


TOPOLOGIES = "/apis/scheduling.phalanx.dev/v1beta1/topologies"


@contextlib.contextmanager
def active_topology(api: RestClient, name: str, *labels: str) -> Iterator[str]:
    """A Topology of these node labels (widest first), once its Active condition is True; deleted after."""
    body = {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }
    api.request("POST", TOPOLOGIES, body)

    def active() -> bool:
        conditions = (api.get(f"{TOPOLOGIES}/{name}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    try:
        wait_for(f"Topology {name} active", active, timeout=60)
        yield name
    finally:
        api.request("DELETE", f"{TOPOLOGIES}/{name}")


PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def ensure_priority_class(api: RestClient, name: str, value: int) -> None:
    """Create the PriorityClass unless it exists; one of that name with another value is an error."""
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
    try:
        api.request("POST", PRIORITY_CLASSES, {**body, "value": value})
    except ApiError as e:
        if e.status != 409:
            raise
        found = api.get(f"{PRIORITY_CLASSES}/{name}")["value"]
        assert found == value, f"PriorityClass {name} exists with value {found}, not {value}"
