"""The watch path of the high-volume kinds (nodes and pods: watched.py's INFORMER rows), without Kopf.

Kopf hands every event through its per-event machinery (a deep copy of the body, a per-object memory kept
until the object is deleted, 1.78 KiB each: docs/performance.md) although the cache needs only the typed
record it parses from the body. This is client-go's reflector instead, feeding the cache directly:

- **list**: a paged LIST (`limit`/`continue`), every item upserted as its page comes (no list of 50,000
  bodies held at once); the list's resourceVersion is where the watch starts. The first list is the cache's
  priming (process/runtime.py): the watch continues from it, so nothing between priming and watch is missed.
- **watch** from that resourceVersion with `allowWatchBookmarks`, a server-side `timeoutSeconds` (client-go's
  5-10 min) and a client deadline a little longer, plus a read deadline (a dead connection is noticed);
  every event's object, decoded from the stream's JSON and never copied, goes to `cache.upsert` or
  `cache.delete`; a BOOKMARK only moves the resourceVersion.
- a watch that ends (timeout, cut connection, error) is **resumed from the last resourceVersion seen**;
- **410 Gone** (the version expired: an ERROR event in the stream, or the status of the answer) means a new
  list, after which every record the cache held before that list was asked for and the list lacks is
  dropped (relist.py's rule: a record added after the question stays);
- failures are retried with a bounded, jittered exponential backoff that honours a 429's Retry-After
  (apply/kube.py's rules); a watch that delivered something starts the backoff over;
- cancellation (shutdown) ends the loop at once, closing the stream.

The pure parts (stream lines, event meaning, queries, the backoff) are unit-tested; the loop talks to the
API through `Transport`, one implementation of which (`ApiTransport`) uses the operator's API client.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from phalanx.controller import metrics
from phalanx.controller.apply.kube import retry_after, retrying
from phalanx.controller.cache.store import ClusterCache, key_of
from phalanx.controller.watch.relist import drop_deleted
from phalanx.controller.watch.watched import Watched
from phalanx.kubeclient import ApiClient, ApiException, codec, resource_path

log = logging.getLogger("phalanx.informer")

PAGE_SIZE = 500  # objects per LIST page
MIN_WATCH_SECONDS = 300  # client-go's minWatchTimeout: each watch asks for 5-10 minutes
WATCH_GRACE_SECONDS = 30.0  # the client's deadline past the server's timeoutSeconds
READ_TIMEOUT_SECONDS = 150.0  # silence longer than this (bookmarks come about every minute): reconnect
CONNECT_TIMEOUT_SECONDS = 10.0
SHORT_WATCH_SECONDS = 1.0  # a watch that ended sooner with no event counts as failed (backs off)
BACKOFF_BASE, BACKOFF_CAP = 0.2, 30.0  # seconds: the first retry, the longest wait


class GoneError(Exception):
    """The resourceVersion a watch (or a LIST's continue token) resumed from has expired: list again."""


class WatchError(Exception):
    """An ERROR event other than 410 in a watch stream (its Status object)."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        super().__init__(f"{status.get('code')} {status.get('reason')}: {status.get('message')}")
        self.code = int(status.get("code") or 0)
        self.reason = str(status.get("reason") or "")


# ---------------------------------------------------------------------- pure parts
class Lines:
    """A watch stream's bytes, chunked anywhere, as its newline-separated JSON lines. A last line without its
    newline (a stream cut mid-event) is never handed over: the watch resumes before that event."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (blank ones skipped); a partial last line waits for the next."""
        if b"\n" not in chunk:
            self._parts.append(chunk)
            return []
        *lines, rest = b"".join((*self._parts, chunk)).split(b"\n")
        self._parts = [rest] if rest else []
        return [line for line in lines if line.strip()]


@dataclass(frozen=True)
class Event:
    """One watch event: ADDED, MODIFIED, DELETED or BOOKMARK, with its object."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return version_of(self.object)


def version_of(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def parse_event(line: bytes) -> Event:
    """A stream line as an event; an ERROR event raises GoneError (410) or WatchError (anything else)."""
    decoded = codec.loads(line)
    kind, body = decoded.get("type"), decoded.get("object")
    if not isinstance(body, dict):
        raise WatchError({"code": 0, "reason": "BadEvent", "message": f"{kind} event without an object"})
    if kind == "ERROR":
        if body.get("code") == 410:
            raise GoneError(str(body.get("message") or "410 Gone"))
        raise WatchError(body)
    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
        raise WatchError({"code": 0, "reason": "BadEvent", "message": f"unknown event type {kind!r}"})
    return Event(str(kind), body)


def list_query(continue_token: str, limit: int = PAGE_SIZE) -> list[tuple[str, str]]:
    """One page of a consistent LIST (the newest state; a continue token carries the list's version)."""
    query = [("limit", str(limit))]
    if continue_token:
        query.append(("continue", continue_token))
    return query


def watch_query(resource_version: str, timeout_seconds: int) -> list[tuple[str, str]]:
    return [
        ("watch", "true"),
        ("resourceVersion", resource_version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout_seconds)),
    ]


def watch_seconds(rng: random.Random) -> int:
    """client-go's: between the minimum and twice it, so watches of many clients do not end together."""
    return int(MIN_WATCH_SECONDS * (1 + rng.random()))


def is_gone(error: BaseException) -> bool:
    return isinstance(error, GoneError) or (isinstance(error, ApiException) and error.status == 410)


class Backoff:
    """Bounded, jittered exponential waits between failed attempts; a 429's (or 5xx's) Retry-After wins."""

    def __init__(
        self, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP, rng: random.Random | None = None
    ) -> None:
        self.base, self.cap = base, cap
        self.failures = 0
        self._rng = rng or random.Random()

    def delay(self, error: BaseException | None = None) -> float:
        """How long to wait after this failure (the next one waits longer, up to `cap`)."""
        self.failures += 1
        asked = retry_after(error)
        if asked is not None:
            return asked
        ceiling = min(self.cap, self.base * 2.0 ** min(self.failures - 1, 30))
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0


# ---------------------------------------------------------------------- the API
@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str


class Transport(Protocol):
    async def list_page(self, continue_token: str) -> Page: ...

    def watch(self, resource_version: str, timeout_seconds: int) -> AsyncGenerator[bytes, None]:
        """The stream's chunks, ending when the stream does (also when its connection breaks after the
        answer came); raises ApiException for an error answer, another error when there was no answer."""
        ...


class ApiTransport:
    """A row's LIST and WATCH through the operator's API client (its auth, TLS and request deadlines)."""

    def __init__(self, api: ApiClient, row: Watched, list_timeout: float) -> None:
        r = row.resource
        self.path = resource_path(r.group, r.version, r.plural)
        self.api = api
        self.list_timeout = list_timeout

    async def _get(self, query: list[tuple[str, str]], timeout: float | aiohttp.ClientTimeout) -> Any:
        return await self.api.request("GET", self.path, query=query, timeout=timeout)

    async def list_page(self, continue_token: str) -> Page:
        async def once() -> Page:
            response = await self._get(list_query(continue_token), self.list_timeout)
            decoded = await response.json()
            meta = decoded.get("metadata") or {}
            return Page(
                decoded.get("items") or [],
                str(meta.get("resourceVersion") or ""),
                str(meta.get("continue") or ""),
            )

        # 410 (an expired continue token) is not transient: it ends here and the list starts over.
        return await retrying(once, verb="list")

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncGenerator[bytes, None]:
        deadline = aiohttp.ClientTimeout(
            total=timeout_seconds + WATCH_GRACE_SECONDS,
            sock_connect=CONNECT_TIMEOUT_SECONDS,
            sock_read=READ_TIMEOUT_SECONDS,
        )
        response = await self._get(watch_query(resource_version, timeout_seconds), deadline)
        try:
            async for chunk in response.content.iter_any():
                yield chunk
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as e:
            # The stream was answered, then broke (a cut connection, its deadline): it ended, to be resumed.
            log.debug("%s: watch stream ended: %r", self.path, e)
        finally:
            response.close()


# ---------------------------------------------------------------------- the loop
class Informer:
    """List-then-watch of one watched kind into the cache (module docstring)."""

    def __init__(
        self,
        row: Watched,
        cache: ClusterCache,
        transport: Transport,
        *,
        sleep: Callable[[float], Any] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.row = row
        self.cache = cache
        self.transport = transport
        self.resource_version = ""  # where the next watch resumes; "" = list first
        self.backoff = Backoff(rng=rng)
        self.lists = 0  # LISTs done (the priming included)
        self.resumes = 0  # watches resumed from a resourceVersion
        self.dropped = 0  # records dropped after a relist (deleted while the watch was away)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    @property
    def kind(self) -> str:
        return self.row.kind

    async def relist(self) -> int:
        """A paged LIST into the cache; the records it lacks that were there before are dropped. Returns how
        many objects were listed; afterwards the watch resumes from the list's resourceVersion."""
        before = self.cache.records(self.kind)
        listed: set[str] = set()
        token, version = "", ""
        while True:
            page = await self.transport.list_page(token)
            version = page.resource_version or version
            r = self.row.resource
            for item in page.items:
                item.setdefault("apiVersion", r.api_version)
                item.setdefault("kind", self.kind)
                listed.add(key_of(item))
                self.cache.upsert(self.kind, item)
            token = page.continue_token
            if not token:
                break
        self.lists += 1
        metrics.WATCH_LISTS.labels(self.kind).inc()
        dropped = drop_deleted(self.cache, self.kind, before, listed)
        metrics.WATCH_DROPPED.labels(self.kind).inc(dropped)
        self.dropped += dropped
        self.resource_version = version
        return len(listed)

    def apply(self, event: Event) -> None:
        """One event into the cache; the resourceVersion moves on with every event, bookmarks included."""
        if event.type == "DELETED":
            self.cache.delete(self.kind, event.object)
        elif event.type != "BOOKMARK":
            self.cache.upsert(self.kind, event.object)
        version = event.resource_version
        if version:
            self.resource_version = version

    async def watch_once(self) -> int:
        """One watch from the current resourceVersion until it ends; how many events it delivered. Raises
        GoneError when the version expired, another error when the watch failed."""
        lines = Lines()
        seen = 0
        stream = self.transport.watch(self.resource_version, watch_seconds(self._rng))
        try:
            async for chunk in stream:
                for line in lines.feed(chunk):
                    self.apply(parse_event(line))
                    seen += 1
                    self.backoff.reset()
        finally:
            await stream.aclose()
        return seen

    async def run(self) -> None:
        """List (unless primed) and watch until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            listing = not self.resource_version
            try:
                if listing:
                    count = await self.relist()
                    log.info("%s listed: %d at resourceVersion %s", self.kind, count, self.resource_version)
                    self.backoff.reset()
                started = loop.time()
                if await self.watch_once() == 0 and loop.time() - started < SHORT_WATCH_SECONDS:
                    raise WatchError({"code": 0, "reason": "ShortWatch", "message": "ended at once, empty"})
                self.backoff.reset()  # it was answered and lasted: a failure later starts the backoff over
                metrics.WATCH_RESTARTS.labels(self.kind, "ended").inc()
                self.resumes += 1  # the watch ended (its timeout, a cut connection): on from the last version
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if is_gone(e):
                    log.info(
                        "%s watch: resourceVersion %s expired (410 Gone): listing again",
                        self.kind,
                        self.resource_version,
                    )
                    self.resource_version = ""
                    metrics.WATCH_RESTARTS.labels(self.kind, "gone").inc()
                    if not listing:
                        continue  # at once, as client-go; a list answered 410 (its continue) backs off
                wait = self.backoff.delay(e)
                short = isinstance(e, WatchError) and e.reason == "ShortWatch"  # a cut at once: common
                log.log(
                    logging.INFO if short else logging.WARNING,
                    "%s %s failed (%r): again in %.1f s",
                    self.kind,
                    "list" if listing else "watch",
                    e,
                    wait,
                )
                await self._sleep(wait)
                if not listing:
                    metrics.WATCH_RESTARTS.labels(self.kind, "failed").inc()
                    self.resumes += 1

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"phalanx-informer-{self.kind}"
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
            self._task = None
