"""One shared object per equal value, for what every watch event brings again as a fresh copy.

At 50,000 nodes and 50,000 pods the cache's records are most of the operator's memory, and much of that
was the same value held many times: the tolerations every pod of a template carries, the requests of a
gang's pods, the allocatable of nodes of one shape. Equal values are interchangeable here because the
records are read-only (frozen dataclasses, mappings nobody writes to), so one object can stand for all.

The table is bounded: a cluster with more distinct values than `limit` starts the table over rather than
grow it without end (values already shared stay shared; later equal ones share a new object).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)
V = TypeVar("V")


class Interner(Generic[T]):
    """`interner(value)` returns the first equal value it was given (or `value`, now remembered)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._table: dict[T, T] = {}

    def __call__(self, value: T) -> T:
        found = self._table.get(value)
        if found is not None:
            return found
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table[value] = value
        return value

    def __len__(self) -> int:
        return len(self._table)


class MappingInterner(Generic[V]):
    """The same for small read-only dicts (not hashable themselves): keyed by their items."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._table: dict[tuple[tuple[str, V], ...], dict[str, V]] = {}

    def __call__(self, items: Iterable[tuple[str, V]]) -> Mapping[str, V]:
        key = tuple(items)
        found = self._table.get(key)
        if found is not None:
            return found
        if len(self._table) >= self.limit:
            self._table.clear()
        value = {sys.intern(k): v for k, v in key}
        self._table[key] = value
        return value


def text(value: object) -> str:
    """`str(value)`, interned (names and labels many records repeat: namespaces, node names, Job uids)."""
    return sys.intern(value if isinstance(value, str) else str(value))
