"""The applier asks the API whether an owner still is before making its Workload again, once one of the
owner's objects went while the cache held the owner alive: the garbage collector deletes an owner's objects
once the owner is deleted, and the watch of the owners may tell of that deletion after the watch of the
Workloads tells of theirs (a TrainJob's CI flake: its Workload, groups and PodGroupCreated made twice while
it went). The real apiserver answers; the cache is Phalanx's own, fed the events in that order."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.api.builders import build_workload
from phalanx.api.group import GROUP, VERSION
from phalanx.api.job_policy import parse_job_policy
from phalanx.api.workload import Workload
from phalanx.controller import metrics
from phalanx.controller.apply.applier import Applier
from phalanx.controller.apply.events import EventRecorder
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import CreateWorkload, UnitPlan
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.process.access import declared
from phalanx.controller.process.settings import Settings
from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.kubeclient import ApiClient, load

from .faultproxy import FaultProxy, Rates
from .kube import Namespace, delete_namespace, new_namespace, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(stock_cluster: ClusterState) -> AsyncIterator[ApiClient]:
    """Phalanx's own client, as the operator makes it: refusing any access the operator does not declare."""
    credentials = load(str(stock_cluster.kubeconfig), in_cluster_first=True)
    async with ApiClient(credentials, allowed=declared(Settings())) as api_client:
        yield api_client


class Events:
    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None:
        raise AssertionError(f"no event expected: {reason}: {message}")


def unmanaged_job(ns: Namespace) -> dict[str, Any]:
    """A suspended Job without Phalanx's label: the operator running on this cluster makes nothing for it
    (it has no pods to let go of)."""
    job: dict[str, Any] = ns.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "owner"},
            "spec": {
                "suspend": True,
                "parallelism": 2,
                "completions": 2,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "w", "image": "pause"}],
                        # the gate: the cache keeps it (a Job whose pods Phalanx would let go), with no
                        # Workload of ours left to hold it
                        "schedulingGates": [{"name": "phalanx.dev/admission"}],
                    }
                },
            },
        }
    )
    job.update(apiVersion="batch/v1", kind="Job")
    return job


def cache_that_saw_its_workload_go(job: dict[str, Any]) -> tuple[ClusterCache, Workload]:
    """A cache that holds the Job alive and saw its Workload deleted (the Workload's DELETED event first)."""
    workload = Workload.model_validate(build_workload(job, parse_job_policy(job, running=True), None))
    body = workload.to_api()
    body["metadata"].update(
        uid="wl-1", resourceVersion="1", creationTimestamp=job["metadata"]["creationTimestamp"]
    )
    cache = ClusterCache()
    cache.upsert("Job", job)
    cache.upsert("Workload", body)
    assert cache.owner_record("Job", job["metadata"]["uid"]) is not None
    cache.delete("Workload", body)
    assert job["metadata"]["uid"] in cache.bereft
    return cache, workload


def workloads_in_api(ns: Namespace) -> list[str]:
    """The names of the namespace's Workloads (the CRD not installed is an error, not an empty list)."""
    return [
        w["metadata"]["name"] for w in ns.get(f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/workloads")["items"]
    ]


@pytest.fixture
def owner_ns(stock_cluster: ClusterState, phalanx: OperatorProcess) -> Iterator[Namespace]:
    """A namespace of the stock cluster, with Phalanx's CRDs installed (and its operator running)."""
    ns = new_namespace(stock_cluster, "owner-gone")
    yield ns
    delete_namespace(ns)


@pytest.mark.parametrize("deletion", ["Background", "Foreground"])
async def test_no_workload_is_made_again_for_an_owner_the_api_has_deleted_or_is_deleting(
    owner_ns: Namespace, api: ApiClient, deletion: str
) -> None:
    """The Job is deleted (background: gone at once; foreground: held by the garbage collector's finalizer)
    and its deletion has not reached the cache: the applier asks, makes nothing, and the cache learns."""
    ns = owner_ns
    job = unmanaged_job(ns)
    uid = job["metadata"]["uid"]
    cache, workload = cache_that_saw_its_workload_go(job)
    finalizer = {"metadata": {"finalizers": ["phalanx.dev/test-hold"]}} if deletion == "Foreground" else None
    if finalizer is not None:  # holds it in the "being deleted" state for the test's length
        ns.patch_job("owner", finalizer)
    ns.api.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns.name}/jobs/owner",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": deletion},
    )
    applier = Applier(cache, Kube(api), Events())
    (result,) = await applier.apply([UnitPlan("Job/owner-gone/owner", (CreateWorkload(workload),))])
    try:
        assert result.ok
        assert workloads_in_api(ns) == []
        held = cache.owner_record("Job", uid)
        assert held is None or held.deleting  # no unit is made for it from now on
        # A watch event from before its deletion, late, brings it back alive: it is asked about again.
        cache.upsert("Job", job)
        assert cache.owner_record("Job", uid) is not None and uid in cache.bereft
        (again,) = await applier.apply([UnitPlan("Job/owner-gone/owner", (CreateWorkload(workload),))])
        assert again.ok and workloads_in_api(ns) == []
    finally:
        if finalizer is not None:
            ns.patch_job("owner", {"metadata": {"finalizers": None}})


