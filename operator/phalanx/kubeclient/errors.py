"""What a failed request raises: the apiserver's error answer, or no answer in time."""

from __future__ import annotations

import json
from collections.abc import Mapping


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

    def status_message(self) -> str:
        """The Status object's message, else the HTTP reason."""
        try:
            decoded = json.loads(self.body) if self.body else {}
        except ValueError:
            decoded = {}
        message = decoded.get("message") if isinstance(decoded, dict) else None
        return str(message or self.reason or "error")

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        return f"{where}({self.status}) {self.status_message()}"


class ApiTimeoutError(TimeoutError):
    """A request got no answer within its deadline."""
