"""Bounded API calls: every request of the controller's client has a deadline (also on reading a raw
answer's body), a request that got no answer is tried once more, and 429/5xx honour Retry-After (capped).

The client is tested against a local HTTP server that never answers (a socket, not a stand-in for the
API's behaviour); the same against the real apiserver behind the fault proxy is
tests/integration/test_api_stall.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from phalanx.controller import metrics
from phalanx.controller.apply.kube import (
    RETRY_AFTER_CAP_SECONDS,
    TIMEOUT_ATTEMPTS,
    Kube,
    retry_after,
    retrying,
)
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.process.settings import Settings
from phalanx.kubeclient import ApiClient, ApiException, ApiTimeoutError, Credentials

GUARD = 20.0  # seconds: only against a hang if a deadline were ignored; never reached when it works


def api_error(status: int, retry: str | None = None) -> ApiException:
    error = ApiException(status=status, reason="test")
    error.headers = {"Retry-After": retry} if retry is not None else {}
    return error


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Failing:
    """A call that fails with these errors in turn, then answers "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


# ---------------------------------------------------------------------- Retry-After
def test_retry_after_is_read_in_seconds_or_as_a_date_and_capped() -> None:
    assert retry_after(api_error(429, "2")) == 2.0
    assert retry_after(api_error(503, "0.5")) == 0.5
    assert retry_after(api_error(429, "3600")) == RETRY_AFTER_CAP_SECONDS
    assert retry_after(api_error(429, "-4")) == 0.0
    soon = email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30), usegmt=True)
    assert retry_after(api_error(503, soon)) == RETRY_AFTER_CAP_SECONDS
    past = email.utils.format_datetime(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30), usegmt=True)
    assert retry_after(api_error(503, past)) == 0.0
    assert retry_after(api_error(429)) is None  # no header
    assert retry_after(api_error(429, "soon")) is None  # unreadable
    assert retry_after(api_error(429, "nan")) is None
    assert retry_after(api_error(409, "2")) is None  # not a retried status
    assert retry_after(ApiTimeoutError("x")) is None


async def test_a_429_or_503_is_retried_after_what_retry_after_says() -> None:
    sleeps = Sleeps()
    call = Failing(api_error(429, "2"), api_error(503, "1"), api_error(429, "600"))
    assert await retrying(call, verb="patch", sleep=sleeps) == "ok"
    assert call.calls == 4
    assert sleeps.waits == [2.0, 1.0, RETRY_AFTER_CAP_SECONDS]


async def test_without_retry_after_the_wait_is_a_short_jittered_backoff() -> None:
    sleeps = Sleeps()
    assert await retrying(Failing(api_error(503), api_error(500)), verb="get", sleep=sleeps) == "ok"
    assert len(sleeps.waits) == 2 and all(0 < w <= 0.5 for w in sleeps.waits)


async def test_a_request_without_answer_is_tried_once_more_then_fails() -> None:
    sleeps = Sleeps()
    before = (
        metrics.REGISTRY.get_sample_value("phalanx_api_errors_total", {"verb": "patch", "code": "0"}) or 0
    )
    call = Failing(*(ApiTimeoutError(f"attempt {i}") for i in range(5)))
    with pytest.raises(ApiTimeoutError):
        await retrying(call, verb="patch", sleep=sleeps)
    assert call.calls == TIMEOUT_ATTEMPTS == 2
    after = metrics.REGISTRY.get_sample_value("phalanx_api_errors_total", {"verb": "patch", "code": "0"})
    assert after == before + 2  # each attempt counts, code 0: no answer


async def test_other_failures_are_not_retried_and_transient_ones_at_most_six_times() -> None:
    sleeps = Sleeps()
    call = Failing(api_error(409))
    with pytest.raises(ApiException):
        await retrying(call, verb="create", sleep=sleeps)
    assert call.calls == 1
    call = Failing(*(api_error(500) for _ in range(10)))
    with pytest.raises(ApiException):
        await retrying(call, verb="create", sleep=sleeps)
    assert call.calls == 6


# ---------------------------------------------------------------------- the client's deadline
@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    """/stall never answers; /headers-only sends its headers and never the body; /slow-error answers 429."""
    forever = asyncio.Event()

    async def stall(_: web.Request) -> web.Response:
        await forever.wait()
        return web.Response()

    async def headers_only(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b'{"kind": ')
        await forever.wait()
        return response

    async def too_many(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 429}, status=429, headers={"Retry-After": "3"})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/stall", stall)
    app.router.add_get("/api/v1/namespaces/ns/pods/headers-only", headers_only)
    app.router.add_get("/api/v1/namespaces/ns/pods/busy", too_many)
    test_server = TestServer(app)
    await test_server.start_server()
    try:
        yield test_server
    finally:
        forever.set()
        await test_server.close()


def bounded(server: TestServer, timeout: float) -> ApiClient:
    return ApiClient(Credentials(server=str(server.make_url("")).rstrip("/"), source="test"), timeout=timeout)


STALL = "/api/v1/namespaces/ns/pods/stall"


