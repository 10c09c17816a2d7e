"""Phalanx's Kopf handlers, registered on an explicit registry (nothing registers at import): the
admission webhooks (webhooks.py) and one watch per row of the watched-kinds table (watched.py) feeding the
cache. No handler writes to the objects it watches (no finalizers, no Kopf annotations on Jobs or Pods:
only `on.event` and admission handlers are used); decisions belong to the scheduling loop."""

from __future__ import annotations

from typing import Any

import kopf

from phalanx.api import keys as names
from phalanx.api.group import GROUP, POD_GROUPS, TOPOLOGIES, VERSION, WORKLOADS
from phalanx.controller.watch.watched import WATCHED, Watched
from phalanx.controller.watch.webhooks import WatchContext, Webhooks

WEBHOOK_ID = "gate-job"  # a DNS-1123 path segment: Kopf serves each handler at /<id>
VALIDATE_ID = "validate-job"
VALIDATE_POD_GROUP_ID = "validate-podgroup"
VALIDATE_WORKLOAD_ID = "validate-workload"
GATE_POD_ID = "gate-pod"
VALIDATE_TOPOLOGY_ID = "validate-topology"
JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def build_registry(ctx: WatchContext, registry: kopf.OperatorRegistry | None = None) -> kopf.OperatorRegistry:
    """A registry with every handler of Phalanx, over `ctx` (a test builds its own)."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    _register_webhooks(Webhooks(ctx), registry)
    for row in WATCHED:
        _register_watch(ctx, row, registry)
    return registry


def _register_watch(ctx: WatchContext, row: Watched, registry: kopf.OperatorRegistry) -> None:
    async def on_event(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] is None:  # from a listing: it misses deletions (relist.py)
            ctx.listed(row.kind)
        body = event["object"]
        if row.owner and not ctx.watches(str((body.get("metadata") or {}).get("namespace") or "")):
            return
        if event["type"] == "DELETED":
            ctx.cache.delete(row.kind, body)
        else:
            ctx.cache.upsert(row.kind, body)

    r = row.resource
    kopf.on.event(r.group, r.version, r.plural, id=f"watch-{r.plural}", registry=registry)(on_event)


def _register_webhooks(hooks: Webhooks, registry: kopf.OperatorRegistry) -> None:
    # A labelled Job is gated at creation. Any value of the label, not only "true": a misspelt value
    # ("True", "yes") is refused instead of silently opting out.
    kopf.on.mutate(
        "batch",
        "v1",
        "jobs",
        id=WEBHOOK_ID,
        operations=["CREATE"],
        labels={names.MANAGED_LABEL: kopf.PRESENT},
        persistent=True,  # keep the configuration when the operator stops: no labelled Job slips through
        ignore_failures=False,  # failurePolicy: Fail
        side_effects=False,
        registry=registry,
    )(hooks.gate_job)
    kopf.on.validate(
        "batch",
        "v1",
        "jobs",
        id=VALIDATE_ID,
        operations=["UPDATE"],
        labels={names.MANAGED_LABEL: "true"},
        persistent=True,
        # Fail open: an operator outage must not block suspend, scale or label edits of running Jobs;
        # the loop reports a bad edit with an event if one slips through.
        ignore_failures=True,
        side_effects=False,
        registry=registry,
    )(hooks.validate_job_update)
    kopf.on.validate(
        GROUP,
        VERSION,
        POD_GROUPS,
        id=VALIDATE_POD_GROUP_ID,
        operations=["UPDATE"],
        labels={names.JOB_UID_LABEL: kopf.PRESENT},  # groups made for Jobs; hand-made ones stay editable
        persistent=True,
        # Fail open, as for Jobs: with Phalanx away, garbage collection's metadata updates must not block;
        # the loop puts the Job's gang size back before it decides anything.
        ignore_failures=True,
        side_effects=False,
        registry=registry,
    )(hooks.validate_pod_group_update)
    kopf.on.validate(
        GROUP,
        VERSION,
        WORKLOADS,
        id=VALIDATE_WORKLOAD_ID,
        operations=["CREATE", "UPDATE"],
        persistent=True,
        # Fail open: the CRD schema already refuses all but the rules it cannot express (names unique across
        # the template tree, one priority for all templates), and Phalanx's own Workloads keep them.
        ignore_failures=True,
        side_effects=False,
        registry=registry,
    )(hooks.validate_workload)
    kopf.on.mutate(
        "",
        "v1",
        "pods",
        id=GATE_POD_ID,
        operations=["CREATE"],
        # Pods that join a PodGroup by label. A Job's pods are not: they are held through their Job's
        # template, and Phalanx writes this label on them itself.
        labels={names.POD_GROUP_LABEL: kopf.PRESENT, JOB_CONTROLLER_UID_LABEL: kopf.ABSENT},
        persistent=True,  # as for Jobs: no labelled pod slips through ungated while the operator is away
        ignore_failures=False,  # failurePolicy: Fail
        side_effects=False,
        registry=registry,
    )(hooks.gate_pod)
    kopf.on.validate(
        GROUP,
        VERSION,
        TOPOLOGIES,
        id=VALIDATE_TOPOLOGY_ID,
        operations=["CREATE", "UPDATE"],
        persistent=True,
        # Fail open: with Phalanx away, Topologies stay editable; a second one listing a label then is not
        # used, and its Active condition says why (model/topology.py).
        ignore_failures=True,
        side_effects=False,
        registry=registry,
    )(hooks.validate_topology)
