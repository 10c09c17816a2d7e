"""Phalanx's Kopf handlers, registered on an explicit registry (nothing registers at import): the
admission webhooks (webhooks.py) and one watch per row of the watched-kinds table (watched.py) that Kopf
serves, feeding the cache (nodes and pods: informer.py, unless --no-informers). No handler writes to the
objects it watches (no finalizers, no Kopf annotations on Jobs or Pods: only `on.event` and admission
handlers are used); decisions belong to the scheduling loop."""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import kopf

from phalanx.api import keys as names
from phalanx.api.group import GROUP, POD_GROUPS, TOPOLOGIES, VERSION, WORKLOADS
from phalanx.api.owned import OWNER_UID_LABEL
from phalanx.controller.kinds import OWNER_KINDS
from phalanx.controller.kinds.base import AdmittingKind, Resource
from phalanx.controller.kinds.trainjob import TrainJobKind
from phalanx.controller.watch.review import Reviewer
from phalanx.controller.watch.trainjob_gate import gate_trainjob
from phalanx.controller.watch.watched import WATCHED, Watched
from phalanx.controller.watch.webhooks import WatchContext, Webhooks

WEBHOOK_ID = "gate-job"  # a DNS-1123 path segment: Kopf serves each handler at /<id>
VALIDATE_ID = "validate-job"
VALIDATE_POD_GROUP_ID = "validate-podgroup"
VALIDATE_WORKLOAD_ID = "validate-workload"
GATE_POD_ID = "gate-pod"
VALIDATE_TOPOLOGY_ID = "validate-topology"
Operation = Literal["CREATE", "UPDATE"]
JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def build_registry(
    ctx: WatchContext,
    registry: kopf.OperatorRegistry | None = None,
    rows: Iterable[Watched] = WATCHED,
    hooks: Webhooks | None = None,
    serve_webhooks: bool = True,
) -> kopf.OperatorRegistry:
    """A registry with every handler of Phalanx, over `ctx` (a test builds its own): the webhooks (`hooks`,
    the same ones `reviewers` answers with, else new ones over `ctx`), and the watches of `rows` (the ones
    Kopf serves: watched.served_by; the others are informer.py's). Without `serve_webhooks` (--role
    controller) no webhook is registered: Kopf then neither serves nor configures any."""
    registry = registry if registry is not None else kopf.OperatorRegistry()
    if serve_webhooks:
        _register_webhooks(hooks if hooks is not None else Webhooks(ctx), registry)
    plurals = Counter(row.plural for row in WATCHED)  # Kueue has Workloads too: its watch names its group
    for row in rows:
        _register_watch(ctx, row, registry, plurals[row.plural] > 1 and row.resource.group != GROUP)
    return registry


