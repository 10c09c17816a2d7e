"""Interning: one shared object per equal value, bounded, and never a different value back (issue 19, item 3).

The records the cache keeps for 50,000 nodes and pods share what the watch brings again and again; a wrong
share (an unequal value handed back) would be a silent scheduling bug, so the property is equality first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from phalanx.placement.interning import Interner, MappingInterner

values = st.tuples(st.text(max_size=3), st.integers(-2, 2))


@given(st.lists(values, max_size=60), st.integers(1, 8))
def test_an_interner_returns_an_equal_value_and_the_first_equal_object_until_it_starts_over(
    seen: list[tuple[str, int]], limit: int
) -> None:
    interner: Interner[tuple[str, int]] = Interner(limit=limit)
    model: dict[tuple[str, int], tuple[str, int]] = {}  # the reference: a table that starts over when full
    for value in seen:
        fresh = tuple(list(value))  # an equal tuple, a different object
        if value not in model and len(model) >= limit:
            model.clear()
        expected = model.setdefault(value, fresh)
        got = interner(fresh)
        assert got == value and got is expected
        assert len(interner) == len(model) <= limit


@given(st.lists(st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), st.integers(0, 3)), max_size=30))
def test_a_mapping_interner_returns_equal_mappings_shared_by_items(maps: list[dict[str, int]]) -> None:
    interner: MappingInterner[int] = MappingInterner(limit=4)
    for m in maps:
        got = interner(m.items())
        assert dict(got) == m and list(got) == list(m)
        assert interner(dict(m).items()) is got  # just remembered: the same object
