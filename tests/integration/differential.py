"""Differential testing of Phalanx against kube-scheduler (issue 7): random gangs in random cluster states.

`generate(seed)` makes one scenario from `random.Random(seed)` alone, on the article's 8 nodes:

- a background: taints (NoSchedule, NoExecute or PreferNoSchedule) on some nodes, sometimes a cordoned node,
  sometimes a numeric node label, 0-4 pods pinned to distinct nodes by nodeSelector (labels `role: db|web`,
  GPUs and CPUs, sometimes host port 29500 over TCP, UDP or one host IP, sometimes a required anti-affinity
  against the gangs), sometimes a local PersistentVolume with required node affinity and a claim for it
  (Immediate, bound before the gang; or a static WaitForFirstConsumer class);
- one gang Job of 2-4 pods, sometimes two created together, each with a random mix of: GPU, CPU and memory
  requests (as requests or limits only, sometimes an init container or a sidecar), nodeSelector, required node
  affinity (In, NotIn, Exists, Gt, Lt, matchFields, several terms), required pod affinity and anti-affinity
  (matchLabels or matchExpressions on its own pods, the other gang's or the background's, by node, local block
  or network block, sometimes in every namespace), preferred terms (scores only), a host port, topology
  spread (DoNotSchedule on hostname or local block; maxSkew, minDomains, nodeAffinityPolicy,
  nodeTaintsPolicy, matchLabelKeys; sometimes a ScheduleAnyway one too), tolerations and the claim; in one
  network block, one local block, one node or anywhere.

`run_phalanx` plays it on a stock cluster where the operator runs (Job annotations) and `run_upstream` on a
cluster in `--mode upstream` (the same Jobs with `spec.scheduling`, v1.37's in-tree gang scheduler), each in a
fresh namespace with the same background; `verdict` compares them:

- every pod Phalanx released must bind (a released pod kube-scheduler refuses, or that does not bind: `BUG`);
- where Phalanx says the gangs cannot fit, upstream must not place them either (`DISAGREE` otherwise);
- Phalanx placing a gang upstream does not is recorded (`PHALANX_ONLY`: Phalanx may do better, e.g. best
  fit), and so is a field the engine refuses as not modelled (`UNSUPPORTED`) and, with two gangs, each
  system placing a different one (`OTHER_GANG`: which gang goes first and where it goes decide that).

`tests/integration/test_differential.py` runs a few seeds in CI; `bench/differential.py` runs many and writes
docs/differential.md. Every step waits for a state; "nothing happens" is watched for HOLD_SECONDS (a gang
Phalanx refused that is then released, bound or refused in other words is `unsteady`: `BUG`).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from phalanx.api.job_policy import JobPolicy, annotations_for, upstream_scheduling
from phalanx.api.keys import ADMISSION_GATE
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError, RestClient

from .kube import (
    GPU_KEY,
    LB_KEY,
    NB_KEY,
    Namespace,
    bound,
    delete_namespace,
    gpu_job,
    new_namespace,
    pod_condition,
    wait_for,
)

HOST: Final = "kubernetes.io/hostname"
NODES: Final = ("was-worker", *(f"was-worker{i}" for i in range(2, 9)))
NETWORK_BLOCKS: Final = ("nb-a", "nb-b")
LOCAL_BLOCKS: Final = ("lb-a1", "lb-a2", "lb-b1", "lb-b2")
TAINT_KEY: Final = "differential.phalanx.dev/dedicated"
RANK_KEY: Final = "differential.phalanx.dev/rank"
"""A numeric node label some scenarios set (for Gt/Lt), removed afterwards."""
PORT: Final = 29500
TEAM: Final = {"team": "ml"}
"""A label every gang pod carries."""
BACKGROUND_APP: Final = "bg"
PHALANX_GROUPS: Final = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"
UPSTREAM_GROUPS: Final = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"
PLACEMENTS_TRIED: Final = "placements are available"
NOT_MODELLED: Final = "which Phalanx does not model"
WAITS_FOR_BIND: Final = "to be bound first"
"""Phalanx's words for a gang that waits until another released pod is bound (placement/constraints.py
_unsettled): a wait, not a refusal, so not a decision to hold it to."""
PAUSE: Final = "registry.k8s.io/pause:3.10"

HOLD_SECONDS: Final = 3.0
"""How long a gang said not to fit is watched for a pod released or bound."""
DECIDE_TIMEOUT: Final = 60.0
"""How long a system may take to place the gangs or say they cannot."""
BIND_GRACE: Final = 10.0
"""How long a released pod kube-scheduler refused is still watched (whether it binds after all)."""

# Verdicts.
BOTH_PLACED: Final = "both placed"
BOTH_UNSCHEDULABLE: Final = "both unschedulable"
SAME_GANG: Final = "same gang placed"
PHALANX_ONLY: Final = "Phalanx only"
OTHER_GANG: Final = "other gang placed"
UNSUPPORTED: Final = "unsupported"
DISAGREE: Final = "DISAGREE"
BUG: Final = "BUG"
FAILURES: Final = (DISAGREE, BUG)


# ---------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Taint:
    node: str
    value: str
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Gang:
    """One gang Job: `count` pods of `template`, all needed (minCount = count), in one domain of the key."""

    name: str
    count: int
    topology_key: str | None
    template: dict[str, Any]
    """The pod template (metadata.labels and spec)."""

    def job(self, flavor: str) -> dict[str, Any]:
        """The Job: Phalanx's annotations, or upstream's `spec.scheduling` asking the same."""
        policy = JobPolicy(
            policy="gang", min_count=self.count, topology_key=self.topology_key, parallelism=self.count
        )
        if flavor == "upstream":
            body = gpu_job(self.name, self.count, scheduling=upstream_scheduling(policy))
        else:
            body = gpu_job(
                self.name,
                self.count,
                labels={"phalanx.dev/managed": "true"},
                annotations=annotations_for(policy),
            )
        template = json.loads(json.dumps(self.template))
        body["spec"]["template"]["metadata"]["labels"] = template["metadata"]["labels"]
        body["spec"]["template"]["spec"] = template["spec"]
        return body

    def summary(self) -> str:
        resources = self.template["spec"]["containers"][0]["resources"]
        amounts = resources.get("requests") or resources["limits"]
        what = "+".join(f"{v} {k.split('/')[-1]}" for k, v in sorted(amounts.items()))
        domain = {None: "anywhere", NB_KEY: "network block", LB_KEY: "local block", HOST: "one node"}
        return f"{self.name} {self.count} × ({what}) in {domain[self.topology_key]}"


@dataclass(frozen=True)
class Scenario:
    """One generated case: the background and the gangs, as the manifests both clusters get."""

    seed: int
    gangs: tuple[Gang, ...]
    background: tuple[dict[str, Any], ...]
    """Pods pinned to distinct nodes by nodeSelector (kube-scheduler binds them)."""
    taints: tuple[Taint, ...] = ()
    cordoned: tuple[str, ...] = ()
    ranks: tuple[tuple[str, str], ...] = ()
    """(node, value) of the RANK_KEY label."""
    volume: dict[str, Any] | None = None
    """{"binding": Immediate|WaitForFirstConsumer, "key": label key, "values": [...]}: a PersistentVolume
    with that required node affinity and a claim `data` the first gang mounts."""
    features: frozenset[str] = frozenset()

    def describe(self) -> str:
        """Everything needed to read or replay the case, as JSON."""
        return json.dumps(
            {
                "seed": self.seed,
                "gangs": [
                    {"name": g.name, "count": g.count, "topologyKey": g.topology_key, "template": g.template}
                    for g in self.gangs
                ],
                "background": [
                    {"node": p["spec"]["nodeSelector"][HOST], "labels": p["metadata"]["labels"], **_brief(p)}
                    for p in self.background
                ],
                "taints": [f"{t.node}: {TAINT_KEY}={t.value}:{t.effect}" for t in self.taints],
                "cordoned": list(self.cordoned),
                "nodeLabels": [f"{node}: {RANK_KEY}={value}" for node, value in self.ranks],
                "volume": self.volume,
            },
            indent=1,
            sort_keys=True,
        )

    def summary(self) -> str:
        """One line: each gang's pods, requests and domain, then the features."""
        return "; ".join(g.summary() for g in self.gangs) + " — " + ", ".join(sorted(self.features))


