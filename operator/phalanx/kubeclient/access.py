"""What a request asks of RBAC, read off its method and path: (API group, resource[/subresource], verb).

The inverse of `resource_path` (client.py), plus `watch=true` for a watch. The operator declares every
access it makes (controller/process/access.py) and its client refuses any other (`ApiClient(allowed=)`),
so a call the chart's RBAC does not grant fails the first test that makes it, with its name, instead of
a 403 in someone's cluster; the chart is checked against the same declaration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update"}


@dataclass(frozen=True, order=True)
class Access:
    group: str  # "" for the core group
    resource: str  # the plural, with "/subresource" when there is one
    verb: str  # RBAC's: get list watch create update patch delete deletecollection

    def __str__(self) -> str:
        return f"{self.group or 'core'}/{self.resource} {self.verb}"


class AccessNotDeclaredError(RuntimeError):
    """A request outside the client's declared accesses: a bug of the caller, never retried."""


def access_of(
    method: str, path: str, query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None
) -> Access:
    """`PATCH /apis/batch/v1/namespaces/ns/jobs/j` -> batch/jobs patch; `GET /api/v1/pods?watch=true` ->
    core/pods watch. A path that names no resource is a ValueError."""
    parts = [p for p in path.split("?")[0].strip("/").split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"{path}: not a resource path (/api/v1/... or /apis/group/version/...)")
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]  # namespaced: /namespaces/{namespace}/{plural}/...
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    items = query.items() if isinstance(query, Mapping) else (query or ())
    watching = any(k == "watch" and v in ("true", "1") for k, v in items)
    method = method.upper()
    if method == "GET":
        verb = "watch" if watching else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    elif method in VERBS:
        verb = VERBS[method]
    else:
        raise ValueError(f"{method} {path}: no RBAC verb for {method}")
    return Access(group, resource, verb)
