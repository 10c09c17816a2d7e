"""What a crash-kinds round of the soak (soak.py) submits besides gang Jobs, drawn from its seeded generator:
JobSets (one or two replicated Jobs, up to four child Jobs; no key, a network-block key, a local-block key, or
a network-block key with each child Job in one local block; some started InOrder), LeaderWorkerSets (1-2
groups of 2-4 pods, each group a gang; some started LeaderReady, some of 4 pods in two subgroups each in one
local block of one network block) and TrainJobs (Trainer's torch runtime shape: `numNodes` pods of one
replicated Job), pods of 8 or 4 GPUs on the seed cluster (8 nodes of 8 GPUs, 2 network blocks of 4, 4 local
blocks of 2); about one in eight can never fit (more pods than any domain of its key holds). Each says how it
is created (JobSets, TrainJobs and Jobs suspended, so that their groups exist before the release; an LWS has
no suspend and is created at the release), released at once, and which kind deletes it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .gangs import PATHS, RUNTIMES
from .invariants import packs
from .kinds import ensure, jobset, lws, replicated_job, torch_runtime, trainjob
from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace

SLOTS = {None: 8, NB_KEY: 4, LB_KEY: 2}  # nodes of the seed cluster in one domain of each key
SOAK_RUNTIME = "phalanx-soak-torch-{gpus}"


class Submission(Protocol):
    """One object a round submits: a gang Job (soak.GangSpec) or one of the kinds below."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def gangs(self) -> int:
        """How many gangs it is (an LWS: one per group)."""
        ...

    @property
    def smallest(self) -> int:
        """The pods of its smallest gang (an LWS: one group)."""
        ...

    @property
    def brief(self) -> str:
        """What it is, in a few words (the soak's round log)."""
        ...

    def create(self, ns: Namespace, suspend: bool) -> None:
        """Create it (`suspend`: held back until `release`; a kind without suspend is created only then)."""
        ...

    def release(self, ns: Namespace) -> None:
        """Let it run (resume it, or create it now)."""
        ...


