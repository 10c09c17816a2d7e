"""Unit keys: one format for what backs off, what a plan is grouped by, and what logs and metrics name.

A unit is what the scheduling state machine places all or nothing: a Job's gang, a Job's tree of slices,
a hand-made tree or standalone PodGroup, later a JobSet or one LeaderWorkerSet group; a Topology's status
writes are keyed the same way. The key is `<Kind>/<namespace>/<name>` (`<Kind>/<name>` for cluster-scoped
objects, `<Kind>/<namespace>/<name>/<part>` for one of several units of an owner), so two units of
different kinds never share a key.
"""

from __future__ import annotations


def unit_key(kind: str, namespace: str, name: str, *parts: str) -> str:
    """The key of the unit rooted at the object `kind` `namespace`/`name` (`parts`: which unit of it)."""
    base = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    return "/".join((base, *parts))
