"""The metrics' meaning: which plan admits a unit and under which policy, since when it waited (creation or
requeue), the leader gauges with and without election, and /metrics as prometheus-client serves it."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
from typing import Any, cast

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from test_controller_apply import Events, RecordingKube, admission_plan
from testkit import NOW, TOPOLOGY, cluster, group_of, job_body, pod_body

from phalanx.api import conditions as c
from phalanx.api.conditions import Condition
from phalanx.api.status import PodGroupStatus
from phalanx.controller import metrics
from phalanx.controller.apply.applier import Applier, Backoff, Requeues
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import PatchStatus, SuspendJob, UngatePod, UnitPlan, status_write
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.plan import plan
from phalanx.controller.process.health import Health
from phalanx.controller.process.httpserver import build_app

CREATED = dt.datetime(2026, 11, 30, 11, 0, tzinfo=dt.UTC)  # job_body's creationTimestamp
BASIC = {"phalanx.dev/policy": "basic"}


def value(metric: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(metric, labels) or 0.0


def lease_status(lease: str) -> float | None:
    return metrics.REGISTRY.get_sample_value("leader_election_master_status", {"name": lease})


def status_of_unit(unit: UnitPlan) -> PodGroupStatus:
    (patch,) = [a for a in unit.actions if isinstance(a, PatchStatus)]
    status: PodGroupStatus = patch.status
    return status


# ---------------------------------------------------------------------- which plan admits, and since when
def test_a_gang_admitted_for_the_first_time_waited_since_its_creation() -> None:
    job = job_body(annotations=TOPOLOGY)
    (unit,) = plan(cluster([(job, group_of(job), [pod_body("train", i) for i in range(4)])]), NOW).units
    assert (unit.admitted, unit.waiting_since, unit.admitted_pods) == ("Gang", CREATED, 4)


def test_a_basic_group_is_admitted_as_basic_once_its_first_pod_is_placed() -> None:
    """Phalanx holds no pod of a basic Job: kube-scheduler places them, and the pass that sees the first one
    bound writes Admitted True: that is the admission."""
    job = job_body(annotations=BASIC)
    pending = [pod_body("train", i, gated=False) for i in range(2)]
    (waiting,) = plan(cluster([(job, group_of(job), pending)]), NOW).units
    assert waiting.admitted is None
    bound = [pod_body("train", 0, gated=False, node="n1", phase="Running"), pending[1]]
    (unit,) = plan(cluster([(job, group_of(job), bound)]), NOW).units
    assert (unit.admitted, unit.waiting_since, unit.admitted_pods) == ("Basic", CREATED, 0)
    again = group_of(job, status_of_unit(unit))
    more = [*bound[:1], pod_body("train", 1, gated=False, node="n2", phase="Running")]
    later = plan(cluster([(job, again, more)]), NOW).units
    assert all(u.admitted is None for u in later), "a second pod of an admitted basic group"


def test_a_gated_basic_pod_is_ungated_and_admitted_once_bound() -> None:
    job = job_body(annotations=BASIC)
    (unit,) = plan(cluster([(job, group_of(job), [pod_body("train", 0)])]), NOW).units
    assert [type(a).__name__ for a in unit.actions if isinstance(a, UngatePod)] == ["UngatePod"]
    assert unit.admitted is None  # not placed yet


def test_the_rest_of_a_gang_joining_its_placed_pods_is_no_new_admission() -> None:
    """More pods than minCount: the gang was admitted with two, the other two go when room frees."""
    job = job_body(count=4, annotations={"phalanx.dev/min-count": "2"})
    running = [pod_body("train", i, gated=False, node=f"n{i + 1}", phase="Running") for i in range(2)]
    status = PodGroupStatus(conditions=[condition(c.POD_GROUP_INITIALLY_SCHEDULED), condition(c.ADMITTED)])
    pods = [*running, pod_body("train", 2), pod_body("train", 3)]
    (unit,) = plan(cluster([(job, group_of(job, status), pods)]), NOW).units
    assert unit.admitted_pods == 2
    assert unit.admitted is None


def test_a_replacement_joining_a_running_gang_is_no_new_admission() -> None:
    """train ran 3 pods; train-2 went with its node, so Admitted turned False (waiting for its pods); the
    replacement is released beside the two still running: Admitted True again, but no admission counted."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    lost = PodGroupStatus(
        conditions=[
            condition(c.POD_GROUP_INITIALLY_SCHEDULED),
            Condition(
                type=c.ADMITTED,
                status=c.FALSE,
                reason=c.REASON_WAITING_FOR_PODS,
                message="",
                last_transition_time=NOW - dt.timedelta(seconds=5),
            ),
        ]
    )
    group = group_of(job, lost)
    running = [
        pod_body("train", i, gated=False, node=f"n{i + 1}", phase="Running", group=group.name)
        for i in range(2)
    ]
    (unit,) = plan(cluster([(job, group, [*running, pod_body("train", 3, group=group.name)])]), NOW).units
    assert unit.admitted_pods == 1
    assert admitted_after(unit) == c.TRUE
    assert unit.admitted is None