def _brief(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod["spec"]
    out: dict[str, Any] = {"requests": spec["containers"][0]["resources"]["requests"]}
    if ports := spec["containers"][0].get("ports"):
        out["ports"] = ports
    if affinity := spec.get("affinity"):
        out["affinity"] = affinity
    return out


def _port(rng: random.Random, features: set[str], where: str) -> dict[str, Any]:
    """Host port PORT: TCP on every address, UDP, or TCP on one host IP (0.0.0.0 conflicts with it)."""
    kind = rng.choices(["tcp", "udp", "ip"], weights=[6, 2, 2])[0]
    port: dict[str, Any] = {"containerPort": PORT, "hostPort": PORT}
    if kind == "udp":
        port["protocol"] = "UDP"
    elif kind == "ip":
        port["hostIP"] = "127.0.0.1"
    features.add(f"hostPort{where}" + {"tcp": "", "udp": " (UDP)", "ip": " (hostIP)"}[kind])
    return port


def _background(rng: random.Random, gangs: list[str], features: set[str]) -> list[dict[str, Any]]:
    pods = []
    for i, node in enumerate(sorted(rng.sample(NODES, rng.randint(0, 4)))):
        gpus = rng.choice([0, 2, 4, 8, 8])
        container: dict[str, Any] = {
            "name": "bg",
            "image": PAUSE,
            "resources": {"requests": {"cpu": rng.choice(["1", "16", "64"])}},
        }
        if gpus:
            container["resources"]["requests"][GPU_KEY] = str(gpus)
            container["resources"]["limits"] = {GPU_KEY: str(gpus)}
        if rng.random() < 0.3:
            container["ports"] = [_port(rng, features, " in background")]
        spec: dict[str, Any] = {
            "nodeSelector": {HOST: node},
            "tolerations": [{"operator": "Exists"}],  # taints and cordons are set before the background
            "containers": [container],
        }
        if rng.random() < 0.15:
            selector = rng.choice([TEAM, {"app": gangs[0]}])
            key = rng.choice([HOST, HOST, LB_KEY])
            term = {"labelSelector": {"matchLabels": selector}, "topologyKey": key}
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
            features.add("existing anti-affinity")
        labels = {"app": BACKGROUND_APP, "role": rng.choice(["db", "web"])}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"bg-{i}", "labels": labels},
                "spec": spec,
            }
        )
    return pods


def _node_affinity(rng: random.Random, ranks: bool, features: set[str]) -> dict[str, Any]:
    """Required node affinity; with `ranks` (the scenario labels nodes with RANK_KEY) its first term has a
    Gt or Lt on it."""

    def expression() -> dict[str, Any]:
        choice = rng.randrange(5)
        if choice == 0:
            return {"key": LB_KEY, "operator": "NotIn", "values": [rng.choice(LOCAL_BLOCKS)]}
        if choice == 1:
            return {"key": HOST, "operator": "In", "values": sorted(rng.sample(NODES, rng.randint(3, 6)))}
        if choice == 2:
            return {"key": LB_KEY, "operator": "In", "values": sorted(rng.sample(LOCAL_BLOCKS, 2))}
        if choice == 3:
            return {"key": NB_KEY, "operator": "Exists"}
        return {"key": RANK_KEY, "operator": "DoesNotExist"}

    terms = []
    for _ in range(1 if rng.random() < 0.7 else 2):
        if rng.random() < 0.15:
            # The API allows one value for a field selector's In and NotIn.
            field = {
                "key": "metadata.name",
                "operator": rng.choice(["In", "NotIn"]),
                "values": [rng.choice(NODES)],
            }
            terms.append({"matchFields": [field]})
            features.add("node affinity matchFields")
        else:
            terms.append({"matchExpressions": [expression() for _ in range(rng.choice([1, 1, 2]))]})
    if ranks:
        rank = {"key": RANK_KEY, "operator": rng.choice(["Gt", "Lt"]), "values": [str(rng.randint(2, 7))]}
        terms[0] = {**terms[0], "matchExpressions": [rank, *terms[0].get("matchExpressions", [])]}
        features.add("node affinity Gt/Lt")
    if len(terms) > 1:
        features.add("node affinity, several terms")
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _selector(rng: random.Random, own: str, others: list[str]) -> tuple[dict[str, Any], str]:
    """A label selector for pod (anti-)affinity or spread, and whose pods it is meant to match."""
    target = rng.choices(["own", "other", "background", "team"], weights=[5, 2 if others else 0, 3, 1])[0]
    if target == "own":
        key, value = "app", own
    elif target == "other":
        key, value = "app", others[0]
    elif target == "background":
        key, value = "role", rng.choice(["db", "web"])
    else:
        key, value = "team", TEAM["team"]
    form = rng.random()
    if form < 0.7:
        return {"matchLabels": {key: value}}, target
    if form < 0.85:
        return {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}, target
    if target == "background":
        # NotIn: every pod that is not of the other role, the gangs' pods included.
        other_role = "web" if value == "db" else "db"
        return {
            "matchExpressions": [{"key": "role", "operator": "NotIn", "values": [other_role]}]
        }, "not-role"
    return {"matchExpressions": [{"key": key, "operator": "Exists"}]}, f"any-{key}"


def _pod_terms(rng: random.Random, own: str, others: list[str], kind: str, features: set[str]) -> list[Any]:
    terms = []
    for _ in range(1 if rng.random() < 0.8 else 2):
        selector, target = _selector(rng, own, others)
        term: dict[str, Any] = {
            "labelSelector": selector,
            "topologyKey": rng.choice([HOST, HOST, LB_KEY, NB_KEY]),
        }
        if rng.random() < 0.1:
            term["namespaceSelector"] = {}
            features.add(f"{kind} in every namespace")
        terms.append(term)
        features.add(f"{kind} ({target})")
    return terms


