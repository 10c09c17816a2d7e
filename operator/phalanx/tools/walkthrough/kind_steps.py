"""Walk-through steps for the workload kinds GPU users submit: a JobSet, a Kubeflow TrainJob and a
LeaderWorkerSet, each the article's gang case (3 free nodes: nothing starts; a fourth frees: all start at
once) with the real controllers of `phalanx dev-cluster up --addons jobset,lws,trainer`.

A step whose kind the cluster does not serve is skipped with a line saying what to start (`Demo.require`):
the stock dev cluster has none of these CRDs. docs/integrations.md says what each kind maps to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.api.group import GROUP
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.topology import LOCAL_BLOCK_KEY, NETWORK_BLOCK_KEY
from phalanx.tools.walkthrough.demo import Demo
from phalanx.tools.walkthrough.facts import GPU, PAUSE_IMAGE, bound, condition, gated, live
from phalanx.tools.walkthrough.runner import Step

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
LWS_API = "leaderworkerset.x-k8s.io/v1"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed-4x8"
MANAGED = {keys.MANAGED_LABEL: keys.MANAGED_VALUE}


def _pod_spec(restart: str = "Never") -> dict[str, Any]:
    return {
        "restartPolicy": restart,
        "containers": [{"name": "w", "image": PAUSE_IMAGE, "resources": {"limits": {GPU: "8"}}}],
    }


def _pods(d: Demo, label: str, value: str) -> list[Mapping[str, Any]]:
    return [
        p
        for p in live(d.pods())
        if p["metadata"].get("labels", {}).get(label) == value
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    ]


def _owned(d: Demo, owner: str, plural: str = "podgroups") -> list[dict[str, Any]]:
    path = d.path(f"/apis/{GROUP}/v1beta1/namespaces/{{ns}}/{plural}")
    return [
        g
        for g in d.api.get(path)["items"]
        if (g["metadata"].get("annotations") or {}).get(keys.OWNER_ANNOTATION) == owner
    ]


def _refused(d: Demo, owner: str, plural: str) -> dict[str, Any] | None:
    """The owner's root group tried whole and refused (Admitted=False Unschedulable)."""
    for group in _owned(d, owner, plural):
        cond = condition(group, "Admitted")
        if cond and cond.get("reason") == "Unschedulable":
            return cond
    return None


def _gang(d: Demo, what: str, owner: str, plural: str, pods: Any, count: int) -> dict[str, Any]:
    """Wait until `owner`'s gang is tried whole and refused with `count` pods gated, none bound; watch."""
    cond = d.wait(
        f"{what}: {count} pods gated, Admitted=False Unschedulable",
        lambda: _refused(d, owner, plural) if len(gated(pods())) == count else None,
    )
    d.hold(f"no {what} pod binds", lambda: not bound(pods()))
    return cond


def _all_bound(d: Demo, what: str, pods: Any, count: int, key: str) -> list[Mapping[str, Any]]:
    return d.wait(
        f"all {count} {what} pods bound at once, in one {key.rsplit('_', 1)[0].rsplit('.', 1)[-1]}",
        lambda: ps if len(bound(ps := pods())) == count and len(d.domains(ps, key)) == 1 else None,
    )


# ---------------------------------------------------------------------- JobSet


def jobset_step(d: Demo) -> None:
    d.require(JOBSET_API, "JobSet", "jobset")
    d.fill(*FIVE_BUSY)
    rjob = {
        "name": "workers",
        "replicas": 2,
        "template": {
            "spec": {
                "parallelism": 2,
                "completions": 2,
                "completionMode": "Indexed",
                "template": {"spec": _pod_spec()},
            }
        },
    }
    notes = {
        keys.TOPOLOGY_KEY_ANNOTATION: NETWORK_BLOCK_KEY,
        keys.SLICE_TOPOLOGY_KEY_ANNOTATION: LOCAL_BLOCK_KEY,
    }
    body = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": "train", "labels": MANAGED, "annotations": notes},
        "spec": {"replicatedJobs": [rjob]},
    }
    d.command(
        "kubectl apply -f train.yaml   # JobSet train: 2 child Jobs x 2 pods x 8 GPUs, label "
        f"{keys.MANAGED_LABEL}=true, topology-key NB, slice-topology-key LB"
    )
    d.create(body, "jobsets")

    def pods() -> list[Mapping[str, Any]]:
        return _pods(d, "jobset.sigs.k8s.io/jobset-name", "train")

    cond = _gang(d, "train", "JobSet/train", "compositepodgroups", pods, 4)
    d.show("JobSet train with 3 free nodes")
    d.say(f"CompositePodGroup of JobSet train: Admitted=False Unschedulable: {cond.get('message')}")
    d.unfill("was-worker")
    placed = _all_bound(d, "train", pods, 4, NETWORK_BLOCK_KEY)
    children = [
        d.domains(
            [p for p in placed if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == i],
            LOCAL_BLOCK_KEY,
        )
        for i in ("0", "1")
    ]
    d.check(
        all(len(c) == 1 for c in children) and children[0] != children[1],
        "each child Job in its own local block",
        children,
    )
    d.show("JobSet train after freeing was-worker")
    d.notice(
        "a JobSet is one gang: a CompositePodGroup over a PodGroup per child Job (minCount its parallelism). "
        "With 3 free nodes no pod of it started; with 4 all did, in one network block, each child Job in "
        "its own local block. Without Phalanx (or Kueue) the JobSet controller's pods start one by one "
        "(jobset#969)."
    )


