"""bench/timeline.py: each component's first and Nth request of a burst, from the apiserver's log."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from timeline import first_binding, read, render, steps


def line(ended: str, verb: str, uri: str, agent: str, latency: str) -> str:
    fields = f'verb="{verb}" URI="{uri}" latency="{latency}" userAgent="{agent}"'
    return f'I1203 {ended}    4242 httplog.go:134] "HTTP" {fields}\n'


def test_the_chain_is_ordered_by_first_start_relative_to_the_first_job_create(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver.log"
    log.write_text(
        "I1203 13:00:00.000000    4242 some.go:1] not a request\n"
        + line("13:00:00.700000", "PATCH", "/api/v1/namespaces/a/pods/j-0", "phalanx", "100ms")
        + line("13:00:00.150000", "POST", "/apis/batch/v1/namespaces/a/jobs", "python-requests/2", "50ms")
        + line(
            "13:00:00.400000", "POST", "/api/v1/namespaces/a/pods", "kube-controller-manager/v1.37.2", "20ms"
        )
        + line("13:00:00.900000", "PATCH", "/api/v1/namespaces/a/pods/j-1", "phalanx", "1ms")
        + line("13:00:05.000000", "PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/n", "kwok", "1ms")
        + line("13:00:09.000000", "GET", "/api/v1/pods?watch=true", "phalanx", "9s")
    )
    zero, rows = steps(read(log), nth=2)
    assert zero == 13 * 3600 + 0.1  # the Job create's start: its end less its latency
    assert [(s.agent, s.verb, s.resource, s.count) for s in rows] == [
        ("python-requests", "POST", "jobs", 1),
        ("kube-controller-manager", "POST", "pods", 1),
        ("phalanx", "PATCH", "pods", 2),  # leases and watches are left out
    ]
    patches = rows[2]
    assert round(patches.first.start - zero, 6) == 0.5 and patches.nth is not None
    assert round(patches.nth.end - zero, 6) == 0.8
    text = render(zero, rows, 2)
    assert "phalanx PATCH pods" in text and "  0.500 →   0.600" in text


def test_the_first_binding_counts_from_the_first_job_create_on_the_apiservers_clock(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver.log"
    binding = "/api/v1/namespaces/a/pods/j-0/binding"
    log.write_text(
        line("13:00:00.150000", "POST", "/apis/batch/v1/namespaces/a/jobs", "python-requests/2", "50ms")
        + line("13:00:00.300000", "POST", "/apis/batch/v1/namespaces/a/jobs", "python-requests/2", "50ms")
        + line("13:00:00.900000", "POST", binding, "kube-scheduler/v1.37.2", "20ms")
        + line(
            "13:00:00.800000", "POST", "/api/v1/namespaces/a/pods/j-1/binding", "kube-scheduler/v1", "300ms"
        )
    )
    # The first Job create started at .100; the bindings ended at .800 and .900: the first ends first.
    assert round(first_binding(read(log)) or 0.0, 6) == 0.7
    only_jobs = tmp_path / "jobs.log"
    only_jobs.write_text(line("13:00:00.150000", "POST", "/apis/batch/v1/namespaces/a/jobs", "x", "1ms"))
    assert first_binding(read(only_jobs)) is None