def _spread(rng: random.Random, own: str, others: list[str], features: set[str]) -> list[dict[str, Any]]:
    selector, target = _selector(rng, own, others)
    constraint: dict[str, Any] = {
        "maxSkew": 1 if rng.random() < 0.8 else 2,
        "topologyKey": HOST if rng.random() < 0.7 else LB_KEY,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector,
    }
    features.add(f"topology spread ({target})")
    if constraint["topologyKey"] == LB_KEY:
        features.add("topology spread by local block")
    if rng.random() < 0.2:
        constraint["minDomains"] = rng.randint(2, 4)
        features.add("topology spread minDomains")
    if rng.random() < 0.15:
        constraint["nodeAffinityPolicy"] = "Ignore"
        features.add("topology spread nodeAffinityPolicy Ignore")
    if rng.random() < 0.2:
        constraint["nodeTaintsPolicy"] = "Honor"
        features.add("topology spread nodeTaintsPolicy Honor")
    if rng.random() < 0.1:
        constraint["labelSelector"] = {"matchLabels": dict(TEAM)}
        constraint["matchLabelKeys"] = ["app"]
        features.add("topology spread matchLabelKeys")
    constraints = [constraint]
    if rng.random() < 0.1:
        anyway = {**constraint, "whenUnsatisfiable": "ScheduleAnyway", "topologyKey": NB_KEY}
        anyway.pop("minDomains", None)  # only for DoNotSchedule
        constraints.append(anyway)
        features.add("ScheduleAnyway spread (scores only)")
    return constraints


def _resources(rng: random.Random, features: set[str]) -> dict[str, Any]:
    amounts = {"cpu": rng.choice(["500m", "4", "16", "60"])}
    gpus = rng.choice([0, 1, 2, 4, 4, 8])
    if gpus:
        amounts[GPU_KEY] = str(gpus)
        features.add("GPUs")
    if rng.random() < 0.15:
        amounts["memory"] = rng.choice(["700Gi", "1100Gi"])
        features.add("memory")
    if rng.random() < 0.15:
        features.add("limits only")
        return {"limits": amounts}
    resources: dict[str, Any] = {"requests": amounts}
    if gpus:
        resources["limits"] = {GPU_KEY: str(gpus)}
    return resources


def _gang(
    rng: random.Random, name: str, others: list[str], scenario: dict[str, Any], features: set[str]
) -> Gang:
    count = rng.randint(2, 4) if not others else rng.randint(2, 3)
    topology_key = rng.choices([None, NB_KEY, LB_KEY, HOST], weights=[3, 4, 3, 1])[0]
    features.add(
        {None: "anywhere", NB_KEY: "network block", LB_KEY: "local block", HOST: "one node"}[topology_key]
    )
    container: dict[str, Any] = {"name": "worker", "image": PAUSE, "resources": _resources(rng, features)}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if rng.random() < 0.1:
        init = {"name": "setup", "image": PAUSE, "resources": {"requests": {"cpu": "100"}}}
        spec["initContainers"] = [init]
        features.add("init container")
    elif rng.random() < 0.1:
        sidecar = {
            "name": "proxy",
            "image": PAUSE,
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "40"}},
        }
        spec["initContainers"] = [sidecar]
        features.add("sidecar")
    affinity: dict[str, Any] = {}
    if rng.random() < 0.15:
        key = rng.choice([NB_KEY, LB_KEY])
        spec["nodeSelector"] = {key: rng.choice(NETWORK_BLOCKS if key == NB_KEY else LOCAL_BLOCKS)}
        features.add("nodeSelector")
    if scenario["ranks"] or rng.random() < 0.25:
        affinity["nodeAffinity"] = _node_affinity(rng, bool(scenario["ranks"]), features)
        features.add("node affinity")
    if rng.random() < 0.3:
        terms = _pod_terms(rng, name, others, "pod anti-affinity", features)
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    if rng.random() < 0.2:
        terms = _pod_terms(rng, name, others, "pod affinity", features)
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    if rng.random() < 0.1:
        preferred = {
            "weight": 50,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": HOST},
        }
        affinity.setdefault("podAntiAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            preferred
        ]
        features.add("preferred terms (scores only)")
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.25:
        container["ports"] = [_port(rng, features, "")]
    if rng.random() < 0.25:
        spec["topologySpreadConstraints"] = _spread(rng, name, others, features)
    if scenario["taints"] and rng.random() < 0.6:
        choice = rng.randrange(3)
        value = rng.choice(["a", "b"])
        if choice == 0:
            toleration = {"key": TAINT_KEY, "operator": "Equal", "value": value, "effect": "NoSchedule"}
        elif choice == 1:
            toleration = {"key": TAINT_KEY, "operator": "Equal", "value": value}
        else:
            toleration = {"key": TAINT_KEY, "operator": "Exists"}
        spec["tolerations"] = [toleration]
        features.add("tolerations")
    if scenario["volume"] is not None and name == "gang-a":
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    labels = {"app": name, **TEAM}
    return Gang(name, count, topology_key, {"metadata": {"labels": labels}, "spec": spec})


