"""What a group's status says about where its gang is — `status.admission` (the decision) and `status.domain`
(kubectl get podgroups' DOMAIN column) — stays put from the decision for as long as the gang runs there, for
every kind and shape of tree: nothing but the counters, the phase and the conditions changes in the passes
after it (a value written with the decision and dropped by the next status write is a wasted write and a
column that flickers; before 2fa6a27 a JobSet's child PodGroups without a key of their own lost their
domain once their pods ran). One row per kind and shape: its owner, its pods (gated, then bound where the
decision released them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
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

from phalanx.controller.model.actions import PatchStatus, RecordAdmission, ReleasePod
from phalanx.controller.plan import plan

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
