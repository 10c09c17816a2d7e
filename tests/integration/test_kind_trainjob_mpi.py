"""TrainJobs of Trainer's MPI runtimes (DeepSpeed, MLX: mlPolicy `mpi`) against the real Kubeflow Trainer
v2.2.0 and JobSet v0.11.1 controllers, with Phalanx on the same cluster. Their JobSet has two replicated Jobs,
a `launcher` (one pod, running mpirun) and `node` (the GPU pods, running sshd); Trainer's MPI plugin makes an
ssh Secret and a hostfile ConfigMap beside it. Phalanx admits the JobSet as one tree: one PodGroup per child
Job (launcher-0 of minCount 1, node-0 of the node pods), all or nothing, every pod of it, the launcher
included, in one network block (`phalanx.dev/topology-key`):

- runLauncherAsNode false: a CPU-only launcher and numNodes GPU node pods. The launcher would fit on any
  node, even one whose GPUs are all taken, but it waits with the nodes and is placed in their block.
- runLauncherAsNode true: the launcher is one of the numNodes GPU pods (Trainer makes numNodes-1 `node`).
- the launcher `dependsOn` the nodes being Ready (JobSet makes it only then): a staged JobSet, decided
  whole with its first stage (the node pods) with the launcher's room held, never deadlocked; `phalanx
  explain` says why it waits as the loop decided it (the launcher's slot does not fit).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kinds import (
    JOBSET_NAME,
    RUNTIMES,
    TRAINJOBS,
    TrainJobSuspendWatch,
    changes,
    condition,
    ensure,
    explain,
    gated,
    jobset_gang,
    jobset_pods,
    label_of,
    mpi_runtime,
    owned,
    phalanx_objects,
    reasons_of,
    trainjob,
    wait_bound,
    wait_unschedulable,
    whole_gangs,
)
from .kube import NB_KEY, Namespace, bound, hold, node_labels, wait_for

pytestmark = pytest.mark.integration

KEY = {"phalanx.dev/topology-key": NB_KEY}
NODES = 4  # the TrainJob's spec.trainer.numNodes
FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
NOT_SEEN_YET = "must be created before the TrainJob is created"


def create_trainjob(ns: Namespace, body: dict[str, Any]) -> None:
    """Create the TrainJob once Trainer's validator sees its runtime (it reads its own cache, which may not
    have a runtime created a moment ago: it refuses the TrainJob saying the runtime must be created first)."""

    def created() -> bool | None:
        try:
            ns.create(body)
        except ApiError as e:
            if e.status == 403 and NOT_SEEN_YET in json.loads(e.body).get("message", ""):
                return None
            raise
        return True

    wait_for(f"Trainer to take TrainJob {body['metadata']['name']}", created, timeout=30)


def by_job(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The pods by replicated Job (launcher, node)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        out.setdefault(pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"], []).append(pod)
    return out


def gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"]["containers"]
    )


def groups_of(ns: Namespace, owner: str) -> dict[str, int]:
    """The PodGroups of `owner` by the child Job they stand for (their name's end), with their minCount."""
    return {
        "-".join(g["metadata"]["name"].split("-")[-2:]): g["spec"]["schedulingPolicy"]["gang"]["minCount"]
        for g in owned(ns, owner)
    }


def mpi_objects(ns: Namespace, name: str) -> tuple[str, str]:
    """The ssh Secret and hostfile ConfigMap Trainer's MPI plugin made for TrainJob `name` (their types and
    the hostfile), waited for."""
    secret = wait_for(
        "the MPI ssh Secret",
        lambda: _get(ns, f"/api/v1/namespaces/{{ns}}/secrets/{name}-mpi-ssh-auth"),
        timeout=30,
    )
    hostfile = wait_for(
        "the MPI hostfile ConfigMap",
        lambda: _get(ns, f"/api/v1/namespaces/{{ns}}/configmaps/{name}-mpi-hostfile"),
        timeout=30,
    )
    return str(secret["type"]), str(hostfile["data"]["hostfile"])


def _get(ns: Namespace, path: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = ns.get(path)
        return body
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def end_pod(ns: Namespace, pod: dict[str, Any]) -> None:
    """Ask the simulated kubelet to end a running pod with exit code 0 (kwok stage pod-complete)."""
    ns.api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns.name}/pods/{pod['metadata']['name']}",
        {"metadata": {"annotations": {"sim.phalanx.dev/complete-after": "1s"}}},
        "application/merge-patch+json",
    )


def _complete(ns: Namespace, name: str) -> bool | None:
    return condition(ns.get(f"{TRAINJOBS}/{name}"), "Complete").get("status") == "True" or None


def root_of(ns: Namespace, owner: str) -> dict[str, Any]:
    (root,) = owned(ns, owner, "compositepodgroups")
    return root


