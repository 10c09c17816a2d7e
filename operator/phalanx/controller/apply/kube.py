"""The operator's writes to the API: idempotent, bounded in time, retried on transient failures (tenacity).

Every request of the controller has a deadline per attempt (`--api-timeout-seconds`; LISTs their own,
`--api-list-timeout-seconds`): the API client itself applies it (`BoundedApiClient`, aiohttp's total
timeout, which also bounds reading a raw answer's body), so a connection that never answers costs one
deadline, not the scheduling pass. A request that got no answer is tried once more, then fails, and its
unit backs off while the others go on. A 429 or 5xx that says `Retry-After` is retried after that long
(capped at `RETRY_AFTER_CAP_SECONDS`), as client-go does; other transient failures after a short,
jittered exponential wait. Kopf's own requests (its watches, the webhook configurations) keep Kopf's
settings.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_exponential, wait_random

from phalanx.api import keys as names
from phalanx.api.group import GROUP, VERSION
from phalanx.api.naming import pod_group_label_value
from phalanx.controller import metrics
from phalanx.controller.model.refs import ObjectRef

log = logging.getLogger("phalanx.kube")
T = TypeVar("T")

RETRIABLE_STATUS = {429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
COMPONENT = "phalanx"
REQUEST_TIMEOUT_SECONDS = 5.0  # --api-timeout-seconds' default: one attempt of one request
LIST_TIMEOUT_SECONDS = 60.0  # --api-list-timeout-seconds' default: a LIST of every pod may be large
RETRY_AFTER_CAP_SECONDS = 10.0  # the longest Retry-After honoured; a longer one waits this long
TIMEOUT_ATTEMPTS = 2  # a request that got no answer is tried once more, then its unit backs off
# Exponential from 0.1 s to 3 s, plus a little jitter so replicas and groups don't retry in step.
BACKOFF = wait_exponential(multiplier=0.1, max=3.0) + wait_random(0, 0.1)


class ApiTimeoutError(TimeoutError):
    """A request got no answer within its deadline."""


class BoundedApiClient(client.ApiClient):  # type: ignore[misc]  # the client's classes are untyped
    """kubernetes-asyncio's ApiClient with a deadline on every request: `timeout` seconds unless the call
    gives its own `_request_timeout`. aiohttp's total timeout covers connecting, sending and reading the
    whole answer (also a raw one's body, read after the call returns)."""

    def __init__(self, configuration: Any = None, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        super().__init__(configuration)
        self.timeout = timeout

    async def request(  # the signature ApiClient.__call_api calls
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: Any = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Any = None,
    ) -> Any:
        deadline = _request_timeout or self.timeout
        try:
            return await super().request(
                method,
                url,
                query_params=query_params,
                headers=headers,
                post_params=post_params,
                body=body,
                _preload_content=_preload_content,
                _request_timeout=deadline,
            )
        except TimeoutError as e:  # also aiohttp's ServerTimeoutError and ConnectionTimeoutError
            seconds = f"{deadline:g} s" if isinstance(deadline, int | float) else "its deadline"
            raise ApiTimeoutError(f"{method} {urlsplit(url).path}: no answer within {seconds}") from e


async def raise_for_status(response: Any) -> None:
    """For a raw (`_preload_content=False`) answer, which the client does not check: an error status is an
    ApiException with the answer's headers (its Retry-After) and body, as the client raises them."""
    if response.status < 400:
        return
    error = ApiException(status=response.status, reason=response.reason)
    error.headers = response.headers
    error.body = await response.text()
    raise error


def _transient(error: BaseException) -> bool:
    if isinstance(error, ApiException):
        return error.status in RETRIABLE_STATUS
    return isinstance(error, aiohttp.ClientError | asyncio.TimeoutError | ConnectionError)


def _code(error: BaseException) -> str:
    """The HTTP status of a failed request, or 0 when the apiserver did not answer."""
    return str(error.status) if isinstance(error, ApiException) and error.status else "0"


def retry_after(error: BaseException | None) -> float | None:
    """The seconds a 429 or 5xx asks to wait (`Retry-After`: seconds or an HTTP date), capped; None when
    it says nothing (or nothing readable)."""
    if not isinstance(error, ApiException) or error.status not in RETRIABLE_STATUS:
        return None
    headers = getattr(error, "headers", None)
    text = headers.get("Retry-After") if headers is not None else None
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def _wait(state: RetryCallState) -> float:
    """Retry-After when the answer gave one, else the jittered exponential backoff."""
    error = state.outcome.exception() if state.outcome is not None else None
    asked = retry_after(error)
    return asked if asked is not None else float(BACKOFF(state))


def _should_retry(state: RetryCallState) -> bool:
    error = state.outcome.exception() if state.outcome is not None else None
    if error is None:
        return False
    if isinstance(error, TimeoutError):
        return state.attempt_number < TIMEOUT_ATTEMPTS
    return _transient(error)


async def retrying(
    call: Callable[[], Awaitable[T]],
    attempts: int = 6,
    *,
    verb: str = "unknown",
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Call, retrying transient failures (module docstring); every failed attempt counts in
    phalanx_api_errors_total."""
    async for attempt in AsyncRetrying(
        retry=_should_retry,
        wait=_wait,
        stop=stop_after_attempt(attempts),
        sleep=sleep,
        reraise=True,
    ):
        with attempt:
            try:
                return await call()
            except Exception as e:
                if _code(e) != "404":
                    metrics.API_ERRORS.labels(verb, _code(e)).inc()
                raise
    raise AssertionError("unreachable")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _dict(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return result

    # -- Workloads and PodGroups
    async def create_object(self, plural: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create, or return the existing object of that name (idempotent)."""
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        try:
            created: dict[str, Any] = await retrying(
                lambda: self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, dict(body)
                ),
                verb="create",
            )
            return created
        except ApiException as e:
            if e.status != 409:
                raise
        existing: dict[str, Any] = await retrying(
            lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name),
            verb="get",
        )
        return existing

    async def delete_object(self, plural: str, namespace: str, name: str) -> None:
        """Delete (gone already is fine)."""
        try:
            await retrying(
                lambda: self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name),
                verb="delete",
            )
        except ApiException as e:
            if e.status != 404:
                raise

    async def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        resource_version: str = "",
    ) -> dict[str, Any]:
        """With `resource_version`, only if the object is still at that version (else 409 Conflict)."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._merge_patch(plural, namespace, name, body, status_subresource=True)

    async def patch_cluster_status(self, plural: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status of a cluster-scoped object of ours (a Topology)."""
        patched: dict[str, Any] = await retrying(
            lambda: self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, {"status": dict(status)}, _content_type=MERGE_PATCH
            ),
            verb="patch",
        )
        return patched

    async def list_cluster_objects(self, plural: str) -> list[dict[str, Any]]:
        """Every object of a cluster-scoped kind of ours (few: read live by the Topology webhook)."""
        listed: dict[str, Any] = await retrying(
            lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, plural), verb="list"
        )
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    async def patch_spec(
        self, plural: str, namespace: str, name: str, spec: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._merge_patch(
            plural, namespace, name, {"spec": dict(spec)}, status_subresource=False
        )

    async def _merge_patch(
        self, plural: str, namespace: str, name: str, body: dict[str, Any], status_subresource: bool
    ) -> dict[str, Any]:
        call = (
            self.custom.patch_namespaced_custom_object_status
            if status_subresource
            else self.custom.patch_namespaced_custom_object
        )
        patched: dict[str, Any] = await retrying(
            lambda: call(GROUP, VERSION, namespace, plural, name, body, _content_type=MERGE_PATCH),
            verb="patch",
        )
        return patched

    # -- pods
    async def _patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """A strategic merge patch of a pod; None if the pod is gone."""
        try:
            pod = await retrying(
                lambda: self.core.patch_namespaced_pod(
                    name, namespace, patch, _content_type=STRATEGIC_MERGE_PATCH
                ),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._dict(pod)

    async def release_pod(self, namespace: str, name: str, node: str, group: str) -> dict[str, Any] | None:
        """Pin the pod to its node and remove our gate, in one request. None if the pod is gone."""
        return await self._patch_pod(
            namespace,
            name,
            {
                "metadata": {"labels": {names.POD_GROUP_LABEL: pod_group_label_value(group)}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "schedulingGates": [{"$patch": "delete", "name": names.ADMISSION_GATE}],
                },
            },
        )

    async def label_pod(self, namespace: str, name: str, group: str) -> dict[str, Any] | None:
        """Link a pod to its PodGroup. None if the pod is gone."""
        return await self._patch_pod(
            namespace, name, {"metadata": {"labels": {names.POD_GROUP_LABEL: pod_group_label_value(group)}}}
        )

    async def ungate_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove our gate only (no node chosen): kube-scheduler places the pod. None if the pod is gone."""
        return await self._patch_pod(
            namespace,
            name,
            {"spec": {"schedulingGates": [{"$patch": "delete", "name": names.ADMISSION_GATE}]}},
        )

    async def delete_pod(self, namespace: str, name: str, reason: str = "", message: str = "") -> None:
        """Delete a pod (gone already is fine): its owner makes it again. With `reason`, first mark it a
        disruption target, so that a Job's podFailurePolicy can ignore the failure (rule `Ignore` on
        `DisruptionTarget`) instead of counting it against backoffLimit."""
        try:
            if reason:
                await self._mark_disrupted(namespace, name, reason, message)
            await retrying(lambda: self.core.delete_namespaced_pod(name, namespace), verb="delete")
        except ApiException as e:
            if e.status != 404:
                raise

    async def _mark_disrupted(self, namespace: str, name: str, reason: str, message: str) -> None:
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": message[:1024],
            "lastTransitionTime": now_rfc3339(),
        }
        await retrying(
            lambda: self.core.patch_namespaced_pod_status(
                name,
                namespace,
                {"status": {"conditions": [condition]}},
                _content_type=STRATEGIC_MERGE_PATCH,
            ),
            verb="patch",
        )

    async def evict_pod(self, namespace: str, name: str, reason: str, message: str) -> bool:
        """Mark the pod a disruption target (as kube-scheduler's preemption does), then evict it through
        the Eviction API, which honours PodDisruptionBudgets. False if a budget blocks it (429); True when
        evicted or already gone."""
        try:
            await self._mark_disrupted(namespace, name, reason, message)
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
            await self.core.create_namespaced_pod_eviction(name, namespace, eviction)
        except ApiException as e:
            if e.status == 404:
                return True
            if e.status == 429:
                return False  # a PodDisruptionBudget does not allow it now
            raise
        return True

    # -- owners
    async def patch_owner(self, owner: ObjectRef, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A merge patch of an owner (a batch/v1 Job, or a custom kind such as a JobSet); None if gone."""
        if owner.api_version == "batch/v1" and owner.kind == "Job":
            return await self.patch_job(owner.namespace, owner.name, patch)
        group, _, version = owner.api_version.rpartition("/")
        plural = owner.kind.lower() + "s"
        try:
            patched: dict[str, Any] = await retrying(
                lambda: self.custom.patch_namespaced_custom_object(
                    group,
                    version,
                    owner.namespace,
                    plural,
                    owner.name,
                    dict(patch),
                    _content_type=MERGE_PATCH,
                ),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return patched

    # -- Jobs
    async def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A merge patch of a Job; None if the Job is gone."""
        try:
            job = await retrying(
                lambda: self.batch.patch_namespaced_job(
                    name, namespace, dict(patch), _content_type=MERGE_PATCH
                ),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return self._dict(job)
