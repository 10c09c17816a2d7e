from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.placement import QuantityError, canonical_amount, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        ("2Ki", Fraction(2048)),
        ("1Ki", Fraction(1024)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ei", Fraction(2**60)),
        ("500M", Fraction(500_000_000)),
        ("1k", Fraction(1000)),
        ("12E", Fraction(12 * 10**18)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("1.5e+2", Fraction(150)),
        ("250n", Fraction(250, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1.", Fraction(1)),
    ],
)
def test_parse_quantity(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", "1K", "1e", "1 Gi", "Gi", "1Gb", "abc", "1.2.3", "1e3.5", "--1", "1Mi5", "."]
)
def test_parse_quantity_rejects_malformed(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_parse_quantity_numbers_from_json() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert parse_quantity(1e20) == 10**20
    with pytest.raises(QuantityError):
        parse_quantity(float("inf"))
    with pytest.raises(QuantityError):
        parse_quantity(True)


def test_absurd_exponent_is_rejected_not_computed() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("1e999999999")


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "100m", 100),
        ("cpu", "1", 1000),
        ("cpu", "1.5", 1500),
        ("cpu", "0.0001", 1),  # MilliValue rounds up
        ("cpu", "1n", 1),
        ("cpu", "1500u", 2),
        ("memory", "1Gi", 2**30),
        ("memory", "1.5Ki", 1536),
        ("memory", "100m", 1),  # Value rounds up
        ("memory", "1e3", 1000),
        ("nvidia.com/gpu", "8", 8),
        ("hugepages-2Mi", "4Mi", 4 * 2**20),
        ("cpu", "-1.5m", -2),  # away from zero, like Quantity.MilliValue
        ("memory", "-0.5", -1),
    ],
)
def test_canonical_amount(resource: str, text: str, expected: int) -> None:
    assert canonical_amount(resource, text) == expected


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "k", "M", "G", "Ki", "Mi", "Gi", "m"])
)
def test_integer_with_suffix_round_trips(n: int, suffix: str) -> None:
    factor = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    value = parse_quantity(f"{n}{suffix}")
    if suffix == "m":
        assert value == Fraction(n, 1000)
        assert canonical_amount("cpu", f"{n}m") == n
    else:
        assert value == n * factor[suffix]
