"""Workload and PodGroup names: the same as upstream's Job controller, always valid, always stable."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.formats import dns_label_problems, dns_subdomain_problems
from phalanx.api.naming import (
    fnv32a,
    pod_group_label_value,
    pod_group_name,
    pod_group_template_name,
    safe_encode,
    workload_name,
)

HASH = r"[bcdfghjklmnpqrstvwxz2456789]{1,10}"

# Computed by computeWorkloadName / computePodGroupName copied verbatim from
# k8s.io/kubernetes v1.37.2 pkg/controller/job/job_scheduling_manager.go.
UPSTREAM_JOBS = [
    (
        "train",
        "0b7a4c2e-1f7e-4b6e-9d0a-3c1e2f4a5b6c",
        "train-6695f68766",
        "train-6695f68766-train-pgt-0-655cb76fc6",
    ),
    ("pi", "5f1d8a3b-9c2e-4d7f-8a1b-2c3d4e5f6a7b", "pi-b4458885c", "pi-b4458885c-pi-pgt-0-8497d4b7d4"),
    ("a", "x", "a-56b945d94f", "a-56b945d94f-a-pgt-0-66fc869b69"),
    (
        "j" * 57,
        "11111111-2222-3333-4444-555555555555",
        "j" * 57 + "-68d7549f75",
        "j" * 57 + "-68d7549f75-" + "j" * 57 + "-pgt-0-6c844687c4",
    ),
]
UPSTREAM_LONG_POD_GROUPS = [
    ("w" * 250, "t", "w" * 240 + "-t-69c58d886f"),
    ("w", "t" * 250, "w-" + "t" * 241 + "-954b9ff6b"),
    ("w" * 200, "t" * 200, "w" * 121 + "-" + "t" * 120 + "-6f9f45db49"),
    ("w" * 130, "t" * 100, "w" * 130 + "-" + "t" * 100 + "-67f798d77f"),
]


def test_fnv32a_known_values() -> None:
    assert fnv32a(b"") == 0x811C9DC5
    assert fnv32a(b"a") == 0xE40C292C
    assert fnv32a(b"foobar") == 0xBF9CF968


def test_safe_encode_maps_each_character() -> None:
    assert safe_encode("0123456789") == "456789bcdf"  # ord("0") % 27 == 21
    assert safe_encode("") == ""


@pytest.mark.parametrize(("job", "uid", "workload", "pod_group"), UPSTREAM_JOBS)
def test_names_match_upstream(job: str, uid: str, workload: str, pod_group: str) -> None:
    assert workload_name(job, uid) == workload
    assert pod_group_template_name(job) == f"{job}-pgt-0"
    assert pod_group_name(workload, pod_group_template_name(job)) == pod_group


@pytest.mark.parametrize(("workload", "template", "expected"), UPSTREAM_LONG_POD_GROUPS)
def test_long_names_are_cut_as_upstream_does(workload: str, template: str, expected: str) -> None:
    assert pod_group_name(workload, template) == expected
    assert len(expected) <= 253


def test_a_very_long_job_name_is_cut_as_upstream_does() -> None:
    assert workload_name("n" * 260, "u") == "n" * 242 + "-548bf4f8b6"


def test_template_names_upstream_could_not_create_are_repaired() -> None:
    assert pod_group_template_name("a" * 63) == "a" * 57 + "-pgt-0"
    assert pod_group_template_name("train.v2") == "train-v2-pgt-0"
    assert dns_label_problems(pod_group_template_name("x." * 31 + "y")) == []


def test_a_cut_never_leaves_a_dot_before_the_dash() -> None:
    job = "a" * 240 + ".bcdefghijk"
    assert dns_subdomain_problems(workload_name(job, "uid")) == []


_job_names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?", fullmatch=True).filter(
    lambda n: not dns_subdomain_problems(n)
)
_uids = st.uuids().map(str)


@given(_job_names, _uids)
def test_names_are_valid_stable_and_shaped_like_upstream(job: str, uid: str) -> None:
    workload = workload_name(job, uid)
    template = pod_group_template_name(job)
    pod_group = pod_group_name(workload, template)
    assert dns_subdomain_problems(workload) == []
    assert dns_label_problems(template) == []
    assert dns_subdomain_problems(pod_group) == []
    assert max(len(workload), len(pod_group)) <= 253
    assert re.fullmatch(rf"{re.escape(job)}-{HASH}", workload)
    assert re.fullmatch(rf"{re.escape(workload)}-{re.escape(template)}-{HASH}", pod_group)
    if "." not in job and len(job) <= 57:
        assert template == f"{job}-pgt-0"
    assert workload_name(job, uid) == workload  # a restarted operator finds the same objects
    assert pod_group_name(workload, template) == pod_group


@given(_job_names, _uids, _uids)
def test_the_uid_tells_jobs_of_the_same_name_apart(job: str, first: str, second: str) -> None:
    same_hash = fnv32a(f"(types.UID){first}".encode()) == fnv32a(f"(types.UID){second}".encode())
    assert (workload_name(job, first) == workload_name(job, second)) == same_hash


@given(
    st.text(st.sampled_from("abc-."), min_size=1, max_size=300),
    st.text(st.sampled_from("xyz-"), max_size=300),
)
def test_pod_group_names_never_exceed_a_dns_subdomain(workload: str, template: str) -> None:
    assert len(pod_group_name(workload, template)) <= 253


def test_uuid_strings_work() -> None:
    uid = str(uuid.UUID(int=0))
    assert workload_name("job", uid) == workload_name("job", uid)


LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def test_short_pod_group_names_are_their_own_label_value() -> None:
    name = "train-6695f68766-train-pgt-0-655cb76fc6"
    assert pod_group_label_value(name) == name


@given(_job_names, _uids)
def test_pod_group_label_values_are_valid_and_distinct(job: str, uid: str) -> None:
    pod_group = pod_group_name(workload_name(job, uid), pod_group_template_name(job))
    value = pod_group_label_value(pod_group)
    assert len(value) <= 63
    assert LABEL_VALUE.fullmatch(value)
    assert value == pod_group_label_value(pod_group)
    if len(pod_group) > 63:
        assert value != pod_group_label_value(pod_group + "x")
