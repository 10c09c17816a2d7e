"""Admission reviews answered straight from Phalanx's handlers, without Kopf's per-review machinery.

Kopf's webhook server still listens, holds the certificate and (when it manages them) writes the webhook
configurations; only the step from a parsed AdmissionReview to its answer is done here. Kopf's own step
(`serve_admission_request`) builds a handler cause with a memo, a logger and a diff, runs the handler
through its execution machinery, and turns the handler's merge patch into a JSON patch by deep-copying
the whole object and diffing it: measured on an idle cluster (bench/webhook_bench.py, py-spy), that was
~3x the handler's own time, in the one event loop that also runs the watches and the passes, so under
concurrent creates the reviews queued behind each other.

What the answer is stays Kopf's (`build_response` in kopf/_core/engines/admission.py), which the unit
tests check against Kopf's own path as the reference:
- a handler runs when the object's labels match its registration (Kopf filters again what the apiserver's
  objectSelector sent, on the new object, or the old one for a DELETE); the operations are the
  configuration's rules, which the apiserver applies, and a mutating one never sees a DELETE unless it was
  registered for DELETE alone, as in Kopf;
- `kopf.AdmissionError` denies with its message and code; any other exception denies with code 500;
- warnings the handler added are returned; the merge patch it wrote becomes a JSON patch of only the keys
  it touched, equal in effect to Kopf's diff (a key set to None is removed with the parents that leaves
  empty, a dict merged key by key, any other value replaced whole, a no-op left out).
"""

from __future__ import annotations

import base64
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import kopf

from phalanx.kubeclient import codec

log = logging.getLogger("phalanx.webhooks")

LabelSpec = Mapping[str, Any]  # label -> kopf.PRESENT, kopf.ABSENT or an exact value


@dataclass(frozen=True)
class Reviewer:
    """One webhook's handler, with what Kopf would check before running it."""

    handler: Callable[..., Any]
    operations: tuple[str, ...]
    labels: LabelSpec | None
    mutating: bool = False
    name: str = ""  # the webhook's id, for the log


def labels_match(labels: Mapping[str, Any], spec: LabelSpec | None) -> bool:
    """Kopf's label filter: PRESENT, ABSENT or an exact value, every one of them."""
    for key, wanted in (spec or {}).items():
        if wanted is kopf.PRESENT:
            if key not in labels:
                return False
        elif wanted is kopf.ABSENT:
            if key in labels:
                return False
        elif labels.get(key) != wanted:
            return False
    return True


