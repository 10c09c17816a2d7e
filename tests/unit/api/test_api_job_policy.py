"""A Job's phalanx.dev annotations: defaults, every rejection, and the upstream spec.scheduling twin."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.job_policy import (
    JobPolicy,
    JobPolicyError,
    PolicyProblem,
    annotations_for,
    from_upstream_scheduling,
    is_managed,
    parse_job_policy,
    upstream_scheduling,
)
from phalanx.api.keys import (
    DISRUPTION_MODE_ANNOTATION,
    MANAGED_LABEL,
    MIN_COUNT_ANNOTATION,
    POLICY_ANNOTATION,
    POLICY_ANNOTATIONS,
    TOPOLOGY_KEY_ANNOTATION,
)


def job(
    annotations: dict[str, str] | None = None,
    parallelism: int | None = 4,
    priority_class_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if priority_class_name is not None:
        spec["template"]["spec"]["priorityClassName"] = priority_class_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "0b7a4c2e-1f7e-4b6e-9d0a-3c1e2f4a5b6c",
            "labels": {MANAGED_LABEL: "true"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def rejection(annotations: dict[str, str], parallelism: int | None = 4) -> JobPolicyError:
    with pytest.raises(JobPolicyError) as caught:
        parse_job_policy(job(annotations, parallelism))
    return caught.value


# --- defaults


def test_no_annotations_means_a_gang_of_the_whole_parallelism() -> None:
    assert parse_job_policy(job()) == JobPolicy(
        policy="gang", min_count=4, topology_key=None, disruption_mode="single", parallelism=4
    )


def test_parallelism_defaults_to_one() -> None:
    policy = parse_job_policy(job(parallelism=None))
    assert (policy.min_count, policy.parallelism) == (1, 1)


def test_fewer_completions_than_parallelism_make_a_smaller_default_gang() -> None:
    body = job(parallelism=4)
    body["spec"]["completions"] = 2  # the Job controller only ever creates 2 pods
    assert parse_job_policy(body).min_count == 2
    body["metadata"]["annotations"] = {MIN_COUNT_ANNOTATION: "3"}
    with pytest.raises(JobPolicyError, match="3 is greater than completions 2"):
        parse_job_policy(body)


def test_zero_parallelism_still_gets_a_gang_of_one_as_upstream() -> None:
    assert parse_job_policy(job(parallelism=0)).min_count == 1


def test_priority_class_comes_from_the_pod_template() -> None:
    assert parse_job_policy(job(priority_class_name="high")).priority_class_name == "high"
    assert parse_job_policy(job()).priority_class_name is None


def test_a_full_gang_policy() -> None:
    policy = parse_job_policy(
        job(
            {
                POLICY_ANNOTATION: "gang",
                MIN_COUNT_ANNOTATION: "3",
                TOPOLOGY_KEY_ANNOTATION: "topology.kubernetes.io/zone",
                DISRUPTION_MODE_ANNOTATION: "all",
            }
        )
    )
    assert policy == JobPolicy(
        policy="gang",
        min_count=3,
        topology_key="topology.kubernetes.io/zone",
        disruption_mode="all",
        parallelism=4,
    )
    assert policy.is_gang


def test_a_basic_policy_has_no_min_count() -> None:
    policy = parse_job_policy(job({POLICY_ANNOTATION: "basic"}))
    assert (policy.policy, policy.min_count, policy.topology_key) == ("basic", None, None)
    assert not policy.is_gang


def test_surrounding_whitespace_is_forgiven() -> None:
    assert parse_job_policy(job({MIN_COUNT_ANNOTATION: " 2\n", POLICY_ANNOTATION: "gang "})).min_count == 2


def test_unrelated_annotations_are_ignored() -> None:
    assert parse_job_policy(job({"example.com/other": "x", "team": "ml"})) == parse_job_policy(job())


def test_managed_label() -> None:
    assert is_managed(job())
    unmanaged = job()
    unmanaged["metadata"]["labels"] = {MANAGED_LABEL: "false"}
    assert not is_managed(unmanaged)
    assert not is_managed({"metadata": {}})


# --- rejections


@pytest.mark.parametrize(
    ("annotations", "parallelism", "message"),
    [
        (
            {MIN_COUNT_ANNOTATION: "abc"},
            4,
            'metadata.annotations[phalanx.dev/min-count]: "abc" is not an integer',
        ),
        (
            {MIN_COUNT_ANNOTATION: "2.5"},
            4,
            'metadata.annotations[phalanx.dev/min-count]: "2.5" is not an integer',
        ),
        ({MIN_COUNT_ANNOTATION: ""}, 4, 'metadata.annotations[phalanx.dev/min-count]: "" is not an integer'),
        (
            {MIN_COUNT_ANNOTATION: "5"},
            4,
            "metadata.annotations[phalanx.dev/min-count]: 5 is greater than parallelism 4",
        ),
        (
            {MIN_COUNT_ANNOTATION: "2"},
            None,
            "metadata.annotations[phalanx.dev/min-count]: 2 is greater than parallelism 1",
        ),
        ({MIN_COUNT_ANNOTATION: "0"}, 4, "metadata.annotations[phalanx.dev/min-count]: 0 must be at least 1"),
        (
            {MIN_COUNT_ANNOTATION: "-3"},
            4,
            "metadata.annotations[phalanx.dev/min-count]: -3 must be at least 1",
        ),
        (
            {POLICY_ANNOTATION: "foo"},
            4,
            'metadata.annotations[phalanx.dev/policy]: "foo" is not one of gang, basic',
        ),
        (
            {POLICY_ANNOTATION: "Gang"},
            4,
            'metadata.annotations[phalanx.dev/policy]: "Gang" is not one of gang, basic',
        ),
        (
            {TOPOLOGY_KEY_ANNOTATION: "bad key!"},
            4,
            'metadata.annotations[phalanx.dev/topology-key]: "bad key!" is not a valid label key: '
            "name part must consist of alphanumeric characters, '-', '_' or '.', and start and end with an "
            "alphanumeric character",
        ),
        (
            {TOPOLOGY_KEY_ANNOTATION: ""},
            4,
            'metadata.annotations[phalanx.dev/topology-key]: "" is not a valid label key: must not be empty',
        ),
        (
            {DISRUPTION_MODE_ANNOTATION: "some"},
            4,
            'metadata.annotations[phalanx.dev/disruption-mode]: "some" is not one of single, all',
        ),
        (
            {POLICY_ANNOTATION: "basic", MIN_COUNT_ANNOTATION: "2"},
            4,
            'metadata.annotations[phalanx.dev/min-count]: "2" only applies to policy gang, '
            "but phalanx.dev/policy is basic",
        ),
        (
            {POLICY_ANNOTATION: "basic", DISRUPTION_MODE_ANNOTATION: "all"},
            4,
            'metadata.annotations[phalanx.dev/disruption-mode]: "all" needs policy gang, '
            "but phalanx.dev/policy is basic",
        ),
        (
            {POLICY_ANNOTATION: "basic", TOPOLOGY_KEY_ANNOTATION: "rack"},
            4,
            'metadata.annotations[phalanx.dev/topology-key]: "rack" needs policy gang '
            "(pods placed one by one cannot be held in one domain), but phalanx.dev/policy is basic",
        ),
    ],
)
def test_rejections_are_one_clear_line(
    annotations: dict[str, str], parallelism: int | None, message: str
) -> None:
    error = rejection(annotations, parallelism)
    assert str(error) == message
    assert "\n" not in str(error)
    field = message.split("]: ")[0] + "]"
    annotation = field.removeprefix("metadata.annotations[").removesuffix("]")
    assert error.annotation == annotation
    assert error.fields[0] == field
    assert str(error).startswith(f"{field}: ")


def test_all_problems_are_reported_together() -> None:
    error = rejection(
        {
            POLICY_ANNOTATION: "foo",
            MIN_COUNT_ANNOTATION: "abc",
            TOPOLOGY_KEY_ANNOTATION: "a/b/c",
            DISRUPTION_MODE_ANNOTATION: "never",
            "phalanx.dev/preemption-policy": "sometimes",
        }
    )
    assert error.annotations == POLICY_ANNOTATIONS
    assert str(error).count("; ") >= 4
    assert str(error) == "; ".join(str(p) for p in error.problems)


def test_error_can_be_raised_with_one_problem_or_many() -> None:
    one = JobPolicyError(MIN_COUNT_ANNOTATION, "0 must be at least 1")
    assert (one.annotation, one.problem, str(one)) == (
        MIN_COUNT_ANNOTATION,
        "0 must be at least 1",
        "metadata.annotations[phalanx.dev/min-count]: 0 must be at least 1",
    )
    many = JobPolicyError.of([PolicyProblem("a", "x"), PolicyProblem("spec.b", "y")])
    assert str(many) == "metadata.annotations[a]: x; spec.b: y"
    assert isinstance(many, ValueError)


@given(st.text(max_size=12))
def test_any_bad_min_count_is_blamed_on_min_count(value: str) -> None:
    stripped = value.strip()
    if stripped.lstrip("+-").isascii() and stripped.lstrip("+-").isdigit() and 1 <= int(stripped) <= 4:
        return  # a valid one
    error = rejection({MIN_COUNT_ANNOTATION: value})
    assert error.annotations == (MIN_COUNT_ANNOTATION,)


def test_a_job_policy_cannot_be_inconsistent() -> None:
    with pytest.raises(ValueError, match="min_count only applies to gang"):
        JobPolicy(policy="basic", min_count=2)
    with pytest.raises(ValueError, match="gang needs"):
        JobPolicy(policy="gang", min_count=5, parallelism=4)
    with pytest.raises(ValueError, match="needs policy gang"):
        JobPolicy(policy="basic", min_count=None, disruption_mode="all")
    with pytest.raises(ValueError, match="label key"):
        JobPolicy(topology_key="no good")


# --- upstream spec.scheduling


def test_upstream_scheduling_of_a_gang() -> None:
    policy = JobPolicy(
        min_count=3, topology_key="topology.kubernetes.io/zone", disruption_mode="all", parallelism=4
    )
    assert upstream_scheduling(policy) == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
        "disruptionMode": {"all": {}},
    }


def test_upstream_scheduling_of_basic() -> None:
    assert upstream_scheduling(parse_job_policy(job({POLICY_ANNOTATION: "basic"}))) == {
        "schedulingPolicy": {"basic": {}},
        "disruptionMode": {"single": {}},
    }


def test_upstream_defaults_differ_from_ours() -> None:
    """Upstream: no spec.scheduling means basic. Phalanx: no annotations means gang."""
    assert from_upstream_scheduling(None, parallelism=4).policy == "basic"
    assert parse_job_policy(job()).policy == "gang"
    assert from_upstream_scheduling({"schedulingPolicy": {"gang": {}}}, parallelism=4).min_count == 4


_topology_keys = st.sampled_from(
    [None, "zone", "topology.kubernetes.io/zone", "example.com/rack_1", "kubernetes.io/hostname"]
)


@st.composite
def valid_jobs(draw: st.DrawFn) -> dict[str, Any]:
    parallelism = draw(st.one_of(st.none(), st.integers(0, 64)))
    annotations: dict[str, str] = {}
    policy = draw(st.sampled_from([None, "gang", "basic"]))
    if policy is not None:
        annotations[POLICY_ANNOTATION] = policy
    if policy != "basic" and parallelism != 0 and draw(st.booleans()):
        annotations[MIN_COUNT_ANNOTATION] = str(draw(st.integers(1, parallelism or 1)))
    topology_key = draw(_topology_keys) if policy != "basic" else None
    if topology_key is not None:
        annotations[TOPOLOGY_KEY_ANNOTATION] = topology_key
    modes = [None, "single"] if policy == "basic" else [None, "single", "all"]
    mode = draw(st.sampled_from(modes))
    if mode is not None:
        annotations[DISRUPTION_MODE_ANNOTATION] = mode
    priority_class = draw(st.sampled_from([None, "high", "batch-low"]))
    return job(annotations, parallelism, priority_class)


@given(valid_jobs())
def test_valid_annotations_parse_and_round_trip_through_upstream(body: dict[str, Any]) -> None:
    policy = parse_job_policy(body)
    spec = body["spec"]
    again = from_upstream_scheduling(
        upstream_scheduling(policy),
        parallelism=spec.get("parallelism"),
        priority_class_name=spec["template"]["spec"].get("priorityClassName"),
    )
    assert again == policy


@given(valid_jobs())
def test_valid_policies_round_trip_through_annotations(body: dict[str, Any]) -> None:
    policy = parse_job_policy(body)
    body["metadata"]["annotations"] = annotations_for(policy)
    assert parse_job_policy(body) == policy


def test_a_running_job_scaled_below_its_min_count_clamps_the_gang_instead_of_failing() -> None:
    body = job({MIN_COUNT_ANNOTATION: "4"}, 4)
    body["spec"]["parallelism"] = 0  # drained
    with pytest.raises(JobPolicyError, match="greater than parallelism 0"):
        parse_job_policy(body)  # at creation: refused
    assert parse_job_policy(body, running=True).min_count == 1
    body["spec"]["parallelism"] = 2
    assert parse_job_policy(body, running=True).min_count == 2


def test_the_preemption_policy_annotation() -> None:
    from phalanx.api.keys import PREEMPTION_POLICY_ANNOTATION

    assert parse_job_policy(job({})).preemption_policy is None
    policy = parse_job_policy(job({PREEMPTION_POLICY_ANNOTATION: "Never"}))
    assert policy.preemption_policy == "Never"
    assert annotations_for(policy)[PREEMPTION_POLICY_ANNOTATION] == "Never"
    with pytest.raises(JobPolicyError, match=r'phalanx\.dev/preemption-policy\]: "never" is not one of'):
        parse_job_policy(job({PREEMPTION_POLICY_ANNOTATION: "never"}))


def test_the_on_scale_up_annotation() -> None:
    from phalanx.api.keys import ON_SCALE_UP_ANNOTATION

    assert parse_job_policy(job({})).on_scale_up == "wait"
    assert parse_job_policy(job({ON_SCALE_UP_ANNOTATION: " wait "})).on_scale_up == "wait"
    policy = parse_job_policy(job({ON_SCALE_UP_ANNOTATION: "requeue"}))
    assert policy.on_scale_up == "requeue"
    assert annotations_for(policy)[ON_SCALE_UP_ANNOTATION] == "requeue"
    assert ON_SCALE_UP_ANNOTATION not in annotations_for(parse_job_policy(job({})))
    wrong = rejection({ON_SCALE_UP_ANNOTATION: "Requeue"})
    assert str(wrong) == (
        'metadata.annotations[phalanx.dev/on-scale-up]: "Requeue" is not one of wait, requeue'
    )
    basic = rejection({POLICY_ANNOTATION: "basic", ON_SCALE_UP_ANNOTATION: "requeue"})
    assert str(basic) == (
        'metadata.annotations[phalanx.dev/on-scale-up]: "requeue" needs policy gang (a basic group\'s pods '
        "are placed one by one, so there is no whole gang to requeue), but phalanx.dev/policy is basic"
    )
    assert (
        parse_job_policy(job({POLICY_ANNOTATION: "basic", ON_SCALE_UP_ANNOTATION: "wait"})).on_scale_up
        == "wait"
    )
    with pytest.raises(ValueError, match="on-scale-up requeue needs policy gang"):
        JobPolicy(policy="basic", min_count=None, on_scale_up="requeue")
