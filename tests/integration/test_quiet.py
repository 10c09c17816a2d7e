"""Quiet when nothing is wrong (issue 16 item 10), on the dev cluster: deleting Jobs Phalanx manages (one
running, one waiting for room) posts no warning event, logs no warning and counts no failed action or API
error; a webhook's denial is logged at INFO."""

from __future__ import annotations

import re

import pytest

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import NB_KEY, Namespace, bound, wait_for
from .test_phalanx_admission import group_of, managed_job, pod_groups

pytestmark = pytest.mark.integration

FAILURES = re.compile(r"^(phalanx_apply_failures_total|phalanx_api_errors_total)\{[^}]*\} ([0-9.e+]+)$", re.M)


def failures(phalanx: OperatorProcess) -> dict[str, float]:
    return {m.group(0).rsplit(" ", 1)[0]: float(m.group(2)) for m in FAILURES.finditer(phalanx.scrape())}


def test_deleting_managed_jobs_is_not_a_failure(ns: Namespace, phalanx: OperatorProcess) -> None:
    said = len(phalanx.current_log())
    before = failures(phalanx)
    ns.create(managed_job("running", 2, NB_KEY))
    ns.create(managed_job("waiting", 5, NB_KEY))  # 5 pods in one block of 4 nodes: it waits
    wait_for("running bound", lambda: len(bound(ns.job_pods("running"))) == 2 or None, timeout=120)
    wait_for("waiting's group said why", lambda: (group_of(ns, "waiting") or {}).get("status") or None)

    for job in ("running", "waiting"):
        ns.api.request(
            "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/{job}", {"propagationPolicy": "Background"}
        )
    wait_for("the groups and pods gone", lambda: (not pod_groups(ns) and not ns.pods()) or None, timeout=120)
    # One more pass after the last deletion has run by the time the operator saw a change after it.
    ns.create(managed_job("after", 1, NB_KEY))
    wait_for("after bound", lambda: len(bound(ns.job_pods("after"))) == 1 or None, timeout=120)

    # Unschedulable is the waiting gang's own Warning (no room: true); nothing else is.
    warnings = [
        (e["reason"], e["message"])
        for e in ns.events()
        if e["type"] == "Warning" and e["reason"] != "Unschedulable"
    ]
    assert not warnings, warnings
    log = phalanx.current_log()[said:]
    noisy = [line for line in log.splitlines() if ns.name in line and ("WARNING" in line or "ERROR" in line)]
    assert not noisy, noisy
    after = failures(phalanx)
    grew = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    assert not grew, grew


def test_a_webhook_denial_is_logged_at_info(ns: Namespace, phalanx: OperatorProcess) -> None:
    said = len(phalanx.current_log())
    body = managed_job("denied", 2, NB_KEY, **{"phalanx.dev/min-count": "\u0662"})
    with pytest.raises(ApiError):
        ns.create(body)

    def logged() -> list[str] | None:
        log = phalanx.current_log()[said:]
        return [line for line in log.splitlines() if "phalanx.dev/min-count" in line] or None

    lines = wait_for("the denial logged", logged, timeout=30)
    assert all("[INFO" in line and "denied: " in line for line in lines), lines
    assert not any("ERROR" in line for line in lines), lines
