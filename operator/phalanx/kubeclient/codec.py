"""JSON to and from the apiserver, through orjson.

Every watch event and every answer the operator reads is JSON decoded in its one event loop, and every
write it sends is encoded there: with the standard library that was ~7 % of the operator's CPU in a
2,000-node burst (py-spy), on the thread that also serves the admission webhooks. orjson does the same
3-5x faster. Where it differs from the standard library it gives way to it: an integer beyond 64 bits
(orjson refuses it; Kubernetes sends none, but a custom resource may), and values it cannot encode
(keys that are not strings, types it does not know); the result is then exactly `json`'s.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of a JSON document (json.JSONDecodeError, a ValueError, when it is not one)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (TypeError when it is not JSON-serialisable)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