async def test_a_request_that_never_gets_an_answer_ends_at_the_deadline(server: TestServer) -> None:
    async with bounded(server, 0.3) as api:
        with pytest.raises(ApiTimeoutError) as raised:
            await asyncio.wait_for(api.json("GET", STALL), GUARD)
    assert "GET /api/v1/namespaces/ns/pods/stall: no answer within 0.3 s" in str(raised.value)
    assert isinstance(raised.value, TimeoutError)  # transient for `retrying`


async def test_a_call_may_give_its_own_deadline(server: TestServer) -> None:
    """A LIST gets --api-list-timeout-seconds: the call's own deadline wins over the client's."""
    async with bounded(server, 3600) as api:
        with pytest.raises(ApiTimeoutError, match=r"within 0\.3 s"):
            await asyncio.wait_for(api.json("GET", STALL, timeout=0.3), GUARD)


async def test_reading_a_raw_answers_body_is_bounded_too(server: TestServer) -> None:
    async with bounded(server, 0.3) as api:
        response = await asyncio.wait_for(
            api.request("GET", "/api/v1/namespaces/ns/pods/headers-only"), GUARD
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(response.read(), GUARD)


async def test_an_error_answer_keeps_its_retry_after_and_body(server: TestServer) -> None:
    async with bounded(server, 5) as api:
        with pytest.raises(ApiException) as raised:
            await api.request("GET", "/api/v1/namespaces/ns/pods/busy")
    assert raised.value.status == 429
    assert retry_after(raised.value) == 3.0
    assert '"code": 429' in raised.value.body


def test_the_settings_defaults_are_the_clients() -> None:
    from phalanx.controller.apply import kube

    settings = Settings()
    assert settings.api_timeout_seconds == kube.REQUEST_TIMEOUT_SECONDS == 5.0
    assert settings.api_list_timeout_seconds == kube.LIST_TIMEOUT_SECONDS == 60.0
    assert "--api-timeout-seconds" in settings.to_args()


@pytest.mark.parametrize(
    ("body", "named"),
    [
        # What kube-apiserver answers for an object that is not there (apierrors.NewNotFound) ...
        (
            '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"jobsets.jobset.x-k8s.io '
            '\\"train\\" not found","reason":"NotFound","details":{"name":"train","group":"jobset.x-k8s.io",'
            '"kind":"jobsets"},"code":404}',
            "train",
        ),
        # ... and for a path it does not serve (a CRD not synced yet): it names nothing.
        (
            '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could '
            'not find the requested resource","reason":"NotFound","details":{},"code":404}',
            "",
        ),
        ("404 page not found", ""),
    ],
)
def test_only_a_404_that_names_the_owner_says_it_is_gone(body: str, named: str) -> None:
    """apply/owners.py drops an owner from the cache on a 404 only if the 404 names it."""
    assert ApiException(404, "Not Found", body=body).details_name() == named


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("batch/v1", "Job", "/apis/batch/v1/namespaces/ns/jobs/o"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/o"),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/o",
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/o",
        ),
    ],
)
async def test_an_owner_is_read_and_patched_at_its_kinds_own_path(
    api_version: str, kind: str, path: str
) -> None:
    """The owner's path is its kind's watched resource (the plural the API serves), written out by hand."""
    seen: list[tuple[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        return web.json_response({"kind": kind, "metadata": {"name": "o"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    test_server = TestServer(app)
    await test_server.start_server()
    try:
        async with bounded(test_server, 5.0) as api:
            owner = ObjectRef(api_version, kind, "ns", "o", "uid-o")
            assert await Kube(api).get_owner(owner) == {"kind": kind, "metadata": {"name": "o"}}
            await Kube(api).patch_owner(owner, {"spec": {"suspend": True}})
    finally:
        await test_server.close()
    assert seen == [("GET", path), ("PATCH", path)]


async def test_an_owner_of_a_kind_phalanx_does_not_admit_has_no_path() -> None:
    async with ApiClient(Credentials(server="https://127.0.0.1:9", source="test"), timeout=1.0) as api:
        with pytest.raises(ValueError, match="apps/v1 Deployment is not a kind Phalanx admits"):
            await Kube(api).get_owner(ObjectRef("apps/v1", "Deployment", "ns", "o"))


# What kube-apiserver v1.37.2 answered to a create in a namespace being deleted (read from the dev cluster).
TERMINATING = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \\"x\\" is '
    'forbidden: unable to create new content in namespace t1 because it is being terminated","reason":'
    '"Forbidden","details":{"name":"x","kind":"configmaps","causes":[{"reason":"NamespaceTerminating",'
    '"message":"namespace t1 is being terminated","field":"metadata.namespace"}]},"code":403}'
)


@pytest.mark.parametrize(
    ("status", "body", "terminating"),
    [
        (403, TERMINATING, True),
        # Another 403 (RBAC, a quota): a failure to report.
        (
            403,
            '{"kind":"Status","reason":"Forbidden","details":{"name":"x","kind":"configmaps"},"code":403}',
            False,
        ),
        (403, "forbidden", False),
        # The cause alone, on another code, is not the apiserver's refusal of new content.
        (422, TERMINATING.replace('"code":403', '"code":422'), False),
    ],
)
def test_only_a_403_whose_cause_is_namespace_terminating_says_the_namespace_goes(
    status: int, body: str, terminating: bool
) -> None:
    assert ApiException(status, "Forbidden", body=body).namespace_terminating() is terminating