def generate(seed: int) -> Scenario:
    """The scenario of `seed` (the same on every machine)."""
    rng = random.Random(seed)
    features: set[str] = set()

    taints: list[Taint] = []
    if rng.random() < 0.35:
        for node in sorted(rng.sample(NODES, rng.randint(1, 3))):
            effect = rng.choices(["NoSchedule", "NoExecute", "PreferNoSchedule"], weights=[7, 2, 1])[0]
            taints.append(Taint(node, rng.choice(["a", "b"]), effect))
            features.add("taints" if effect == "NoSchedule" else f"taint {effect}")
    cordoned: tuple[str, ...] = ()
    if rng.random() < 0.1:
        cordoned = (rng.choice(NODES),)
        features.add("cordoned node")
    ranks: tuple[tuple[str, str], ...] = ()
    if rng.random() < 0.1:
        ranks = tuple((node, str(rng.randint(0, 9))) for node in NODES if rng.random() < 0.8)
    volume = None
    if rng.random() < 0.2:
        where = rng.random()
        if where < 0.4:
            key, values = HOST, sorted(rng.sample(NODES, rng.randint(1, 2)))
        elif where < 0.7:
            key, values = LB_KEY, [rng.choice(LOCAL_BLOCKS)]
        else:
            key, values = NB_KEY, [rng.choice(NETWORK_BLOCKS)]
        binding = "WaitForFirstConsumer" if rng.random() < 0.15 else "Immediate"
        volume = {"binding": binding, "key": key, "values": values}
        features.add("volume" if binding == "Immediate" else "volume (static WaitForFirstConsumer)")
    names = ["gang-a", "gang-b"] if rng.random() < 0.2 else ["gang-a"]
    if len(names) > 1:
        features.add("two gangs at once")
    background = _background(rng, names, features)
    if background:
        features.add("background pods")
    state = {"taints": taints, "ranks": ranks, "volume": volume}
    gangs = [_gang(rng, name, [n for n in names if n != name], state, features) for name in names]

    return Scenario(
        seed=seed,
        gangs=tuple(gangs),
        background=tuple(background),
        taints=tuple(taints),
        cordoned=cordoned,
        ranks=ranks,
        volume=volume,
        features=frozenset(features),
    )


# ---------------------------------------------------------------------- one cluster


@dataclass
class Observed:
    """What one system did with one gang."""

    kind: str
    """placed | unschedulable | unsupported (Phalanx refused a field) | stuck (released, not bound) |
    undecided (only next to a stuck gang) | unsteady (Phalanx said it cannot fit, then released it, or
    said so in other words, in a cluster that did not change)."""
    message: str = ""
    nodes: tuple[str, ...] = ()

    def line(self) -> str:
        text = self.kind + (f" on {', '.join(self.nodes)}" if self.nodes else "")
        return text + (f": {self.message}" if self.message else "")


@dataclass
class Run:
    """What one system did with the scenario's gangs (in the scenario's order)."""

    gangs: list[Observed]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def placed(self) -> frozenset[int]:
        return frozenset(i for i, o in enumerate(self.gangs) if o.kind == "placed")


