"""kubeclient/codec.py against the standard library's json, the reference: the same values decoded, the
same documents refused, and what it encodes reads back as the value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.kubeclient import codec

scalars = (
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_decodes_what_json_decodes_to_the_same_value(value: Any) -> None:
    text = json.dumps(value)
    expected = repr(json.loads(text))  # repr: an int read back as an equal float is a difference
    assert repr(codec.loads(text)) == expected
    assert repr(codec.loads(text.encode())) == expected
    assert repr(codec.loads(memoryview(text.encode()))) == expected


@given(values)
def test_what_it_encodes_reads_back_as_the_value(value: Any) -> None:
    assert json.loads(codec.dumps(value)) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # Beyond 64 bits orjson reads a float (it equals 2**64, so compared by repr); json reads the int.
        ('{"n": 18446744073709551616}', {"n": 2**64}),
        ('{"n": -9223372036854775809}', {"n": -(2**63) - 1}),
        (
            '{"a": [1, {"b": 123456789012345678901234567890}]}',
            {"a": [1, {"b": 123456789012345678901234567890}]},
        ),
        ('{"n": 18446744073709551615, "m": -9223372036854775808}', {"n": 2**64 - 1, "m": -(2**63)}),
        ('{"x": 0.12345678901234567890123}', None),
        ('{"n": 1e400}', {"n": float("inf")}),  # orjson refuses it
        ('{"s": "caf\\u00e9"}', {"s": "café"}),
        ('{"type": "ADDED", "object": {"metadata": {"resourceVersion": "7"}}}', None),
    ],
)
def test_documents_orjson_refuses_or_reads_differently_are_read_as_json_does(text: str, value: Any) -> None:
    assert repr(codec.loads(text)) == repr(json.loads(text) if value is None else value)
    assert repr(codec.loads(text.encode())) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["", "{", "{'a': 1}", "[1,]", "NaN-ish"])
def test_what_is_not_json_is_refused_as_json_refuses_it(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        codec.loads(text)


@pytest.mark.parametrize(
    "value",
    [
        {1: "int key"},  # orjson wants string keys; json writes "1"
        {"big": 2**70},
    ],
)
def test_values_orjson_cannot_encode_are_encoded_as_json_does(value: Any) -> None:
    assert codec.dumps(value) == json.dumps(value, separators=(",", ":")).encode()


def test_what_neither_can_encode_is_refused() -> None:
    with pytest.raises(TypeError):
        codec.dumps({"a": object()})
