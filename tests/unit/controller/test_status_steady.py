"""What a group's status says about where its gang is — `status.admission` (the decision) and `status.domain`
(kubectl get podgroups' DOMAIN column) — stays put from the decision for as long as the gang runs there, for
every kind and shape of tree: nothing but the counters, the phase and the conditions changes in the passes
after it (a value written with the decision and dropped by the next status write is a wasted write and a
column that flickers; before 2fa6a27 a JobSet's child PodGroups without a key of their own lost their
domain once their pods ran). One row per kind and shape: its owner, its pods (gated, then bound where the
decision released them)."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import (
    LB,
    NB,
    NOW,
    job_body,
    jobset_body,
    jobset_pod,
    lws_body,
    lws_pod,
    made_groups,
    owner_cluster,
    pod_body,
    written,
)

from phalanx.api.naming import pod_group_label_value
from phalanx.controller.model.actions import DeletePod, PatchStatus, RecordAdmission, ReleasePod, SuspendJob
from phalanx.controller.plan import Plan, plan

KEY = {"phalanx.dev/topology-key": NB}
SLICED = {**KEY, "phalanx.dev/slice-topology-key": LB}
Pods = Callable[[dict[str, str] | None], list[dict[str, Any]]]  # bound where the map says, or all gated


def job_pods(bound: dict[str, str] | None) -> list[dict[str, Any]]:
    return [
        pod_body(
            "train", i, gated=bound is None, node=(bound or {}).get(f"train-{i}", ""), completion_index=i
        )
        for i in range(4)
    ]


def jobset_pods(bound: dict[str, str] | None) -> list[dict[str, Any]]:
    names = [(j, i) for j in range(2) for i in range(2)]
    return [
        jobset_pod(
            "train",
            "workers",
            j,
            i,
            global_index=j,
            gated=bound is None,
            node=(bound or {}).get(f"train-workers-{j}-{i}", ""),
        )
        for j, i in names
    ]


def lws_pods(bound: dict[str, str] | None) -> list[dict[str, Any]]:
    pods = [lws_pod("serve", 0, w) for w in range(4)]
    if bound is None:
        return pods
    return [
        lws_pod("serve", 0, w, gated=False, node=bound[p["metadata"]["name"]]) for w, p in enumerate(pods)
    ]


# (case, owner kind, owner, its pods)
ROWS: list[tuple[str, str, dict[str, Any], Pods]] = [
    ("a Job in one block", "Job", job_body("train", 4, annotations=KEY), job_pods),
    (
        "a JobSet in one block, its child Jobs without a key",
        "JobSet",
        jobset_body(annotations=KEY),
        jobset_pods,
    ),
    (
        "a JobSet in one block, each child Job in one local block",
        "JobSet",
        jobset_body(annotations=SLICED),
        jobset_pods,
    ),
    ("an LWS group in one block", "LeaderWorkerSet", lws_body(annotations=KEY), lws_pods),
    (
        "an LWS group in one block, its subgroups each in one local block",
        "LeaderWorkerSet",
        lws_body(annotations=SLICED, subgroup_size=2),
        lws_pods,
    ),
]


@pytest.mark.parametrize(("case", "kind", "owner", "pods"), ROWS, ids=[r[0] for r in ROWS])
def test_where_a_running_gang_is_stays_said_as_decided(
    case: str, kind: str, owner: dict[str, Any], pods: Pods
) -> None:
    first = plan(owner_cluster([(kind, owner)], pods(None)), NOW)
    released = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    assert len(released) == 4, case
    groups = made_groups(first)
    decided = {g.name: (g.status.admission, g.status.domain) for g in groups}
    assert all(admission is not None and domain for admission, domain in decided.values()), decided
    for seconds in (5, 60, 600):  # the pods bound; settling, refreshing, and long after
        result = plan(
            owner_cluster([(kind, owner)], pods(released), groups=groups), NOW + dt.timedelta(seconds=seconds)
        )
        assert not [a for a in result.actions if isinstance(a, (RecordAdmission, ReleasePod))]
        groups = written(result, groups)
        for a in result.actions:
            if isinstance(a, PatchStatus):
                assert (a.status.admission, a.status.domain) == decided[a.group.name], (seconds, a.group.name)
    assert {g.name: g.status.phase for g in groups} == dict.fromkeys(decided, "Running")


# (case, owner kind, owner, its first stage's pods: gated, or bound where the map says)
STAGED: list[tuple[str, str, dict[str, Any], Pods]] = [
    (
        "a JobSet InOrder: its driver first, the workers once it is Ready",
        "JobSet",
        jobset_body(replicated=(("driver", 1, 1), ("workers", 1, 3)), in_order=True, annotations=KEY),
        lambda bound: [
            jobset_pod(
                "train", "driver", 0, 0, gated=bound is None, node=(bound or {}).get("train-driver-0-0", "")
            )
        ],
    ),
    (
        "an LWS group LeaderReady: its leader first, the workers once it is Ready",
        "LeaderWorkerSet",
        lws_body(leader_ready=True, annotations=KEY),
        lambda bound: [lws_pod("serve", 0, 0, gated=bound is None, node=(bound or {}).get("serve-0", ""))],
    ),
]


def still_admitted_as_decided(groups: list[Any], decided: dict[str, Any], case: object) -> None:
    """Every group says Admitted in the transition of its decision, and keeps its decision."""
    for g in groups:
        admitted = g.status.condition("Admitted")
        assert admitted is not None and admitted.status == "True", (case, g.name, admitted)
        assert admitted.last_transition_time == decided[g.name].last_transition_time, (case, g.name)
        assert g.status.admission is not None, (case, g.name)


@pytest.mark.parametrize(("case", "kind", "owner", "first_stage"), STAGED, ids=[r[0] for r in STAGED])
def test_a_staged_gang_stays_admitted_while_its_later_pods_are_still_to_come(
    case: str, kind: str, owner: dict[str, Any], first_stage: Pods
) -> None:
    """Decided whole with its first stage, the room of its later pods held in their slots: every group of it
    says Admitted from the decision on, and keeps saying it (the same transition, no write back and forth)
    while the later pods are not made — the unit's decision stands. Before, the next pass turned the root
    and the later stage's group to WaitingForPods (a write and an event per group, and a status that read
    as if the gang waited), and a first stage lost later was then judged from that old transition: the
    grace was long over the moment it went (plan/lost.py)."""
    first = plan(owner_cluster([(kind, owner)], first_stage(None)), NOW)
    released = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    assert len(released) == 1, case
    groups = made_groups(first)
    decided = {g.name: g.status.condition("Admitted") for g in groups}
    assert all(a is not None and a.status == "True" for a in decided.values()), decided
    for seconds in (5, 60, 600):
        result = plan(
            owner_cluster([(kind, owner)], first_stage(released), groups=groups),
            NOW + dt.timedelta(seconds=seconds),
        )
        assert not [a for a in result.actions if isinstance(a, (RecordAdmission, ReleasePod))]
        groups = written(result, groups)
        still_admitted_as_decided(groups, decided, seconds)
    messages = " | ".join(m.message for g in groups if (m := g.status.condition("Admitted")) is not None)
    assert "still to come, their room held" in messages, messages


# What happens next to a staged gang, step by step: a pass a few seconds later (kube-scheduler may not have
# bound what Phalanx released yet), a pass up to minutes later (it has: it binds within a second), or its
# owner makes the later pods (gated; their events wake a pass).
STEP = st.one_of(
    st.integers(1, 5).map(lambda s: ("pass", s)),
    st.integers(6, 600).map(lambda s: ("wait", s)),
    st.just(("make", 0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row=st.sampled_from(range(len(STAGED))), later=st.integers(1, 3), steps=st.lists(STEP, max_size=8))
def test_a_staged_gang_says_admitted_from_its_decision_on_whatever_comes_next(
    row: int, later: int, steps: list[tuple[str, int]]
) -> None:
    """A staged gang (either row above, `later` pods in its second stage) decided with its first stage,
    then any sequence of its later pods made, released into their slots and bound, with time passing in
    between, nothing lost: every group of it says Admitted from the decision on, in one transition (no write
    flips it to waiting and back), keeps its decision, and every pod goes to the node of its slot; once all
    are bound, every group is Running."""
    case, kind, _, _ = STAGED[row]
    if kind == "JobSet":
        owner = jobset_body(
            replicated=(("driver", 1, 1), ("workers", 1, later)), in_order=True, annotations=KEY
        )
        firsts = [jobset_pod("train", "driver", 0, 0)]
        seconds = [jobset_pod("train", "workers", 0, i, global_index=1) for i in range(later)]
    else:
        owner = lws_body(leader_ready=True, size=later + 1, annotations=KEY)
        firsts = [lws_pod("serve", 0, 0)]
        seconds = [lws_pod("serve", 0, w) for w in range(1, later + 1)]
    now = NOW
    first = plan(owner_cluster([(kind, owner)], firsts), now)
    groups = made_groups(first)
    decided = {g.name: g.status.condition("Admitted") for g in groups}
    slots = {
        a.pod: a.node
        for g in groups
        if g.status.admission is not None
        for a in g.status.admission.assignments
        if "-slot-" in a.pod
    }
    pods = {p["metadata"]["name"]: p for p in firsts}

    def released(result: Plan) -> None:
        for a in result.actions:
            if isinstance(a, ReleasePod):
                body = pods[a.pod.name]
                body["spec"].pop("schedulingGates", None)
                body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": a.node}
                body["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(a.pod_group)

    def bind() -> None:
        for body in pods.values():
            target = (body["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
            if target and not body["spec"].get("nodeName"):
                body["spec"]["nodeName"] = target
                body["status"]["phase"] = "Running"

    released(first)
    for what, amount in [*steps, ("make", 0), ("pass", 1), ("wait", 6), ("wait", 6)]:
        if what == "make":
            for body in seconds:
                made = copy.deepcopy(body)
                made["metadata"]["creationTimestamp"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
                pods.setdefault(body["metadata"]["name"], made)
            # the pods' events wake a pass at once (below, with no time passed)
        if what == "wait":
            bind()
        now += dt.timedelta(seconds=amount)
        result = plan(owner_cluster([(kind, owner)], list(pods.values()), groups=groups), now)
        assert not [a for a in result.actions if isinstance(a, RecordAdmission | DeletePod | SuspendJob)], (
            case
        )
        for a in result.actions:
            if isinstance(a, ReleasePod):
                rank = seconds.index(next(p for p in seconds if p["metadata"]["name"] == a.pod.name))
                (slot,) = [s for s in slots if s.endswith(f"-slot-{rank + (kind != 'JobSet')}")]
                assert a.node == slots[slot], (case, a.pod.name, a.node, slot)
        released(result)
        groups = written(result, groups)
        still_admitted_as_decided(groups, decided, case)
    assert {g.name: g.status.phase for g in groups} == dict.fromkeys(decided, "Running"), case
