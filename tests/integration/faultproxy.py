"""A fault-injecting HTTPS proxy between the operator and the dev cluster's apiserver (issue 10 item 5).

It terminates TLS with a serving certificate from the dev cluster's own CA (so the operator's kubeconfig
only changes its server), forwards every request upstream with the caller's bearer token, and for a
seeded share of requests instead:

- answers 429 Too Many Requests with Retry-After, or 500/503, without forwarding;
- answers 409 Conflict, without forwarding, where the apiserver can: a create (the name is taken), a
  replace, or a patch with a resourceVersion precondition (somebody wrote first);
- forwards a write and answers 500 all the same (it happened, the answer was lost);
- cuts a watch stream after a random while (the connection just closes);
- answers a watch that resumes from a resourceVersion with 410 Gone after a delay (an expired version, as
  the apiserver's watch cache does: an ERROR event in a 200 stream), so the client must list again and
  whatever was deleted meanwhile is never seen as a deletion;
- on request (`stall`), never answers the requests of a method and path prefix: the connection stays
  open and silent, as a stuck apiserver or a dead load balancer leaves it, until `unstall`.

It runs its own event loop in a thread; `counts()` says what it did. The apiserver calls the operator's
webhook directly, not through here.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from phalanx import certs
from phalanx.devcluster.cluster import ClusterState, free_port
from phalanx.devcluster.operator_process import OperatorProcess

WRITES = ("POST", "PUT", "PATCH", "DELETE")
HOP_HEADERS = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "accept-encoding",
    "content-encoding",
}


@dataclass(frozen=True)
class Rates:
    """Shares of requests that get each fault."""

    too_many: float = 0.05  # 429 with Retry-After
    server_error: float = 0.04  # 500, not forwarded
    unavailable: float = 0.04  # 503, not forwarded
    conflict: float = 0.04  # 409 to a write, not forwarded
    lost_answer: float = 0.03  # a write forwarded, answered 500
    cut_watch: float = 0.7  # share of watch streams cut after a random while
    cut_mean_seconds: float = 4.0
    gone: float = 0.5  # share of resumed watches answered 410 Gone
    gone_delay: tuple[float, float] = (0.5, 4.0)  # seconds before that answer (events missed meanwhile)

    @classmethod
    def none(cls) -> Rates:
        return cls(0, 0, 0, 0, 0, 0, 1, 0)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"{message} (fault proxy)",
        "reason": reason,
        "code": code,
    }


class FaultProxy:
    def __init__(
        self, cluster: ClusterState, folder: Path, seed: int = 0, rates: Rates | None = None
    ) -> None:
        self.cluster = cluster
        self.folder = folder
        self.rng = random.Random(seed)
        self.rates = rates or Rates()
        self.port = free_port()
        self.enabled = True
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._scripted: list[list[Any]] = []  # [method, path prefix, status, times left, Retry-After]
        self._stalls: list[tuple[str, str]] = []  # (method, path prefix) never answered
        self._limits: list[list[Any]] = []  # [method, path prefix, seconds, window start or None, over]
        self._unstalled: asyncio.Event | None = None
        self._log: list[tuple[float, str, str, int]] = []  # (monotonic time, method, path, status)
        self._streams: dict[asyncio.Task[Any], tuple[str, web.Request]] = {}  # live watch streams
        self._blackout: tuple[str, asyncio.Event] | None = None

    def script(
        self, method: str, prefix: str, status: int, times: int, retry_after: str | None = None
    ) -> None:
        """Answer the next `times` requests `method` on a path starting with `prefix` with `status` (and a
        Retry-After header when given)."""
        self._scripted.append([method, prefix, status, times, retry_after])

    def rate_limit(self, method: str, prefix: str, seconds: int) -> None:
        """As a server that sheds load: the first request `method` on a path starting with `prefix` is
        answered 429 with `Retry-After: seconds`, and so is every such request until that long has passed
        (each told the seconds left); the first one after that goes through, and the rule is over. A client
        that honours Retry-After is refused once (`requests` shows one 429); one that retries sooner is
        refused again."""
        self._limits.append([method, prefix, seconds, None, False])

    def stall(self, method: str, prefix: str) -> None:
        """From now on never answer requests `method` on a path starting with `prefix` (until `unstall`)."""
        if self._loop is not None and self._unstalled is not None and self._unstalled.is_set():
            unstalled = self._unstalled
            self._loop.call_soon_threadsafe(unstalled.clear)  # before the rule, so nothing slips through
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self._loop).result(10)
        self._stalls.append((method, prefix))

    def unstall(self) -> None:
        """Answer again: the held requests get a 503 (their callers gave up long ago)."""
        self._stalls.clear()
        if self._loop is not None and self._unstalled is not None:
            self._loop.call_soon_threadsafe(self._unstalled.set)

    def requests(self, method: str, prefix: str) -> list[tuple[float, int]]:
        """When (time.monotonic) each request `method` on a path starting with `prefix` came, and what the
        proxy answered of its own (0: forwarded, or still held)."""
        with self._lock:
            return [(t, code) for t, m, path, code in self._log if m == method and path.startswith(prefix)]

    def _note(self, request: web.Request, code: int) -> None:
        with self._lock:
            self._log.append((time.monotonic(), request.method, request.path, code))

    # ------------------------------------------------------------------ files
    @property
    def kubeconfig(self) -> Path:
        return self.folder / "fault-proxy.kubeconfig"

    def _write_files(self) -> None:
        pki = self.cluster.path / "pki"
        ca = certs.KeyPair((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
        serving = certs.issue(ca, "phalanx-fault-proxy", ["127.0.0.1", "localhost"])
        serving.write(self.folder / "fault-proxy.crt", self.folder / "fault-proxy.key")
        config = json.loads(self.cluster.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        self._write_files()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("the fault proxy did not start") from self._error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=15)

    def blackout(self, prefix: str) -> None:
        """Cut the watches of paths starting with `prefix` and hold their resumption until `end_blackout`,
        which answers it 410 Gone: an outage long enough for the resourceVersion to expire."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._start_blackout(prefix), self._loop).result(10)

    def end_blackout(self) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self._end_blackout(), self._loop).result(10)

    async def _start_blackout(self, prefix: str) -> None:
        self._blackout = (prefix, asyncio.Event())
        for path, request in list(self._streams.values()):
            if path.startswith(prefix) and request.transport is not None:
                self._count("watch streams cut (blackout)")
                request.transport.close()

    async def _end_blackout(self) -> None:
        if self._blackout is not None:
            self._blackout[1].set()
            self._blackout = None

    def counts(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)

    def _count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # told to start(), which waits for readiness
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._unstalled = asyncio.Event()
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(self.folder / "fault-proxy.crt", self.folder / "fault-proxy.key")
        upstream_ssl = ssl.create_default_context(cafile=str(self.cluster.ca_file))
        connector = aiohttp.TCPConnector(ssl=upstream_ssl, limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            self._session = session
            app = web.Application(client_max_size=64 * 2**20)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=server_ssl)
            await site.start()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

    # ------------------------------------------------------------------ requests
    def _upstream(self, request: web.Request) -> str:
        return f"https://127.0.0.1:{self.cluster.api_port}{request.rel_url}"

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}

    def _upstream_headers(self, request: web.Request) -> dict[str, str]:
        """Uncompressed answers: the body is relayed without its Content-Encoding (aiohttp would otherwise
        ask for gzip, and a large LIST relayed compressed but unlabelled broke Kopf's watcher)."""
        return {**self._headers(request.headers), "Accept-Encoding": "identity"}

    def _fail(
        self, code: int, reason: str, message: str, what: str, retry_after: str | None = None
    ) -> web.Response:
        self._count(what)
        headers = {"Retry-After": retry_after or "1"} if code == 429 or retry_after else {}
        return web.json_response(_status(code, reason, message), status=code, headers=headers)

    async def _held(self, request: web.Request) -> web.Response:
        """Say nothing until `unstall` (or the proxy stops)."""
        self._count(f"stalled {request.method}")
        self._note(request, 0)
        assert self._unstalled is not None
        await self._unstalled.wait()
        return self._fail(503, "ServiceUnavailable", "was stalled", "503 after a stall")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("true", "1")
        roll = self.rng.random()
        r = self.rates
        self._count("requests")
        if any(request.method == m and request.path.startswith(p) for m, p in self._stalls):
            return await self._held(request)
        for limit in self._limits:
            method, prefix, seconds, start, over = limit
            if over or request.method != method or not request.path.startswith(prefix):
                continue
            now = time.monotonic()
            if start is None:
                limit[3] = start = now
            if now - start < seconds:
                self._note(request, 429)
                left = str(max(1, math.ceil(seconds - (now - start))))
                return self._fail(429, "TooManyRequests", "rate limited", "429 (rate limited)", left)
            limit[4] = True
        for rule in self._scripted:
            method, prefix, status, left, retry_after = rule
            if left and request.method == method and request.path.startswith(prefix):
                rule[3] -= 1
                self._note(request, status)
                return self._fail(status, "ServiceUnavailable", "scripted", f"scripted {status}", retry_after)
        if self.enabled:
            if roll < r.too_many:
                return self._fail(429, "TooManyRequests", "too many requests", "429 Too Many Requests")
            roll -= r.too_many
            if roll < r.server_error:
                return self._fail(500, "InternalError", "internal error", "500 Internal Server Error")
            roll -= r.server_error
            if roll < r.unavailable:
                return self._fail(503, "ServiceUnavailable", "unavailable", "503 Service Unavailable")
            roll -= r.unavailable
            if request.method in WRITES:
                if roll < r.conflict and await self._may_conflict(request):
                    return self._fail(409, "Conflict", "the object has been modified", "409 Conflict")
                roll -= r.conflict
                if roll < r.lost_answer:
                    await self._forward(request)
                    return self._fail(500, "InternalError", "answer lost", "500 after the write was applied")
        if watch:
            return await self._watch(request)
        return await self._forward(request)

    async def _may_conflict(self, request: web.Request) -> bool:
        """A patch without a resourceVersion precondition never conflicts (the apiserver retries it)."""
        if request.method in ("POST", "PUT"):
            return True
        if request.method != "PATCH":
            return False
        try:
            body = json.loads(await request.read())
        except ValueError:
            return False
        meta = body.get("metadata") if isinstance(body, dict) else None
        return isinstance(meta, dict) and bool(meta.get("resourceVersion"))

    async def _forward(self, request: web.Request) -> web.Response:
        self._note(request, 0)
        body = await request.read()
        async with self._session.request(
            request.method,
            self._upstream(request),
            headers=self._upstream_headers(request),
            data=body or None,
        ) as upstream:
            data = await upstream.read()
            headers = self._headers(upstream.headers)
            return web.Response(status=upstream.status, body=data, headers=headers)

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        r = self.rates
        resumed = bool(request.query.get("resourceVersion"))
        blackout = self._blackout
        if blackout is not None and request.path.startswith(blackout[0]):
            self._count("watches held by a blackout")
            await blackout[1].wait()
            return await self._gone(request, "410 Gone after a blackout")
        if self.enabled and resumed and self.rng.random() < r.gone:
            await asyncio.sleep(self.rng.uniform(*r.gone_delay))
            return await self._gone(request, "410 Gone on a resumed watch")
        task = asyncio.current_task()
        assert task is not None
        self._streams[task] = (request.path, request)
        try:
            return await self._stream(request)
        finally:
            del self._streams[task]

    async def _gone(self, request: web.Request, what: str) -> web.StreamResponse:
        """As the apiserver's watch cache answers an expired resourceVersion: an ERROR event in a 200."""
        self._count(what)
        version = request.query.get("resourceVersion", "")
        event = {"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {version}")}
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        r = self.rates
        cut_after = self.rng.expovariate(1 / r.cut_mean_seconds) if self.rng.random() < r.cut_watch else None
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.get(
            self._upstream(request), headers=self._upstream_headers(request), timeout=timeout
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, headers=self._headers(upstream.headers))
            await response.prepare(request)
            try:
                async with asyncio.timeout(cut_after if self.enabled else None):
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
            except TimeoutError:
                self._count("watch streams cut")
                if request.transport is not None:
                    request.transport.close()
                return response
            except (ConnectionResetError, aiohttp.ClientError):
                return response
            await response.write_eof()
            return response


@contextmanager
def operator_behind(
    proxy: FaultProxy, session: OperatorProcess, folder: Path, name: str, args: tuple[str, ...] = ()
) -> Iterator[OperatorProcess]:
    """An operator whose kubeconfig points at the proxy, in place of the session's (stopped meanwhile and
    started again afterwards)."""
    session.stop()
    operator = OperatorProcess(
        proxy.cluster, folder, name=name, args=["--kubeconfig", str(proxy.kubeconfig), *args]
    )
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        print(f"operator log: {operator.log_path}")
        session.start()
