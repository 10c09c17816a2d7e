"""What a failed request raises: the apiserver's error answer, or no answer in time."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

NAMESPACE_TERMINATING = "NamespaceTerminating"  # corev1.NamespaceTerminatingCause


class ApiException(Exception):  # noqa: N818  # the name every Kubernetes client gives it
    """An error status from the apiserver: its code, reason, headers (a 429's Retry-After) and body (the
    Status object, as text)."""

    def __init__(
        self,
        status: int = 0,
        reason: str = "",
        *,
        headers: Mapping[str, str] | None = None,
        body: str = "",
        method: str = "",
        path: str = "",
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        self.body = body
        self.method = method
        self.path = path
        super().__init__(self.__str__())

    def _status(self) -> dict[str, Any]:
        """The Status object the body carries ({} if none)."""
        try:
            decoded = json.loads(self.body) if self.body else {}
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}

    def status_message(self) -> str:
        """The Status object's message, else the HTTP reason."""
        return str(self._status().get("message") or self.reason or "error")

    def details_name(self) -> str:
        """The name the Status's details give ("" if none): a NotFound of an object names it; one of a path
        not served (a CRD not synced yet) names nothing."""
        details = self._status().get("details")
        return str(details.get("name") or "") if isinstance(details, dict) else ""

    def causes(self) -> tuple[str, ...]:
        """The reasons of the Status's details.causes: a create in a namespace being deleted is refused
        (403) with the cause NamespaceTerminating."""
        details = self._status().get("details")
        found = details.get("causes") if isinstance(details, dict) else None
        if not isinstance(found, list):
            return ()
        return tuple(str(c.get("reason") or "") for c in found if isinstance(c, dict))

    def namespace_terminating(self) -> bool:
        """Refused because its namespace is being deleted: nothing new can be made there (the apiserver's
        NamespaceLifecycle admission), and all that is in it goes."""
        return self.status == 403 and NAMESPACE_TERMINATING in self.causes()

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        return f"{where}({self.status}) {self.status_message()}"


def namespace_terminating(error: BaseException) -> bool:
    """Any failure: an apiserver's refusal because the namespace is being deleted (ApiException's own)."""
    return isinstance(error, ApiException) and error.namespace_terminating()


class ApiTimeoutError(TimeoutError):
    """A request got no answer within its deadline."""
