"""Kubernetes resource quantities (apimachinery resource.Quantity), parsed exactly.

A Fraction keeps "0.1" and "100m" exact; the scheduler's integer views
(MilliValue for cpu, Value for the rest) round up, away from zero.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Final

__all__ = ["QuantityError", "canonical_amount", "parse_quantity"]

_DECIMAL_SI: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# Same grammar as parseQuantityString: sign, digits, optional fraction, suffix letters, optional signed
# exponent digits. The suffix is validated separately, like quantitySuffixer.interpret.
_QUANTITY_RE: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_GO_INT_RE: Final = re.compile(r"[+-]?[0-9]+")

# Guard against "1e999999999": Python would happily try to build that integer.
_MAX_EXPONENT: Final = 1000


class QuantityError(ValueError):
    """The string is not a Kubernetes quantity."""


def parse_quantity(s: str | int | float | Fraction) -> Fraction:
    """Parse "100m", "1.5", "2Gi", "500M", "1e3", "12E", ... into an exact Fraction."""
    if isinstance(s, Fraction):
        return s
    if isinstance(s, bool):
        raise QuantityError(f"not a quantity: {s!r}")
    if isinstance(s, int):
        return Fraction(s)
    if isinstance(s, float):
        if not math.isfinite(s):
            raise QuantityError(f"not a quantity: {s!r}")
        # JSON numbers reach us as floats; their shortest repr is what the API server saw.
        s = repr(s)
    if not isinstance(s, str):
        raise QuantityError(f"not a quantity: {s!r}")
    return _parse_text(s)


@functools.lru_cache(maxsize=4096)
def _parse_text(s: str) -> Fraction:
    """A quantity string's value, remembered: the same few ("8", "500m", "4Gi") come in every pod and every
    admission review, and an exact parse builds several Fractions (a Fraction is immutable: shared)."""
    m = _QUANTITY_RE.fullmatch(s)
    if m is None or not (m.group(2) or m.group(3)):
        raise QuantityError(f"not a quantity: {s!r}")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    mantissa = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    if suffix in _DECIMAL_SI:
        value = mantissa * Fraction(10) ** _DECIMAL_SI[suffix]
    elif suffix in _BINARY_SI:
        value = mantissa * 2 ** _BINARY_SI[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _GO_INT_RE.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"quantity out of range: {s!r}")
        value = mantissa * Fraction(10) ** exponent
    else:
        raise QuantityError(f"unknown quantity suffix in {s!r}")
    return -value if sign == "-" else value


def _ceil_away_from_zero(x: Fraction) -> int:
    return math.ceil(x) if x >= 0 else math.floor(x)


def canonical_amount(resource: str, q: str | int | float | Fraction) -> int:
    """The integer the scheduler compares: millicores for cpu, plain units (bytes, counts) otherwise."""
    value = parse_quantity(q)
    if resource == "cpu":
        value *= 1000
    return _ceil_away_from_zero(value)
