"""/metrics, /healthz and /readyz on a small aiohttp server of their own (plain HTTP).

/metrics is prometheus-client's own aiohttp handler over Phalanx's registry: it negotiates the format
(Prometheus text, or OpenMetrics when the scraper asks for it), honours `name[]` filters and
compresses when the scraper accepts gzip.
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from phalanx.controller.metrics import REGISTRY
from phalanx.controller.process.health import Health, Verdict

log = logging.getLogger("phalanx.http")


def build_app(health: Health) -> web.Application:
    def answer(verdict: Verdict) -> web.Response:
        return web.Response(status=200 if verdict.ok else 503, text=verdict.detail + "\n")

    async def healthz(_: web.Request) -> web.Response:
        # Answering at all proves the event loop runs; the verdict adds the scheduling loop.
        return answer(health.liveness())

    async def readyz(_: web.Request) -> web.Response:
        return answer(health.readiness())

    app = web.Application()
    app.add_routes(
        [
            web.get("/metrics", make_aiohttp_handler(REGISTRY)),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
        ]
    )
    return app


class HttpServer:
    def __init__(self, health: Health, host: str, port: int) -> None:
        self.health = health
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        runner = web.AppRunner(build_app(self.health), handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, reuse_address=True).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("metrics and probes on http://%s:%d/ (metrics, healthz, readyz)", self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
