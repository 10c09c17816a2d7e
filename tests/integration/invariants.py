"""What must hold for gangs on a real cluster, whatever broke (the crash and API-fault soaks), for every kind
Phalanx admits: batch/v1 Jobs, JobSets, TrainJobs (their JobSets) and LeaderWorkerSet groups (gangs.py reads
them: which pods, how many at once, from each kind's own spec).

Read straight from the API, independently of Phalanx's code (own quantity parsing, own fit check):

- safety, at every moment: no node over capacity (requests of the pods bound to it or released to it by
  Phalanx <= allocatable), no gang with pods in two domains of its topology key, and no part of a gang (a
  JobSet's child Job) in two domains of its slice key;
- settled, once the operator had time: every gang fully admitted (all pods bound, where its recorded decision
  put them) or fully gated (no pod released or bound, so below its size it holds no node), nothing in flight
  (pods still to be made by the kind's controller, released but unbound, requeued, suspended, terminating),
  and no gated gang that would fit in the room left (nothing lost: Phalanx admits whatever fits; a JobSet with
  a slice key fits when its child Jobs pack into domains of the slice key within one domain of its key). The
  room left excludes the nodes another waiting gang's group records as held for it (`status.reservation`:
  bounded waiting holds them for a gang that waited longer than --starvation-age, so a smaller gang that fits
  only there waits by rule).

With preemption (the preemption crash soak, `preemption=True` in `unsettled`, and the checks below): a waiting
gang that would fit once every pod of a lower priority were gone is not settled (it should preempt); the
pods of a gang that run stay in the domain its group records (`outside_decision`); and once settled no
group holds a reservation unless its gang still waits for it (`reservations_left`: none on an admitted
group, on a group whose owner is gone, or lapsed long ago).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.devcluster.http import RestClient

from .gangs import Gang, Objects, pod_requests, quantity, read_gangs, usage_node

Room = dict[str, dict[str, int]]


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    schedulable: bool


def packs(sizes: Sequence[int], bins: Sequence[int]) -> bool:
    """Can items of these sizes go into bins of these capacities, each item whole in one bin?"""
    items = sorted(sizes, reverse=True)
    room = sorted(bins, reverse=True)
    if sum(items) > sum(room):
        return False

    def place(i: int) -> bool:
        if i == len(items):
            return True
        tried: set[int] = set()
        for b, free in enumerate(room):
            if free >= items[i] and free not in tried:
                tried.add(free)
                room[b] -= items[i]
                if place(i + 1):
                    return True
                room[b] += items[i]
        return False

    return place(0)


@dataclass
class World:
    """One read of the cluster: nodes, every pod (all namespaces: all take room), the gangs of a namespace."""

    nodes: dict[str, Node]
    pods: list[dict[str, Any]]
    gangs: dict[str, Gang]
    notes: list[str] = field(default_factory=list)
    roots: list[dict[str, Any]] = field(default_factory=list)  # Phalanx's groups without a parent

    @classmethod
    def read(cls, api: RestClient, namespace: str, kinds: bool = False) -> World:
        """`kinds`: JobSets, TrainJobs and LeaderWorkerSets too (their CRDs must be served)."""
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
        objects = Objects.read(api, namespace, kinds)
        return cls(nodes, objects.pods, read_gangs(objects, namespace), roots=objects.roots)

    # ------------------------------------------------------------------ room
    def used(self, counts: Callable[[dict[str, Any]], bool] = lambda pod: True) -> Room:
        """What the pods take on each node (only the pods `counts` keeps)."""
        used: Room = defaultdict(lambda: defaultdict(int))
        for pod in self.pods:
            node = usage_node(pod)
            if node and counts(pod):
                for resource, amount in pod_requests(pod).items():
                    used[node][resource] += amount
        return used

    def free(self, counts: Callable[[dict[str, Any]], bool] = lambda pod: True) -> Room:
        used = self.used(counts)
        return {
            name: {r: amount - used[name].get(r, 0) for r, amount in node.allocatable.items()}
            for name, node in self.nodes.items()
        }

    def held_for_others(self, gang: Gang) -> set[str]:
        """Nodes the groups of the other waiting gangs record as held for them (their reservations)."""
        held: set[str] = set()
        for other in self.gangs.values():
            if other is gang or not other.waiting or other.holder is None:
                continue
            if gang.holder is not None and other.holder["metadata"]["uid"] == gang.holder["metadata"]["uid"]:
                continue
            held.update((other.reservation or {}).get("nodes") or [])
        return held

    def room_for(self, gang: Gang, free: Room) -> Room:
        """The free room the gang may take: none on nodes held for another waiting gang."""
        held = self.held_for_others(gang)
        return {name: ({r: 0 for r in room} if name in held else room) for name, room in free.items()}

    def fits(self, gang: Gang, free: Room | None = None) -> bool:
        """Would the whole gang fit in one domain of its key (anywhere without one) in this room, each part
        in one domain of its slice key?"""
        if not gang.pods or gang.size < 1:
            return False
        room = self.free() if free is None else free
        need = gang.request()
        domains: dict[str, list[str]] = defaultdict(list)
        for name, node in self.nodes.items():
            if not node.schedulable:
                continue
            if gang.key is None:
                domains[""].append(name)
            elif gang.key in node.labels:
                domains[node.labels[gang.key]].append(name)

        def slots(name: str) -> int:
            per = [room[name].get(r, 0) // amount for r, amount in need.items() if amount > 0]
            return max(0, min(per)) if per else 0

        for members in domains.values():
            if not gang.parts:
                if sum(slots(name) for name in members) >= gang.size:
                    return True
                continue
            bins: dict[str, int] = defaultdict(int)
            for name in members:
                value = self.nodes[name].labels.get(gang.slice_key or "")
                if value is not None:
                    bins[value] += slots(name)
            if packs([part.size for part in gang.parts], list(bins.values())):
                return True
        return False

    def fits_empty(self, gang: Gang) -> bool:
        """Would it fit on the cluster with nothing else running (can it ever fit)?"""
        return self.fits(gang, {n: dict(node.allocatable) for n, node in self.nodes.items()})

    def domains(self, pods: list[dict[str, Any]], key: str) -> set[str]:
        return {self.nodes[node].labels.get(key, "-") for p in pods if (node := usage_node(p)) in self.nodes}

    # ------------------------------------------------------------------ checks
    def safety(self, shrunk: Collection[str] = (), relabelled: Collection[str] = ()) -> list[str]:
        """Must hold at every moment, even while the operator is down or retrying. `shrunk`: nodes whose
        allocatable went down under pods already there (GPUs gone unhealthy; the kubelet keeps them): their
        room is checked by the caller, against when each pod came; `relabelled`: nodes moved to another
        domain (or back) under pods already there: the domains of a gang with a pod on one are checked by
        the caller, by each node's labels when the pod came (soak_nodes.py)."""
        problems = []
        used = self.used()
        for name, resources in used.items():
            node = self.nodes.get(name)
            if node is None or name in shrunk:
                continue
            for resource, amount in resources.items():
                have = node.allocatable.get(resource, 0)
                if amount > have:
                    problems.append(f"node {name} over capacity: {resource} {amount} > {have}")
        for gang in self.gangs.values():
            if relabelled and any(usage_node(p) in relabelled for p in gang.placed):
                continue
            if gang.key and len(domains := self.domains(gang.placed, gang.key)) > 1:
                problems.append(
                    f"{gang.name}: pods in {len(domains)} domains of {gang.key}: {sorted(domains)}"
                )
            for part in gang.parts:
                if gang.slice_key and len(domains := self.domains(part.pods, gang.slice_key)) > 1:
                    problems.append(
                        f"{gang.name}: {part.name}'s pods in {len(domains)} domains of {gang.slice_key}: "
                        f"{sorted(domains)}"
                    )
        return problems

    def fits_by_preempting(self, gang: Gang) -> bool:
        """Would it fit (as `fits`, beside the room held for other waiting gangs) once every pod of a lower
        priority than its own were gone? Then it should preempt rather than wait."""
        priority = gang.priority
        free = self.free(lambda pod: int(pod["spec"].get("priority") or 0) >= priority)
        return self.fits(gang, self.room_for(gang, free))

    def outside_decision(self) -> list[str]:
        """Gangs with a pod bound (not terminating) outside the domain of its key that its group records."""
        out = []
        for gang in self.gangs.values():
            domain = (gang.admission or {}).get("domain")
            if not gang.key or not domain:
                continue
            bound = [p for p in gang.running if p["spec"].get("nodeName") in self.nodes]
            where = {self.nodes[p["spec"]["nodeName"]].labels.get(gang.key, "-") for p in bound}
            if where - {domain}:
                out.append(f"{gang.name}: pods bound in {sorted(where)}, its group records {domain}")
        return out

    def reservations_left(self, now: dt.datetime, lapse: float = 60.0) -> list[str]:
        """Reservations (`status.reservation`) left behind: on a group whose gang no longer waits (admitted,
        or its owner gone: no gang holds the group), or lapsed more than `lapse` seconds ago."""
        holders = {g.holder["metadata"]["uid"]: g for g in self.gangs.values() if g.holder is not None}
        out = []
        for group in self.roots:
            reservation = (group.get("status") or {}).get("reservation")
            if not reservation:
                continue
            name = f"{group['kind']} {group['metadata']['name']}"
            gang = holders.get(group["metadata"]["uid"])
            expires = dt.datetime.fromisoformat(str(reservation.get("expiresAt")).replace("Z", "+00:00"))
            if gang is None:
                out.append(f"{name}: a reservation on a group no gang of a live owner holds: {reservation}")
            elif gang.admitted:
                out.append(f"{name}: a reservation left on the admitted gang {gang.name}: {reservation}")
            elif (now - expires).total_seconds() > lapse:
                out.append(f"{name}: a reservation that lapsed at {expires:%H:%M:%S} is still there")
        return out

    def unsettled(self, preemption: bool = False) -> list[str]:
        """Why the namespace is not (yet) in a final state; [] once it is. `preemption`: gangs of several
        priorities, so a waiting gang that fits once the lower-priority pods are gone is not final."""
        reasons = []
        if any(p["metadata"].get("deletionTimestamp") for p in self.pods):
            reasons.append("pods terminating")
        free = self.free()
        for gang in self.gangs.values():
            live, placed = gang.live, gang.placed
            if gang.suspended:
                reasons.append(f"{gang.name}: suspended")
            elif gang.requeued:
                reasons.append(f"{gang.name}: requeued")
            elif gang.pending:
                reasons.append(gang.pending)
            elif gang.admitted:
                continue
            elif len(live) < gang.made_first and not placed:
                reasons.append(f"{gang.name}: {len(live)} of its {gang.made_first} pods made so far")
            elif not gang.waiting:
                placed_of = f"{len(placed)} of {len(live)} pods placed (size {gang.size})"
                deleting = sum(1 for p in live if p["metadata"].get("deletionTimestamp"))
                being = f", {deleting} being deleted" if deleting else ""
                reasons.append(f"{gang.name}: {placed_of}{being}, partly admitted")
            elif self.fits(gang, self.room_for(gang, free)):
                reasons.append(f"{gang.name}: waits although it fits the room left")
            elif preemption and self.fits_by_preempting(gang):
                reasons.append(f"{gang.name}: waits although it fits once lower-priority pods are gone")
        return reasons

    def settled_problems(self) -> list[str]:
        """Checked once settled: each admitted gang sits where its recorded decision put it; the kinds'
        own counts agree (a TrainJob's numNodes and its JobSet)."""
        problems = []
        for gang in self.gangs.values():
            problems += gang.problems
            if not gang.admitted:
                continue
            admission = gang.admission
            if admission is None:
                problems.append(f"{gang.name}: admitted without a recorded decision")
                continue
            if gang.key:
                domains = {self.nodes[p["spec"]["nodeName"]].labels.get(gang.key) for p in gang.live}
                if domains != {admission.get("domain")}:
                    problems.append(f"{gang.name}: bound in {domains}, recorded {admission.get('domain')}")
            recorded = {a["pod"]: a["node"] for a in admission.get("assignments", [])}
            bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in gang.live}
            # A staged gang's later pods were not there at the decision: it named a placeholder (a slot)
            # for each, and each must be on a slot's node (as many pods on a node as slots there).
            named = {pod: node for pod, node in bound.items() if pod in recorded}
            later = sorted(node for pod, node in bound.items() if pod not in recorded)
            slots = sorted(node for pod, node in recorded.items() if pod not in bound)
            if any(recorded[pod] != node for pod, node in named.items()) or later != slots:
                problems.append(f"{gang.name}: bound {bound}, recorded {recorded}")
        return problems

    def summary(self) -> str:
        admitted = sum(g.admitted for g in self.gangs.values())
        waiting = sum(g.waiting for g in self.gangs.values())
        return f"{len(self.gangs)} gangs: {admitted} admitted, {waiting} waiting"