def _update_node(api: RestClient, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Read, change, replace; again on a conflict (controllers write nodes too)."""
    for _ in range(10):
        node = api.get(f"/api/v1/nodes/{name}")
        change(node)
        try:
            api.request("PUT", f"/api/v1/nodes/{name}", node)
            return
        except ApiError as e:
            if e.status != 409:
                raise
    raise AssertionError(f"could not update node {name}: conflicts")


def _node_state(scenario: Scenario, name: str) -> Callable[[dict[str, Any]], None]:
    """What the scenario does to node `name`: its taint, cordon and rank label."""
    taint = next((t for t in scenario.taints if t.node == name), None)
    rank = dict(scenario.ranks).get(name)

    def change(node: dict[str, Any]) -> None:
        if taint is not None:
            taints = [t for t in node["spec"].get("taints", []) if t["key"] != TAINT_KEY]
            node["spec"]["taints"] = [
                *taints,
                {"key": TAINT_KEY, "value": taint.value, "effect": taint.effect},
            ]
        if name in scenario.cordoned:
            node["spec"]["unschedulable"] = True
        if rank is not None:
            node["metadata"]["labels"][RANK_KEY] = rank

    return change


def _undo_node_state(node: dict[str, Any]) -> None:
    node["spec"]["taints"] = [t for t in node["spec"].get("taints", []) if t["key"] != TAINT_KEY]
    node["spec"]["unschedulable"] = False
    node["metadata"]["labels"].pop(RANK_KEY, None)


def _delete(api: RestClient, path: str) -> None:
    try:
        api.request("DELETE", path)
    except ApiError as e:
        if e.status != 404:
            raise


@contextmanager
def staged(cluster: ClusterState, scenario: Scenario, label: str) -> Iterator[Namespace]:
    """A fresh namespace with the scenario's background in place; everything it made undone afterwards.

    Node changes come first, then the background pods (which tolerate them), then the volume: Phalanx's
    watches see the node changes before the background is bound, and the background bound before the gang."""
    api = cluster.client()
    ns = new_namespace(cluster, f"diff-{scenario.seed}-{label}")
    suffix = uuid.uuid4().hex[:6]
    pv, storage_class = f"diff-{scenario.seed}-{suffix}", f"diff-{scenario.seed}-{suffix}"
    touched = sorted({t.node for t in scenario.taints} | set(scenario.cordoned) | set(dict(scenario.ranks)))
    try:
        for node in touched:
            _update_node(api, node, _node_state(scenario, node))
        for pod in scenario.background:
            ns.create(pod)
        if scenario.background:
            wait_for(
                "the background pods running",
                lambda: (
                    len(ps := ns.pods(f"app={BACKGROUND_APP}")) == len(scenario.background)
                    and all(p["status"].get("phase") == "Running" for p in ps)
                ),
                timeout=60,
            )
        if scenario.volume is not None:
            _volume(ns, scenario.volume, pv, storage_class)
        yield ns
    finally:
        _clear_namespace(ns)
        for node in touched:
            _update_node(api, node, _undo_node_state)
        if scenario.volume is not None:
            _delete(api, f"/api/v1/persistentvolumes/{pv}")
            if scenario.volume["binding"] != "Immediate":
                _delete(api, f"/apis/storage.k8s.io/v1/storageclasses/{storage_class}")


def _clear_namespace(ns: Namespace) -> None:
    """Delete the Jobs, pods and namespace at once (grace 0: there is no kubelet to wait for), so the next
    scenario starts on free nodes in a second rather than after graceful termination."""
    base = f"/namespaces/{ns.name}"
    for path in (f"/apis/batch/v1{base}/jobs", f"/api/v1{base}/pods"):
        try:
            ns.api.request("DELETE", f"{path}?gracePeriodSeconds=0&propagationPolicy=Background")
        except ApiError as e:
            if e.status != 404:
                raise
    delete_namespace(ns)


def _volume(ns: Namespace, volume: dict[str, Any], pv: str, storage_class: str) -> None:
    """A local PersistentVolume with the required node affinity, and the claim `data` for it.

    Immediate: no StorageClass of that name exists, so the claim binds at once (and is Bound before the gang
    is created). WaitForFirstConsumer: a class without provisioner (static local volumes)."""
    if volume["binding"] != "Immediate":
        ns.api.request(
            "POST",
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": storage_class},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    affinity = {"matchExpressions": [{"key": volume["key"], "operator": "In", "values": volume["values"]}]}
    ns.api.request(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "persistentVolumeReclaimPolicy": "Retain",
                "local": {"path": "/mnt/data"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [affinity]}},
            },
        },
    )
    # Available once the PersistentVolume controller has it in its cache: the claim then binds on its
    # creation, not at the controller's next resync (15 s later).
    wait_for(
        "the volume available",
        lambda: ns.api.get(f"/api/v1/persistentvolumes/{pv}").get("status", {}).get("phase") == "Available",
        timeout=30,
    )
    ns.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    if volume["binding"] == "Immediate":
        wait_for(
            "the claim bound",
            lambda: (
                ns.get("/api/v1/namespaces/{ns}/persistentvolumeclaims/data")["status"].get("phase")
                == "Bound"
            ),
            timeout=60,
        )


def _group_condition(groups: list[dict[str, Any]], job: str, kind: str) -> dict[str, Any] | None:
    """Condition `kind` of the Job's PodGroup (Phalanx labels it; upstream's is owned by the Job)."""
    for group in groups:
        meta = group["metadata"]
        owners = {o["name"] for o in meta.get("ownerReferences", []) if o["kind"] == "Job"}
        if meta.get("labels", {}).get("phalanx.dev/job-name") == job or job in owners:
            for cond in group.get("status", {}).get("conditions", []):
                if cond["type"] == kind:
                    return dict(cond)
    return None


def _released(pod: dict[str, Any]) -> bool:
    return not any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates", []))


def _refused(pod: dict[str, Any]) -> str | None:
    """kube-scheduler's reason for not binding a pod, if it said one."""
    cond = pod_condition(pod, "PodScheduled")
    if cond and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
        node = pod["spec"].get("nodeSelector", {}).get(HOST)
        return f"{pod['metadata']['name']} (pinned to {node}): {cond['message']}"
    return None


def _nodes(pods: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted(p["spec"]["nodeName"] for p in bound(pods)))


