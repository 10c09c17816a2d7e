"""JSON to and from the apiserver, through orjson.

Every watch event and every answer the operator reads is JSON decoded in its one event loop, and every
write it sends is encoded there: with the standard library that was ~7 % of the operator's CPU in a
2,000-node burst (py-spy), on the thread that also serves the admission webhooks. orjson does the same
3-5x faster. Where it differs from the standard library it gives way to it, and the result is then exactly
`json`'s: an integer beyond 64 bits (Kubernetes sends none, but a custom resource may), which orjson 3.13
silently makes a float (-9223372036854775809 read back as -9.223372036854776e18: hypothesis found it), so a
document with 19 digits in a row anywhere goes to `json` (a byte translation and a search, ~0.6 µs per watch
event, a tenth of orjson's time on a large list); a document orjson refuses (1e400); and values it cannot
encode (keys that are not strings, types it does not know).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


_DIGITS = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))  # a digit -> "1", else "0"
_LONG_NUMBER = b"1" * 19  # the fewest digits of an integer beyond 64 bits (-9223372036854775809)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of a JSON document (json.JSONDecodeError, a ValueError, when it is not one)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    raw = bytes(raw) if isinstance(raw, memoryview) else raw
    if raw.translate(_DIGITS).find(_LONG_NUMBER) >= 0:
        return json.loads(data if isinstance(data, str) else raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(data if isinstance(data, str) else raw)


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (TypeError when it is not JSON-serialisable)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
