"""The operator's writes to the API: idempotent, bounded in time, retried on transient failures (tenacity).

Every request of the controller has a deadline per attempt (`--api-timeout-seconds`; LISTs their own,
`--api-list-timeout-seconds`): the API client itself applies it (phalanx.kubeclient, aiohttp's total
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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_exponential, wait_random

from phalanx.api import keys as names
from phalanx.api.cluster_objects import REQUIRED, name_pin
from phalanx.api.group import GROUP, VERSION
from phalanx.api.naming import pod_group_label_value
from phalanx.api.trainjob import API_GROUP as TRAINER_GROUP
from phalanx.api.trainjob import RUNTIME_PLURALS
from phalanx.controller import metrics
from phalanx.controller.kinds import OWNER_KINDS
from phalanx.controller.model.kueue import KUEUE_GROUP, KUEUE_VERSION
from phalanx.controller.model.refs import ObjectRef
from phalanx.kubeclient import ApiClient, ApiException, namespace_terminating, resource_path

# --api-timeout-seconds' default is the client's own (one attempt of one request), re-exported here.
from phalanx.kubeclient.client import REQUEST_TIMEOUT_SECONDS as REQUEST_TIMEOUT_SECONDS

log = logging.getLogger("phalanx.kube")
T = TypeVar("T")

RETRIABLE_STATUS = {429, 500, 502, 503, 504}
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
COMPONENT = "phalanx"
LIST_TIMEOUT_SECONDS = 60.0  # --api-list-timeout-seconds' default: a LIST of every pod may be large
RETRY_AFTER_CAP_SECONDS = 10.0  # the longest Retry-After honoured; a longer one waits this long
TIMEOUT_ATTEMPTS = 2  # a request that got no answer is tried once more, then its unit backs off
# Exponential from 0.1 s to 3 s, plus a little jitter so replicas and groups don't retry in step.
BACKOFF = wait_exponential(multiplier=0.1, max=3.0) + wait_random(0, 0.1)


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
                # Not the API failing: an object gone (404), its namespace being deleted (403).
                if _code(e) != "404" and not namespace_terminating(e):
                    metrics.API_ERRORS.labels(verb, _code(e)).inc()
                raise
    raise AssertionError("unreachable")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ours(plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return resource_path(GROUP, VERSION, plural, namespace=namespace, name=name, subresource=sub)


def _pods(namespace: str, name: str, sub: str | None = None) -> str:
    return resource_path("", "v1", "pods", namespace=namespace, name=name, subresource=sub)


def _owner_path(owner: ObjectRef) -> str:
    """The path of an owner of a kind Phalanx admits: its plural is the one its kind watches
    (kinds/*.RESOURCE, what process/access.py declares), never guessed from the kind's name."""
    kind = next(
        (k for k in OWNER_KINDS if k.name == owner.kind and k.resource.api_version == owner.api_version), None
    )
    if kind is None:
        raise ValueError(f"{owner.api_version} {owner.kind} is not a kind Phalanx admits")
    r = kind.resource
    return resource_path(r.group, r.version, r.plural, namespace=owner.namespace, name=owner.name)


class Kube:
    """The controller's verbs, as plain JSON (no generated models: phalanx.kubeclient says why)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def _json(self, method: str, path: str, body: Any = None, content_type: str = MERGE_PATCH) -> Any:
        return await self.api.json(method, path, body=body, content_type=content_type)

    # -- Workloads and PodGroups
    async def create_object(self, plural: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create, or return the existing object of that name (idempotent)."""
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        try:
            created: dict[str, Any] = await retrying(
                lambda: self.api.json("POST", _ours(plural, namespace), body=dict(body)),
                verb="create",
            )
            return created
        except ApiException as e:
            if e.status != 409:
                raise
        existing: dict[str, Any] = await retrying(
            lambda: self.api.json("GET", _ours(plural, namespace, name)),
            verb="get",
        )
        return existing

    async def delete_object(self, plural: str, namespace: str, name: str) -> None:
        """Delete (gone already is fine)."""
        try:
            await retrying(
                lambda: self.api.json("DELETE", _ours(plural, namespace, name)),
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
            lambda: self._json("PATCH", _ours(plural, name=name, sub="status"), {"status": dict(status)}),
            verb="patch",
        )
        return patched

    async def list_objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of a kind of ours in one namespace, read live, once (no retries: a webhook confirming
        the cache answers within its review's deadline)."""
        listed: dict[str, Any] = await self.api.json("GET", _ours(plural, namespace))
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    async def list_cluster_objects(self, plural: str) -> list[dict[str, Any]]:
        """Every object of a cluster-scoped kind of ours (few: read live by the Topology webhook)."""
        listed: dict[str, Any] = await retrying(lambda: self.api.json("GET", _ours(plural)), verb="list")
        items: list[dict[str, Any]] = listed.get("items") or []
        return items

    async def get_runtime(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The Kubeflow Trainer runtime a TrainJob refers to (api/trainjob.runtime_ref: a
        ClusterTrainingRuntime, or a TrainingRuntime of `namespace`), read live once, with no retries (the
        TrainJob's webhook asks, within its review's deadline); None when there is no such runtime."""
        scoped = namespace if kind == "TrainingRuntime" else None
        path = resource_path(TRAINER_GROUP, "v1alpha1", RUNTIME_PLURALS[kind], namespace=scoped, name=name)
        try:
            found: dict[str, Any] = await self.api.json("GET", path)
        except ApiException as e:
            if e.status == 404 and e.details_name() == name:
                return None
            raise
        return found

    async def patch_spec(
        self, plural: str, namespace: str, name: str, spec: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self._merge_patch(
            plural, namespace, name, {"spec": dict(spec)}, status_subresource=False
        )

    async def _merge_patch(
        self, plural: str, namespace: str, name: str, body: dict[str, Any], status_subresource: bool
    ) -> dict[str, Any]:
        path = _ours(plural, namespace, name, "status" if status_subresource else None)
        patched: dict[str, Any] = await retrying(lambda: self._json("PATCH", path, body), verb="patch")
        return patched

    # -- pods
    async def _patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """A strategic merge patch of a pod; None if the pod is gone."""
        try:
            pod: dict[str, Any] = await retrying(
                lambda: self._json("PATCH", _pods(namespace, name), patch, STRATEGIC_MERGE_PATCH),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return pod

    async def release_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        group: str,
        by_name: bool = True,
        domain: Iterable[tuple[str, str]] = (),
    ) -> dict[str, Any] | None:
        """Pin the pod to its node and remove our gate, in one request. None if the pod is gone. With
        `by_name` (the pod has no required node affinity of its own) it is also pinned by the node's name,
        so kube-scheduler filters that node alone; `domain`: the node's topology labels, pinned too, so it
        binds nothing there once the node is relabelled into another domain (model/actions.py ReleasePod)."""
        spec: dict[str, Any] = {
            "nodeSelector": {**dict(domain), "kubernetes.io/hostname": node},
            "schedulingGates": [{"$patch": "delete", "name": names.ADMISSION_GATE}],
        }
        if by_name:
            spec["affinity"] = {"nodeAffinity": {REQUIRED: name_pin(node)}}
        return await self._patch_pod(
            namespace,
            name,
            {"metadata": {"labels": {names.POD_GROUP_LABEL: pod_group_label_value(group)}}, "spec": spec},
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

    async def delete_pod(
        self, namespace: str, name: str, reason: str = "", message: str = "", *, foreground: bool = False
    ) -> None:
        """Delete a pod (gone already is fine): its owner makes it again. With `reason`, first mark it a
        disruption target, so that a Job's podFailurePolicy can ignore the failure (rule `Ignore` on
        `DisruptionTarget`) instead of counting it against backoffLimit. `foreground`: it stays, being
        deleted, until the objects it owns are gone (DeletePod.foreground)."""
        query = {"propagationPolicy": "Foreground"} if foreground else None
        try:
            if reason:
                await self._mark_disrupted(namespace, name, reason, message)
            await retrying(
                lambda: self.api.json("DELETE", _pods(namespace, name), query=query), verb="delete"
            )
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
            lambda: self._json(
                "PATCH",
                _pods(namespace, name, "status"),
                {"status": {"conditions": [condition]}},
                STRATEGIC_MERGE_PATCH,
            ),
            verb="patch",
        )

    async def evict_pod(self, namespace: str, name: str, reason: str, message: str) -> bool:
        """Mark the pod a disruption target (as kube-scheduler's preemption does), then evict it through
        the Eviction API, which honours PodDisruptionBudgets. False if a budget blocks it (429); True when
        evicted or already gone."""
        try:
            await self._mark_disrupted(namespace, name, reason, message)
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
            }
            await self.api.json("POST", _pods(namespace, name, "eviction"), body=eviction)
        except ApiException as e:
            if e.status == 404:
                return True
            if e.status == 429:
                return False  # a PodDisruptionBudget does not allow it now
            raise
        return True

    # -- owners
    async def get_owner(self, owner: ObjectRef) -> dict[str, Any] | None:
        """An owner as the API holds it now; None if gone: a 404 that names it. Any other 404 (a custom
        resource's path not served for a moment, as by an apiserver whose CRDs are not synced yet) says
        nothing of the owner, and raises."""
        try:
            found: dict[str, Any] = await retrying(lambda: self._json("GET", _owner_path(owner)), verb="get")
        except ApiException as e:
            if e.status == 404 and e.details_name() == owner.name:
                return None
            raise
        return found

    async def patch_owner(self, owner: ObjectRef, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A merge patch of an owner (a batch/v1 Job, or a custom kind such as a JobSet); None if gone."""
        if owner.api_version == "batch/v1" and owner.kind == "Job":
            return await self.patch_job(owner.namespace, owner.name, patch)
        try:
            patched: dict[str, Any] = await retrying(
                lambda: self._json("PATCH", _owner_path(owner), dict(patch)),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return patched

    async def patch_kueue_workload(
        self, workload: ObjectRef, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """A merge patch of a Kueue Workload (a requeue through Kueue: kinds/kueue.py), on the one the plan
        saw (its uid a precondition: a Workload Kueue made again for the same owner is not touched); None if
        gone."""
        body = dict(patch)
        if workload.uid:
            body["metadata"] = {**dict(patch.get("metadata") or {}), "uid": workload.uid}
        path = resource_path(
            KUEUE_GROUP, KUEUE_VERSION, "workloads", namespace=workload.namespace, name=workload.name
        )
        try:
            patched: dict[str, Any] = await retrying(lambda: self._json("PATCH", path, body), verb="patch")
        except ApiException as e:
            if e.status in (404, 409):
                return None  # gone, or made again (another uid): nothing of ours to write there
            raise
        return patched

    # -- Jobs
    async def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A merge patch of a Job; None if the Job is gone."""
        try:
            job: dict[str, Any] = await retrying(
                lambda: self._json(
                    "PATCH", resource_path("batch", "v1", "jobs", namespace=namespace, name=name), dict(patch)
                ),
                verb="patch",
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return job
