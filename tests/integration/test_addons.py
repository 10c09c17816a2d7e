"""`dev-cluster up --addons`: the real JobSet, LWS, Kubeflow Trainer and Kueue controllers do their work on
the dev cluster (webhooks on 127.0.0.1, CRDs from their released modules), and `down` stops them all."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.devcluster import addons
from phalanx.devcluster.binaries import K8S_VERSION
from phalanx.devcluster.cluster import ClusterState, pid_alive
from phalanx.devcluster.http import ApiError

from .addons_fixtures import addons_on
from .kube import GPU_KEY, Namespace, wait_for
from .test_dev_cluster import processes_mentioning

pytestmark = pytest.mark.integration

JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def small_pod_spec(gpus: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {GPU_KEY: str(gpus)}
    return {"containers": [{"name": "worker", "image": "simulated/worker:1", "resources": resources}]}


def running_pods(ns: Namespace, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in ns.pods(selector)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def wait_running(ns: Namespace, selector: str, count: int, timeout: float = 180) -> list[dict[str, Any]]:
    def probe() -> list[dict[str, Any]] | None:
        pods = running_pods(ns, selector)
        return pods if len(pods) == count else None

    return wait_for(f"{count} Running pods with {selector}", probe, timeout=timeout)


def process_start(pid: int) -> float:
    """When a process started (seconds since the epoch), from /proc."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    # Not /proc/stat's btime: it is whole seconds, truncated, so a start read from it is up to a second early
    # (CI once saw KCM "start" 40 ms before a CRD it in fact followed). Boot = now - uptime, to 10 ms.
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- up, status, down
def test_up_with_addons_status_and_down_leave_nothing_behind(tmp_path: Path) -> None:
    """Through the CLI: `--addons trainer,kueue` adds jobset (and says so), `status` lists each addon running,
    and `down` stops every addon process, leaving no mount (Kueue's private /etc overlay) behind."""
    folder = tmp_path / "cluster"
    cli = [sys.executable, "-m", "phalanx.cli", "dev-cluster"]
    up = subprocess.run(
        [*cli, "up", "--dir", str(folder), "--topology", "1x1x2", "--addons", "trainer,kueue"],
        capture_output=True,
        text=True,
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert "--addons: added jobset (trainer needs it)" in up.stdout
        for name in ("jobset", "trainer", "kueue"):
            assert f"addon {name} {addons.ADDONS[name].version} ready" in up.stdout
        status = subprocess.run([*cli, "status", "--dir", str(folder)], capture_output=True, text=True)
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert sorted(info["addons"]) == ["jobset", "kueue", "trainer"]
        assert all(a["running"] for a in info["addons"].values()), info["addons"]
        state = ClusterState.load(folder)
        assert state is not None
        addon_pids = [state.pids[f"addon-{n}"] for n in ("jobset", "trainer", "kueue")]
        assert all(pid_alive(p) for p in addon_pids)
        for name, record in state.addons.items():
            assert Path(record["log"]).is_file(), name
            assert record["webhook_configurations"], name
        assert not Path("/etc/kueue").exists(), "Kueue's metrics certificate must stay in its private /etc"
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(folder)], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    for name in ("addon-jobset", "addon-trainer", "addon-kueue"):
        assert name in down.stdout
    assert processes_mentioning(str(folder)) == []
    assert all(not pid_alive(p) for p in addon_pids)
    with open("/proc/self/mountinfo") as f:
        assert str(folder) not in f.read()
    assert not Path("/etc/kueue").exists()


def test_unknown_addon_is_refused_before_anything_starts(tmp_path: Path) -> None:
    folder = tmp_path / "cluster"
    cli = [sys.executable, "-m", "phalanx.cli", "dev-cluster"]
    up = subprocess.run(
        [*cli, "up", "--dir", str(folder), "--addons", "jobset,volcano"], capture_output=True, text=True
    )
    assert up.returncode == 1
    assert "unknown addon 'volcano': choose from jobset, lws, trainer, kueue" in up.stderr
    assert not (folder / "state.json").exists()


