"""The article's experiments on a stock cluster (no gates), Phalanx doing gang and topology admission."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError

from .kube import LB_KEY, NB_KEY, Namespace, bound, domains_of, gpu_job, hold, wait_for

pytestmark = pytest.mark.integration

FIVE_BUSY = ("was-worker", "was-worker5", "was-worker6", "was-worker7", "was-worker8")
MANAGED = {"phalanx.dev/managed": "true"}


def managed_job(name: str, count: int, key: str | None = None, **annotations: str) -> dict[str, Any]:
    notes = dict(annotations)
    if key:
        notes["phalanx.dev/topology-key"] = key
    return gpu_job(name, count, labels=MANAGED, annotations=notes)


def pod_groups(ns: Namespace) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = ns.get("/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns}/podgroups")[
        "items"
    ]
    return items


def group_of(ns: Namespace, job: str) -> dict[str, Any] | None:
    return next(
        (g for g in pod_groups(ns) if g["metadata"]["labels"].get("phalanx.dev/job-name") == job), None
    )


def condition(group: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if group is None:
        return None
    return next((dict(c) for c in group.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def wait_condition(
    ns: Namespace, job: str, kind: str, status: str, reason: str | None = None, timeout: float = 60
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        cond = condition(group_of(ns, job), kind)
        if cond and cond["status"] == status and (reason is None or cond["reason"] == reason):
            return cond
        return None

    return wait_for(f"{job}: {kind}={status} {reason or ''}", probe, timeout=timeout)


def wait_bound(ns: Namespace, job: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
    return wait_for(
        f"{count} {job} pods bound",
        lambda: ps if len(bound(ps := ns.job_pods(job))) == count else None,
        timeout=timeout,
    )


# ---------------------------------------------------------------------- gang


def test_plain_4_basic_with_five_nodes_filled_runs_3_and_records_a_basic_pod_group(ns: Namespace) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(managed_job("plain-4", 4, **{"phalanx.dev/policy": "basic"}))
    wait_for(
        "3 plain-4 pods running",
        lambda: sum(p["status"].get("phase") == "Running" for p in ns.job_pods("plain-4")) == 3,
        timeout=60,
    )
    hold(
        "the 4th plain-4 pod stays Pending",
        lambda: sum(p["status"].get("phase") == "Pending" for p in ns.job_pods("plain-4")) == 1,
        seconds=3,
    )
    print(ns.where("job-name=plain-4"))
    group = wait_for("the Basic PodGroup", lambda: group_of(ns, "plain-4"), timeout=20)
    assert "basic" in group["spec"]["schedulingPolicy"]
    pods = ns.job_pods("plain-4")
    assert all(not p["spec"].get("schedulingGates") for p in pods), "basic pods are never held"


def test_gang_4_with_three_free_nodes_binds_none_then_all_four_together(ns: Namespace) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(managed_job("gang-4", 4))
    cond = wait_condition(ns, "gang-4", "PodGroupInitiallyScheduled", "False", "Unschedulable")
    print(cond["message"])
    assert cond["message"] == (
        "pod group is unschedulable, 0/1 placements are available, first placement status: "
        "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining"
    )
    hold("no gang-4 pod bound", lambda: not bound(ns.job_pods("gang-4")), seconds=3)
    admitted = condition(group_of(ns, "gang-4"), "Admitted")
    assert admitted and admitted["status"] == "False" and admitted["reason"] == "Unschedulable"
    # Phalanx's own condition adds why, in kube-scheduler's words, after upstream's sentence.
    assert admitted["message"].startswith(cond["message"])
    assert "3 of 4 pods fit (5 nodes: Insufficient nvidia.com/gpu)" in admitted["message"]
    print(ns.where("job-name=gang-4"))

    ns.unfill("was-worker")
    pods = wait_bound(ns, "gang-4", 4)
    print(ns.where("job-name=gang-4"))
    # All four together: one decision, recorded before any pod was released, placed all four, and each pod
    # is bound where it said (no pod was released on its own, nor by a second decision).
    admission = (group_of(ns, "gang-4") or {}).get("status", {}).get("admission") or {}
    print(admission)
    assert admission.get("attempt") == 0, f"more than one decision: {admission}"
    assigned = {a["pod"]: a["node"] for a in admission.get("assignments", [])}
    assert assigned == {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}, admission
    wait_condition(ns, "gang-4", "PodGroupInitiallyScheduled", "True", "Scheduled")
    events = ns.events_until(
        "the Job's Unschedulable and Admitted events",
        lambda evs: (
            {"Unschedulable", "Admitted"}
            <= {e["reason"] for e in evs if e["involvedObject"]["kind"] == "Job"}
        ),
    )
    reasons = {e["reason"] for e in events if e["involvedObject"]["kind"] == "Job"}
    assert {"Unschedulable", "Admitted"} <= reasons, reasons
    admitted_events = [
        e for e in events if e["involvedObject"]["kind"] == "Job" and e["reason"] == "Admitted"
    ]
    assert sum(int(e.get("count") or 1) for e in admitted_events) == 1, admitted_events


# ---------------------------------------------------------------------- topology


def test_local_2_on_an_empty_cluster_lands_in_one_local_block(ns: Namespace) -> None:
    ns.create(managed_job("local-2", 2, LB_KEY))
    pods = wait_bound(ns, "local-2", 2)
    print(ns.where("job-name=local-2"))
    assert len(domains_of(ns.api, pods, LB_KEY)) == 1


def test_local_4_waits_with_zero_of_four_placements(ns: Namespace) -> None:
    ns.create(managed_job("local-4", 4, LB_KEY))
    cond = wait_condition(ns, "local-4", "PodGroupInitiallyScheduled", "False", "Unschedulable")
    print(cond["message"])
    assert "0/4 placements are available" in cond["message"]
    assert "minCount (4) cannot be satisfied: 2 scheduled, 1 remaining" in cond["message"]
    hold("no local-4 pod bound", lambda: not bound(ns.job_pods("local-4")), seconds=2)
    # A gang larger than any local block is told apart from one that only has to wait.
    admitted = condition(group_of(ns, "local-4"), "Admitted")
    assert admitted is not None and "it can never fit in this cluster" in admitted["message"]
    assert "the largest domain holds 2 of the 4 pods" in admitted["message"]


def test_block_4_takes_the_four_nodes_of_one_network_block(ns: Namespace) -> None:
    ns.create(managed_job("block-4", 4, NB_KEY))
    pods = wait_bound(ns, "block-4", 4)
    print(ns.where("job-name=block-4"))
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    assert len({p["spec"]["nodeName"] for p in pods}) == 4


@pytest.mark.parametrize(("busy", "expected"), [("was-worker", "nb-a"), ("was-worker5", "nb-b")])
def test_best_fit_block_3_goes_to_the_tighter_block_every_time(
    ns: Namespace, busy: str, expected: str
) -> None:
    """The article saw upstream choose at random here; Phalanx must pick the fuller block, 6 of 6."""
    ns.fill(busy)
    chosen = []
    for run in range(6):
        name = f"block-3-{run}"
        ns.create(managed_job(name, 3, NB_KEY))
        pods = wait_bound(ns, name, 3)
        chosen.append(sorted(domains_of(ns.api, pods, NB_KEY)))
        ns.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/{name}", {"propagationPolicy": "Foreground"}
        )
        wait_for(f"{name} pods gone", lambda name=name: not ns.pods(f"job-name={name}"), timeout=60)
    print(f"busy {busy}: {chosen}")
    assert chosen == [[expected]] * 6


# ---------------------------------------------------------------------- suspend / resume


def test_suspended_then_resumed_gang_waits_whole_and_says_why(ns: Namespace) -> None:
    ns.create(managed_job("gang-4", 4))
    wait_bound(ns, "gang-4", 4)
    wait_condition(ns, "gang-4", "PodGroupInitiallyScheduled", "True", "Scheduled")
    ns.patch_job("gang-4", {"spec": {"suspend": True}})
    wait_for("gang-4 pods gone", lambda: not ns.pods("job-name=gang-4"), timeout=60)
    suspended = wait_condition(ns, "gang-4", "Admitted", "False", "Suspended")
    print(suspended["message"])

    ns.fill(*FIVE_BUSY)
    ns.patch_job("gang-4", {"spec": {"suspend": False}})
    wait_for("4 new gang-4 pods", lambda: len(ns.job_pods("gang-4")) == 4, timeout=30)
    why = wait_condition(ns, "gang-4", "Admitted", "False", "Unschedulable")
    print(why["message"])
    assert "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining" in why["message"]
    hold(
        "all 4 gang-4 pods wait",
        lambda: len(ns.job_pods("gang-4")) == 4 and not bound(ns.job_pods("gang-4")),
        seconds=3,
    )
    # Upstream's condition stays True after the first start; the Admitted condition tells the present.
    initial = condition(group_of(ns, "gang-4"), "PodGroupInitiallyScheduled")
    assert initial and initial["status"] == "True"
    assert group_of(ns, "gang-4")["status"]["phase"] == "Unschedulable"  # type: ignore[index]


# ---------------------------------------------------------------------- the boundary


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"phalanx.dev/min-count": "abc"}, "phalanx.dev/min-count"),
        ({"phalanx.dev/min-count": "0"}, "phalanx.dev/min-count"),
        ({"phalanx.dev/min-count": "5"}, "phalanx.dev/min-count"),
        ({"phalanx.dev/policy": "fifo"}, "phalanx.dev/policy"),
        ({"phalanx.dev/disruption-mode": "some"}, "phalanx.dev/disruption-mode"),
        ({"phalanx.dev/topology-key": "bad key!"}, "phalanx.dev/topology-key"),
    ],
)
def test_bad_annotations_are_rejected_at_creation_naming_the_annotation(
    ns: Namespace, annotations: dict[str, str], expected: str
) -> None:
    with pytest.raises(ApiError) as error:
        ns.create(gpu_job("bad", 4, labels=MANAGED, annotations=annotations))
    print(error.value.body)
    assert error.value.status in (400, 422)
    assert expected in error.value.body
    assert not ns.pods(), "nothing was created"


def test_every_pod_of_a_gang_job_is_born_gated(ns: Namespace) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(managed_job("gang-4", 4))
    pods = wait_for("4 gang-4 pods", lambda: ps if len(ps := ns.job_pods("gang-4")) == 4 else None)
    assert all({"name": "phalanx.dev/admission"} in p["spec"].get("schedulingGates", []) for p in pods)


def test_a_labelled_job_is_rejected_while_the_webhook_is_down(ns: Namespace, phalanx: Any) -> None:
    phalanx.stop()
    try:
        with pytest.raises(ApiError) as error:
            ns.create(managed_job("gang-4", 4))
        print(error.value.body)
        assert "gate-job" in error.value.body or "webhook" in error.value.body
        assert not ns.get("/apis/batch/v1/namespaces/{ns}/jobs")["items"]
        # An unlabelled Job is not Phalanx's business and still goes through.
        ns.create(gpu_job("plain-1", 1))
    finally:
        phalanx.start()
    ns.create(managed_job("gang-4", 4))
    # Back up: the same labelled Job is admitted whole (7 nodes free besides plain-1's).
    wait_bound(ns, "gang-4", 4)


# ---------------------------------------------------------------------- changes after creation


def test_min_count_follows_the_annotation_and_admits_a_smaller_gang(ns: Namespace) -> None:
    ns.fill(*FIVE_BUSY)
    ns.create(managed_job("gang-4", 4))
    wait_condition(ns, "gang-4", "Admitted", "False", "Unschedulable")
    pods = ns.job_pods("gang-4")
    group = group_of(ns, "gang-4")
    assert group is not None
    label = pods[0]["metadata"]["labels"].get("phalanx.dev/pod-group")
    assert label == group["metadata"]["name"], "waiting pods are linked to their PodGroup"

    ns.api.request(
        "PATCH",
        f"/apis/batch/v1/namespaces/{ns.name}/jobs/gang-4",
        {"metadata": {"annotations": {"phalanx.dev/min-count": "3"}}},
        "application/merge-patch+json",
    )
    wait_for(
        "PodGroup minCount 3",
        lambda: (
            (group_of(ns, "gang-4") or {})
            .get("spec", {})
            .get("schedulingPolicy", {})
            .get("gang", {})
            .get("minCount")
            == 3
        ),
        timeout=30,
    )
    wait_bound(ns, "gang-4", 3)
    hold(
        "the 4th pod keeps waiting for room in the same domain",
        lambda: len(bound(ns.job_pods("gang-4"))) == 3,
        seconds=2,
    )
    admitted = condition(group_of(ns, "gang-4"), "Admitted")
    assert admitted and admitted["status"] == "True" and "1 more waiting" in admitted["message"]


def test_changing_the_topology_key_after_creation_is_rejected(ns: Namespace) -> None:
    ns.create(managed_job("local-2", 2, LB_KEY))
    with pytest.raises(ApiError) as error:
        ns.api.request(
            "PATCH",
            f"/apis/batch/v1/namespaces/{ns.name}/jobs/local-2",
            {"metadata": {"annotations": {"phalanx.dev/topology-key": NB_KEY}}},
            "application/merge-patch+json",
        )
    print(error.value.body)
    assert "metadata.annotations[phalanx.dev/topology-key]: cannot change" in error.value.body


# ---------------------------------------------------------------------- crash recovery


def test_a_restart_after_a_partial_release_finishes_the_gang_in_the_same_domain(
    ns: Namespace, phalanx: Any
) -> None:
    """Rebuild what a crash between two pod releases leaves (decision recorded, 2 of 4 pods released), then
    restart: the rest of the gang must join the released pods' network block, although best fit alone would
    now prefer the other block (a tie broken by name)."""
    ns.fill("was-worker", "was-worker2")  # nb-a: 2 free; nb-b: 4 free
    ns.create(
        gpu_job("gang-4", 4, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}, suspend=True)
    )
    group = wait_for("the PodGroup", lambda: group_of(ns, "gang-4"))
    phalanx.stop(signal.SIGKILL)
    try:
        ns.patch_job("gang-4", {"spec": {"suspend": False}})
        pods = wait_for(
            "4 gated pods", lambda: ps if len(ps := ns.job_pods("gang-4")) == 4 else None, timeout=30
        )
        pods.sort(key=lambda p: p["metadata"]["name"])
        plan = dict(
            zip(
                [p["metadata"]["name"] for p in pods],
                ["was-worker7", "was-worker8", "was-worker5", "was-worker6"],
                strict=True,
            )
        )
        name = group["metadata"]["name"]
        ns.api.request(
            "PATCH",
            f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/podgroups/{name}/status",
            {
                "status": {
                    "admission": {
                        "domain": "nb-b",
                        "admittedAt": "2026-11-29T00:00:00Z",
                        "attempt": 0,
                        "assignments": [{"pod": p, "node": n} for p, n in plan.items()],
                    }
                }
            },
            "application/merge-patch+json",
        )
        for pod in pods[:2]:
            pod_name = pod["metadata"]["name"]
            ns.api.request(
                "PATCH",
                f"/api/v1/namespaces/{ns.name}/pods/{pod_name}",
                {
                    "metadata": {"labels": {"phalanx.dev/pod-group": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": plan[pod_name]},
                        "schedulingGates": [{"$patch": "delete", "name": "phalanx.dev/admission"}],
                    },
                },
                "application/strategic-merge-patch+json",
            )
        wait_bound(ns, "gang-4", 2)
        hold(
            "the other two stay gated while Phalanx is down",
            lambda: len(bound(ns.job_pods("gang-4"))) == 2,
            seconds=2,
        )
    finally:
        phalanx.start()
    pods = wait_bound(ns, "gang-4", 4)
    print(ns.where("job-name=gang-4"))
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-b"}


# ---------------------------------------------------------------------- many groups at once


def test_three_gangs_at_once_two_blocks_never_double_book_a_node(ns: Namespace) -> None:
    """Groups admitted in one pass see each other's room taken (the snapshot assumes each admission)."""
    for name in ("race-a", "race-b", "race-c"):
        ns.create(managed_job(name, 4, NB_KEY))
    wait_for(
        "two gangs bound",
        lambda: sum(len(bound(ns.job_pods(n))) == 4 for n in ("race-a", "race-b", "race-c")) == 2,
        timeout=60,
    )
    hold(
        "the third gang waits whole",
        lambda: sorted(len(bound(ns.job_pods(n))) for n in ("race-a", "race-b", "race-c")) == [0, 4, 4],
        seconds=3,
    )
    nodes = [p["spec"]["nodeName"] for n in ("race-a", "race-b", "race-c") for p in bound(ns.job_pods(n))]
    assert len(nodes) == len(set(nodes)) == 8
    print(ns.where())
    waiting = next(n for n in ("race-a", "race-b", "race-c") if not bound(ns.job_pods(n)))
    cond = wait_condition(ns, waiting, "Admitted", "False", "Unschedulable")
    assert "0/2 placements are available" in cond["message"]


def test_a_job_with_more_completions_than_parallelism_finishes(ns: Namespace) -> None:
    """Gangs of 4 for 6 completions: the last wave has only 2 pods to run, and must not wait for 4."""
    body = gpu_job("waves", 4, labels=MANAGED, pod_annotations={"sim.phalanx.dev/complete-after": "2s"})
    body["spec"]["completions"] = 6
    ns.create(body)
    wait_for(
        "the Job complete",
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in ns.get("/apis/batch/v1/namespaces/{ns}/jobs/waves")
            .get("status", {})
            .get("conditions", [])
        ),
        timeout=90,
    )
    assert ns.get("/apis/batch/v1/namespaces/{ns}/jobs/waves")["status"]["succeeded"] == 6