def admitted_after(unit: UnitPlan) -> str:
    """The Admitted condition's status the unit's status write says."""
    for action in unit.actions:
        written = status_write(action)
        if written is not None and (admitted := written[1].condition(c.ADMITTED)) is not None:
            return admitted.status
    return ""


def condition(kind: str, status: str = c.TRUE, at: dt.datetime = CREATED) -> Condition:
    reason = c.REASON_SCHEDULED if kind == c.POD_GROUP_INITIALLY_SCHEDULED else c.REASON_ADMITTED
    return Condition(type=kind, status=status, reason=reason, message="", last_transition_time=at)


def test_a_requeued_gang_waited_since_its_admitted_condition_turned_false() -> None:
    """Admitted once (InitiallyScheduled True), then requeued: Admitted False since the requeue, whatever
    its reason became after the resume."""
    job = job_body(annotations=TOPOLOGY)
    requeued_at = NOW - dt.timedelta(minutes=5)
    status = PodGroupStatus(
        conditions=[
            Condition(
                type=c.POD_GROUP_INITIALLY_SCHEDULED,
                status=c.TRUE,
                reason=c.REASON_SCHEDULED,
                message="",
                last_transition_time=CREATED + dt.timedelta(minutes=1),
            ),
            Condition(
                type=c.ADMITTED,
                status=c.FALSE,
                reason=c.REASON_WAITING_FOR_PODS,
                message="waiting for the Job's pods",
                last_transition_time=requeued_at,
            ),
        ]
    )
    pods = [pod_body("train", i) for i in range(4)]
    (unit,) = plan(cluster([(job, group_of(job, status), pods)]), NOW).units
    assert (unit.admitted, unit.waiting_since) == ("Gang", requeued_at)


# ---------------------------------------------------------------------- what the applier counts
def applier() -> Applier:
    return Applier(ClusterCache(), cast(Kube, UngatingKube({})), Events(), Backoff())


class UngatingKube(RecordingKube):
    async def ungate_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self._check("ungate_pod", namespace, name)
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "3"},
            "spec": {"containers": []},
            "status": {"phase": "Pending"},
        }


def test_admissions_are_counted_by_their_policy_with_their_wait() -> None:
    since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=40)
    job = ObjectRef("batch/v1", "Job", "basic", "b", "uid-b")
    basic = UnitPlan(
        "Job/basic/b",
        (UngatePod(ObjectRef("v1", "Pod", "basic", "b-0")),),
        job,
        admitted="Basic",
        waiting_since=since,
    )
    gang = admission_plan("gang")
    gang = UnitPlan(
        gang.key, gang.actions, gang.owner, gang.admitted_pods, admitted="Gang", waiting_since=since
    )
    before = {
        p: (
            value("phalanx_admissions_total", policy=p),
            value("phalanx_admission_wait_time_seconds_count", policy=p),
            value("phalanx_admission_wait_time_seconds_sum", policy=p),
        )
        for p in ("Basic", "Gang")
    }
    results = asyncio.run(applier().apply([basic, gang]))
    assert all(r.ok for r in results)
    for policy in ("Basic", "Gang"):
        admissions, count, total = before[policy]
        assert value("phalanx_admissions_total", policy=policy) == admissions + 1
        assert value("phalanx_admission_wait_time_seconds_count", policy=policy) == count + 1
        assert value("phalanx_admission_wait_time_seconds_sum", policy=policy) - total >= 40


def test_a_plan_that_admits_nothing_counts_no_admission() -> None:
    plain = admission_plan("later-wave")  # pods released, but the unit was admitted before
    before = value("phalanx_admissions_total", policy="Gang"), value("phalanx_pods_released_total")
    asyncio.run(applier().apply([plain]))
    assert value("phalanx_admissions_total", policy="Gang") == before[0]
    assert value("phalanx_pods_released_total") == before[1] + 2