# ---------------------------------------------------------------------- TrainJob


def _runtime() -> dict[str, Any]:
    container = {"name": "node", "image": PAUSE_IMAGE, "resources": {"limits": {GPU: "8"}}}
    step = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    return {
        "apiVersion": TRAINER_API,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 4, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": step},
                                "spec": {"template": {"spec": {"containers": [container]}}},
                            },
                        }
                    ]
                }
            },
        },
    }


def trainjob_step(d: Demo) -> None:
    d.require(TRAINER_API, "TrainJob", "trainer")
    d.require(JOBSET_API, "JobSet", "jobset")
    try:
        d.api.request("POST", f"/apis/{TRAINER_API}/clustertrainingruntimes", _runtime())
        d.say(
            f"(created ClusterTrainingRuntime {RUNTIME}: torch-distributed's shape, numNodes 4, "
            "8 GPUs a node)"
        )
    except ApiError as e:
        if e.status != 409:
            raise
    d.fill("was-worker", "was-worker5")
    body = {
        "apiVersion": TRAINER_API,
        "kind": "TrainJob",
        "metadata": {
            "name": "llm",
            "labels": MANAGED,
            "annotations": {keys.TOPOLOGY_KEY_ANNOTATION: NETWORK_BLOCK_KEY},
        },
        "spec": {"runtimeRef": {"name": RUNTIME}},
    }
    d.command(
        f"kubectl apply -f llm.yaml   # TrainJob llm: runtime {RUNTIME}, label {keys.MANAGED_LABEL}=true, "
        "topology-key NB"
    )
    d.create(body, "trainjobs")

    def pods() -> list[Mapping[str, Any]]:
        return _pods(d, "jobset.sigs.k8s.io/jobset-name", "llm")

    cond = _gang(d, "llm", "TrainJob/llm", "compositepodgroups", pods, 4)
    d.show("TrainJob llm: 6 nodes free, 3 in each network block")
    d.say(f"its CompositePodGroup: Admitted=False Unschedulable: {cond.get('message')}")
    d.unfill("was-worker")
    placed = _all_bound(d, "llm", pods, 4, NETWORK_BLOCK_KEY)
    d.check(d.domains(placed) == {"nb-a"}, "all 4 nodes of llm in nb-a", d.domains(placed))
    d.wait(
        "the PodGroup's OWNER is TrainJob/llm",
        lambda: _owned(d, "TrainJob/llm") or None,
    )
    d.show("TrainJob llm after freeing was-worker")
    d.notice(
        "Trainer makes a JobSet for the TrainJob; Phalanx's runtime patch (manager phalanx.dev/manager) "
        "carried the label and annotations to it, so it was held whole and placed whole in one network "
        "block. kubectl get podgroups, the events and phalanx explain trainjob/llm name the TrainJob."
    )


# ---------------------------------------------------------------------- LeaderWorkerSet


def lws_step(d: Demo) -> None:
    d.require(LWS_API, "LeaderWorkerSet", "lws")
    d.fill(*FIVE_BUSY)
    body = {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "serve",
            "labels": MANAGED,
            "annotations": {keys.TOPOLOGY_KEY_ANNOTATION: NETWORK_BLOCK_KEY},
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": _pod_spec("Always")}},
        },
    }
    d.command(
        "kubectl apply -f serve.yaml   # LeaderWorkerSet serve: groups of 4 pods x 8 GPUs, startupPolicy "
        f"LeaderReady, label {keys.MANAGED_LABEL}=true, topology-key NB"
    )
    d.create(body, "leaderworkersets")

    def pods() -> list[Mapping[str, Any]]:
        return _pods(d, "leaderworkerset.sigs.k8s.io/name", "serve")

    cond = _gang(d, "serve (its leader)", "LeaderWorkerSet/serve", "podgroups", pods, 1)
    d.show("LeaderWorkerSet serve with 3 free nodes")
    d.say(f"PodGroup of group 0: Admitted=False Unschedulable: {cond.get('message')}")
    d.unfill("was-worker")
    _all_bound(d, "serve", pods, 4, NETWORK_BLOCK_KEY)
    d.show("LeaderWorkerSet serve after freeing was-worker")
    d.notice(
        "each LWS group is one gang. With LeaderReady LWS makes the workers only once the leader is Ready, "
        "so Phalanx decides the whole group when the leader comes, holds the workers' room and releases "
        "them into it: with 3 free nodes not even the leader started (upstream: the leader binds and the "
        "workers can stay Pending for good, lws#167); with 4 the whole group ran in one network block."
    )


KIND_STEPS: list[Step] = [
    Step("jobset", "JobSet: 2 child Jobs of 2 pods, 3 free nodes, then 4", jobset_step, addon="jobset"),
    Step(
        "trainjob",
        "TrainJob: torch-distributed, 4 nodes in one network block",
        trainjob_step,
        addon="trainer",
    ),
    Step(
        "lws", "LeaderWorkerSet: a group of 4 with LeaderReady, 3 free nodes, then 4", lws_step, addon="lws"
    ),
]
