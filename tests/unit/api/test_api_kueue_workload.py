"""What a Kueue Workload's conditions say of its owner (api/kueue_workload.py), and that the operator's
wording (a held group's condition, controller/kinds/kueue.py) and `phalanx explain`'s (tools/kueue_view.py)
say the same for every combination of conditions: they once drifted apart."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.kueue_workload import (
    ADMITTED,
    EVICTED,
    FINISHED,
    QUOTA_RESERVED,
    REQUEUED,
    KueueCondition,
    KueueState,
    conditions_of,
    kueue_state,
)
from phalanx.controller.kinds.kueue import KueueView as ControllerView
from phalanx.controller.model.kueue import KueueWorkloadRecord
from phalanx.tools.kueue_view import KUEUE, NOBODY, PHALANX
from phalanx.tools.kueue_view import kueue_view as explain_view

T, F = "True", "False"


def conds(**statuses: str) -> tuple[KueueCondition, ...]:
    return tuple(
        KueueCondition(kind, status, f"{kind}Reason", f"{kind} said") for kind, status in statuses.items()
    )


ROWS = [
    # conditions, active, state
    (conds(), True, KueueState.WAITING),
    (conds(QuotaReserved=F), True, KueueState.WAITING),
    (conds(QuotaReserved=T), True, KueueState.RESERVED),
    (conds(QuotaReserved=T, Admitted=T), True, KueueState.ADMITTED),
    (conds(QuotaReserved=T, Admitted=T), False, KueueState.DEACTIVATED),
    (conds(QuotaReserved=T, Admitted=T, Evicted=T), True, KueueState.EVICTING),
    (conds(QuotaReserved=F, Admitted=F, Evicted=T), True, KueueState.WAITING_AFTER_EVICTION),
    (conds(QuotaReserved=F, Admitted=F, Evicted=T, Requeued=T), True, KueueState.WAITING_AFTER_EVICTION),
    (conds(QuotaReserved=F, Admitted=F, Evicted=T, Requeued=F), True, KueueState.NOT_REQUEUED),
    (conds(QuotaReserved=T, Evicted=T, Requeued=F), True, KueueState.EVICTING),
    (conds(QuotaReserved=T, Admitted=T, Evicted=F), True, KueueState.ADMITTED),
    (conds(QuotaReserved=T, Admitted=T, Finished=T), True, KueueState.FINISHED),
    (conds(Finished=T), False, KueueState.FINISHED),
    (conds(Evicted=T, QuotaReserved=T), False, KueueState.DEACTIVATED),
]


@pytest.mark.parametrize(("conditions", "active", "state"), ROWS)
def test_kueue_state(conditions: tuple[KueueCondition, ...], active: bool, state: KueueState) -> None:
    assert kueue_state(conditions, active) is state


def test_conditions_are_read_in_order_and_entries_not_objects_are_skipped() -> None:
    raw = [{"type": EVICTED, "status": T, "reason": "Preempted"}, "junk", {"type": ADMITTED}]
    assert conditions_of(raw) == (
        KueueCondition(EVICTED, T, "Preempted", ""),
        KueueCondition(ADMITTED, "", "", ""),
    )


# What each state is called, in the operator's condition and in explain alike.
WORDS = {
    KueueState.DEACTIVATED: "deactivated",
    KueueState.EVICTING: "Kueue is evicting it",
    KueueState.NOT_REQUEUED: "has not requeued it yet",
    KueueState.WAITING_AFTER_EVICTION: "since Kueue evicted it",
    KueueState.RESERVED: "waits for its admission checks",
    KueueState.WAITING: "waiting in Kueue's LocalQueue lq",
}


def workload_body(conditions: tuple[KueueCondition, ...], active: bool) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "job-train-1a2b3",
            "namespace": "ns",
            "uid": "w-uid",
            "ownerReferences": [{"kind": "Job", "name": "train", "uid": "job-uid", "controller": True}],
        },
        "spec": {"queueName": "lq", "active": active},
        "status": {
            "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in conditions
            ],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 4}]},
        },
    }


KINDS = (QUOTA_RESERVED, ADMITTED, EVICTED, REQUEUED, FINISHED)


@given(
    st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from([T, F, "Unknown"])), unique_by=lambda c: c[0]),
    st.booleans(),
    st.sampled_from(["", "below its minCount: 3 of its 4 pods were left"]),
)
def test_the_operator_and_explain_say_the_same_of_any_workload(
    pairs: list[tuple[str, str]], active: bool, note: str
) -> None:
    """`note`: Phalanx's requeue note on the Workload (it deactivated it to requeue through Kueue)."""
    conditions = tuple(
        KueueCondition(kind, status, f"{kind}Reason", f"{kind} said") for kind, status in pairs
    )
    body = workload_body(conditions, active)
    if note:
        body["metadata"]["annotations"] = {"phalanx.dev/requeued": note}
    state = kueue_state(conditions, active)
    held = ControllerView("lq", KueueWorkloadRecord.from_body(body)).holds
    owner = {"metadata": {"name": "train", "uid": "job-uid", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}}
    shown = explain_view(owner, [body])
    assert shown is not None
    if state is KueueState.FINISHED:
        assert (held, shown.holder) == ("", NOBODY)
    elif state is KueueState.ADMITTED:
        assert (held, shown.holder) == ("", PHALANX)
    else:
        assert shown.holder == KUEUE
        assert WORDS[state] in held, held
        assert WORDS[state] in shown.summary, shown.summary
        by_phalanx = state is KueueState.DEACTIVATED and bool(note)
        assert ("Phalanx deactivated" in held) is by_phalanx, held
        assert ("Phalanx deactivated" in shown.summary) is by_phalanx, shown.summary
        assert (note in shown.summary) is by_phalanx or not note, shown.summary