class WatchOnlyDiffBase(kopf.DiffBaseStorage):
    """Kopf's diff-base storage for an operator whose watches are all `on.event` handlers.

    Kopf builds every watched object's "essence" on every event (a deep copy of the body less its metadata
    and status) to tell what changed for `on.create`/`on.update`/`on.field` handlers, even when there are
    none: in a burst of Jobs that was half of Kopf's per-event CPU (py-spy, 2,000 nodes), on the loop that
    also serves the webhooks. Phalanx registers none (build_registry; a unit test holds it to that), so the
    essence is empty and nothing is stored. A changing handler added later would make Kopf call `store`,
    which refuses loudly instead of silently never telling it a change."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        raise RuntimeError(
            "WatchOnlyDiffBase: a Kopf change-detecting handler ran; it needs a real diff-base storage"
        )


def _register_watch(
    ctx: WatchContext, row: Watched, registry: kopf.OperatorRegistry, qualified: bool = False
) -> None:
    async def on_event(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] is None:  # from a listing: it misses deletions (relist.py)
            ctx.listed(row.kind)
        body = event["object"]
        if row.owner and not ctx.watches(str((body.get("metadata") or {}).get("namespace") or "")):
            if event["type"] != "DELETED":
                await ctx.outside(row.kind, body)
            return
        if event["type"] == "DELETED":
            ctx.cache.delete(row.kind, body)
        else:
            ctx.cache.upsert(row.kind, body)

    r = row.resource
    name = f"{r.plural}.{r.group}" if qualified else r.plural
    kopf.on.event(r.group, r.version, r.plural, id=f"watch-{name}", registry=registry)(on_event)


@dataclass(frozen=True)
class _Hook:
    mutating: bool
    resource: Resource
    id: str
    operations: tuple[Operation, ...]
    labels: dict[str, Any] | None
    ignore_failures: bool  # True: failurePolicy Ignore (fails open)
    handler: Callable[..., Any]


def _hooks(hooks: Webhooks) -> tuple[_Hook, ...]:
    jobs, pods = Resource("batch", "v1", "jobs"), Resource("", "v1", "pods")
    return (
        # A labelled Job is gated at creation. Any value of the label, not only "true": a misspelt value
        # ("True", "yes") is refused instead of silently opting out. Fails closed: no labelled Job slips
        # through ungated while the operator is away.
        _Hook(
            True, jobs, WEBHOOK_ID, ("CREATE",), {names.MANAGED_LABEL: kopf.PRESENT}, False, hooks.gate_job
        ),
        # Fails open: an operator outage must not block suspend, scale or label edits of running Jobs; the
        # loop reports a bad edit with an event if one slips through. Any value of the label, as at
        # creation: an edit from true to a misspelt value ("True", "yes") is refused, not taken as opting
        # out mid-admission; removing the label (not selected) or false is how a Job leaves Phalanx.
        _Hook(
            False,
            jobs,
            VALIDATE_ID,
            ("UPDATE",),
            {names.MANAGED_LABEL: kopf.PRESENT},
            True,
            hooks.validate_job_update,
        ),
        # Every PodGroup: the handler refuses spec edits of those Phalanx made, for a Job (labelled with
        # its uid) or for any other owner kind (labelled with the owner's uid), and lets hand-made ones
        # pass. No label selector: one cannot say "either label", and a selector on one of them left the
        # groups of JobSets, LeaderWorkerSets and TrainJobs editable. Fails open, as for Jobs: with Phalanx
        # away, garbage collection's metadata updates must not block; the loop puts a Job's gang size back
        # and schedules the other owners' groups with the size their spec gives (kinds/).
        _Hook(
            False,
            Resource(GROUP, VERSION, POD_GROUPS),
            VALIDATE_POD_GROUP_ID,
            ("UPDATE",),
            None,
            True,
            hooks.validate_pod_group_update,
        ),
        # Fails open: the CRD schema already refuses all but the rules it cannot express (names unique
        # across the template tree, one priority for all templates), and Phalanx's own Workloads keep them.
        # Workloads Phalanx makes itself (labelled with their owner) are valid by construction: leaving them
        # out keeps a webhook round trip off every admission's path.
        _Hook(
            False,
            Resource(GROUP, VERSION, WORKLOADS),
            VALIDATE_WORKLOAD_ID,
            ("CREATE", "UPDATE"),
            {names.JOB_UID_LABEL: kopf.ABSENT, OWNER_UID_LABEL: kopf.ABSENT},
            True,
            hooks.validate_workload,
        ),
        # Pods that join a PodGroup by label. A Job's pods are not: they are held through their Job's
        # template, and Phalanx writes this label on them itself. Fails closed, as for Jobs.
        _Hook(
            True,
            pods,
            GATE_POD_ID,
            ("CREATE",),
            {names.POD_GROUP_LABEL: kopf.PRESENT, JOB_CONTROLLER_UID_LABEL: kopf.ABSENT},
            False,
            hooks.gate_pod_confirmed,
        ),
        # Fails open: with Phalanx away, Topologies stay editable; a second one listing a label then is
        # not used, and its Active condition says why (model/topology.py).
        _Hook(
            False,
            Resource(GROUP, VERSION, TOPOLOGIES),
            VALIDATE_TOPOLOGY_ID,
            ("CREATE", "UPDATE"),
            None,
            True,
            hooks.validate_topology,
        ),
    )


def _owner_hooks(hooks: Webhooks) -> tuple[_Hook, ...]:
    """For each owner kind with a webhook of its own (kinds.OWNER_KINDS: a JobSet), a gate at creation that
    fails closed and an edit check that fails open, both for objects carrying the managed label with any
    value (a misspelt one is refused, at creation as in an edit); for a kind whose templates change at any
    time (a LeaderWorkerSet), a mutating edit hook that puts the gate back, failing open."""
    out: list[_Hook] = []
    for kind in OWNER_KINDS:
        if not isinstance(kind, AdmittingKind):
            continue
        r, name = kind.resource, kind.name.lower()
        # A TrainJob's gate reads its runtime too (Kueue's TAS annotations there reach its JobSet's pods).
        gate = gate_trainjob(hooks, kind) if isinstance(kind, TrainJobKind) else hooks.gate_owner(kind)
        out.append(
            _Hook(True, r, f"gate-{name}", ("CREATE",), {names.MANAGED_LABEL: kopf.PRESENT}, False, gate)
        )
        if kind.regates_on_update:
            # Phalanx's gate put back into an edited template. Mutating, not refusing, where the kind's
            # templates change at any time (an LWS rolling update from a replaced manifest or a controller
            # above it that never had the gate; Kueue's LWS webhook defaults on UPDATE too); a Job's or
            # JobSet's templates change only while suspended, and their validators refuse the removal
            # instead, as Kueue, which mutates those only at creation, validates their edits. Fails open:
            # an outage must not block rolling updates or scaling; an edit then is said NotGated.
            out.append(
                _Hook(
                    True,
                    r,
                    f"regate-{name}",
                    ("UPDATE",),
                    {names.MANAGED_LABEL: kopf.PRESENT},  # the handler reads the value (managed_by_label)
                    True,
                    hooks.regate_owner(kind),
                )
            )
        out.append(
            _Hook(
                False,
                r,
                f"validate-{name}",
                ("UPDATE",),
                {names.MANAGED_LABEL: kopf.PRESENT},
                True,
                hooks.validate_owner(kind),
            )
        )
    return tuple(out)


def _in_the_loop(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The handler as a coroutine function. Kopf runs a plain function in its thread pool: a hand-off to a
    worker thread and back per review, each waiting for the GIL behind the loop's watch work, which made a
    review of a burst of Jobs wait ~40 ms for a handler that runs in 0.04 ms. The handlers are pure and quick
    (webhooks.py: nothing on the plain ones' path waits for I/O), so they run in the loop itself. A handler
    that is a coroutine function already (one that reads the API live) is kept as it is."""
    if inspect.iscoroutinefunction(handler):
        return handler

    async def review(**kwargs: Any) -> Any:
        return handler(**kwargs)

    review.__name__ = review.__qualname__ = getattr(handler, "__name__", "review")
    return review


def reviewers(ctx: WatchContext | Webhooks) -> dict[str, Reviewer]:
    """Each webhook's handler by its id (the path Kopf serves it at), for answering reviews directly
    (review.py) with the same operations and label filter as its Kopf registration: of the webhooks given
    (the process registers the same ones with Kopf: one set of memos), or of new ones over a context."""
    hooks = ctx if isinstance(ctx, Webhooks) else Webhooks(ctx)
    return {
        hook.id: Reviewer(hook.handler, hook.operations, hook.labels, hook.mutating, hook.id)
        for hook in (*_hooks(hooks), *_owner_hooks(hooks))
    }


def _register_webhooks(hooks: Webhooks, registry: kopf.OperatorRegistry) -> None:
    for hook in (*_hooks(hooks), *_owner_hooks(hooks)):
        on = kopf.on.mutate if hook.mutating else kopf.on.validate
        r = hook.resource
        on(
            r.group,
            r.version,
            r.plural,
            id=hook.id,
            operations=list(hook.operations),
            labels=hook.labels,
            persistent=True,  # the configuration outlives the operator (docs/design.md, Safety)
            ignore_failures=hook.ignore_failures,
            side_effects=False,
            registry=registry,
        )(_in_the_loop(hook.handler))