def resources(pod_spec: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The soak's pod shape: `gpus` GPUs and 2 CPUs (as the gang Jobs of soak.py)."""
    for container in pod_spec["containers"]:
        container["resources"] = {"limits": {GPU_KEY: str(gpus)}, "requests": {"cpu": "2"}}
    return pod_spec


def _keys(key: str | None, slice_key: str | None = None) -> dict[str, str]:
    keys = {"phalanx.dev/topology-key": key} if key else {}
    return keys | ({"phalanx.dev/slice-topology-key": slice_key} if slice_key else {})


def key_name(key: str | None) -> str:
    return {None: "anywhere", NB_KEY: "nb", LB_KEY: "lb"}[key]


def _resume(ns: Namespace, kind: str, name: str) -> None:
    ns.api.request(
        "PATCH",
        f"{PATHS[kind].replace('{ns}', ns.name)}/{name}",
        {"spec": {"suspend": False}},
        "application/merge-patch+json",
    )


@dataclass(frozen=True)
class JobSetSpec:
    name: str
    children: tuple[tuple[int, int], ...]  # (replicas, parallelism) per replicated Job
    gpus: int
    key: str | None
    slice_key: str | None = None
    in_order: bool = (
        False  # startupPolicyOrder InOrder: a replicated Job is made once the one before is Ready
    )
    kind: str = "JobSet"
    gangs: int = 1
    priority: str | None = None  # the pods' PriorityClass (the preemption soak's)

    @property
    def size(self) -> int:
        return sum(replicas * parallelism for replicas, parallelism in self.children)

    @property
    def brief(self) -> str:
        jobs = "+".join(f"{r}x{p}" for r, p in self.children)
        where = key_name(self.key) + ("/lb each child" if self.slice_key else "")
        return f"{self.name} JobSet {jobs} x{self.gpus}gpu {where}" + (" InOrder" if self.in_order else "")

    @property
    def smallest(self) -> int:
        return self.size

    def body(self, suspend: bool) -> dict[str, Any]:
        rjobs = [replicated_job(f"w{i}", r, p, backoff_limit=6) for i, (r, p) in enumerate(self.children)]
        for rjob in rjobs:
            prioritized(resources(rjob["template"]["spec"]["template"]["spec"], self.gpus), self.priority)
        body = jobset(self.name, *rjobs, annotations=_keys(self.key, self.slice_key), in_order=self.in_order)
        body["spec"]["suspend"] = suspend
        return body

    def create(self, ns: Namespace, suspend: bool) -> None:
        ns.create(self.body(suspend))

    def release(self, ns: Namespace) -> None:
        _resume(ns, self.kind, self.name)

    def fits_empty(self) -> bool:
        slots = SLOTS[self.key] * (8 // self.gpus)
        if self.slice_key is None:
            return self.size <= slots
        per_block = SLOTS[self.slice_key] * (8 // self.gpus)
        sizes = [p for r, p in self.children for _ in range(r)]
        return packs(sizes, [per_block] * (SLOTS[self.key] // SLOTS[self.slice_key]))


@dataclass(frozen=True)
class LwsSpec:
    name: str
    replicas: int
    size: int  # pods of one group
    gpus: int
    key: str | None
    leader_ready: bool = (
        False  # startupPolicy LeaderReady: a group's workers are made once its leader is Ready
    )
    subgroup: int | None = None  # subGroupSize, each subgroup in one local block
    kind: str = "LeaderWorkerSet"
    priority: str | None = None

    @property
    def gangs(self) -> int:
        return self.replicas

    @property
    def brief(self) -> str:
        how = (" LeaderReady" if self.leader_ready else "") + (
            f" subgroups of {self.subgroup}/lb" if self.subgroup else ""
        )
        return f"{self.name} LWS {self.replicas}x{self.size} x{self.gpus}gpu {key_name(self.key)}{how}"

    @property
    def smallest(self) -> int:
        return self.size

    def body(self) -> dict[str, Any]:
        slice_key = LB_KEY if self.subgroup else None
        body = lws(
            self.name,
            self.size,
            replicas=self.replicas,
            annotations=_keys(self.key, slice_key),
            leader_ready=self.leader_ready,
            subgroup_size=self.subgroup,
        )
        spec = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        prioritized(resources(spec, self.gpus), self.priority)  # the leader's too: no leaderTemplate
        return body

    def create(self, ns: Namespace, suspend: bool) -> None:
        if not suspend:  # no suspend in an LWS: else made at the release
            ns.create(self.body())

    def release(self, ns: Namespace) -> None:
        ns.create(self.body())

    def fits_empty(self) -> bool:
        if self.subgroup:
            per_block = SLOTS[LB_KEY] * (8 // self.gpus)
            sizes = [min(self.subgroup, self.size - start) for start in range(0, self.size, self.subgroup)]
            return packs(sizes, [per_block] * (SLOTS[self.key] // SLOTS[LB_KEY]))
        return self.size <= SLOTS[self.key] * (8 // self.gpus)


@dataclass(frozen=True)
class TrainJobSpec:
    name: str
    nodes: int
    gpus: int
    key: str | None
    kind: str = "TrainJob"
    gangs: int = 1
    priority: str | None = None  # its runtime's pods' PriorityClass (a runtime per class: runtimes())

    @property
    def brief(self) -> str:
        return f"{self.name} TrainJob {self.nodes} x{self.gpus}gpu {key_name(self.key)}"

    @property
    def smallest(self) -> int:
        return self.nodes

    def body(self, suspend: bool) -> dict[str, Any]:
        body = trainjob(self.name, runtime_name(self.gpus, self.priority), _keys(self.key))
        body["spec"] |= {"trainer": {"numNodes": self.nodes}, "suspend": suspend}
        return body

    def create(self, ns: Namespace, suspend: bool) -> None:
        ns.create(self.body(suspend))

    def release(self, ns: Namespace) -> None:
        _resume(ns, self.kind, self.name)

    def fits_empty(self) -> bool:
        return self.nodes <= SLOTS[self.key] * (8 // self.gpus)


def prioritized(pod_spec: dict[str, Any], priority: str | None) -> dict[str, Any]:
    """The pod spec naming the PriorityClass, if any."""
    if priority:
        pod_spec["priorityClassName"] = priority
    return pod_spec


def runtime_name(gpus: int, priority: str | None = None) -> str:
    return SOAK_RUNTIME.format(gpus=gpus) + (f"-{priority}" if priority else "")


def runtimes(ns: Namespace, priorities: tuple[str, ...] = ()) -> None:
    """The ClusterTrainingRuntimes the TrainJobs name: torch's shape, pods of 8 or of 4 GPUs and 2 CPUs (one
    more of each per PriorityClass of `priorities`, its pods of that class)."""
    for gpus in (8, 4):
        for priority in (None, *priorities):
            runtime = torch_runtime(runtime_name(gpus, priority), 1)
            rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
            prioritized(resources(rjob["template"]["spec"]["template"]["spec"], gpus), priority)
            ensure(ns, RUNTIMES, runtime)


def random_jobset(rng: random.Random, name: str, never: bool) -> JobSetSpec:
    key = rng.choice([None, NB_KEY, NB_KEY, LB_KEY])
    slice_key = LB_KEY if key == NB_KEY and rng.random() < 0.5 else None
    gpus = rng.choice([8, 8, 4])
    if never or rng.random() < 0.12:  # one more pod than a domain of its key holds
        over = SLOTS[key] * (8 // gpus) + 1
        return JobSetSpec(name, ((1, over),), gpus, key)
    while True:
        children = tuple((rng.randint(1, 2), rng.randint(1, 2)) for _ in range(rng.randint(1, 2)))
        in_order = len(children) > 1 and rng.random() < 0.3
        spec = JobSetSpec(name, children, gpus, key, slice_key, in_order)
        if spec.size <= 6 and spec.fits_empty():
            return spec


def random_lws(rng: random.Random, name: str, never: bool) -> LwsSpec:
    key = rng.choice([None, NB_KEY, LB_KEY])
    gpus = rng.choice([8, 8, 4])
    if never or rng.random() < 0.12:
        return LwsSpec(name, 1, 3, 8, LB_KEY)  # a local block holds two such pods
    leader_ready = rng.random() < 0.25
    while True:
        size = rng.randint(2, 4)
        subgroup = 2 if key == NB_KEY and size == 4 and rng.random() < 0.4 else None
        spec = LwsSpec(name, rng.randint(1, 2), size, gpus, key, leader_ready, subgroup)
        if spec.fits_empty():
            return spec


def random_trainjob(rng: random.Random, name: str, never: bool) -> TrainJobSpec:
    key = rng.choice([None, NB_KEY, NB_KEY])
    gpus = rng.choice([8, 8, 4])
    if never or rng.random() < 0.12:
        return TrainJobSpec(name, 5, 8, NB_KEY)
    return TrainJobSpec(name, rng.randint(1, 4), gpus, key)


DRAWS: dict[str, Callable[[random.Random, str, bool], Submission]] = {
    "JobSet": random_jobset,
    "LeaderWorkerSet": random_lws,
    "TrainJob": random_trainjob,
}


def random_kind(rng: random.Random, name: str, never: bool) -> Submission | None:
    """One of the kinds, or None for a gang Job (about three in ten)."""
    kind = rng.choice(
        [
            "Job",
            "Job",
            "Job",
            "JobSet",
            "JobSet",
            "JobSet",
            "LeaderWorkerSet",
            "LeaderWorkerSet",
            "TrainJob",
            "TrainJob",
        ]
    )
    return draw_kind(kind, rng, name, never)


def draw_kind(kind: str, rng: random.Random, name: str, never: bool) -> Submission | None:
    """One of `kind` (None for a gang Job: soak.random_gang draws it)."""
    if kind == "Job":
        return None
    return DRAWS[kind](rng, name, never)