def test_the_state_records_each_addon(addons_cluster: ClusterState) -> None:
    """Every addon the version supports runs (all four from v1.32; lws and kueue before), and Kueue has a
    framework for each."""
    running = list(addons_on(addons_cluster.kubernetes_version))
    assert list(addons_cluster.addons) == running
    if addons_cluster.kubernetes_version == K8S_VERSION:
        assert running == ["jobset", "lws", "trainer", "kueue"]
    for name, record in addons_cluster.addons.items():
        assert record["version"] == addons.ADDONS[name].version
        assert pid_alive(addons_cluster.pids[record["pid_name"]])
        assert Path(record["log"]).parent == addons_cluster.logs
        assert record["crds"] and record["webhook_configurations"]
    every = {
        "jobset": "jobset.x-k8s.io/jobset",
        "lws": "leaderworkerset.x-k8s.io/leaderworkerset",
        "trainer": "trainer.kubeflow.org/trainjob",
    }
    assert addons_cluster.addons["kueue"]["frameworks"] == [
        "batch/job",
        *(framework for name, framework in every.items() if name in running),
    ]


def test_addon_crds_exist_before_the_garbage_collector_starts(addons_cluster: ClusterState) -> None:
    """The root of Kueue's lingering-Workload pitfall: kube-controller-manager's garbage collector watches
    only kinds it discovers, so every addon CRD was made before kube-controller-manager started."""
    kcm_started = process_start(addons_cluster.pids["kube-controller-manager"])
    api = addons_cluster.client()

    for record in addons_cluster.addons.values():
        for crd in record["crds"]:
            made = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")["metadata"][
                "creationTimestamp"
            ]
            # creationTimestamp has whole seconds: made in the second before or the one KCM started in.
            assert dt.datetime.fromisoformat(made).timestamp() <= kcm_started, (crd, made, kcm_started)


# ---------------------------------------------------------------------------- JobSet
def jobset(name: str, replicas: int = 2, parallelism: int = 2, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "backoffLimit": 0,
                            "template": {"spec": small_pod_spec()},
                        }
                    },
                }
            ],
            **spec,
        },
    }


@pytest.mark.addons("jobset")
def test_a_jobset_creates_its_child_jobs_and_their_pods(addons_ns: Namespace) -> None:
    addons_ns.create(jobset("train"), f"{JOBSET_API}/namespaces/{addons_ns.name}/jobsets")
    selector = "jobset.sigs.k8s.io/jobset-name=train"

    def child_jobs() -> list[dict[str, Any]] | None:
        items = addons_ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs?labelSelector={selector}")["items"]
        return items if len(items) == 2 else None

    jobs = wait_for("the JobSet's 2 child Jobs", child_jobs, timeout=120)
    assert sorted(j["metadata"]["name"] for j in jobs) == ["train-workers-0", "train-workers-1"]
    for job in jobs:
        assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
        assert job["spec"]["completionMode"] == "Indexed"  # JobSet's defaulting webhook
    pods = wait_running(addons_ns, selector, 4)
    assert sorted(p["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] for p in pods) == [
        "0",
        "0",
        "1",
        "1",
    ]
    assert all(p["spec"].get("nodeName") for p in pods)


@pytest.mark.addons("jobset")
def test_an_invalid_jobset_is_refused_by_jobsets_webhook(addons_ns: Namespace) -> None:
    bad = jobset("bad")
    bad["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "other", "status": "Ready"}]
    with pytest.raises(ApiError) as refused:
        addons_ns.create(bad, f"{JOBSET_API}/namespaces/{addons_ns.name}/jobsets")
    assert refused.value.status in (400, 403, 422)
    message = json.loads(refused.value.body)["message"]
    assert 'admission webhook "jobset.vjobset.kb.io" denied the request' in message
    assert "DependsOn can't be set for the first ReplicatedJob" in message


# ---------------------------------------------------------------------------- LeaderWorkerSet
@pytest.mark.addons("lws")
def test_a_leaderworkerset_creates_leaders_and_workers_with_their_labels(addons_ns: Namespace) -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": small_pod_spec()}},
        },
    }
    addons_ns.create(lws, f"{LWS_API}/namespaces/{addons_ns.name}/leaderworkersets")
    selector = "leaderworkerset.sigs.k8s.io/name=serve"
    pods = wait_running(addons_ns, selector, 6)
    seen = {
        (
            p["metadata"]["name"],
            p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"],
            p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"],
        )
        for p in pods
    }
    assert seen == {
        ("serve-0", "0", "0"),
        ("serve-0-1", "0", "1"),
        ("serve-0-2", "0", "2"),
        ("serve-1", "1", "0"),
        ("serve-1-1", "1", "1"),
        ("serve-1-2", "1", "2"),
    }
    # LWS's annotations: the group's size on every pod, the leader's name on each worker.
    for p in pods:
        labels, notes = p["metadata"]["labels"], p["metadata"]["annotations"]
        assert notes["leaderworkerset.sigs.k8s.io/size"] == "3"
        if labels["leaderworkerset.sigs.k8s.io/worker-index"] != "0":
            group = labels["leaderworkerset.sigs.k8s.io/group-index"]
            assert notes["leaderworkerset.sigs.k8s.io/leader-name"] == f"serve-{group}"


