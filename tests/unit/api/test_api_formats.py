"""The Python checks of Kubernetes string formats agree with the CRD patterns the apiserver uses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.formats import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_KEY_MAX,
    LABEL_KEY_PATTERN,
    dns_label_problems,
    dns_subdomain_problems,
    label_key_problems,
)


@pytest.mark.parametrize(
    "key",
    [
        "zone",
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
        "example.com/Rack_1.a",
        "a" * 63,
        f"{'p' * 253}/n",
    ],
)
def test_valid_label_keys(key: str) -> None:
    assert label_key_problems(key) == []


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "must not be empty"),
        ("bad key!", "name part must consist of alphanumeric characters"),
        ("a/b/c", "at most one '/'"),
        ("/zone", "prefix before '/' must not be empty"),
        ("zone/", "name part must not be empty"),
        ("Example.com/zone", "prefix must consist of lower case"),
        ("-zone", "start and end with an alphanumeric"),
        ("a" * 64, "at most 63 characters"),
        (f"{'p' * 254}/n", "prefix must be at most 253 characters"),
    ],
)
def test_invalid_label_keys_say_why(key: str, why: str) -> None:
    assert any(why in problem for problem in label_key_problems(key)), label_key_problems(key)


def test_dns_names() -> None:
    assert dns_label_problems("train-pgt-0") == []
    assert dns_label_problems("a.b") != []
    assert dns_label_problems("a" * 64) == ["must be at most 63 characters"]
    assert dns_subdomain_problems("a.b-c") == []
    assert dns_subdomain_problems("A") != []
    assert dns_subdomain_problems("a" * 254) == ["must be at most 253 characters"]


def _crd_accepts_label_key(key: str) -> bool:
    """What the CRD does: maxLength, the pattern, and the CEL rule on the prefix length."""
    prefix_ok = "/" not in key or re.match(r"^[^/]{1,253}/", key) is not None
    return len(key) <= LABEL_KEY_MAX and re.search(LABEL_KEY_PATTERN, key) is not None and prefix_ok


_label_chars = st.sampled_from("abcxyzABZ019-_./")
_keys = st.one_of(
    st.text(_label_chars, max_size=80),
    st.builds(
        lambda p, n: f"{p}/{n}", st.text(_label_chars, max_size=260), st.text(_label_chars, max_size=70)
    ),
)


@given(_keys)
def test_python_and_crd_agree_on_label_keys(key: str) -> None:
    assert (label_key_problems(key) == []) == _crd_accepts_label_key(key)


@given(st.text(st.sampled_from("abz09-.A"), max_size=70))
def test_python_and_crd_agree_on_dns_labels(name: str) -> None:
    crd = len(name) <= 63 and re.search(DNS_LABEL_PATTERN, name) is not None
    assert (dns_label_problems(name) == []) == crd


@given(st.text(st.sampled_from("abz09-.A"), max_size=260))
def test_python_and_crd_agree_on_dns_subdomains(name: str) -> None:
    crd = len(name) <= 253 and re.search(DNS_SUBDOMAIN_PATTERN, name) is not None
    assert (dns_subdomain_problems(name) == []) == crd