def hosts(hostfile: str) -> list[str]:
    """The hosts of an OpenMPI hostfile, without the domain: `<trainjob>-<rjob>-0-<index>`."""
    return [line.split()[0].split(".")[0] for line in hostfile.splitlines() if line.strip()]


def test_an_mpi_trainjob_with_a_cpu_launcher_waits_whole_and_runs_whole_in_one_network_block(
    kinds_ns: Namespace,
) -> None:
    """runLauncherAsNode false, numNodes 4: a CPU-only launcher and four 8-GPU node pods. was-worker and
    was-worker5 busy (their GPUs taken, their CPUs free): three free nodes in each block, so the four node
    pods fit nowhere whole and nothing starts — not even the launcher, which alone would fit on any node.
    Phalanx counts the gang as Trainer's JobSet has it (launcher 1 + node 4). Freeing was-worker makes nb-a
    whole: all five pods start there together, the node pods on four nodes and the launcher beside one."""
    ns = kinds_ns
    runtime = "mpi-cpu-launcher"
    ensure(ns, RUNTIMES, mpi_runtime(runtime, launcher_as_node=False))
    ns.fill("was-worker", "was-worker5")
    with whole_gangs(ns, {"mpi": NODES + 1}, jobset_gang):
        create_trainjob(ns, trainjob("mpi", runtime, KEY, num_nodes=NODES))
        kind, hostfile = mpi_objects(ns, "mpi")
        assert kind == "kubernetes.io/ssh-auth"
        assert hosts(hostfile) == [f"mpi-node-0-{i}" for i in range(NODES)]  # the launcher is no host
        wait_unschedulable(ns, "TrainJob/mpi")
        assert groups_of(ns, "TrainJob/mpi") == {"launcher-0": 1, "node-0": NODES}
        hold("no pod of it bound", lambda: not bound(jobset_pods(ns, "mpi")), seconds=2)
        waits = explain(ns, "trainjob/mpi")
        print(waits)
        assert waits.startswith(
            f"trainjob/mpi in namespace {ns.name}: waiting: composite group is unschedulable"
        )
        assert "-launcher-0: fits, waits for the rest of the tree" in waits  # held for the nodes, not alone
        assert "-node-0: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu)" in waits
        waiting = by_job(jobset_pods(ns, "mpi"))
        assert {job: len(gated(pods)) for job, pods in waiting.items()} == {"launcher": 1, "node": NODES}
        ns.unfill("was-worker")
        pods = wait_bound(ns, "mpi", lambda: jobset_pods(ns, "mpi"), NODES + 1)
    print(ns.where(f"{JOBSET_NAME}=mpi"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    placed = by_job(pods)
    (launcher,) = placed["launcher"]
    assert gpus(launcher) == 0 and [gpus(p) for p in placed["node"]] == [8] * NODES
    assert len({p["spec"]["nodeName"] for p in placed["node"]}) == NODES
    assert launcher["spec"]["nodeName"] in {p["spec"]["nodeName"] for p in placed["node"]}
    made = phalanx_objects(ns, "TrainJob/mpi")
    assert [len(made[p]) for p in ("workloads", "compositepodgroups", "podgroups")] == [1, 1, 2], made
    wait_for(
        "the root Admitted in nb-a",
        lambda: [
            r
            for r in owned(ns, "TrainJob/mpi", "compositepodgroups")
            if condition(r).get("status") == "True" and (r.get("status") or {}).get("domain") == "nb-a"
        ],
        timeout=60,
    )

    # mpirun returns: the launcher's Job completes, and with it the JobSet (its successPolicy is the
    # launcher's), whose controller then deletes the node Jobs: their sshd pods never end by themselves. The
    # gang ends whole, as finished, not as one left short by its node pods' deletion.
    watch = TrainJobSuspendWatch(ns, "mpi")
    try:
        end_pod(ns, launcher)
        wait_for("the TrainJob Complete", lambda: _complete(ns, "mpi"), timeout=60)
        wait_for("its node pods gone", lambda: not jobset_pods(ns, "mpi"), timeout=60)
        wait_for(
            "the root Finished",
            lambda: (root_of(ns, "TrainJob/mpi")["status"].get("phase") == "Finished") or None,
            timeout=60,
        )
    finally:
        watch.stop()
    assert changes(watch.notes) == [(False, "")], watch.notes  # never suspended (requeued) on the way
    assert "Requeued" not in reasons_of(ns, "TrainJob", "mpi")


def test_an_mpi_trainjob_whose_launcher_is_a_node_runs_its_four_gpu_pods_whole_in_one_network_block(
    kinds_ns: Namespace,
) -> None:
    """runLauncherAsNode true, numNodes 4 (the shape of Trainer's deepspeed-distributed and mlx-distributed):
    Trainer makes one launcher and three node pods, all of 8 GPUs, the launcher first in the hostfile. With
    three free nodes in each block they wait, all four; with four in nb-a they start there together, each on
    its own node."""
    ns = kinds_ns
    runtime = "mpi-launcher-as-node"
    ensure(ns, RUNTIMES, mpi_runtime(runtime, launcher_as_node=True))
    ns.fill("was-worker", "was-worker5")
    with whole_gangs(ns, {"ds": NODES}, jobset_gang):
        create_trainjob(ns, trainjob("ds", runtime, KEY, num_nodes=NODES))
        _, hostfile = mpi_objects(ns, "ds")
        assert hosts(hostfile) == ["ds-launcher-0-0", *(f"ds-node-0-{i}" for i in range(NODES - 1))]
        wait_unschedulable(ns, "TrainJob/ds")
        assert groups_of(ns, "TrainJob/ds") == {"launcher-0": 1, "node-0": NODES - 1}
        hold("no pod of it bound", lambda: not bound(jobset_pods(ns, "ds")), seconds=2)
        assert len(gated(jobset_pods(ns, "ds"))) == NODES
        ns.unfill("was-worker")
        pods = wait_bound(ns, "ds", lambda: jobset_pods(ns, "ds"), NODES)
    print(ns.where(f"{JOBSET_NAME}=ds"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    assert len({p["spec"]["nodeName"] for p in pods}) == NODES
    assert {job: [gpus(p) for p in ps] for job, ps in by_job(pods).items()} == {
        "launcher": [8],
        "node": [8] * (NODES - 1),
    }


def test_an_mpi_trainjob_whose_launcher_waits_for_ready_nodes_is_decided_whole_with_them(
    kinds_ns: Namespace,
) -> None:
    """The launcher `dependsOn` the node Job being Ready (node listed first), runLauncherAsNode true: JobSet
    makes the launcher's Job only once the three node pods are Ready. Five nodes busy: nb-a has three free,
    room for the node pods but not for the launcher's 8 GPUs. Releasing the node pods alone would leave the
    launcher pending (a partial gang); waiting for every pod to exist would deadlock (the launcher comes only
    after the nodes run). Phalanx decides the whole tree with the node pods, a slot for the launcher, so
    nothing starts on three nodes; with a fourth free node in nb-a the node pods go, the launcher's Job is
    made and its pod goes to the node held for it: one decision, never a second."""
    ns = kinds_ns
    runtime = "mpi-launcher-after-nodes"
    ensure(ns, RUNTIMES, mpi_runtime(runtime, launcher_as_node=True, launcher_after_nodes=True))
    ns.fill(*FIVE_BUSY)
    create_trainjob(ns, trainjob("staged", runtime, KEY, num_nodes=NODES))
    wait_unschedulable(ns, "TrainJob/staged")
    assert groups_of(ns, "TrainJob/staged") == {"node-0": NODES - 1, "launcher-0": 1}
    hold(
        "the node pods wait, gated",
        lambda: len(gated(jobset_pods(ns, "staged"))) == NODES - 1 and not bound(jobset_pods(ns, "staged")),
        seconds=2,
    )
    assert set(by_job(jobset_pods(ns, "staged"))) == {"node"}  # no launcher before the nodes are Ready
    # explain says what the loop decided, with the launcher's slot: its 8 GPUs fit nowhere beside the nodes.
    waits = explain(ns, "trainjob/staged")
    print(waits)
    assert waits.startswith(
        f"trainjob/staged in namespace {ns.name}: waiting: composite group is unschedulable: 2 of 2 child "
        f"groups must fit in one domain of {NB_KEY}; 1 of 2 child groups fit in nb-a"
    )
    assert "    Now: 0 of 1 pods fit (4 nodes: Insufficient nvidia.com/gpu)" in waits.splitlines()
    ns.unfill("was-worker")
    pods = wait_bound(ns, "staged", lambda: jobset_pods(ns, "staged"), NODES)
    print(ns.where(f"{JOBSET_NAME}=staged"))
    labels = node_labels(ns.api)
    assert {label_of(p["spec"]["nodeName"], NB_KEY, labels) for p in pods} == {"nb-a"}
    assert len({p["spec"]["nodeName"] for p in pods}) == NODES
    admission = root_of(ns, "TrainJob/staged")["status"]["admission"]
    assert admission.get("attempt", 0) == 0  # the decision made with the node pods, not a second one
    (slot,) = [a["node"] for a in admission["assignments"] if "-slot-" in a["pod"]]
    (launcher,) = by_job(pods)["launcher"]
    assert launcher["spec"]["nodeName"] == slot  # the launcher went to the node held for it
