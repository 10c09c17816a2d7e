"""Two replicas of `phalanx run` with leader election on the stock cluster: one schedules, both serve the
webhook, and when the leader is killed mid-stream the other takes over and every gang is admitted once."""

from __future__ import annotations

import signal
import time
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
TAKEOVER_LIMIT = 30.0
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
    leader.stop(signal.SIGKILL)
    killed = time.monotonic()
    # The rest at once: the webhook must answer without the killed replica (the standby serves it).
    tries += [create_through_webhook(ns, i) for i in range(KILL_AFTER, JOBS)]
    created = time.monotonic() - killed
    print(
        f"webhook: {JOBS} Jobs in {sum(tries)} tries; "
        f"the {JOBS - KILL_AFTER} after the kill took {created:.1f} s"
    )
    assert created < DURATION, "Job creation did not wait for the takeover: the standby served the webhook"

    # Takeover: the standby holds the Lease and made a pass (PodGroups of Jobs made after the kill exist).
    late = [f"gang-{i:02d}" for i in range(KILL_AFTER, JOBS)]
    took_lease = wait_for(
        "the standby holds the Lease",
        lambda: time.monotonic() if holder(ns) == "phalanx-b" else None,
        timeout=TAKEOVER_LIMIT + 10,
        interval=0.1,
    )
    passed = wait_for(
        "a PodGroup made by the new leader",
        lambda: time.monotonic() if any(group_of(ns, job) for job in late) else None,
        timeout=TAKEOVER_LIMIT + 10,
        interval=0.1,
    )
    takeover = passed - killed
    print(
        f"takeover: Lease taken {took_lease - killed:.1f} s and first pass seen {takeover:.1f} s after the "
        f"leader was killed (lease {DURATION} s, renew deadline {RENEW} s, retry {RETRY} s)"
    )
    assert takeover < TAKEOVER_LIMIT
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

    # A graceful stop releases the Lease: a new standby takes over at its next try, not after expiry.
    leader.start()
    assert holder(ns) == "phalanx-b" and leader_metric(leader) == 0
    stopping = time.monotonic()
    standby.stop(signal.SIGTERM)
    handed = wait_for(
        "phalanx-a holds the Lease again",
        lambda: time.monotonic() if holder(ns) == "phalanx-a" else None,
        timeout=DURATION + 10,
        interval=0.1,
    )
    print(f"graceful handover: {handed - stopping:.1f} s from SIGTERM to the other replica holding the Lease")
    assert handed - stopping < DURATION, "the stopped leader released the Lease"
    wait_for("phalanx-a leads", lambda: leader_metric(leader) == 1, timeout=10)
