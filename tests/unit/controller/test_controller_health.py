"""Liveness and readiness, and the endpoints that serve them with the metrics."""

from __future__ import annotations

import json
import logging

from aiohttp.test_utils import TestClient, TestServer

from phalanx.controller import metrics
from phalanx.controller.process.health import Health
from phalanx.controller.process.httpserver import build_app
from phalanx.controller.process.logs import JsonFormatter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_replica_without_a_loop_is_live() -> None:
    health = Health(stale_after=60, clock=Clock())
    assert health.liveness().ok
    assert health.seconds_since_pass() is None


def test_the_loop_must_pass_within_the_limit_counted_from_its_start() -> None:
    clock = Clock()
    health = Health(stale_after=60, clock=clock)
    health.loop_started()
    clock.now += 59
    assert health.liveness().ok
    clock.now += 2
    verdict = health.liveness()
    assert not verdict.ok and "no scheduling pass for 61.0 s (limit 60 s)" in verdict.detail
    health.pass_done()
    assert health.liveness().ok and health.passes == 1
    clock.now += 61
    assert not health.liveness().ok
    health.loop_stopped()  # lost the lead: liveness no longer asks
    assert health.liveness().ok


def test_ready_once_crds_cache_and_webhook_are_up() -> None:
    health = Health()
    verdict = health.readiness()
    assert not verdict.ok
    assert verdict.detail == "CRDs not installed; cache not primed; webhook server not started"
    health.mark_crds_installed()
    health.mark_cache_primed()
    assert health.readiness().detail == "webhook server not started"
    health.mark_webhook_started()
    assert health.readiness().ok


async def test_endpoints() -> None:
    clock = Clock()
    health = Health(stale_after=60, clock=clock)
    metrics.PODS_RELEASED.inc(0)
    async with TestClient(TestServer(build_app(health))) as http:
        assert (await http.get("/healthz")).status == 200
        response = await http.get("/readyz")
        assert response.status == 503 and "CRDs not installed" in await response.text()
        health.mark_crds_installed()
        health.mark_cache_primed()
        health.mark_webhook_started()
        assert (await http.get("/readyz")).status == 200
        health.loop_started()
        clock.now += 120
        assert (await http.get("/healthz")).status == 503
        health.pass_done()
        assert (await http.get("/healthz")).status == 200
        response = await http.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
        assert "# TYPE phalanx_pods_released_total counter" in text
        assert "phalanx_scheduling_pass_duration_seconds_bucket" in text


def test_json_log_lines() -> None:
    record = logging.LogRecord("phalanx.scheduler", logging.WARNING, __file__, 1, "admitted %s", ("g",), None)
    record.group = "ml/g"  # an `extra=` field
    record.k8s_ref = {"name": "train", "namespace": "ml"}  # Kopf's object reference
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert entry["level"] == "warning"
    assert entry["logger"] == "phalanx.scheduler"
    assert entry["message"] == "admitted g"
    assert entry["group"] == "ml/g"
    assert entry["object"] == {"name": "train", "namespace": "ml"}
    assert entry["time"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in entry["exception"]
