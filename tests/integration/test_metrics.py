"""/metrics of the running operator: admitting a gang moves the admission counters and histograms under the
policy Gang, a basic Job's under Basic; the process, platform and GC collectors, the build info and both
leader gauges are there."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from phalanx.devcluster.operator_process import OperatorProcess

from .kinds import groups
from .kube import Namespace, bound, gpu_job, wait_for

pytestmark = pytest.mark.integration

WATCHED = (
    "phalanx_admissions_total",
    "phalanx_admission_wait_time_seconds_count",
    "phalanx_pods_released_total",
    "phalanx_scheduling_pass_duration_seconds_count",
    "phalanx_placement_decision_duration_seconds_count",
    "phalanx_job_admission_latency_seconds_count",
    "phalanx_webhook_review_duration_seconds_count",  # the Job's gate-job review
    "phalanx_event_loop_lag_seconds_count",  # four wake-ups a second
)


def labelled(text: str, metric: str, /, **labels: str) -> float:
    """One sample's value (0 when absent); positional `metric`, so a label may be called `name`."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


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


def test_a_basic_job_counts_as_basic_and_a_gang_as_gang(ns: Namespace, phalanx: OperatorProcess) -> None:
    before = phalanx.scrape()
    ns.create(
        gpu_job(
            "basic-1", 2, labels={"phalanx.dev/managed": "true"}, annotations={"phalanx.dev/policy": "basic"}
        )
    )
    wait_for("2 basic-1 pods bound", lambda: len(bound(ns.job_pods("basic-1"))) == 2, timeout=60)

    def counted(policy: str) -> str | None:
        now = phalanx.scrape()
        grew = all(
            labelled(now, name, policy=policy) > labelled(before, name, policy=policy)
            for name in ("phalanx_admissions_total", "phalanx_admission_wait_time_seconds_count")
        )
        return now if grew else None

    after = wait_for("a Basic admission counted", lambda: counted("Basic"), timeout=15)
    # The basic Job moved no Gang series.
    for name in ("phalanx_admissions_total", "phalanx_admission_wait_time_seconds_count"):
        assert labelled(after, name, policy="Gang") == labelled(before, name, policy="Gang"), name
    ns.create(gpu_job("gang-1", 2, labels={"phalanx.dev/managed": "true"}))
    wait_for("2 gang-1 pods bound", lambda: len(bound(ns.job_pods("gang-1"))) == 2, timeout=60)
    gang = wait_for("a Gang admission counted", lambda: counted("Gang"), timeout=15)
    assert labelled(gang, "phalanx_admissions_total", policy="Gang") == (
        labelled(before, "phalanx_admissions_total", policy="Gang") + 1
    ), "one gang, one admission"


def test_process_build_and_leader_metrics_are_served(phalanx: OperatorProcess) -> None:
    text = phalanx.scrape()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
        "python_gc_collections",
    ):
        assert name in families, f"{name} missing from /metrics"
    assert labelled(text, "process_resident_memory_bytes") > 0
    (build,) = families["phalanx_build_info"].samples
    assert build.value == 1 and build.labels["version"] not in ("", "unknown"), build
    # The session's operator runs without leader election: it runs the loop, so both gauges say 1.
    assert labelled(text, "phalanx_leader") == 1
    assert labelled(text, "leader_election_master_status", name="phalanx-leader") == 1
    # uvloop is a dependency: `--event-loop auto` runs the process on it and says so at start.
    assert "event loop: uvloop" in phalanx.current_log()


def test_a_running_gang_settles_and_passes_skip_it(ns: Namespace, phalanx: OperatorProcess) -> None:
    """Incremental passes (loop/incremental.py) on the real operator: once a gang runs and its status says
    so, passes stop planning it (`phalanx_units_skipped_total` grows at every pass, one a resync at least)
    while a pod of it changing plans it again (and --verify-incremental, on in these tests, checks every
    such pass against the whole one)."""
    ns.create(
        gpu_job(
            "settles",
            2,
            labels={"phalanx.dev/managed": "true"},
            annotations={"phalanx.dev/topology-key": "oci.oraclecloud.com/rdma.network_block_id"},
        )
    )
    wait_for("2 settles pods bound", lambda: len(bound(ns.job_pods("settles"))) == 2, timeout=60)

    def skipping() -> float | None:
        first = samples(phalanx.scrape()).get("phalanx_units_skipped_total", 0.0)
        passes = samples(phalanx.scrape()).get("phalanx_scheduling_pass_duration_seconds_count", 0.0)
        return first if first > 0 and passes > 0 else None

    before = wait_for("a settled unit skipped", skipping, timeout=60)
    wait_for(
        "more settled units skipped at the next passes",
        lambda: samples(phalanx.scrape()).get("phalanx_units_skipped_total", 0.0) > before,
        timeout=30,
    )


def test_the_primed_cache_is_left_out_of_full_garbage_collections(phalanx: OperatorProcess) -> None:
    """gc.freeze() after priming (process/runtime.py): the full collections walk what came after only."""
    assert phalanx.http_status("/readyz") == 200
    said = [line for line in phalanx.current_log().splitlines() if "left out of full garbage" in line]
    assert len(said) == 1, said
    frozen = int(said[0].split("cache primed: ")[1].split()[0])
    assert frozen > 10_000  # the imported modules alone are tens of thousands of objects


def test_a_gangs_writes_are_counted_by_action_and_why(ns: Namespace, phalanx: OperatorProcess) -> None:
    """phalanx_writes_total against the real apiserver: a 2-pod gang that runs is at least its Workload and
    PodGroup, its decision recorded (phase Admitted), two releases, its Running status and its events."""
    before = phalanx.scrape()
    ns.create(gpu_job("writes-2", 2, labels={"phalanx.dev/managed": "true"}))
    wait_for("2 writes-2 pods bound", lambda: len(bound(ns.job_pods("writes-2"))) == 2, timeout=60)
    wait_for(
        "its PodGroup Running",
        lambda: [g for g in groups(ns) if (g.get("status") or {}).get("phase") == "Running"],
        timeout=30,
    )
    least = {
        ("CreateWorkload", ""): 1,
        ("CreatePodGroup", ""): 1,
        ("RecordAdmission", "Admitted"): 1,
        ("ReleasePod", ""): 2,
        ("PatchStatus", "Running"): 1,
        ("PostEvent", "PodGroupCreated"): 1,
        ("PostEvent", "Admitted"): 2,  # on the PodGroup and on its Job
    }

    def grown() -> dict[tuple[str, str], float]:
        now = phalanx.scrape()
        return {
            (action, why): labelled(now, "phalanx_writes_total", action=action, why=why)
            - labelled(before, "phalanx_writes_total", action=action, why=why)
            for action, why in least
        }

    try:
        wait_for("every write counted", lambda: all(grown()[k] >= n for k, n in least.items()), timeout=15)
    except AssertionError:
        raise AssertionError(f"grown: {grown()}, at least {least}") from None
