"""One node label as an integer column, so selectors and topology domains are numpy operations.

Codes index the sorted distinct values; -1 marks nodes without the label. Evaluating a
requirement costs O(distinct values touched) in Python plus one gather over the nodes.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from .filters import NODE_NAME_FIELD, parse_go_int, requirement_is_valid
from .model import NodeSelectorRequirement
from .remap import NodeRemap

__all__ = ["BoolArray", "DomainGroups", "IndexArray", "IntArray", "LabelColumn", "field_mask", "readonly"]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
IndexArray = npt.NDArray[np.intp]

_G = TypeVar("_G", bound=np.generic)


def readonly(a: npt.NDArray[_G]) -> npt.NDArray[_G]:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, slots=True)
class DomainGroups:
    """Nodes grouped by domain: domain i owns nodes order[starts[i]:ends[i]] (ascending node index)."""

    names: tuple[str, ...]
    codes: IndexArray
    order: IndexArray
    starts: IndexArray
    ends: IndexArray


class LabelColumn:
    __slots__ = ("_groups", "_ints", "codes", "index", "values")

    values: tuple[str, ...]
    index: dict[str, int]
    codes: IndexArray

    def __init__(self, raw: Sequence[str | None]) -> None:
        first_seen: dict[str, int] = {}
        provisional = np.fromiter(
            (-1 if v is None else first_seen.setdefault(v, len(first_seen)) for v in raw),
            dtype=np.intp,
            count=len(raw),
        )
        # Codes follow sorted value order so "smallest domain name" is "smallest code".
        self.values = tuple(sorted(first_seen))
        self.index = {v: i for i, v in enumerate(self.values)}
        remap = np.empty(len(first_seen) + 1, dtype=np.intp)
        for v, provisional_code in first_seen.items():
            remap[provisional_code] = self.index[v]
        remap[-1] = -1
        self.codes = readonly(remap[provisional])
        self._ints: tuple[IntArray, BoolArray] | None = None
        self._groups: DomainGroups | None = None

    @classmethod
    def of_codes(cls, values: tuple[str, ...], index: dict[str, int], codes: IndexArray) -> LabelColumn:
        """A column from its parts: distinct `values` in code order, their codes, code per node."""
        col = cls.__new__(cls)
        col.values, col.index, col.codes = values, index, readonly(codes)
        col._ints = None
        col._groups = None
        return col

    def _code(self, value: str | None) -> int:
        """The code `value` has in this column; -2 for a value the column does not have."""
        return -1 if value is None else self.index.get(value, -2)

    def remapped(self, remap: NodeRemap, fresh: Mapping[int, str | None]) -> LabelColumn:
        """This column after a node change: nodes move by `remap`, then node j (new index) takes the
        value fresh[j]; every new node must be in `fresh`.

        Costs O(nodes + values) in numpy plus O(changed values) in Python; an unchanged column is
        returned as is, keeping its cached domain groups.
        """
        if remap.is_identity and all(self.codes[j] == self._code(v) for j, v in fresh.items()):
            return self
        codes = remap.carry(self.codes, -1)
        codes[np.fromiter(fresh, dtype=np.intp, count=len(fresh))] = -1
        in_use = np.bincount(codes[codes >= 0], minlength=len(self.values)) > 0
        wanted = {v for v in fresh.values() if v is not None}
        for v in wanted & self.index.keys():
            in_use[self.index[v]] = True
        dropped = np.flatnonzero(~in_use)
        inserted = sorted(wanted - self.index.keys())
        values, index = self.values, self.index
        if dropped.size or inserted:
            values, recode = self._revalued(dropped, inserted)
            index = dict(zip(values, range(len(values)), strict=True))
            codes = recode[codes]
        for j, value in fresh.items():
            codes[j] = -1 if value is None else index[value]
        return LabelColumn.of_codes(values, index, codes)

    def _revalued(self, dropped: IndexArray, inserted: list[str]) -> tuple[tuple[str, ...], IndexArray]:
        """Sorted values without `dropped` (codes) and with `inserted`, and old code -> new code
        (one extra trailing slot, -1, that code -1 picks up)."""
        # New code = old code - dropped codes below it + inserted values below it.
        shift = np.zeros(len(self.values) + 1, dtype=np.intp)
        np.subtract.at(shift, dropped + 1, 1)
        for v in inserted:
            shift[bisect_left(self.values, v)] += 1
        recode = np.arange(len(self.values) + 1, dtype=np.intp) + np.cumsum(shift)
        recode[-1] = -1
        values = list(self.values)
        for i in dropped[::-1].tolist():
            del values[i]
        for v in inserted:
            insort(values, v)
        return tuple(values), recode

    def __len__(self) -> int:
        return len(self.values)

    def _value_mask(self, per_value: BoolArray, missing: bool) -> BoolArray:
        # One slot per value plus a trailing slot that code -1 picks up.
        table = np.empty(len(self.values) + 1, dtype=np.bool_)
        table[:-1] = per_value
        table[-1] = missing
        result: BoolArray = table[self.codes]
        return result

    def _int_values(self) -> tuple[IntArray, BoolArray]:
        if self._ints is None:
            parsed = [parse_go_int(v) for v in self.values]
            ints = np.array([0 if p is None else p for p in parsed], dtype=np.int64)
            valid = np.array([p is not None for p in parsed], dtype=np.bool_)
            self._ints = (ints, valid)
        return self._ints

    def _in_values(self, values: Iterable[str]) -> BoolArray:
        hit = np.zeros(len(self.values), dtype=np.bool_)
        for v in values:
            i = self.index.get(v)
            if i is not None:
                hit[i] = True
        return hit

    def requirement_mask(self, req: NodeSelectorRequirement) -> BoolArray:
        """labels.Requirement.Matches for every node; `req` must be valid (filters.requirement_is_valid)."""
        op = req.operator
        if op == "In":
            return self._value_mask(self._in_values(req.values), missing=False)
        if op == "NotIn":
            return self._value_mask(~self._in_values(req.values), missing=True)
        if op in ("Exists", "DoesNotExist"):
            exists: BoolArray = self.codes >= 0
            return exists if op == "Exists" else ~exists
        bound = parse_go_int(req.values[0])
        assert bound is not None, "caller checks requirement_is_valid"
        ints, valid = self._int_values()
        per_value = valid & ((ints > bound) if op == "Gt" else (ints < bound))
        return self._value_mask(per_value, missing=False)

    def equals_mask(self, value: str) -> BoolArray:
        i = self.index.get(value)
        if i is None:
            return np.zeros(len(self.codes), dtype=np.bool_)
        hit: BoolArray = self.codes == i
        return hit

    def groups(self) -> DomainGroups:
        if self._groups is None:
            order = np.argsort(self.codes, kind="stable")
            missing = int(np.count_nonzero(self.codes < 0))
            counts = np.bincount(self.codes[self.codes >= 0], minlength=len(self.values))
            ends = np.cumsum(counts).astype(np.intp)
            self._groups = DomainGroups(
                names=self.values,
                codes=self.codes,
                order=readonly(order[missing:].astype(np.intp)),
                starts=readonly((ends - counts).astype(np.intp)),
                ends=readonly(ends),
            )
        return self._groups


def field_mask(req: NodeSelectorRequirement, name_index: dict[str, int], n_nodes: int) -> BoolArray:
    """Field selector (matchFields) for every node; only metadata.name exists, other fields read as ""."""
    if not requirement_is_valid(req, is_field=True):
        return np.zeros(n_nodes, dtype=np.bool_)
    wanted = req.values[0]
    if req.key == NODE_NAME_FIELD:
        hit = np.zeros(n_nodes, dtype=np.bool_)
        i = name_index.get(wanted)
        if i is not None:
            hit[i] = True
    else:
        hit = np.full(n_nodes, wanted == "", dtype=np.bool_)
    return hit if req.operator == "In" else ~hit
