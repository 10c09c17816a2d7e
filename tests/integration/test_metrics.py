"""/metrics of the running operator: admitting a gang moves the admission counters and histograms."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace, bound, gpu_job, wait_for

pytestmark = pytest.mark.integration

WATCHED = (
    "phalanx_admissions_total",
    "phalanx_pods_released_total",
    "phalanx_scheduling_pass_duration_seconds_count",
    "phalanx_placement_decision_duration_seconds_count",
    "phalanx_job_admission_latency_seconds_count",
)


def samples(text: str) -> dict[str, float]:
    """Every sample's value summed over its labels, by sample name."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_admitting_a_gang_moves_the_admission_metrics(ns: Namespace, phalanx: OperatorProcess) -> None:
    assert phalanx.http_status("/healthz") == 200
    assert phalanx.http_status("/readyz") == 200
    before = samples(phalanx.scrape())
    ns.create(
        gpu_job(
            "metrics-2",
            2,
            labels={"phalanx.dev/managed": "true"},
            annotations={"phalanx.dev/topology-key": "oci.oraclecloud.com/rdma.network_block_id"},
        )
    )
    wait_for("2 metrics-2 pods bound", lambda: len(bound(ns.job_pods("metrics-2"))) == 2, timeout=60)

    def moved() -> dict[str, float] | None:
        after = samples(phalanx.scrape())
        return after if all(after.get(n, 0) > before.get(n, 0) for n in WATCHED) else None

    try:
        after = wait_for("every admission metric increased", moved, timeout=15)
    except AssertionError:
        now = samples(phalanx.scrape())
        raise AssertionError(
            "not increased: "
            + ", ".join(
                f"{n} {before.get(n, 0)} -> {now.get(n, 0)}"
                for n in WATCHED
                if now.get(n, 0) <= before.get(n, 0)
            )
        ) from None
    print({n: (before.get(n, 0), after[n]) for n in WATCHED})
    assert after["phalanx_pods_released_total"] - before.get("phalanx_pods_released_total", 0) >= 2
    assert phalanx.http_status("/healthz") == 200