def _play(
    cluster: ClusterState, scenario: Scenario, flavor: str, watch: Callable[[Namespace, Scenario], Run]
) -> Run:
    started = time.monotonic()
    with staged(cluster, scenario, flavor) as ns:
        for gang in scenario.gangs:
            ns.create(gang.job(flavor))
        run = watch(ns, scenario)
    run.seconds = time.monotonic() - started
    return run


def run_phalanx(cluster: ClusterState, scenario: Scenario) -> Run:
    """The gangs on the stock cluster, Phalanx deciding: each placed (every pod bound), unschedulable,
    unsupported, or stuck (a released pod kube-scheduler refuses, or that does not bind in time)."""
    return _play(cluster, scenario, "phalanx", _watch_phalanx)


def run_upstream(cluster: ClusterState, scenario: Scenario) -> Run:
    """The same gangs on the upstream cluster (Job `spec.scheduling`): each placed, or unschedulable."""
    return _play(cluster, scenario, "upstream", _watch_upstream)


def _watch(
    ns: Namespace,
    scenario: Scenario,
    decided: Callable[[Gang, list[dict[str, Any]], list[dict[str, Any]]], str | None],
    who: str,
) -> Run:
    """Wait until every gang is placed or said not to fit (`decided` gives the message); the latter then
    watched for HOLD_SECONDS: nothing released or bound, the same message. For Phalanx a change is the
    outcome (`unsteady`, a BUG); upstream is watched on (it retries in a random node order). Released pods
    that kube-scheduler refuses for BIND_GRACE make their gang `stuck`."""
    notes: list[str] = []
    deadline = time.monotonic() + DECIDE_TIMEOUT
    refused_since: float | None = None
    groups_path = PHALANX_GROUPS if who == "Phalanx" else UPSTREAM_GROUPS
    while time.monotonic() < deadline:
        pods = {g.name: ns.job_pods(g.name) for g in scenario.gangs}
        groups = ns.get(groups_path)["items"]
        refusals = {
            name: [r for p in ps if _released(p) and not p["spec"].get("nodeName") and (r := _refused(p))]
            for name, ps in pods.items()
        }
        if who == "Phalanx" and any(refusals.values()):
            # Every released pod must bind whatever the order; watched a little longer to say whether it
            # binds at all.
            refused_since = refused_since or time.monotonic()
            if time.monotonic() - refused_since > BIND_GRACE:
                return Run([_stuck(g, pods[g.name], refusals[g.name]) for g in scenario.gangs], notes)
        outcome: list[Observed | None] = []
        for gang in scenario.gangs:
            ps = pods[gang.name]
            if len(ps) == gang.count and len(bound(ps)) == gang.count:
                outcome.append(Observed("placed", nodes=_nodes(ps)))
            elif (message := decided(gang, ps, groups)) is not None:
                kind = "unsupported" if NOT_MODELLED in message else "unschedulable"
                outcome.append(Observed(kind, message))
            else:
                outcome.append(None)
        if all(o is not None for o in outcome):
            observed = [o for o in outcome if o is not None]
            waiting = [(g, o) for g, o in zip(scenario.gangs, observed, strict=True) if o.kind != "placed"]

            def changes(waiting: list[tuple[Gang, Observed]] = waiting) -> dict[str, str]:
                """What became of the gangs said not to fit: gang name -> what changed (empty: nothing)."""
                groups = ns.get(groups_path)["items"]
                changed: dict[str, str] = {}
                for gang, o in waiting:
                    ps = ns.job_pods(gang.name)
                    now = decided(gang, ps, groups)
                    if bound(ps):
                        changed[gang.name] = f"{len(bound(ps))} pod(s) bound after all"
                    elif who == "Phalanx" and any(_released(p) for p in ps):
                        changed[gang.name] = "pods released after all"
                    elif now is None:
                        changed[gang.name] = "no longer said not to fit"
                    elif who == "Phalanx" and now != o.message:
                        # Upstream's counts change from try to try (its node order is random): only
                        # Phalanx's message must stay the same.
                        changed[gang.name] = f"then said {now!r}"
                return changed

            changed: dict[str, str] = {}
            until = time.monotonic() + (HOLD_SECONDS if waiting else 0.0)
            while not changed and time.monotonic() < until:
                changed = changes()
                time.sleep(0.5)
            if changed and who == "Phalanx":
                # A gang Phalanx refused must stay refused, with the same words, in a cluster that does
                # not change: anything else is a failing outcome, not a note.
                return Run(
                    [
                        Observed("unsteady", f"said {o.message!r}, {changed[g.name]}", o.nodes)
                        if g.name in changed
                        else o
                        for g, o in zip(scenario.gangs, observed, strict=True)
                    ],
                    notes,
                )
            if changed:
                # Upstream may place a gang it failed to place at first (it retries, in a random node
                # order): watched on until it settles.
                notes.append(f"{who} said {[o.message for _, o in waiting]!r}, then {changed!r}")
                continue
            return Run(observed, notes)
        time.sleep(0.25)
    pods = {g.name: ns.job_pods(g.name) for g in scenario.gangs}
    if who == "Phalanx" and any(_released(p) and not bound([p]) for ps in pods.values() for p in ps):
        gangs = []
        for gang in scenario.gangs:
            refused = [r for p in pods[gang.name] if _released(p) and (r := _refused(p))]
            gangs.append(_stuck(gang, pods[gang.name], refused or ["released, not bound in time"]))
        return Run(gangs, notes)
    states = {
        g.name: f"{len(bound(ps))}/{g.count} bound"
        for g, ps in zip(scenario.gangs, pods.values(), strict=True)
    }
    raise AssertionError(f"{who} neither placed the gangs nor said they cannot fit: {states}")