async def test_units_of_one_owner_whose_objects_went_ask_the_api_about_it_once(
    owner_ns: Namespace, stock_cluster: ClusterState, tmp_path: Path
) -> None:
    """Several units of one owner (a LeaderWorkerSet's groups) make its objects again in one pass, after
    one of them went while the cache held the owner alive: one read of the owner, their answer shared —
    counted at a proxy in front of the apiserver. The owner is gone: nothing is made by any of them."""
    ns = owner_ns
    job = unmanaged_job(ns)
    cache, workload = cache_that_saw_its_workload_go(job)
    ns.api.request("DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/owner")
    wait_for("the Job gone", lambda: not ns.get("/apis/batch/v1/namespaces/{ns}/jobs")["items"])
    proxy = FaultProxy(stock_cluster, tmp_path, rates=Rates.none())
    proxy.start()
    try:
        credentials = load(str(proxy.kubeconfig), in_cluster_first=True)
        async with ApiClient(credentials, allowed=declared(Settings())) as through_proxy:
            applier = Applier(cache, Kube(through_proxy), Events())
            plans = [UnitPlan(f"Job/owner-gone/owner-{i}", (CreateWorkload(workload),)) for i in range(4)]
            results = await applier.apply(plans)
        assert all(r.ok for r in results)
        assert workloads_in_api(ns) == []
        asked = proxy.requests("GET", f"/apis/batch/v1/namespaces/{ns.name}/jobs/owner")
        assert len(asked) == 1, asked
    finally:
        proxy.stop()


async def test_a_workload_deleted_by_hand_is_made_again_for_an_owner_that_still_is(
    owner_ns: Namespace, api: ApiClient
) -> None:
    """A user deleted the Workload of a Job that still is: the applier asks once, and makes it again."""
    ns = owner_ns
    job = unmanaged_job(ns)
    uid = job["metadata"]["uid"]
    cache, workload = cache_that_saw_its_workload_go(job)
    applier = Applier(cache, Kube(api), Events())
    (result,) = await applier.apply([UnitPlan("Job/owner-gone/owner", (CreateWorkload(workload),))])
    assert result.ok
    name = str(workload.metadata["name"])
    made = cache.workloads.get(f"{ns.name}/{name}")
    assert made is not None and made.uid != "wl-1"  # the API's answer: made anew
    assert uid not in cache.bereft  # asked once: the next ones are made without asking
    # (Not read back from the API: the operator running on this cluster lets go of a Workload of a Job
    # without its label, and may have deleted it already. The answer above is the API's.)


async def test_nothing_is_made_or_warned_of_in_a_namespace_being_deleted(
    owner_ns: Namespace, api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A namespace being deleted (held in Terminating by a finalizer) still shows its Job to the cache:
    the apiserver refuses every create there (403, cause NamespaceTerminating), the Workload's and the
    events' alike, and all in it goes. Not a failure: no warning, no event, no failure counted; the unit
    backs off until the Job's deletion reaches the cache."""
    ns = owner_ns
    job = unmanaged_job(ns)
    cache = ClusterCache()
    cache.upsert("Job", job)
    workload = Workload.model_validate(build_workload(job, parse_job_policy(job, running=True), None))
    hold = {"name": "held", "finalizers": ["phalanx.dev/test-hold"]}  # keeps the namespace Terminating
    ns.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": hold})
    held = f"/api/v1/namespaces/{ns.name}/configmaps/held"
    try:
        ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}")
        wait_for(
            "the namespace to be terminating",
            lambda: ns.get(f"/api/v1/namespaces/{ns.name}")["status"].get("phase") == "Terminating",
            timeout=30,
        )
        failures = metrics.APPLY_FAILURES.labels("CreateWorkload")._value.get()
        api_errors = metrics.API_ERRORS.labels("create", "403")._value.get()
        recorder = EventRecorder(api)
        applier = Applier(cache, Kube(api), recorder)
        key = "Job/owner-gone/owner"
        with caplog.at_level(logging.DEBUG, logger="phalanx"):
            (result,) = await applier.apply([UnitPlan(key, (CreateWorkload(workload),))])
            ref = ObjectRef("batch/v1", "Job", ns.name, "owner", job["metadata"]["uid"])
            await recorder.post(ref, "Warning", "FailedCreate", "anything")
        assert result.ok and result.retry_in > 0
        assert key in applier.backoff.waiting()
        assert metrics.APPLY_FAILURES.labels("CreateWorkload")._value.get() == failures
        assert metrics.API_ERRORS.labels("create", "403")._value.get() == api_errors
        assert workloads_in_api(ns) == []
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warned == []
        said = [r.getMessage() for r in caplog.records]
        assert any("its namespace is being deleted" in m and "creating Workload" in m for m in said), said
        assert any("FailedCreate" in m and "not posted: its namespace is being deleted" in m for m in said), (
            said
        )
    finally:
        ns.api.request("PATCH", held, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