# ---------------------------------------------------------------------- node failures (soak_nodes.py)
def running(gang: Gang) -> list[dict[str, Any]]:
    """The gang's pods bound to a node and not being taken away: what runs as the gang."""
    return [p for p in gang.live if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def short_by(gang: Gang) -> int:
    """How many pods a gang that runs in part lacks (0: it runs whole, or nothing of it runs)."""
    bound = len(running(gang))
    return gang.size - bound if 0 < bound < gang.size else 0


def room_for_missing(world: World, gang: Gang) -> bool:
    """Would the pods a gang running in part lacks fit beside its running pods, on the schedulable nodes of
    the domain of its key those pods are in (any schedulable node without a key), in the room left? (A
    staged gang's later pods count too; its slice key is not looked at: the lenient side.)"""
    missing = short_by(gang)
    if not missing:
        return True
    need = gang.request()
    domains = world.domains(running(gang), gang.key) if gang.key else set()
    if len(domains) > 1:
        return False
    free = world.free()
    slots = 0
    for name, node in world.nodes.items():
        if not node.schedulable:
            continue
        if gang.key and node.labels.get(gang.key) not in domains:
            continue
        per = [free[name].get(r, 0) // amount for r, amount in need.items() if amount > 0]
        slots += max(0, min(per)) if per else 0
    return slots >= missing


def owner_failed(gang: Gang) -> bool:
    """Its owner's controller gave up (a Job or a JobSet past its backoffLimit after evictions, a TrainJob
    whose JobSet failed): the owner says `Failed`."""
    conditions = (gang.owner.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)