def _stuck(gang: Gang, pods: list[dict[str, Any]], refusals: list[str]) -> Observed:
    if refusals:
        return Observed("stuck", "; ".join(refusals), _nodes(pods))
    if len(pods) == gang.count and len(bound(pods)) == gang.count:
        return Observed("placed", nodes=_nodes(pods))
    return Observed("undecided", f"{len(bound(pods))}/{gang.count} bound", _nodes(pods))


def _phalanx_decided(gang: Gang, pods: list[dict[str, Any]], groups: list[dict[str, Any]]) -> str | None:
    """Admitted=False/Unschedulable's message, once every pod exists and none is released (not one that
    says the gang waits for another pod's binding: Phalanx decides again once it is bound)."""
    admitted = _group_condition(groups, gang.name, "Admitted")
    if (
        len(pods) == gang.count
        and not any(_released(p) for p in pods)
        and admitted
        and admitted["status"] == "False"
        and admitted["reason"] == "Unschedulable"
        and WAITS_FOR_BIND not in admitted["message"]
    ):
        return str(admitted["message"])
    return None


def _upstream_decided(gang: Gang, pods: list[dict[str, Any]], groups: list[dict[str, Any]]) -> str | None:
    """PodGroupInitiallyScheduled=False's message once it tried its placements, with no pod bound."""
    cond = _group_condition(groups, gang.name, "PodGroupInitiallyScheduled")
    if cond and cond["status"] == "False" and PLACEMENTS_TRIED in cond.get("message", "") and not bound(pods):
        return str(cond["message"])
    return None


def _watch_phalanx(ns: Namespace, scenario: Scenario) -> Run:
    return _watch(ns, scenario, _phalanx_decided, "Phalanx")


def _watch_upstream(ns: Namespace, scenario: Scenario) -> Run:
    return _watch(ns, scenario, _upstream_decided, "upstream")


# ---------------------------------------------------------------------- both, compared


def verdict(phalanx: Run, upstream: Run) -> str:
    """Compare what both did. With two gangs, only "Phalanx placed none, upstream placed some" is a
    disagreement: otherwise Phalanx decided the refused gang beside the other's pods, which upstream may
    have put elsewhere or not placed (the order and the nodes of the first gang decide the second)."""
    kinds = {o.kind for o in phalanx.gangs}
    if kinds & {"stuck", "undecided", "unsteady"}:
        return BUG
    if "unsupported" in kinds:
        return UNSUPPORTED
    ours, theirs, every = phalanx.placed(), upstream.placed(), frozenset(range(len(phalanx.gangs)))
    if ours == theirs:
        return BOTH_PLACED if ours == every else BOTH_UNSCHEDULABLE if not ours else SAME_GANG
    if not ours:
        return DISAGREE
    if theirs < ours:
        return PHALANX_ONLY
    return OTHER_GANG


@dataclass
class Result:
    scenario: Scenario
    phalanx: Run
    upstream: Run

    @property
    def verdict(self) -> str:
        return verdict(self.phalanx, self.upstream)

    def report(self) -> str:
        lines = [f"seed {self.scenario.seed}: {self.verdict} — {self.scenario.summary()}"]
        for who, run in (("Phalanx", self.phalanx), ("upstream", self.upstream)):
            for gang, observed in zip(self.scenario.gangs, run.gangs, strict=True):
                lines.append(f"  {who} ({run.seconds:.1f} s), {gang.name}: {observed.line()}")
            lines += [f"  note: {n}" for n in run.notes]
        return "\n".join(lines)


def run_both(stock: ClusterState, upstream: ClusterState, scenario: Scenario) -> Result:
    """The scenario on both clusters at once (they are independent), compared."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"diff-{scenario.seed}") as pool:
        ours = pool.submit(run_phalanx, stock, scenario)
        theirs = pool.submit(run_upstream, upstream, scenario)
        return Result(scenario, ours.result(), theirs.result())
