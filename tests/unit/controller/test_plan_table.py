"""`plan()` as a table, like Kueue's scheduler tests: one row per case — the cluster (built with the testkit,
planned through the real cache), what each unit gets released (how many pods, in which domain) and the
reason its groups' `Admitted` condition gives."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from testkit import (
    LB,
    LOCAL,
    NOW,
    TOPOLOGY,
    cluster,
    group_of,
    job_body,
    job_key,
    pod_body,
    running,
    waiting_status,
    written_statuses,
)

from phalanx.api import conditions as c
from phalanx.api.builders import build_sliced_objects
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import parse_job_policy
from phalanx.api.status import PodGroupStatus
from phalanx.controller.model.actions import ReleasePod, UngatePod
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan import Plan, PlanInput, plan

BLOCK = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}
SLICED = {**TOPOLOGY, "phalanx.dev/slice-size": "2", "phalanx.dev/slice-topology-key": LB}


def pods(
    job: str, count: int, *, priority: int = 0, indexed: bool = False, **kw: Any
) -> list[dict[str, Any]]:
    return [
        pod_body(job, i, priority=priority, completion_index=i if indexed else None, **kw)
        for i in range(count)
    ]


def sliced_job(
    name: str, *, created: str, priority: int, last_domain: str | None = None
) -> tuple[dict[str, Any], Any, list[dict[str, Any]]]:
    """A sliced Job of 4 pods in 2 slices (one local block each, both in one network block), made by
    Phalanx already (its CompositePodGroup and slices exist), its pods gated; `last_domain`: the network
    block its root remembers from a decision whose pods are gone."""
    job = job_body(name, 4, annotations=SLICED, created=created, indexed=True)
    policy = parse_job_policy(job)
    _, root, groups = build_sliced_objects(job, policy, parse_job_layout(job, policy), priority)
    root_body = {**root.to_api(), "metadata": _meta(root, "r")}
    if last_domain is not None:
        root_body["status"] = {"lastDomain": last_domain}
    made: list[Any] = [CompositePodGroupRecord.from_body(root_body)]
    made += [
        PodGroupRecord.from_body({**g.to_api(), "metadata": _meta(g, f"s{i}")}) for i, g in enumerate(groups)
    ]
    return job, made, pods(name, 4, priority=priority, indexed=True)


def _meta(obj: Any, uid: str) -> dict[str, Any]:
    return {**obj.to_api()["metadata"], "uid": uid}


@dataclass(frozen=True)
class Case:
    name: str
    cluster: Callable[[], PlanInput]
    released: dict[str, tuple[int, str | None]]  # unit key -> (pods released, their one network block)
    reasons: dict[str, str] = field(default_factory=dict)  # group name prefix -> Admitted reason


def _gang(name: str, **kw: Any) -> dict[str, Any]:
    return job_body(name, 4, annotations=TOPOLOGY, **kw)


CASES = [
    Case(
        "a new gang that fits is made and admitted whole in one block in the same pass",
        lambda: cluster([(_gang("train"), None, pods("train", 4))]),
        {job_key("train"): (4, "nb-a")},
        {"train": c.REASON_ADMITTED},
    ),
    Case(
        "a gang with three free nodes in each block waits, nothing released",
        lambda: cluster([(_gang("train"), group_of(_gang("train")), pods("train", 4))], busy=(1, 5)),
        {},
        {"train": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        "a gang short of pods waits for them",
        lambda: cluster([(_gang("train"), group_of(_gang("train")), pods("train", 3))]),
        {},
        {"train": c.REASON_WAITING_FOR_PODS},
    ),
    Case(
        "a suspended Job holds nothing",
        lambda: cluster([(_gang("train", suspend=True), group_of(_gang("train")), pods("train", 4))]),
        {},
        {"train": c.REASON_SUSPENDED},
    ),
    Case(
        "a finished Job says so",
        lambda: cluster([(_gang("train", finished=True), group_of(_gang("train")), [])]),
        {},
        {"train": c.REASON_FINISHED},
    ),
    Case(
        "a unit that backs off is left out of the pass",
        lambda: cluster(
            [(_gang("train"), group_of(_gang("train")), pods("train", 4))],
            backing_off=frozenset({job_key("train")}),
        ),
        {},
    ),
    Case(
        "of two gangs that each need a whole block, both are placed, one per block",
        lambda: cluster(
            [
                (_gang("a"), group_of(_gang("a")), pods("a", 4)),
                (_gang("b"), group_of(_gang("b")), pods("b", 4)),
            ]
        ),
        {job_key("a"): (4, "nb-a"), job_key("b"): (4, "nb-b")},
    ),
    Case(
        "with one block free the higher-priority gang is placed, though younger",
        lambda: cluster(
            [
                (_gang("low"), group_of(_gang("low")), pods("low", 4)),
                (
                    _gang("high", created="2026-11-30T11:30:00Z"),
                    group_of(_gang("high")),
                    pods("high", 4, priority=100),
                ),
            ],
            busy=(5,),
        ),
        {job_key("high"): (4, "nb-a")},
        {"low": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        "of equal priority, the older gang is placed first",
        lambda: cluster(
            [
                (_gang("young", created="2026-11-30T11:30:00Z"), group_of(_gang("young")), pods("young", 4)),
                (_gang("old", created="2026-11-30T10:00:00Z"), group_of(_gang("old")), pods("old", 4)),
            ],
            busy=(5,),
        ),
        {job_key("old"): (4, "nb-a")},
        {"young": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        # The ordering fix of issue 15: units are ordered by rule, not by kind (sliced Jobs used to be
        # planned after every plain Job, whatever their priority).
        "a high-priority sliced Job is placed before a low-priority plain Job competing for the same block",
        lambda: cluster(
            [
                (_gang("plain", created="2026-11-30T09:00:00Z"), group_of(_gang("plain")), pods("plain", 4)),
                sliced_job("sliced", created="2026-11-30T11:30:00Z", priority=1000),
            ],
            busy=(5,),
        ),
        {job_key("sliced"): (4, "nb-a")},
        {"plain": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        "a low-priority sliced Job waits behind a high-priority plain Job for the same block",
        lambda: cluster(
            [
                (
                    _gang("plain", created="2026-11-30T11:30:00Z"),
                    group_of(_gang("plain")),
                    pods("plain", 4, priority=1000),
                ),
                sliced_job("sliced", created="2026-11-30T09:00:00Z", priority=0),
            ],
            busy=(5,),
        ),
        {job_key("plain"): (4, "nb-a")},
    ),
]


def _had(domain: str) -> PodGroupStatus:
    """A group whose last decision was in `domain` and whose pods are gone (made anew by their controller)."""
    return PodGroupStatus(last_domain=domain)


CASES += [
    Case(
        "a gang whose pods were made anew goes back to the block it had, the other equally free",
        lambda: cluster([(_gang("train"), group_of(_gang("train"), _had("nb-b")), pods("train", 4))]),
        {job_key("train"): (4, "nb-b")},
        {"train": c.REASON_ADMITTED},
    ),
    Case(
        "a gang whose block it had no longer fits goes whole to another",
        lambda: cluster(
            [(_gang("train"), group_of(_gang("train"), _had("nb-b")), pods("train", 4))], busy=(6,)
        ),
        {job_key("train"): (4, "nb-a")},
        {"train": c.REASON_ADMITTED},
    ),
    Case(
        "a gang remembering a block no node has any more is placed by the usual rule",
        lambda: cluster([(_gang("train"), group_of(_gang("train"), _had("nb-gone")), pods("train", 4))]),
        {job_key("train"): (4, "nb-a")},
    ),
    Case(
        "a tree whose pods were made anew goes back whole to the block its root had",
        lambda: cluster(
            [sliced_job("sliced", created="2026-11-30T11:30:00Z", priority=0, last_domain="nb-b")]
        ),
        {job_key("sliced"): (4, "nb-b")},
        {"sliced": c.REASON_ADMITTED},
    ),
    Case(
        "a tree whose block it had no longer fits goes whole to another",
        lambda: cluster(
            [sliced_job("sliced", created="2026-11-30T11:30:00Z", priority=0, last_domain="nb-b")], busy=(7,)
        ),
        {job_key("sliced"): (4, "nb-a")},
        {"sliced": c.REASON_ADMITTED},
    ),
]


def _waited(seconds: float) -> PodGroupStatus:
    return waiting_status(NOW - dt.timedelta(seconds=seconds))


def _starving(waited: float) -> PlanInput:
    """A 4-pod block gang waiting since `waited` s, a small gang running in each block (two free nodes in
    each), and a younger small gang that fits either block."""
    big = _gang("big", created="2026-11-30T10:00:00Z")
    smalls = []
    for name, nodes, created in (
        ("small-a", ("n1", "n2"), "2026-11-30T10:01:00Z"),
        ("small-b", ("n5", "n6"), "2026-11-30T10:02:00Z"),
        ("small-c", (), "2026-11-30T11:00:00Z"),
    ):
        job = job_body(name, 2, created=created)
        group = group_of(job)
        pods_ = [running(name, i, n, group.name) for i, n in enumerate(nodes)] or pods(name, 2)
        smalls.append((job, group, pods_))
    return cluster([(big, group_of(big, _waited(waited)), pods("big", 4)), *smalls], starvation_age=60)


def _low_gangs_and(*more: Any) -> PlanInput:
    low = []
    for name, first in (("low-a", 1), ("low-b", 5)):
        job = job_body(name, 4, created="2026-11-30T09:00:00Z")
        group = group_of(job)
        low.append(
            (job, group, [running(name, i, f"n{first + i}", group.name, priority=10) for i in range(4)])
        )
    return cluster([*low, *more])


CASES += [
    Case(
        "before --starvation-age a younger small gang takes the room a waiting block gang needs",
        lambda: _starving(59),
        {job_key("small-c"): (2, "nb-a")},
        {"big": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        # Bounded waiting (issue 18): the big gang's block is held, the small one backfills the other.
        "past --starvation-age the waiting gang's room is held and a younger small gang backfills elsewhere",
        lambda: _starving(61),
        {job_key("small-c"): (2, "nb-b")},
        {"big": c.REASON_UNSCHEDULABLE},
    ),
    Case(
        # Trees preempt (issue 18): as a plain gang of the same priority would.
        "a high-priority sliced Job preempts a low-priority gang whole instead of waiting behind it",
        lambda: _low_gangs_and(sliced_job("sliced", created="2026-11-30T11:30:00Z", priority=1000)),
        {},
        {"sliced": c.REASON_PREEMPTING},
    ),
]


def released(result: Plan) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    for unit in result.units:
        nodes = [a.node for a in unit.actions if isinstance(a, ReleasePod)]
        if nodes:
            blocks = {BLOCK[n] for n in nodes}
            out[unit.key] = (len(nodes), blocks.pop() if len(blocks) == 1 else None)
    return out


def reasons(result: Plan) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, status in written_statuses(result).items():
        condition = status.condition(c.ADMITTED)
        if condition is not None:
            out[name] = condition.reason
    return out


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_plan(case: Case) -> None:
    result = plan(case.cluster(), NOW)
    assert released(result) == case.released
    said = reasons(result)
    for prefix, reason in case.reasons.items():
        matching = {name: r for name, r in said.items() if name.startswith(prefix)}
        assert matching, f"no status written for {prefix}: {said}"
        assert set(matching.values()) == {reason}, matching


def test_a_basic_job_is_ungated_not_placed() -> None:
    job = job_body("b", 2, annotations={"phalanx.dev/policy": "basic"})
    result = plan(cluster([(job, group_of(job), pods("b", 2, gated=True))]), NOW)
    assert not released(result)
    assert len([a for a in result.actions if isinstance(a, UngatePod)]) == 2


def test_the_sliced_job_placed_first_keeps_each_slice_in_one_local_block() -> None:
    state = cluster(
        [
            (_gang("plain", created="2026-11-30T09:00:00Z"), group_of(_gang("plain")), pods("plain", 4)),
            sliced_job("sliced", created="2026-11-30T11:30:00Z", priority=1000),
        ],
        busy=(5,),
    )
    order = [u.key for u in sorted(state.units, key=lambda u: u.order)]
    assert order == [job_key("sliced"), job_key("plain")]
    result = plan(state, NOW + dt.timedelta(seconds=1))
    by_pod = {a.pod.name: LOCAL[int(a.node[1:])] for a in result.actions if isinstance(a, ReleasePod)}
    assert by_pod["sliced-0"] == by_pod["sliced-1"] != by_pod["sliced-2"] == by_pod["sliced-3"]
