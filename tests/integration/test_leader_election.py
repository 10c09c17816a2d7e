"""Two replicas of `phalanx run` with leader election on the stock cluster: one schedules, both serve the
webhook, and when the leader is killed mid-stream the other takes over and every gang is admitted once."""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.cluster import ClusterState, free_port
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess, lease_holder

from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, bound, gpu_job, node_labels, wait_for

pytestmark = pytest.mark.integration

LEASE = "phalanx-leader"
DURATION, RENEW, RETRY = 15, 10, 2
JOBS = 20
KILL_AFTER = 10
TAKEOVER_WAIT = 60.0  # a timeout for the waits only: the takeover is checked on the Lease's record
GROUPS = "/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups"


def gang(index: int) -> dict[str, Any]:
    """Gang i: 1 pod (no topology) or 2 pods in one local or network block; 1 GPU per pod, so all fit."""
    size = 1 + index % 2
    annotations = {}
    if size == 2:
        annotations["phalanx.dev/topology-key"] = LB_KEY if index % 4 == 1 else NB_KEY
    job = gpu_job(f"gang-{index:02d}", size, labels={"phalanx.dev/managed": "true"}, annotations=annotations)
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU_KEY] = "1"
    return job


def create_through_webhook(ns: Namespace, index: int) -> int:
    """Create gang `index`; the number of tries it took (a connection to the killed replica may fail once)."""
    tries = 0

    def attempt() -> bool:
        nonlocal tries
        tries += 1
        try:
            ns.create(gang(index))
        except ApiError as e:
            if e.status == 409:  # an earlier try got through after all
                return True
            print(f"creating gang-{index:02d} failed: {e.status} {e.body[:200]}")
            return False
        return True

    wait_for(f"gang-{index:02d} created", attempt, timeout=20, interval=0.2)
    return tries


def leader_metric(replica: OperatorProcess) -> float | None:
    """phalanx_leader, when client-go's leader_election_master_status{name=<the Lease>} says the same
    (None when they differ, or either is missing)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(replica.scrape()):
        for sample in family.samples:
            if sample.name == "phalanx_leader" or (
                sample.name == "leader_election_master_status" and sample.labels == {"name": LEASE}
            ):
                values[sample.name] = sample.value
    leader = values.get("phalanx_leader")
    if leader is None or values.get("leader_election_master_status") != leader:
        print(f"the leader gauges differ: {values}")
        return None
    return leader


def job_reviews(replica: OperatorProcess) -> float:
    """How many Job admission reviews (the gate-job webhook) this replica answered."""
    for family in text_string_to_metric_families(replica.scrape()):
        for sample in family.samples:
            if sample.name == "phalanx_webhook_review_duration_seconds_count" and sample.labels == {
                "webhook": "gate-job"
            }:
                return sample.value
    return 0.0


def template_gated(ns: Namespace, job: str) -> bool:
    """The Job's pod template carries Phalanx's gate: a replica's gate-job webhook mutated it."""
    spec = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job}")["spec"]["template"]["spec"]
    return any(g.get("name") == "phalanx.dev/admission" for g in spec.get("schedulingGates") or [])


def group_of(ns: Namespace, job: str) -> dict[str, Any] | None:
    return next(
        (g for g in ns.get(GROUPS)["items"] if g["metadata"]["labels"].get("phalanx.dev/job-name") == job),
        None,
    )


@pytest.fixture
def replicas(
    stock_cluster: ClusterState, phalanx: OperatorProcess, ns: Namespace, tmp_path: Path
) -> Iterator[dict[str, OperatorProcess]]:
    """Two replicas with leader election, one webhook port and one cert folder; the session's operator is
    stopped meanwhile (it does not take part in the election) and started again afterwards."""
    phalanx.stop()
    port = free_port()
    made: dict[str, OperatorProcess] = {}
    for name in ("a", "b"):
        made[name] = OperatorProcess(
            stock_cluster,
            tmp_path,
            name=f"phalanx-{name}",
            webhook_port=port,
            args=[
                "--leader-election",
                "--identity",
                f"phalanx-{name}",
                "--lease-name",
                LEASE,
                "--lease-namespace",
                ns.name,
                "--lease-duration-seconds",
                str(DURATION),
                "--renew-deadline-seconds",
                str(RENEW),
                "--retry-period-seconds",
                str(RETRY),
                "--webhook-cert-dir",
                str(tmp_path / "webhook-certs"),
            ],
        )
    try:
        yield made
    finally:
        for replica in made.values():
            replica.stop()
            print(f"{replica.name} log: {replica.log_path}")
        phalanx.start()


def holder(ns: Namespace) -> str | None:
    return lease_holder(ns.cluster, ns.name, LEASE)


def lease(ns: Namespace) -> dict[str, Any]:
    """The Lease's spec (holderIdentity, leaseDurationSeconds, acquireTime, renewTime, leaseTransitions)."""
    spec: dict[str, Any] = ns.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns.name}/leases/{LEASE}")[
        "spec"
    ]
    return spec


def micro(stamp: str) -> dt.datetime:
    """A Lease's MicroTime."""
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)


