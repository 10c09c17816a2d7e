from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Snapshot,
    decide,
)
from phalanx.placement.scoring import Scorer

# Exactly equal scores whose float sums differ in the last bit (found by search):
# 4/5 + 34/35 + 2/10 == 5/5 + 6/35 + 8/10, but the float sums are not equal.
TOTALS = (5, 35, 10)
ROW_A = [4, 34, 2]
ROW_B = [5, 6, 8]


def test_float_sums_really_disagree_on_the_fixture() -> None:
    s = Scorer(TOTALS)
    assert s.fraction(ROW_A) == s.fraction(ROW_B)
    f = s.floats(np.array([ROW_A, ROW_B], dtype=np.int64))
    assert f[0] != f[1]


def test_exact_ties_break_by_tiebreak_not_float_noise() -> None:
    s = Scorer(TOTALS)
    rows = np.array([ROW_A, ROW_B], dtype=np.int64)
    assert list(s.order(rows, np.array([1, 0], dtype=np.intp))) == [1, 0]
    assert list(s.order(rows, np.array([0, 1], dtype=np.intp))) == [0, 1]
    assert s.argmin(rows) == 0
    assert s.argmin(rows[::-1].copy()) == 0


def test_engine_domain_choice_uses_exact_ties() -> None:
    # Leftover after one pod: domain A (3-1-1, 10-9-1, 29-5-1) vs B (14-13-1, 5-1-1, 16-1-1), both
    # normalised by totals (17, 15, 45): exactly equal, floats differ. Equal -> smallest name "A".
    nodes = [
        NodeInfo("a", {"d": "A"}, {"r1": 3, "r2": 10, "r3": 29, "pods": 10}),
        NodeInfo("b", {"d": "B"}, {"r1": 14, "r2": 5, "r3": 16, "pods": 10}),
    ]
    pods = [BoundPod("x", "a", {"r1": 2, "r2": 9, "r3": 5}), BoundPod("y", "b", {"r1": 13, "r2": 1, "r3": 1})]
    s = Snapshot.build(nodes, pods)
    scorer = Scorer((17, 15, 45))
    assert s.totals == (20, 17, 15, 45)  # pods, r1, r2, r3
    rows = np.array([[0, 0, 23], [0, 3, 14]], dtype=np.int64)
    assert scorer.fraction(rows[0]) == scorer.fraction(rows[1])
    assert scorer.floats(rows)[0] > scorer.floats(rows)[1]  # float alone would pick B
    req = PodRequirements(requests=(("r1", 1), ("r2", 1), ("r3", 1)))
    group = GroupRequest("g", (PodRequest("p", req),), 1, "d")
    assert decide(s, group) == Admit(domain="A", assignments=(("p", "a"),))


rows_strategy = st.integers(1, 4).flatmap(
    lambda k: st.tuples(
        st.lists(st.integers(1, 10**15), min_size=k, max_size=k),
        st.lists(st.lists(st.integers(0, 10**15), min_size=k, max_size=k), min_size=1, max_size=12),
    )
)


@settings(max_examples=200, deadline=None)
@given(rows_strategy, st.booleans())
def test_order_and_argmin_equal_fraction_sort(data: tuple[list[int], list[list[int]]], dup: bool) -> None:
    totals, rows = data
    if dup:
        rows = rows + rows[:3]  # equal rows: real ties
    s = Scorer(totals)
    arr = np.array(rows, dtype=np.int64)
    tiebreak = np.arange(len(rows), dtype=np.intp)[::-1].copy()
    keys = [sum((Fraction(x, t) for x, t in zip(r, totals, strict=True)), Fraction(0)) for r in rows]
    expected = sorted(range(len(rows)), key=lambda i: (keys[i], tiebreak[i]))
    assert list(s.order(arr, tiebreak)) == expected
    best = min(keys)
    assert s.argmin(arr) == keys.index(best)
