"""Reading API object bodies (plain dicts from JSON) without trusting their shape.

A body from the API, a webhook review or a user's YAML may hold anything where a mapping or a list is
expected; these helpers give an empty one instead, so a malformed object is reported by the code that
reads it, never a crash. No Phalanx imports: every layer may use it (the engine included).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []
