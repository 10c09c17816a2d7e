"""The TrainJob's CREATE webhook: webhooks.py's owner gate, with the runtime the TrainJob refers to (as the
cache's watch of the runtimes saw it; read live when it has not seen it, or before refusing).

Kubeflow Trainer copies the runtime's JobSet template (a ClusterTrainingRuntime, or a TrainingRuntime of the
TrainJob's namespace) into the JobSet it makes, so Kueue's Topology-Aware Scheduling annotations on the
runtime's pod templates would reach a managed gang's pods. They are refused here, at the TrainJob's creation,
naming the runtime and its field (api/admission_checks.runtime_tas_problems); the TrainJob's own
`runtimePatches` are checked by the gate itself (tas_problems). Else Trainer's creation of the JobSet would be
refused by the JobSet's webhook, again at each of its retries, while Kueue queued (and, with a flavor that
has a topologyName, admitted: its quota reserved) a TrainJob that could never run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from phalanx.api.admission_checks import runtime_tas_problems
from phalanx.api.trainjob import runtime_ref
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import AdmittingKind
from phalanx.controller.watch.webhooks import WatchContext, Webhooks

log = logging.getLogger("phalanx.webhooks")


def gate_trainjob(hooks: Webhooks, kind: AdmittingKind) -> Callable[..., Awaitable[None]]:
    """`hooks.gate_owner(kind)` for a TrainJob, with the problems of its runtime."""
    gate = hooks.gate_owner(kind)

    async def gate_confirmed(
        body: kopf.Body, patch: kopf.Patch, warnings: list[str] | None = None, **kwargs: Any
    ) -> None:
        problems: list[str] = []
        if hooks.gated_here(body):
            problems, said = await runtime_problems(hooks.ctx, body)
            if said and warnings is not None:
                warnings.append(said)
        gate(body=body, patch=patch, warnings=warnings, runtime_problems=problems, **kwargs)

    return gate_confirmed


async def runtime_problems(ctx: WatchContext, body: kopf.Body) -> tuple[list[str], str | None]:
    """(Kueue TAS problems of the TrainJob's runtime, a warning when it could not be read). A runtime the
    cache's watch saw without any (cache/digests.py) is not read again: the common case, a TrainJob let
    through with nothing on its review's path. One the cache has not seen (made a moment ago, or its CRD
    installed after Phalanx started), or saw with problems, is read live: a refusal is never for what a
    runtime said before an edit the watch has not brought yet. A runtime that does not exist is Trainer's
    to refuse (its webhook requires it); without an API client (a test's context) the cache answers."""
    ref = runtime_ref(body)
    if ref is None:
        return [], None
    kind, name = ref
    meta = mapping(body.get("metadata"))
    namespace = str(meta.get("namespace") or "")
    seen = ctx.cache.digests.runtime_problems(kind, namespace, name)
    if seen is not None and not seen:
        return [], None  # the TrainJob's path: nothing read (stale, its JobSet's webhook still refuses)
    if ctx.kube is None:
        return list(seen or ()), None
    try:
        runtime = await ctx.kube.get_runtime(kind, namespace, name)
    except Exception as e:  # the API's failure: let the TrainJob through, and say what was not checked
        log.warning("could not read %s %s for TrainJob %s/%s: %s", kind, name, namespace, meta.get("name"), e)
        return [], (
            f"spec.runtimeRef: Phalanx could not read {kind} {name} to check its pod templates for Kueue's "
            f"Topology-Aware Scheduling annotations ({e}); if it has any, Trainer's creation of this "
            "TrainJob's JobSet is refused, and its events say why"
        )
    return ([], None) if runtime is None else (runtime_tas_problems(runtime), None)
