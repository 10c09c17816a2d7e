"""A reference to one API object: what events, actions and logs name (no body)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def kind_key(self) -> str:
        """`<kind>/<namespace>/<name>`: a key unique across kinds (kind_key())."""
        return kind_key(self.kind, self.key)

    def __str__(self) -> str:
        return f"{self.kind.lower()} {self.namespace}/{self.name}"

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ObjectRef:
        meta = body.get("metadata") or {}
        return cls(
            api_version=str(body.get("apiVersion", "")),
            kind=str(body.get("kind", "")),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
        )

    def as_involved_object(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


def kind_key(kind: str, key: str) -> str:
    """A cache key (`<namespace>/<name>`) made unique across kinds."""
    return f"{kind}/{key}"
