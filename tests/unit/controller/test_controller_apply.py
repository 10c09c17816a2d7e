"""The applier's own logic — order inside a group, isolation between groups, backoff — without a cluster.

`RecordingKube` is a stand-in with Kube's write methods that answers like the API (or fails as told); the
same behaviour against a real apiserver is tested in tests/integration/test_controller_isolation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from phalanx.api.status import Admission, Assignment, PodGroupStatus
from phalanx.controller import metrics
from phalanx.controller.apply.applier import Applier, Backoff
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import (
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    UnitPlan,
)
from phalanx.controller.model.refs import ObjectRef
from phalanx.kubeclient import ApiException


def forbidden(message: str) -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


class RecordingKube:
    def __init__(self, failing_namespaces: Mapping[str, ApiException]) -> None:
        self.failing = failing_namespaces
        self.calls: list[tuple[str, str]] = []

    def _check(self, verb: str, namespace: str, name: str) -> None:
        self.calls.append((verb, f"{namespace}/{name}"))
        if namespace in self.failing:
            raise self.failing[namespace]

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any], resource_version: str = ""
    ) -> dict[str, Any]:
        self._check("patch_status", namespace, name)
        return {
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": "u", "resourceVersion": "2"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
            "status": dict(status),
        }

    async def release_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        group: str,
        by_name: bool = True,
        domain: Iterable[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        self._check("release_pod", namespace, name)
        await asyncio.sleep(0)
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "resourceVersion": "3",
                "labels": {"phalanx.dev/pod-group": group, "batch.kubernetes.io/controller-uid": "j"},
            },
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": []},
            "status": {"phase": "Pending"},
        }


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[ObjectRef, str, str, str]] = []

    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None:
        self.posted.append((involved, type_, reason, message))


def admission_plan(namespace: str, pods: int = 2) -> UnitPlan:
    group = ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", namespace, "pg", "u")
    job = ObjectRef("batch/v1", "Job", namespace, "train", "j")
    admission = Admission(
        domain=None,
        assignments=[Assignment(pod=f"p{i}", node=f"n{i}") for i in range(pods)],
        admitted_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        attempt=0,
    )
    actions = (
        RecordAdmission(group, admission),
        *(ReleasePod(ObjectRef("v1", "Pod", namespace, f"p{i}"), f"n{i}", "pg") for i in range(pods)),
        PostEvent(job, "Normal", "Admitted", "admitted"),
    )
    return UnitPlan(f"{namespace}/train", actions, job, pods)


def applier(kube: RecordingKube, clock: list[float]) -> tuple[Applier, ClusterCache, Events]:
    cache = ClusterCache()
    events = Events()
    backoff = Backoff(clock=lambda: clock[0])
    return Applier(cache, cast(Kube, kube), events, backoff), cache, events


def test_a_failing_group_does_not_stop_another_in_the_same_pass_and_backs_off() -> None:
    clock = [100.0]
    kube = RecordingKube({"quota": forbidden('podgroups "pg" is forbidden: exceeded quota: one')})
    apply, cache, events = applier(kube, clock)
    results = asyncio.run(apply.apply([admission_plan("quota"), admission_plan("fine")]))

    assert [(r.key, r.ok) for r in results] == [("quota/train", False), ("fine/train", True)]
    # The failing group stopped at its first action: its pods were never released.
    assert ("release_pod", "quota/p0") not in kube.calls
    assert {("release_pod", "fine/p0"), ("release_pod", "fine/p1")} <= set(kube.calls)
    assert cache.pods["fine/p0"].released  # written through
    (warning,) = [e for e in events.posted if e[1] == "Warning"]
    assert warning[0].key == "quota/train" and warning[2] == "FailedSync"
    assert "exceeded quota" in warning[3] and "403" in warning[3]
    assert apply.backoff.waiting() == frozenset({"quota/train"})


def test_backoff_doubles_per_failure_up_to_a_cap_and_a_success_forgets_it() -> None:
    clock = [0.0]
    backoff = Backoff(clock=lambda: clock[0], initial=0.5, cap=4.0)
    assert [backoff.failed("k") for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert backoff.waiting() == frozenset({"k"})
    assert backoff.next_retry_in() == 4.0
    clock[0] = 4.5
    assert backoff.waiting() == frozenset()
    # Past its window it may run again, but its last try failed until one succeeds (the plan requeues a
    # gang released in part only while its releases keep failing: plan/requeue.py released_in_part).
    assert backoff.failing() == frozenset({"k"})
    backoff.succeeded("k")
    assert backoff.failing() == frozenset()
    assert backoff.failed("k") == 0.5


def test_a_release_that_fails_halfway_leaves_the_rest_of_the_group_undone() -> None:
    class OnePodFails(RecordingKube):
        async def release_pod(
            self,
            namespace: str,
            name: str,
            node: str,
            group: str,
            by_name: bool = True,
            domain: Iterable[tuple[str, str]] = (),
        ) -> dict[str, Any]:
            if name == "p1":
                self.calls.append(("release_pod", f"{namespace}/{name}"))
                raise ApiException(status=500, reason="Internal Server Error")
            return await super().release_pod(namespace, name, node, group)

    clock = [0.0]
    kube = OnePodFails({})
    apply, cache, events = applier(kube, clock)
    (result,) = asyncio.run(apply.apply([admission_plan("ns", pods=3)]))
    assert not result.ok and result.failed_action == "ReleasePod"
    # p0 and p2 went out with p1 (one run of releases); the Admitted event after them did not.
    assert cache.pods["ns/p0"].released and cache.pods["ns/p2"].released
    assert not [e for e in events.posted if e[2] == "Admitted"]


def test_an_event_between_writes_waits_for_them_and_is_said_only_if_what_came_before_it_went_through() -> (
    None
):
    """A new gang's "PodGroupCreated" comes between its creates and its record: it must not hold back the
    release, and it is still posted only when the writes before it succeeded (as if in order)."""

    class Timed(RecordingKube):
        async def patch_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            self.calls.append(("events so far", str(len(events.posted))))
            return await super().patch_status(*args, **kwargs)

    def plan(namespace: str) -> UnitPlan:
        base = admission_plan(namespace)
        job = base.owner
        assert job is not None
        said = PostEvent(job, "Normal", "PodGroupCreated", "created")
        return UnitPlan(base.key, (said, *base.actions), job, 2)

    clock = [0.0]
    kube = Timed({"quota": forbidden("exceeded quota")})
    apply, _, events = applier(kube, clock)
    results = asyncio.run(apply.apply([plan("fine")]))
    assert results[0].ok
    assert ("events so far", "0") in kube.calls  # the record and releases went out before any event
    assert [e[2] for e in events.posted] == ["PodGroupCreated", "Admitted"]  # the plan's order
    events.posted.clear()
    (failed,) = asyncio.run(apply.apply([plan("quota")]))
    assert not failed.ok
    # Nothing came before the event: it is said, then the failure; the Admitted after the failure is not.
    assert [e[2] for e in events.posted] == ["PodGroupCreated", "FailedSync"]


def test_the_cache_notes_when_a_groups_status_was_written_and_forgets_it_with_the_group() -> None:
    """What plan/status.refreshing reads: a status written (alone, or with a decision) is noted; a status
    the API refused is not; a deleted group is forgotten."""
    clock = [100.0]
    kube = RecordingKube({"quota": forbidden('podgroups "pg" is forbidden: exceeded quota: one')})
    apply, cache, _ = applier(kube, clock)
    job = ObjectRef("batch/v1", "Job", "fine", "train", "j")
    written = [
        UnitPlan(f"{ns}/train", (PatchStatus(_group_ref(ns), PodGroupStatus()),), job, 0)
        for ns in ("fine", "quota")
    ]
    asyncio.run(apply.apply(written))
    assert set(cache.reported) == {"PodGroup/fine/pg"}
    bare = admission_plan("bare")  # a decision alone (its status unchanged) is not a status written
    unit = admission_plan("other")
    whole = (dataclasses.replace(unit.actions[0], status=PodGroupStatus()), *unit.actions[1:])
    results = asyncio.run(apply.apply([bare, dataclasses.replace(unit, actions=whole)]))
    assert all(r.ok for r in results)
    assert set(cache.reported) == {"PodGroup/fine/pg", "PodGroup/other/pg"}
    cache.upsert(
        "PodGroup", {"kind": "PodGroup", "metadata": {"name": "pg", "namespace": "fine", "uid": "u"}}
    )
    cache.delete("PodGroup", {"metadata": {"name": "pg", "namespace": "fine"}})
    assert set(cache.reported) == {"PodGroup/other/pg"}


def _group_ref(namespace: str) -> ObjectRef:
    return ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", namespace, "pg", "u")


def _writes() -> dict[tuple[str, str], float]:
    return {
        (s.labels["action"], s.labels["why"]): s.value
        for family in metrics.WRITES.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_every_write_is_counted_by_action_and_why_the_failed_ones_too() -> None:
    """phalanx_writes_total: what Phalanx's requests go to. A decision with its whole status counts under
    its phase, each release once, an event under its reason (the FailedSync one a failure posts too), a
    write the API refused as well; noting an announced problem writes nothing."""
    clock = [100.0]
    kube = RecordingKube({"quota": forbidden('podgroups "pg" is forbidden: exceeded quota: one')})
    apply, _, _ = applier(kube, clock)
    unit = admission_plan("fine", pods=3)
    admitted = PodGroupStatus.model_validate({"phase": "Admitted"})
    whole = (dataclasses.replace(unit.actions[0], status=admitted), *unit.actions[1:])
    job = ObjectRef("batch/v1", "Job", "fine", "other", "k")
    running = UnitPlan(
        "fine/other",
        (
            PatchStatus(_group_ref("fine"), PodGroupStatus.model_validate({"phase": "Running"})),
            RememberAnnounced("k/policy", "said"),
        ),
        job,
        0,
    )
    before = _writes()
    results = asyncio.run(
        apply.apply([dataclasses.replace(unit, actions=whole), running, admission_plan("quota")])
    )
    assert [r.ok for r in results] == [True, True, False]
    after = _writes()
    grown = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert grown == {
        ("RecordAdmission", "Admitted"): 1,
        ("RecordAdmission", ""): 1,  # the refused one: a decision alone, no status with it
        ("ReleasePod", ""): 3,
        ("PatchStatus", "Running"): 1,
        ("PostEvent", "Admitted"): 1,
        ("PostEvent", "FailedSync"): 1,
    }


class VictimKube(RecordingKube):
    """Answers the writes that take victims back; each confirmed one is recorded before the next starts."""

    async def delete_pod(
        self, namespace: str, name: str, reason: str = "", message: str = "", *, foreground: bool = False
    ) -> None:
        await asyncio.sleep(0.01)
        self._check("delete_pod", namespace, name)

    async def evict_pod(self, namespace: str, name: str, reason: str, message: str) -> bool:
        await asyncio.sleep(0.01)
        self._check("evict_pod", namespace, name)
        return True

    async def patch_owner(self, owner: ObjectRef, patch: Any) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        self._check("patch_owner", owner.namespace, owner.name)
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": owner.name, "namespace": "ml"}}


def test_the_abort_after_victims_falls_after_the_nth_confirmed_victim_action_of_a_preemption() -> None:
    """PHALANX_FAULT_ABORT_AFTER_VICTIMS=N (apply/faults.py): a victim Job suspended, each pod of a victim
    LWS group deleted and each pod evicted count, one at a time, after the API confirmed them; the kill
    falls right after the Nth, inside the LWS group's take-back, before the rest is sent. A pod deleted to
    requeue a unit for another cause (below its minCount) counts nothing."""
    from phalanx.controller.apply.faults import AFTER_VICTIMS, Faults
    from phalanx.controller.model.actions import DeletePod, EvictPod, SuspendJob

    def pod(name: str) -> ObjectRef:
        return ObjectRef("v1", "Pod", "ml", name)

    high = ObjectRef("batch/v1", "Job", "ml", "high", "uid-high")
    own = UnitPlan(
        "Job/ml/short", (DeletePod(pod("short-0"), "below its minCount", "below-min-count"),), high
    )
    preempting = UnitPlan(
        "Job/ml/high",
        (
            SuspendJob(ObjectRef("batch/v1", "Job", "ml", "low", "uid-low"), "preempted", "preempted"),
            *(DeletePod(pod(f"lws-0-{i}"), "preempted", "preempted") for i in range(3)),
            EvictPod(pod("bare"), "PreemptionByPhalanx", "preempting"),
        ),
        high,
        preempted_pods=5,
    )
    kube = VictimKube({})
    apply, _, _ = applier(kube, [0.0])
    apply.faults = Faults.from_env({AFTER_VICTIMS: "3"})
    seen_at_kill: list[list[tuple[str, str]]] = []

    def kill() -> None:  # stands for the SIGKILL: what was sent when it fell
        seen_at_kill.append(list(kube.calls))

    apply.faults.kill = kill
    asyncio.run(apply.apply([own]))
    assert seen_at_kill == []  # a requeue of its own is no victim
    kube.calls.clear()
    asyncio.run(apply.apply([preempting]))
    assert seen_at_kill[:1] == [
        [("patch_owner", "ml/low"), ("delete_pod", "ml/lws-0-0"), ("delete_pod", "ml/lws-0-1")]
    ]