# ---------------------------------------------------------------------------- Trainer
def torch_runtime(name: str, nodes: int) -> dict[str, Any]:
    """Trainer's own torch-distributed ClusterTrainingRuntime (from its released module), numNodes set."""
    source = addons.source_dir(addons.ADDONS["trainer"])
    runtime: dict[str, Any] = yaml.safe_load(
        (source / "manifests/base/runtimes/torch_distributed.yaml").read_text()
    )
    runtime["metadata"]["name"] = name
    runtime["spec"]["mlPolicy"]["numNodes"] = nodes
    return runtime


@pytest.mark.addons("trainer")
def test_a_trainjob_on_a_torch_distributed_runtime_materialises_a_jobset(addons_ns: Namespace) -> None:
    runtime_name = f"torch-4-{uuid.uuid4().hex[:5]}"
    api = addons_ns.api
    api.request("POST", f"{TRAINER_API}/clustertrainingruntimes", torch_runtime(runtime_name, 4))
    try:
        trainjob = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "llm"},
            "spec": {
                "runtimeRef": {"name": runtime_name, "kind": "ClusterTrainingRuntime"},
                "trainer": {"resourcesPerNode": {"limits": {GPU_KEY: "8"}}},
            },
        }
        addons_ns.create(trainjob, f"{TRAINER_API}/namespaces/{addons_ns.name}/trainjobs")

        def materialised() -> dict[str, Any] | None:
            try:
                return addons_ns.get(f"{JOBSET_API}/namespaces/{{ns}}/jobsets/llm")  # type: ignore[no-any-return]
            except ApiError:
                return None

        made = wait_for("the TrainJob's JobSet", materialised, timeout=120)
        assert made["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
        node = next(r for r in made["spec"]["replicatedJobs"] if r["name"] == "node")
        assert node["template"]["spec"]["parallelism"] == 4
        container = node["template"]["spec"]["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"][GPU_KEY] == "8"
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env.get("PET_NNODES") == "4"
        pods = wait_running(addons_ns, "jobset.sigs.k8s.io/jobset-name=llm", 4)
        assert len({p["spec"]["nodeName"] for p in pods}) == 4  # 8 GPUs each: one per node
    finally:
        api.request("DELETE", f"{TRAINER_API}/clustertrainingruntimes/{runtime_name}")


# ---------------------------------------------------------------------------- Kueue
def kueue_objects(suffix: str, namespace: str, gpus: int) -> list[tuple[str, dict[str, Any]]]:
    flavor, cq = f"flavor-{suffix}", f"cq-{suffix}"
    return [
        (
            f"{KUEUE_API}/resourceflavors",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
        ),
        (
            f"{KUEUE_API}/clusterqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU_KEY],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "100"},
                                        {"name": "memory", "nominalQuota": "1Ti"},
                                        {"name": GPU_KEY, "nominalQuota": str(gpus)},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
        (
            f"{KUEUE_API}/namespaces/{namespace}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": namespace},
                "spec": {"clusterQueue": cq},
            },
        ),
    ]


