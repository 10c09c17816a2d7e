"""What must hold for gang Jobs on a real cluster, whatever broke (the crash and API-fault soaks).

Read straight from the API, independently of Phalanx's code (own quantity parsing, own fit check):

- safety, at every moment: no node over capacity (requests of the pods bound to it or released to it by
  Phalanx <= allocatable), and no gang with pods in two domains of its topology key;
- settled, once the operator had time: every gang fully admitted (all pods bound, where its PodGroup's
  recorded decision put them) or fully gated (no pod released or bound, so below minCount it holds no
  node), nothing in flight (released but unbound, requeued, terminating), and no gated gang that would fit
  in the room left (nothing lost: Phalanx admits whatever fits). The room left excludes the nodes another
  waiting gang's PodGroup records as held for it (`status.reservation`: bounded waiting holds them for a
  gang that waited longer than --starvation-age, so a smaller gang that fits only there waits by rule).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from phalanx.devcluster.http import RestClient

GATE = "phalanx.dev/admission"
GROUP_LABEL = "phalanx.dev/pod-group"
KEY_ANNOTATION = "phalanx.dev/topology-key"
REQUEUED_ANNOTATION = "phalanx.dev/requeued"
HOSTNAME = "kubernetes.io/hostname"
GROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
_SUFFIX["Ti"] = 2**40


def quantity(text: str | int, resource: str) -> int:
    """A resource quantity as an integer: millicores for cpu, bytes or counts otherwise."""
    value = str(text)
    match = re.fullmatch(r"([0-9.]+)(m|[kMGT]i?|)", value)
    if match is None:
        raise ValueError(f"quantity {value!r} of {resource} not understood by the checker")
    number, suffix = float(match.group(1)), match.group(2)
    scale = 1000 if resource == "cpu" else 1
    if suffix == "m":
        return round(number * scale / 1000)
    return round(number * _SUFFIX[suffix] * scale)


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Sum over the containers (init containers are not used by the soaks); limits stand for requests."""
    total: dict[str, int] = defaultdict(int)
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, amount in wanted.items():
            total[resource] += quantity(amount, resource)
    total["pods"] += 1
    return dict(total)


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def terminal(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def usage_node(pod: dict[str, Any]) -> str:
    """The node whose room the pod takes: bound, or released by Phalanx (ungated, pinned, labelled)."""
    if terminal(pod):
        return ""
    if pod["spec"].get("nodeName"):
        return str(pod["spec"]["nodeName"])
    pinned = (pod["spec"].get("nodeSelector") or {}).get(HOSTNAME, "")
    if pinned and not gated(pod) and pod["metadata"].get("labels", {}).get(GROUP_LABEL):
        return str(pinned)
    return ""


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    schedulable: bool


@dataclass
class Gang:
    job: dict[str, Any]
    pods: list[dict[str, Any]]
    group: dict[str, Any] | None

    @property
    def name(self) -> str:
        return str(self.job["metadata"]["name"])

    @property
    def size(self) -> int:
        return int(self.job["spec"].get("parallelism") or 1)

    @property
    def key(self) -> str | None:
        return self.job["metadata"].get("annotations", {}).get(KEY_ANNOTATION) or None

    @property
    def live(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if not terminal(p)]

    @property
    def placed(self) -> list[dict[str, Any]]:
        return [p for p in self.live if usage_node(p)]

    @property
    def admitted(self) -> bool:
        live = self.live
        return len(live) == self.size and all(p["spec"].get("nodeName") for p in live)

    @property
    def waiting(self) -> bool:
        live = self.live
        return len(live) == self.size and all(gated(p) and not usage_node(p) for p in live)

    @property
    def holding(self) -> bool:
        """Its PodGroup records room held for it because it waited too long (bounded waiting)."""
        reservation = ((self.group or {}).get("status") or {}).get("reservation") or {}
        return reservation.get("cause") == "BoundedWaiting"

    @property
    def requeued(self) -> bool:
        return bool(self.job["metadata"].get("annotations", {}).get(REQUEUED_ANNOTATION))


@dataclass
class World:
    """One read of the cluster: nodes, every pod (all namespaces: all take room), the gangs of a namespace."""

    nodes: dict[str, Node]
    pods: list[dict[str, Any]]
    gangs: dict[str, Gang]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, api: RestClient, namespace: str) -> World:
        nodes = {}
        for item in api.get("/api/v1/nodes")["items"]:
            spec, status = item.get("spec", {}), item.get("status", {})
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
            taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
            name = item["metadata"]["name"]
            nodes[name] = Node(
                name,
                item["metadata"].get("labels", {}),
                {r: quantity(v, r) for r, v in status.get("allocatable", {}).items()},
                ready and not spec.get("unschedulable") and not taints,
            )
        pods = api.get("/api/v1/pods")["items"]
        jobs = api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        groups = api.get(GROUPS.replace("{ns}", namespace))["items"]
        group_of = {g["metadata"]["labels"].get("phalanx.dev/job-name"): g for g in groups}
        by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            if pod["metadata"]["namespace"] == namespace:
                by_job[pod["metadata"].get("labels", {}).get("job-name", "")].append(pod)
        gangs = {
            j["metadata"]["name"]: Gang(
                j, by_job.get(j["metadata"]["name"], []), group_of.get(j["metadata"]["name"])
            )
            for j in jobs
            if not j["metadata"].get("deletionTimestamp")
        }
        return cls(nodes, pods, gangs)

    # ------------------------------------------------------------------ room
    def used(self) -> dict[str, dict[str, int]]:
        used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pod in self.pods:
            node = usage_node(pod)
            if node:
                for resource, amount in pod_requests(pod).items():
                    used[node][resource] += amount
        return used

    def free(self) -> dict[str, dict[str, int]]:
        used = self.used()
        return {
            name: {r: amount - used[name].get(r, 0) for r, amount in node.allocatable.items()}
            for name, node in self.nodes.items()
        }

    def held_for_others(self, gang: Gang) -> set[str]:
        """Nodes the PodGroups of the other waiting gangs record as held for them (their reservations)."""
        held: set[str] = set()
        for other in self.gangs.values():
            if other is gang or not other.waiting:
                continue
            reservation = ((other.group or {}).get("status") or {}).get("reservation") or {}
            held.update(reservation.get("nodes") or [])
        return held

    def room_for(self, gang: Gang, free: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """The free room the gang may take: none on nodes held for another waiting gang."""
        held = self.held_for_others(gang)
        return {name: ({r: 0 for r in room} if name in held else room) for name, room in free.items()}

    def fits(self, gang: Gang, free: dict[str, dict[str, int]] | None = None) -> bool:
        """Would the whole gang fit in one domain of its key (anywhere without one) in this room?"""
        if not gang.pods:
            return False
        room = self.free() if free is None else free
        need = pod_requests(gang.pods[0])
        domains: dict[str, list[str]] = defaultdict(list)
        for name, node in self.nodes.items():
            if not node.schedulable:
                continue
            if gang.key is None:
                domains[""].append(name)
            elif gang.key in node.labels:
                domains[node.labels[gang.key]].append(name)
        for members in domains.values():
            slots = 0
            for name in members:
                per = [room[name].get(r, 0) // amount for r, amount in need.items() if amount > 0]
                slots += max(0, min(per)) if per else 0
            if slots >= gang.size:
                return True
        return False

    def fits_empty(self, gang: Gang) -> bool:
        """Would it fit on the cluster with nothing else running (can it ever fit)?"""
        return self.fits(gang, {n: dict(node.allocatable) for n, node in self.nodes.items()})

    # ------------------------------------------------------------------ checks
    def safety(self) -> list[str]:
        """Must hold at every moment, even while the operator is down or retrying."""
        problems = []
        used = self.used()
        for name, resources in used.items():
            node = self.nodes.get(name)
            if node is None:
                continue
            for resource, amount in resources.items():
                have = node.allocatable.get(resource, 0)
                if amount > have:
                    problems.append(f"node {name} over capacity: {resource} {amount} > {have}")
        for gang in self.gangs.values():
            if gang.key:
                domains = {self.nodes[usage_node(p)].labels.get(gang.key, "-") for p in gang.placed}
                if len(domains) > 1:
                    problems.append(
                        f"{gang.name}: pods in {len(domains)} domains of {gang.key}: {sorted(domains)}"
                    )
        return problems

    def unsettled(self) -> list[str]:
        """Why the namespace is not (yet) in a final state; [] once it is."""
        reasons = []
        if any(p["metadata"].get("deletionTimestamp") for p in self.pods):
            reasons.append("pods terminating")
        free = self.free()
        for gang in self.gangs.values():
            if gang.job["spec"].get("suspend"):
                reasons.append(f"{gang.name}: suspended")
            elif gang.requeued:
                reasons.append(f"{gang.name}: requeued")
            elif gang.admitted:
                continue
            elif not gang.waiting:
                placed, live = len(gang.placed), len(gang.live)
                reasons.append(
                    f"{gang.name}: {placed} of {live} pods placed (size {gang.size}), partly admitted"
                )
            elif self.fits(gang, self.room_for(gang, free)):
                reasons.append(f"{gang.name}: waits although it fits the room left")
        return reasons

    def settled_problems(self) -> list[str]:
        """Checked once settled: each admitted gang sits where its PodGroup's recorded decision put it."""
        problems = []
        for gang in self.gangs.values():
            if not gang.admitted:
                continue
            admission = ((gang.group or {}).get("status") or {}).get("admission")
            if admission is None:
                problems.append(f"{gang.name}: admitted without a recorded decision")
                continue
            if gang.key:
                domains = {self.nodes[p["spec"]["nodeName"]].labels.get(gang.key) for p in gang.live}
                if domains != {admission.get("domain")}:
                    problems.append(f"{gang.name}: bound in {domains}, recorded {admission.get('domain')}")
            recorded = {a["pod"]: a["node"] for a in admission.get("assignments", [])}
            bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in gang.live}
            if any(recorded.get(pod) != node for pod, node in bound.items()):
                problems.append(f"{gang.name}: bound {bound}, recorded {recorded}")
        return problems

    def summary(self) -> str:
        admitted = sum(g.admitted for g in self.gangs.values())
        waiting = sum(g.waiting for g in self.gangs.values())
        return f"{len(self.gangs)} gangs: {admitted} admitted, {waiting} waiting"
