"""bench/scale_watch.py's reading of the apiserver's request log: which component wrote what."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from prometheus_client import CollectorRegistry, Counter, generate_latest

from scale_watch import (
    RequestLog,
    count_diff,
    go_duration,
    histogram_latency,
    lag_buckets,
    resource_of,
    review_buckets,
    write_counts,
)


@pytest.mark.parametrize(
    ("uri", "resource"),
    [
        ("/api/v1/namespaces/a/pods/p/status?fieldManager=x", "pods/status"),
        ("/api/v1/namespaces/a/pods/p", "pods"),
        ("/api/v1/namespaces/a/pods", "pods"),
        ("/apis/phalanx.dev/v1alpha1/namespaces/a/podgroups/g/status", "podgroups/status"),
        ("/apis/events.k8s.io/v1/namespaces/a/events", "events"),
        ("/api/v1/nodes/n1", "nodes"),
        ("/api/v1/namespaces/a", "namespaces"),
        ("/api/v1/namespaces", "namespaces"),
        ("/apis/batch/v1/jobs?watch=true", "jobs"),
        ("/healthz", "healthz"),
    ],
)
def test_resource_of_names_the_plural_and_its_subresource(uri: str, resource: str) -> None:
    assert resource_of(uri) == resource


def test_the_log_counts_each_components_writes_by_resource_and_leases_apart(tmp_path: Path) -> None:
    def line(verb: str, uri: str, agent: str, latency: str = "1.5ms") -> str:
        fields = f'verb="{verb}" URI="{uri}" latency="{latency}" userAgent="{agent}"'
        return f'I1202 httplog.go:134] "HTTP" {fields}\n'

    before = line("PATCH", "/api/v1/namespaces/a/pods/early", "OpenAPI-Generator/1.0")
    inside = [
        line("PATCH", "/api/v1/namespaces/a/pods/p1", "OpenAPI-Generator/1.0", "2ms"),
        line("PATCH", "/api/v1/namespaces/a/pods/p2", "OpenAPI-Generator/1.0", "1m0.5s"),
        line("POST", "/api/v1/namespaces/a/events", "OpenAPI-Generator/1.0"),
        line("GET", "/api/v1/namespaces/a/pods/p1", "OpenAPI-Generator/1.0"),
        line("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", "OpenAPI-Generator/1.0"),
        line("POST", "/api/v1/namespaces/a/pods/p1/binding", "kube-scheduler/v1.37.2 (linux/amd64)"),
        "an unrelated line\n",
    ]
    log = tmp_path / "apiserver.log"
    log.write_text(before + "".join(inside) + line("POST", "/api/v1/namespaces/a/events", "kopf/1"))
    start = len(before.encode())
    end = start + len("".join(inside).encode())

    read = RequestLog.read(log, start, end)

    assert read.counts == {
        "OpenAPI-Generator": {"PATCH": 2, "POST": 1, "GET": 1, "LEASE": 1},
        "kube-scheduler": {"POST": 1},
    }
    assert read.writes == {
        "OpenAPI-Generator": {"PATCH pods": 2, "POST events": 1},
        "kube-scheduler": {"POST pods/binding": 1},
    }
    assert sorted(read.write_latency["OpenAPI-Generator"]) == [0.0015, 0.002, 60.5]
    # Creates by resource, whoever sent them (the scheduler's bindings too); never a PATCH or a GET.
    assert read.creates == {"events": [0.0015], "pods/binding": [0.0015]}
    assert go_duration("856.448µs") == pytest.approx(0.000856448)


def test_the_operators_own_review_histogram_gives_each_webhooks_reviews_and_quantiles_in_the_window() -> None:
    def text(counts: dict[str, int]) -> str:
        lines = [
            "# HELP phalanx_webhook_review_duration_seconds x",
            "# TYPE phalanx_webhook_review_duration_seconds histogram",
        ]
        for le, n in counts.items():
            lines.append(
                f'phalanx_webhook_review_duration_seconds_bucket{{le="{le}",webhook="gate-job"}} {n}'
            )
        lines.append('phalanx_scheduling_pass_duration_seconds_bucket{le="+Inf"} 7')
        return "\n".join(lines) + "\n"

    before = review_buckets(text({"0.001": 2, "0.005": 2, "0.01": 2, "+Inf": 2}))
    # 100 more reviews: 50 within 1 ms, 49 more within 5 ms, 1 more within 10 ms
    after = review_buckets(text({"0.001": 52, "0.005": 101, "0.01": 102, "+Inf": 102}))
    latency = histogram_latency(before, after)
    assert list(latency) == ["gate-job"]
    assert latency["gate-job"]["reviews"] == 100
    assert latency["gate-job"]["p50_ms"] == pytest.approx(1.0)
    assert latency["gate-job"]["p99_ms"] == pytest.approx(5.0)
    assert review_buckets("") == {}


def test_the_operators_loop_lag_histogram_reads_under_one_key_and_leaves_other_histograms_out() -> None:
    def text(counts: dict[str, int]) -> str:
        lines = ["# TYPE phalanx_event_loop_lag_seconds histogram"]
        lines += [f'phalanx_event_loop_lag_seconds_bucket{{le="{le}"}} {n}' for le, n in counts.items()]
        lines.append('phalanx_webhook_review_duration_seconds_bucket{le="0.1",webhook="gate-job"} 9')
        return "\n".join(lines) + "\n"

    before = lag_buckets(text({"0.01": 10, "0.1": 10, "+Inf": 10}))
    # 100 more wake-ups: 98 within 10 ms, 2 between 10 and 100 ms
    after = lag_buckets(text({"0.01": 108, "0.1": 110, "+Inf": 110}))
    assert set(after) == {"loop"}
    latency = histogram_latency(before, after)["loop"]
    assert latency["reviews"] == 100
    assert latency["p99_ms"] == pytest.approx(55.0)
    assert lag_buckets("") == {}


def test_the_operators_writes_counter_reads_by_action_and_why_and_only_what_grew() -> None:
    """Read from prometheus-client's own exposition of a counter shaped like phalanx_writes_total."""
    registry = CollectorRegistry()
    writes = Counter("phalanx_writes", "x", ["action", "why"], registry=registry)
    other = Counter("phalanx_requeues", "y", ["reason"], registry=registry)
    writes.labels("ReleasePod", "").inc(5)
    writes.labels("PatchStatus", "Running").inc(1)
    other.labels("quota").inc(3)
    before = write_counts(generate_latest(registry).decode())
    writes.labels("ReleasePod", "").inc(16)
    writes.labels("PostEvent", "Admitted").inc(2)
    after = write_counts(generate_latest(registry).decode())
    assert before == {"ReleasePod": 5.0, "PatchStatus Running": 1.0}
    assert count_diff(before, after) == {"PostEvent Admitted": 2.0, "ReleasePod": 16.0}
    assert write_counts("") == {}


def test_job_creates_are_timed_whoever_sends_them_webhooks_included() -> None:
    def line(verb: str, uri: str, agent: str, latency: str) -> str:
        fields = f'verb="{verb}" URI="{uri}" latency="{latency}" userAgent="{agent}"'
        return f'I1202 httplog.go:134] "HTTP" {fields}\n'

    chunk = "".join(
        [
            line("POST", "/apis/batch/v1/namespaces/a/jobs", "python-urllib/3.11", "72.5ms"),
            line("POST", "/apis/batch/v1/namespaces/b/jobs?fieldManager=x", "kubectl/v1.37.2", "1.2s"),
            line("PUT", "/apis/batch/v1/namespaces/a/jobs/j", "kube-controller-manager/v1.37.2", "3ms"),
            line("GET", "/apis/batch/v1/namespaces/a/jobs", "kubectl/v1.37.2", "9ms"),
        ]
    )
    assert RequestLog.parse(chunk).creates == {"jobs": [0.0725, 1.2]}