def test_the_standby_takes_over_a_killed_leader_and_every_gang_is_admitted_once(
    ns: Namespace, replicas: dict[str, OperatorProcess]
) -> None:
    a, b = replicas["a"], replicas["b"]
    a.start()
    wait_for("phalanx-a holds the Lease", lambda: holder(ns) == "phalanx-a", timeout=30)
    b.start()  # ready: its webhook listens on the same port, its cache is primed; it does not lead
    assert holder(ns) == "phalanx-a"
    assert leader_metric(a) == 1 and leader_metric(b) == 0
    leader, standby = a, b

    # Half of the gangs while the first leader schedules, then kill it at once (no release).
    tries = [create_through_webhook(ns, i) for i in range(KILL_AFTER)]
    reviews_before = job_reviews(standby)
    leader.stop(signal.SIGKILL)
    # The rest at once: the webhook must answer without the killed replica (the standby serves it), and
    # before the standby leads: Job creation does not wait for the takeover.
    tries.append(create_through_webhook(ns, KILL_AFTER))
    during = lease(ns)  # read once the first Job after the kill was answered
    print(f"the first Job after the kill answered; Lease {during}")
    assert during["holderIdentity"] == "phalanx-a", (
        "the first Job created after the kill was answered only once the Lease had changed hands (Job "
        f"creation must not wait for the takeover): {during}"
    )
    tries += [create_through_webhook(ns, i) for i in range(KILL_AFTER + 1, JOBS)]
    late = [f"gang-{i:02d}" for i in range(KILL_AFTER, JOBS)]
    served = job_reviews(standby) - reviews_before
    print(f"webhook: {JOBS} Jobs in {sum(tries)} tries; the standby answered {served:.0f} after the kill")
    assert served >= len(late), "the standby did not answer every Job created after the kill"
    assert all(template_gated(ns, job) for job in late), "a late Job not mutated by the standby's webhook"

    # Takeover: the standby holds the Lease and made a pass (PodGroups of Jobs made after the kill exist).
    wait_for("the standby holds the Lease", lambda: holder(ns) == "phalanx-b", timeout=TAKEOVER_WAIT)
    taken = lease(ns)
    wait_for(
        "a PodGroup made by the new leader",
        lambda: any(group_of(ns, job) for job in late),
        timeout=TAKEOVER_WAIT,
    )
    print(f"takeover: Lease before {during}, after {taken}")
    # The killed leader released nothing: the standby took the Lease over (one transition) only once the
    # killed leader's last record had stood unchanged for the lease duration (the same host's clock).
    assert taken["leaseTransitions"] == during["leaseTransitions"] + 1, (during, taken)
    waited = micro(taken["acquireTime"]) - micro(during["renewTime"])
    assert waited >= dt.timedelta(seconds=DURATION), f"taken before it expired: {during} {taken}"
    assert leader_metric(standby) == 1

    # Every gang ends fully admitted, once, in one domain.
    jobs = {f"gang-{i:02d}": 1 + i % 2 for i in range(JOBS)}
    wait_for(
        "every gang bound",
        lambda: all(len(bound(ns.job_pods(job))) == size for job, size in jobs.items()),
        timeout=90,
    )
    labels = node_labels(ns.api)
    for index, (job, size) in enumerate(jobs.items()):
        group = group_of(ns, job)
        assert group is not None, job
        admission = group["status"]["admission"]
        assert admission["attempt"] == 0, f"{job} was admitted more than once: {admission}"
        pods = ns.job_pods(job)
        assert len(pods) == size, f"{job}: a pod was replaced: {[p['metadata']['name'] for p in pods]}"
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assigned = {a["pod"]: a["node"] for a in admission["assignments"]}
        assert placed == assigned, f"{job}: pods not where the one decision put them"
        key = gang(index)["metadata"]["annotations"].get("phalanx.dev/topology-key")
        if key:
            domains = {labels[node][key] for node in placed.values()}
            assert domains == {admission["domain"]}, f"{job}: {domains}"
    admitted: dict[str, int] = {}
    for event in ns.events():
        if event["involvedObject"]["kind"] == "Job" and event["reason"] == "Admitted":
            job = event["involvedObject"]["name"]
            admitted[job] = admitted.get(job, 0) + int(event.get("count") or 1)
    print(f"Admitted events on Jobs: {sum(admitted.values())} for {JOBS} Jobs")
    # At most one each (a leader killed between a release and its event leaves none).
    assert all(count == 1 for count in admitted.values()), admitted

    # A graceful stop releases the Lease: a new standby takes over at its next try, not after expiry. The
    # standby is frozen meanwhile, so the released Lease is seen before anyone takes it again.
    leader.start()
    assert holder(ns) == "phalanx-b" and leader_metric(leader) == 0
    held = lease(ns)
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        standby.stop(signal.SIGTERM)  # returns once the process has exited
        released = lease(ns)
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    print(f"graceful stop: Lease before {held}, after {released}")
    assert not released.get("holderIdentity"), f"the stopped leader did not release the Lease: {released}"
    assert released["leaseDurationSeconds"] == 1 and released["leaseTransitions"] == held["leaseTransitions"]
    wait_for("phalanx-a holds the Lease again", lambda: holder(ns) == "phalanx-a", timeout=DURATION + 10)
    assert lease(ns)["leaseTransitions"] == held["leaseTransitions"] + 1
    wait_for("phalanx-a leads", lambda: leader_metric(leader) == 1, timeout=10)