def _pointer(path: tuple[str, ...]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def _leaves(merge: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """The merge patch's leaves in Kopf's order (Patch._apply_patch): a None removes, a dict is walked."""
    for key, value in merge.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


class _Merged:
    """Kopf's application of a merge patch (dicts.ensure / dicts.remove, empty parents of a removal removed
    too), on copies of only the dicts along the patch's paths: the object's other parts are shared."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.root: dict[str, Any] = dict(body)
        self._own = {id(self.root)}

    def _child(self, parent: dict[str, Any], key: str) -> dict[str, Any]:
        child = parent[key]
        if not isinstance(child, Mapping):
            raise TypeError(f"{key!r} holds {type(child).__name__}, not an object")  # as Kopf's dicts
        if id(child) not in self._own:
            child = parent[key] = dict(child)
            self._own.add(id(child))
        return cast(dict[str, Any], child)

    def ensure(self, path: tuple[str, ...], value: Any) -> None:
        node = self.root
        for key in path[:-1]:
            if key not in node:
                node[key] = {}
                self._own.add(id(node[key]))
            node = self._child(node, key)
        node[path[-1]] = value

    def remove(self, path: tuple[str, ...], node: dict[str, Any] | None = None) -> None:
        node = self.root if node is None else node
        if len(path) == 1:
            node.pop(path[0], None)
        elif path[0] in node:
            child = self._child(node, path[0])
            self.remove(path[1:], child)
            if child == {}:
                del node[path[0]]


def _diff(
    old: Mapping[str, Any], new: Mapping[str, Any], merge: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[dict[str, Any]]:
    for key, value in merge.items():
        here = (*path, key)
        if key in old and key not in new:
            yield {"op": "remove", "path": _pointer(here)}
        elif key in new and key not in old:
            yield {"op": "add", "path": _pointer(here), "value": new[key]}
        elif key in new:
            before, after = old[key], new[key]
            if isinstance(value, Mapping) and isinstance(before, Mapping) and isinstance(after, Mapping):
                yield from _diff(before, after, value, here)
            elif before != after:
                yield {"op": "replace", "path": _pointer(here), "value": after}


def json_patch(body: Mapping[str, Any], merge: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that does to `body` what Kopf does with the merge patch `merge`, found by
    applying it as Kopf does to copies of only the dicts it touches and comparing only the keys it names;
    what changes nothing is left out."""
    merged = _Merged(body)
    for path, value in _leaves(merge):
        if value is None:
            merged.remove(path)
        else:
            merged.ensure(path, value)
    return list(_diff(body, merged.root, merge, ()))


def _body(value: Any) -> kopf.Body | None:
    return kopf.Body(cast(kopf.RawBody, dict(value))) if isinstance(value, Mapping) else None


def _where(body: kopf.Body) -> str:
    meta = body.metadata
    return "/".join(p for p in (meta.namespace, meta.name or meta.get("generateName")) if p)


def _denial(error: BaseException) -> dict[str, Any]:
    code = error.code if isinstance(error, kopf.AdmissionError) else None
    return {"message": str(error) or repr(error), "code": code or 500}


async def answer(request: Mapping[str, Any], reviewer: Reviewer) -> dict[str, Any] | None:
    """The AdmissionReview response to `request`, or None when Kopf's own path should answer it (a request
    without the user or the object Kopf insists on: its error, not ours)."""
    payload = request.get("request") or {}
    new, old = payload.get("object"), payload.get("oldObject")
    raw = new if new is not None else old
    if payload.get("userInfo") is None or not isinstance(raw, Mapping):
        return None
    response: dict[str, Any] = {"uid": payload.get("uid", ""), "allowed": True}
    review = {
        "apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
        "kind": request.get("kind", "AdmissionReview"),
        "response": response,
    }
    operation = payload.get("operation")
    if operation == "DELETE" and reviewer.mutating and set(reviewer.operations) != {"DELETE"}:
        return review
    body = kopf.Body(cast(kopf.RawBody, dict(raw)))
    if not labels_match(body.metadata.labels, reviewer.labels):
        return review
    patch = kopf.Patch(body=body)
    warnings: list[str] = []
    try:
        outcome = reviewer.handler(
            body=body,
            patch=patch,
            warnings=warnings,
            old=_body(old),
            new=_body(new),
            operation=operation,
            subresource=payload.get("subResource"),
            dryrun=bool(payload.get("dryRun")),
            userinfo=payload.get("userInfo"),
        )
        if inspect.isawaitable(outcome):
            await outcome
    except kopf.AdmissionError as e:
        # A denial, not a failure: said at INFO, as process/logs.py DenialsAtInfo says Kopf's.
        log.info("[%s] Webhook %r denied: %s", _where(body), reviewer.name, e)
        response.update(allowed=False, status=_denial(e))
    except Exception as e:
        log.exception("[%s] Webhook %r failed with an exception", _where(body), reviewer.name)
        response.update(allowed=False, status=_denial(e))
    if warnings:
        response["warnings"] = [str(w) for w in warnings]
    ops = json_patch(raw, dict(patch)) if patch else []
    if ops:
        response["patch"] = base64.b64encode(codec.dumps(ops)).decode("ascii")
        response["patchType"] = "JSONPatch"
    return review