def test_a_requeue_made_by_this_process_starts_the_next_wait() -> None:
    """A gang short of pods waits out the grace period with Admitted False, then is requeued: its next wait
    counts from the requeue, which this process saw, not from when Admitted turned False."""
    clock = [dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)]
    requeues = Requeues(clock=lambda: clock[0])
    turned_false = clock[0] - dt.timedelta(seconds=30)
    assert requeues.started("Job/ml/train", turned_false) == turned_false  # nothing of ours: the plan's
    requeues.requeued("Job/ml/train")
    assert requeues.started("Job/ml/train", turned_false) == clock[0]
    assert requeues.started("Job/ml/train", turned_false) == turned_false  # forgotten once used
    requeues.requeued("Job/ml/train")
    assert requeues.started("Job/ml/train", None) == clock[0]
    small = Requeues(size=2, clock=lambda: clock[0])
    for key in ("a", "b", "c"):
        small.requeued(key)
    assert small.started("a", None) is None and small.started("c", None) == clock[0]


def test_the_applier_remembers_the_requeues_a_unit_made_of_itself_only() -> None:
    job = ObjectRef("batch/v1", "Job", "ml", "train", "uid-train")
    own = UnitPlan("Job/ml/train", (SuspendJob(job, "below its minCount", "below-min-count"),), job)
    victim = ObjectRef("batch/v1", "Job", "ml", "low", "uid-low")
    preempting = UnitPlan(
        "Job/ml/high", (SuspendJob(victim, "preempted", "preempted"),), job, preempted_pods=4
    )
    apply = Applier(ClusterCache(), cast(Kube, SuspendingKube({})), Events(), Backoff())
    asyncio.run(apply.apply([own, preempting]))
    assert apply.requeues.started("Job/ml/train", None) is not None
    assert apply.requeues.started("Job/ml/high", None) is None
    assert apply.requeues.started("Job/ml/low", None) is None


class SuspendingKube(RecordingKube):
    async def patch_owner(self, owner: ObjectRef, patch: Any) -> None:
        self._check("patch_owner", owner.namespace, owner.name)
        return None


# ---------------------------------------------------------------------- leader gauges and /metrics
def test_both_leader_gauges_say_1_while_the_loop_runs_also_without_election() -> None:
    health = Health(lease="lease-one")
    health.lease = "lease-one"  # as Runtime.configure sets it: a standby says 0
    assert lease_status("lease-one") == 0
    health.loop_started()  # leader election off: the loop starts at once
    assert value("phalanx_leader") == 1
    assert lease_status("lease-one") == 1
    health.loop_stopped()
    assert value("phalanx_leader") == 0
    assert lease_status("lease-one") == 0
    health.lease = "lease-two"  # another --lease-name: the old series goes
    assert lease_status("lease-one") is None
    assert lease_status("lease-two") == 0


async def test_metrics_carry_process_platform_gc_and_build_info() -> None:
    async with TestClient(TestServer(build_app(Health()))) as http:
        response = await http.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_start_time_seconds"):
        assert name in families, name
    assert "python_info" in families and "python_gc_objects_collected" in families
    (build,) = families["phalanx_build_info"].samples
    assert build.name == "phalanx_build_info" and build.value == 1
    assert build.labels["version"] == metrics.phalanx_version() != ""
    assert "phalanx_admission_wait_time_seconds" in families
    assert "leader_election_master_status" in families


async def test_metrics_speak_openmetrics_and_gzip_when_asked() -> None:
    """prometheus-client's own handler: format negotiation, name[] filters, compression."""
    async with TestClient(TestServer(build_app(Health()))) as http:
        response = await http.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await response.text()).rstrip().endswith("# EOF")
        response = await http.get("/metrics", params={"name[]": "phalanx_build_info"})
        assert (await response.text()).count("# TYPE") == 1
        raw = await http.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        assert raw.headers.get("Content-Encoding") == "gzip"
        assert b"phalanx_build_info" in gzip.decompress(await raw.read())


def test_docs_operations_lists_every_requeue_reason() -> None:
    """`phalanx_requeues_total{reason}`: docs/operations.md names every value the applier counts under."""
    import re
    import typing
    from pathlib import Path

    from phalanx.controller.model.actions import RequeueCause

    text = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| `phalanx_requeues_total`")]
    listed = re.search(r"the first: ([^)]*)\)", row)
    assert listed is not None, row
    assert set(re.findall(r"`([a-z-]+)`", listed.group(1))) == set(typing.get_args(RequeueCause))
