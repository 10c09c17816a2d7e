"""`phalanx.dev/topology-mode: auto` through the state machine: kept on the PodGroup, passed to the engine,
and the Admitted condition (and the recorded decision) say which level applied and why."""

from __future__ import annotations

from typing import Any

import pytest
from testkit import LB, NB, NOW, cluster, group_of, job_body, only, pod_body, status_of, with_status

from phalanx.api import conditions as c
from phalanx.api.status import GroupStatus
from phalanx.controller.model.actions import (
    CreatePodGroup,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
)
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.plan import Plan, plan

LEVELS = {NB: (NB, LB), LB: (NB, LB)}
BLOCK = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}


def _auto(name: str, count: int) -> dict[str, Any]:
    return job_body(
        name, count, annotations={"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "auto"}
    )


def _admitted(result: Plan) -> tuple[str, str, str]:
    status: GroupStatus = status_of(result)  # a status patch, or the one a decision's record carries
    cond = status.condition(c.ADMITTED)
    assert cond is not None
    return cond.status, cond.reason, cond.message


def test_the_pod_group_keeps_the_auto_mode_it_was_made_with() -> None:
    group = group_of(_auto("local-4", 4))
    assert group.topology_mode == "auto"


@pytest.mark.parametrize(
    ("written", "kept"),
    [("preferred", "preferred"), ("preferred ", "preferred"), (" auto", "auto"), ("required ", "required")],
)
def test_the_pod_group_keeps_the_mode_as_read_not_as_written(written: str, kept: str) -> None:
    """Surrounding whitespace is ignored when the Job is read: the PodGroup keeps that mode, so the next
    pass finds nothing changed (no ImmutableChangeIgnored) and the gang is decided in that mode."""
    job = job_body(
        "train", 2, annotations={"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": written}
    )
    pods = [pod_body("train", i) for i in range(2)]
    (created,) = only(plan(cluster([(job, None, pods)]), NOW).actions, CreatePodGroup)
    body = created.pod_group.to_api()
    body["metadata"].update(uid="pg-train", creationTimestamp="2026-11-30T11:00:00Z")
    group = PodGroupRecord.from_body(body)
    assert group.topology_mode == kept
    again = plan(cluster([(job, group, pods)]), NOW)
    assert [e.reason for e in only(again.actions, PostEvent) if e.type == "Warning"] == []
    assert len(only(again.actions, ReleasePod)) == 2


def test_a_gang_that_can_never_fit_one_local_block_takes_one_network_block_and_says_why() -> None:
    job = _auto("local-4", 4)
    group = group_of(job)
    pods = [pod_body("local-4", i, group=group.name) for i in range(4)]
    result = plan(cluster([(job, group, pods)], levels=LEVELS), NOW)
    nodes = sorted(r.node for r in only(result.actions, ReleasePod))
    assert len(nodes) == 4 and len({BLOCK[n] for n in nodes}) == 1, nodes
    (record,) = only(result.actions, RecordAdmission)
    note = f"auto: 4 pods can never fit one domain of {LB} (at most 2 do), so one domain of {NB}"
    assert record.admission.level == NB
    assert record.admission.mode_note is not None and record.admission.mode_note.startswith(note)
    flag, reason, message = _admitted(result)
    assert (flag, reason) == (c.TRUE, c.REASON_ADMITTED)
    assert note in message, message
    events = [e.message for e in only(result.actions, PostEvent) if e.reason == "Admitted"]
    assert any(note in m for m in events), events

    # The next pass reads the decision back: the condition still says which level applied and why.
    placed = [
        pod_body("local-4", i, gated=False, node=r.node, phase="Running", group=group.name)
        for i, r in enumerate(sorted(only(result.actions, ReleasePod), key=lambda r: r.pod.name))
    ]
    status = group.status.model_copy(update={"admission": record.admission})
    again = plan(cluster([(job, with_status(group, status), placed)], levels=LEVELS), NOW)
    (patch,) = only(again.actions, PatchStatus)
    cond = patch.status.condition(c.ADMITTED)
    assert cond is not None and cond.reason == c.REASON_ADMITTED and note in cond.message, cond


def test_a_gang_that_fits_one_local_block_when_free_waits_for_one_where_preferred_spreads() -> None:
    busy = (1, 3, 5, 7)  # every local block has one free node: 2 pods fit no local block now
    job = _auto("local-2", 2)
    group = group_of(job)
    pods = [pod_body("local-2", i, group=group.name) for i in range(2)]
    auto = plan(cluster([(job, group, pods)], levels=LEVELS, busy=busy), NOW)
    assert not only(auto.actions, ReleasePod)
    flag, reason, message = _admitted(auto)
    assert (flag, reason) == (c.FALSE, c.REASON_UNSCHEDULABLE)
    assert f"auto: 2 pods fit one domain of {LB} when its nodes are free, so one is required" in message

    preferred = job_body(
        "local-2", 2, annotations={"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"}
    )
    spread = plan(cluster([(preferred, group_of(preferred), pods)], levels=LEVELS, busy=busy), NOW)
    assert len(only(spread.actions, ReleasePod)) == 2


def test_auto_is_accepted_at_the_webhook_and_refused_with_slices() -> None:
    import pytest

    from phalanx.api.job_layout import parse_job_layout
    from phalanx.api.job_policy import JobPolicyError, parse_job_policy

    job = _auto("local-4", 4)
    assert parse_job_layout(job, parse_job_policy(job)).topology_mode == "auto"
    bad = job_body("x", 4, annotations={"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "best"})
    with pytest.raises(JobPolicyError, match="is not one of required, preferred, auto"):
        parse_job_layout(bad, parse_job_policy(bad))
    sliced = job_body(
        "s",
        4,
        indexed=True,
        annotations={
            "phalanx.dev/topology-key": NB,
            "phalanx.dev/topology-mode": "auto",
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": LB,
        },
    )
    with pytest.raises(JobPolicyError, match="auto is not supported with slices"):
        parse_job_layout(sliced, parse_job_policy(sliced))
