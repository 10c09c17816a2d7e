"""The informer's rules that need no cluster (watch/informer.py): stream lines, event meaning, queries, the
backoff, and the list-then-watch loop over a scripted transport (pages and streams given as the apiserver
sends them): resume from the last resourceVersion, relist on 410 dropping only what the new list lacks and
was there before, Retry-After honoured. The loop against the real apiserver, through cuts and 410s, is
tests/integration/test_informer.py."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_controller_cache import node, pod

from phalanx.controller.cache.store import NODE, POD, ClusterCache
from phalanx.controller.watch.informer import (
    Backoff,
    GoneError,
    Informer,
    Lines,
    Page,
    WatchError,
    is_gone,
    list_query,
    parse_event,
    watch_query,
    watch_seconds,
)
from phalanx.controller.watch.relist import deleted_meanwhile
from phalanx.controller.watch.watched import INFORMER, KOPF, WATCHED, Watched, served_by, watched
from phalanx.kubeclient import ApiException


def line(kind: str, body: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": body}).encode() + b"\n"


def at(body: dict[str, Any], version: str) -> dict[str, Any]:
    return body | {"metadata": {**body["metadata"], "resourceVersion": version}}


def gone_line(version: str = "7") -> bytes:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": f"too old: {version}"}
    return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"


# ---------------------------------------------------------------------- pure parts
@given(st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b), max_size=8), st.data())
def test_lines_come_whole_however_the_stream_is_chunked(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(p + b"\n" for p in payloads) + b"partial-without-newline"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    lines, got, start = Lines(), [], 0
    for cut in [*cuts, len(stream)]:
        got += lines.feed(stream[start:cut])
        start = cut
    assert got == [p for p in payloads if p.strip()]  # the partial last line is never handed over


def test_events_and_errors_mean_what_the_apiserver_says() -> None:
    event = parse_event(line("MODIFIED", pod("a", 5)))
    assert (event.type, event.resource_version) == ("MODIFIED", "5")
    bookmark = parse_event(line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "9"}}))
    assert (bookmark.type, bookmark.resource_version) == ("BOOKMARK", "9")
    with pytest.raises(GoneError):
        parse_event(gone_line())
    with pytest.raises(WatchError) as failed:
        parse_event(line("ERROR", {"code": 500, "reason": "InternalError", "message": "boom"}))
    assert failed.value.code == 500
    with pytest.raises(WatchError):
        parse_event(line("SOMETHING", {}))
    assert is_gone(GoneError("x")) and is_gone(ApiException(status=410))
    assert not is_gone(ApiException(status=500))


def test_queries_page_the_list_and_resume_the_watch_with_bookmarks() -> None:
    assert list_query("") == [("limit", "500")]
    assert list_query("tok", 10) == [("limit", "10"), ("continue", "tok")]
    query = dict(watch_query("42", 300))
    assert query == {
        "watch": "true",
        "resourceVersion": "42",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }
    rng = random.Random(1)
    assert all(300 <= watch_seconds(rng) < 600 for _ in range(100))


def _retry_after(seconds: str, status: int = 429) -> ApiException:
    error = ApiException(status=status)
    error.headers = {"Retry-After": seconds}
    return error


def test_backoff_grows_to_its_cap_honours_retry_after_and_starts_over() -> None:
    backoff = Backoff(base=0.2, cap=5.0, rng=random.Random(3))
    waits = [backoff.delay(ConnectionError()) for _ in range(12)]
    assert all(0.1 <= w <= 0.2 for w in waits[:1])
    assert all(w <= 5.0 for w in waits) and max(waits) >= 2.5
    assert backoff.delay(_retry_after("3")) == 3.0
    assert backoff.delay(_retry_after("3600")) == 10.0  # kube.py's cap
    backoff.reset()
    assert backoff.delay(ConnectionError()) <= 0.2


@given(
    st.sets(st.sampled_from("abcdef")),
    st.sets(st.sampled_from("abcdef")),
    st.sets(st.sampled_from("abcdefgh")),
)
def test_only_what_was_there_before_and_the_list_lacks_is_dropped(
    before: set[str], listed: set[str], now: set[str]
) -> None:
    as_records = lambda keys: {(k, f"uid-{k}") for k in keys}  # noqa: E731
    gone = deleted_meanwhile(as_records(before), listed, as_records(now) | {("a", "newer-uid")})
    assert {key for key, _ in gone} == (before - listed) & now


def test_the_table_says_which_path_serves_each_row() -> None:
    assert {row.kind for row in served_by(INFORMER, True)} == {NODE, POD}
    assert served_by(INFORMER, False) == ()
    assert set(served_by(KOPF, False)) == set(WATCHED)
    assert set(served_by(KOPF, True)) | set(served_by(INFORMER, True)) == set(WATCHED)
    owner = next(row for row in WATCHED if row.owner)
    with pytest.raises(ValueError, match="only built-in kinds"):
        Watched(owner.kind, owner.resource, True, 3, owner=True, path=INFORMER)


# ---------------------------------------------------------------------- the loop, over a scripted transport
Stream = list[bytes] | BaseException  # chunks to send then end, or what the request raises


class Scripted:
    """Pages for each LIST (one list per relist) and, per watch, its chunks; records what was asked."""

    def __init__(self, lists: list[list[Page] | BaseException], streams: list[Stream]) -> None:
        self.lists, self.streams = lists, streams
        self.asked: list[tuple[str, str]] = []  # ("list", continue) / ("watch", resourceVersion)
        self._pages: list[Page] = []
        self.during_list: Callable[[], None] = lambda: None

    async def list_page(self, continue_token: str) -> Page:
        self.asked.append(("list", continue_token))
        if not continue_token:
            step = self.lists.pop(0)
            if isinstance(step, BaseException):
                raise step
            self._pages = list(step)
        self.during_list()
        return self._pages.pop(0)

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncGenerator[bytes, None]:
        self.asked.append(("watch", resource_version))
        if not self.streams:
            await asyncio.Event().wait()  # the last watch stays open until cancelled
        step = self.streams.pop(0)
        if isinstance(step, BaseException):
            raise step
        for chunk in step:
            await asyncio.sleep(0)
            yield chunk


async def run_until(informer: Informer, done: Callable[[], bool]) -> None:
    task = asyncio.create_task(informer.run())
    for _ in range(2000):
        if done():
            break
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done()


async def test_pages_then_a_watch_from_the_lists_version_resumed_after_a_cut() -> None:
    cache = ClusterCache()
    pages = [Page([node("n1")], "10", "tok"), Page([node("n2")], "10", "")]
    added = line("ADDED", at(node("n3"), "11"))
    cut = [added[:15], added[15:] + line("DELETED", {"metadata": {"name": "n1", "resourceVersion": "12"}})]
    bookmark = line("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "20"}})
    transport = Scripted([pages], [cut, [bookmark]])
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    informer = Informer(watched(NODE), cache, transport, sleep=sleep)  # type: ignore[arg-type]
    await run_until(informer, lambda: len(transport.asked) == 5)
    assert transport.asked == [
        ("list", ""),
        ("list", "tok"),
        ("watch", "10"),
        ("watch", "12"),
        ("watch", "20"),
    ]
    assert set(cache.nodes) == {"n2", "n3"}
    assert informer.lists == 1 and sleeps == []


async def test_a_410_lists_again_and_drops_only_what_was_deleted_before_that_list() -> None:
    cache = ClusterCache()
    cache.upsert(NODE, node("n1"))
    for name in ("kept", "deleted-meanwhile"):
        cache.upsert(POD, pod(name, 3, node="n1"))
    transport = Scripted(
        [[Page([pod("kept", 8, node="n1")], "8", "")]],
        [[gone_line("5")], [line("MODIFIED", pod("kept", 9, node="n1"))]],
    )
    # A pod the watch (or a write of ours) brought while the list was on its way is newer: it stays.
    transport.during_list = lambda: cache.upsert(POD, pod("born-during-list", 7, node="n1"))
    informer = Informer(watched(POD), cache, transport)  # type: ignore[arg-type]
    informer.resource_version = "5"  # primed
    await run_until(informer, lambda: ("watch", "9") in transport.asked)
    assert transport.asked == [("watch", "5"), ("list", ""), ("watch", "8"), ("watch", "9")]
    assert set(cache.pods) == {"ns/kept", "ns/born-during-list"}
    assert informer.dropped == 1


async def test_failures_back_off_honouring_retry_after_and_resume_from_the_same_version() -> None:
    cache = ClusterCache()
    limited = _retry_after("2")
    transport = Scripted(
        [limited, [Page([node("n1")], "4", "")]],
        [ConnectionError("reset"), ApiException(status=503), [], [line("ADDED", at(node("n2"), "6"))]],
    )
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    informer = Informer(watched(NODE), cache, transport, sleep=sleep, rng=random.Random(0))  # type: ignore[arg-type]
    await run_until(informer, lambda: ("watch", "6") in transport.asked)
    assert transport.asked == [
        ("list", ""),  # 429: Retry-After 2 s
        ("list", ""),
        ("watch", "4"),  # connection reset
        ("watch", "4"),  # 503
        ("watch", "4"),  # ended at once with nothing: a short watch backs off too
        ("watch", "4"),
        ("watch", "6"),
    ]
    assert sleeps[0] == 2.0 and len(sleeps) == 4
    assert all(0 < s <= informer.backoff.cap for s in sleeps[1:])
    assert set(cache.nodes) == {"n1", "n2"}


async def test_stop_cancels_a_watch_that_waits_for_events() -> None:
    cache = ClusterCache()
    transport = Scripted([[Page([], "1", "")]], [])
    informer = Informer(watched(NODE), cache, transport)  # type: ignore[arg-type]
    informer.start()
    for _ in range(100):
        if ("watch", "1") in transport.asked:
            break
        await asyncio.sleep(0)
    await asyncio.wait_for(informer.stop(), timeout=5)
    assert transport.asked == [("list", ""), ("watch", "1")]