def workloads(ns: Namespace) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get(f"{KUEUE_API}/namespaces/{{ns}}/workloads")["items"]
    return items


@pytest.mark.addons("kueue")
def test_kueue_suspends_a_queued_job_until_a_clusterqueue_admits_it(addons_ns: Namespace) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "queued", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {"spec": {**small_pod_spec(gpus=8), "restartPolicy": "Never"}},
        },
    }
    created = addons_ns.create(job)
    assert created["spec"]["suspend"] is True  # Kueue's Job webhook, at creation
    wait_for("the Job's Workload", lambda: workloads(addons_ns), timeout=60)
    # No LocalQueue yet: the Workload waits, the Job stays suspended and makes no pod.
    assert addons_ns.get("/apis/batch/v1/namespaces/{ns}/jobs/queued")["spec"]["suspend"] is True
    assert addons_ns.job_pods("queued") == []

    suffix = uuid.uuid4().hex[:6]
    made = kueue_objects(suffix, addons_ns.name, gpus=16)
    api = addons_ns.api
    try:
        for path, obj in made:
            api.request("POST", path, obj)

        def admitted() -> bool:
            found = workloads(addons_ns)
            return bool(found) and any(
                c["type"] == "Admitted" and c["status"] == "True"
                for c in found[0].get("status", {}).get("conditions", [])
            )

        wait_for("Kueue to admit the Workload", admitted, timeout=90)
        wait_for(
            "the Job unsuspended",
            lambda: addons_ns.get("/apis/batch/v1/namespaces/{ns}/jobs/queued")["spec"]["suspend"] is False,
            timeout=60,
        )
        wait_for("2 Running pods", lambda: len(running_pods(addons_ns, "job-name=queued")) == 2, timeout=120)

        # The garbage collector knows Workloads from its start: deleting the Job deletes its Workload.
        api.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{addons_ns.name}/jobs/queued",
            {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        wait_for("the deleted Job's Workload gone", lambda: not workloads(addons_ns), timeout=60)
    finally:
        for path, obj in reversed(made):
            try:
                api.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise


@pytest.mark.addons("jobset", "lws", "kueue")
def test_kueue_holds_a_queued_jobset_and_a_queued_leaderworkerset_until_admitted(
    addons_ns: Namespace,
) -> None:
    """Kueue's JobSet and LWS integrations (on because those addons run): a queued JobSet is suspended
    at creation, a queued LWS's pods wait behind Kueue's gate; both run once a ClusterQueue admits them."""
    queued = {"kueue.x-k8s.io/queue-name": "lq"}
    js = jobset("queued-js", replicas=1, parallelism=2)
    js["metadata"]["labels"] = queued
    created = addons_ns.create(js, f"{JOBSET_API}/namespaces/{addons_ns.name}/jobsets")
    assert created["spec"]["suspend"] is True  # Kueue's JobSet webhook
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "queued-lws", "labels": queued},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": small_pod_spec()}},
        },
    }
    addons_ns.create(lws, f"{LWS_API}/namespaces/{addons_ns.name}/leaderworkersets")
    lws_selector = "leaderworkerset.sigs.k8s.io/name=queued-lws"

    def gated() -> list[dict[str, Any]] | None:
        pods = addons_ns.pods(lws_selector)
        gates = [{g["name"] for g in p["spec"].get("schedulingGates") or []} for p in pods]
        return pods if pods and all("kueue.x-k8s.io/admission" in g for g in gates) else None

    wait_for("the LWS's pods gated by Kueue", gated, timeout=120)
    assert addons_ns.pods("jobset.sigs.k8s.io/jobset-name=queued-js") == []

    suffix = uuid.uuid4().hex[:6]
    made = kueue_objects(suffix, addons_ns.name, gpus=8)
    api = addons_ns.api
    try:
        for path, obj in made:
            api.request("POST", path, obj)
        wait_running(addons_ns, "jobset.sigs.k8s.io/jobset-name=queued-js", 2)
        wait_running(addons_ns, lws_selector, 2)
    finally:
        for path, obj in reversed(made):
            try:
                api.request("DELETE", f"{path}/{obj['metadata']['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise


# ---------------------------------------------------------------------------- manifests (no cluster)
def test_the_pinned_modules_hold_the_versions_up_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    for addon in addons.ADDONS.values():
        got = subprocess.run(
            ["go", "list", "-m", "-f", "{{.Version}}", addon.module],
            cwd=root / "hack" / "addons" / addon.go_dir,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert got == addon.version, addon.name


def test_the_webhooks_kept_are_the_addons_own_and_their_selected_pod_webhooks() -> None:
    frameworks = addons.kueue_frameworks(addons.ORDER)
    kept: dict[str, set[str]] = {}
    selectors: dict[str, Any] = {}
    for name, addon in addons.ADDONS.items():
        docs = addons.webhook_documents(addon, addons.source_dir(addon))
        rendered = addons.rewrite_webhooks(addon, docs, 12345, b"ca", frameworks)
        hooks = [h for d in rendered for h in d["webhooks"]]
        kept[name] = {h["name"] for h in hooks}
        for h in hooks:
            assert h["clientConfig"]["url"].startswith("https://127.0.0.1:12345/")
            assert "service" not in h["clientConfig"]
            if any("pods" in r["resources"] for r in h["rules"]):
                selectors[h["name"]] = h["objectSelector"]
    assert kept["jobset"] == {
        "jobset.mjobset.kb.io",
        "jobset.vjobset.kb.io",
        "jobset.mpod.kb.io",
        "jobset.vpod.kb.io",
    }
    assert kept["lws"] == {
        "lws.mleaderworkerset.kb.io",
        "lws.vleaderworkerset.kb.io",
        "lws.mpod.kb.io",
        "lws.vpod.kb.io",
    }
    assert kept["trainer"] == {
        "trainer.defaulter.trainjob.trainer.kubeflow.org",
        "trainer.validator.trainjob.trainer.kubeflow.org",
        "trainer.validator.trainingruntime.trainer.kubeflow.org",
        "trainer.validator.clustertrainingruntime.trainer.kubeflow.org",
    }
    # Kueue: its own kinds, Jobs, JobSets, LWSs, TrainJobs and (for LWS) pods; no Deployment, StatefulSet,
    # RayJob... webhook (those frameworks are off: no handler would answer).
    assert {n.split(".")[1] for n in kept["kueue"]} == {
        "mclusterqueue",
        "vclusterqueue",
        "vcohort",
        "mresourceflavor",
        "vresourceflavor",
        "mworkload",
        "vworkload",
        "mjob",
        "vjob",
        "mjobset",
        "vjobset",
        "mleaderworkerset",
        "vleaderworkerset",
        "mtrainjob",
        "vtrainjob",
        "mpod",
        "vpod",
    }
    jobset_pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    assert selectors["jobset.mpod.kb.io"] == selectors["jobset.vpod.kb.io"] == jobset_pods
    for hook in ("lws.mpod.kb.io", "lws.vpod.kb.io", "kueue.mpod.kb.io", "kueue.vpod.kb.io"):
        assert selectors[hook] == addons.LWS_POD_SELECTOR, hook
    # Without LWS, Kueue keeps no pod webhook at all.
    kueue = addons.ADDONS["kueue"]
    only_jobs = addons.rewrite_webhooks(
        kueue, addons.webhook_documents(kueue, addons.source_dir(kueue)), 1, b"ca", ["batch/job"]
    )
    names = {h["name"].split(".")[1] for d in only_jobs for h in d["webhooks"]}
    assert "mpod" not in names and "mjobset" not in names and "mtrainjob" not in names and "mjob" in names
