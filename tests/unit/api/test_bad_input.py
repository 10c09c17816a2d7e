"""Bad input everywhere: every kind of bad Job key or hand-written Workload field, refused by the function the
webhook runs with a message naming the field; and fuzzing: any body is accepted or refused, never a crash.

The CRD schema's own refusals (types, ranges, unions, CEL) are the apiserver's, and
tests/integration/test_bad_input.py asserts its words. Here, the pure functions behind the webhooks.
"""

from __future__ import annotations

import copy
import string
from typing import Any

import kopf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.api import keys
from phalanx.api.job_policy import JobPolicy, JobPolicyError, key_problems, parse_job_policy
from phalanx.api.owned import OWNER_UID_LABEL
from phalanx.api.podgroup import PodGroupSpec
from phalanx.api.suggest import closest, did_you_mean, edit_distance
from phalanx.api.workload import WorkloadSpec, workload_problems
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.watch.webhooks import Webhooks


class _Context:
    """The webhooks' context without a process: an empty cache, every namespace managed."""

    cache = ClusterCache()
    kube: Kube | None = None
    cache_primed = False
    scheduler_names = ("default-scheduler",)

    def watches(self, namespace: str) -> bool:
        return True

    def listed(self, kind: str) -> None:
        pass

    async def outside(self, kind: str, body: Any) -> None:
        pass


_HOOKS = Webhooks(_Context())
gate_job = _HOOKS.gate_job
validate_job_update = _HOOKS.validate_job_update
validate_pod_group_update = _HOOKS.validate_pod_group_update
validate_workload = _HOOKS.validate_workload

MANAGED = {keys.MANAGED_LABEL: "true"}


def job(
    annotations: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    parallelism: Any = 4,
    **pod_spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": MANAGED if labels is None else labels,
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": 4,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}], **pod_spec}},
        },
    }


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(kopf.AdmissionError) as caught:
        gate_job(body=kopf.Body(body), patch=kopf.Patch())
    return str(caught.value)


# ---------------------------------------------------------------------- the kinds, at Job creation
# (kind, Job, the field the message must start with, words it must hold)
JOB_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "min-count not an integer",
        job({keys.MIN_COUNT_ANNOTATION: "four"}),
        "metadata.annotations[phalanx.dev/min-count]",
        '"four" is not an integer',
    ),
    (
        "min-count below 1",
        job({keys.MIN_COUNT_ANNOTATION: "0"}),
        "metadata.annotations[phalanx.dev/min-count]",
        "0 must be at least 1",
    ),
    (
        "min-count above parallelism",
        job({keys.MIN_COUNT_ANNOTATION: "5"}),
        "metadata.annotations[phalanx.dev/min-count]",
        "5 is greater than parallelism 4",
    ),
    (
        "min-count above completions",
        {
            **job({keys.MIN_COUNT_ANNOTATION: "3"}),
            "spec": {**job()["spec"], "completions": 2},
        },
        "metadata.annotations[phalanx.dev/min-count]",
        "3 is greater than completions 2",
    ),
    (
        "min-count with policy basic",
        job({keys.POLICY_ANNOTATION: "basic", keys.MIN_COUNT_ANNOTATION: "2"}),
        "metadata.annotations[phalanx.dev/min-count]",
        "only applies to policy gang",
    ),
    (
        "policy not gang or basic",
        job({keys.POLICY_ANNOTATION: "Gang"}),
        "metadata.annotations[phalanx.dev/policy]",
        '"Gang" is not one of gang, basic',
    ),
    (
        "topology key with bad syntax",
        job({keys.TOPOLOGY_KEY_ANNOTATION: "zone/a/b"}),
        "metadata.annotations[phalanx.dev/topology-key]",
        "is not a valid label key: must contain at most one '/'",
    ),
    (
        "topology key too long",
        job({keys.TOPOLOGY_KEY_ANNOTATION: "x" * 64}),
        "metadata.annotations[phalanx.dev/topology-key]",
        "name part must be at most 63 characters",
    ),
    (
        "topology key with policy basic",
        job({keys.POLICY_ANNOTATION: "basic", keys.TOPOLOGY_KEY_ANNOTATION: "rack"}),
        "metadata.annotations[phalanx.dev/topology-key]",
        "needs policy gang",
    ),
    (
        "disruption mode not single or all",
        job({keys.DISRUPTION_MODE_ANNOTATION: "All"}),
        "metadata.annotations[phalanx.dev/disruption-mode]",
        '"All" is not one of single, all',
    ),
    (
        "disruption mode all with policy basic",
        job({keys.POLICY_ANNOTATION: "basic", keys.DISRUPTION_MODE_ANNOTATION: "all"}),
        "metadata.annotations[phalanx.dev/disruption-mode]",
        "needs policy gang",
    ),
    (
        "preemption policy not a known one",
        job({keys.PREEMPTION_POLICY_ANNOTATION: "never"}),
        "metadata.annotations[phalanx.dev/preemption-policy]",
        '"never" is not one of PreemptLowerPriority, Never',
    ),
    (
        "preemption policy with policy basic",
        job({keys.POLICY_ANNOTATION: "basic", keys.PREEMPTION_POLICY_ANNOTATION: "Never"}),
        "metadata.annotations[phalanx.dev/preemption-policy]",
        "only applies to policy gang",
    ),
    (
        "on-scale-up other than wait/requeue",
        job({keys.ON_SCALE_UP_ANNOTATION: "restart"}),
        "metadata.annotations[phalanx.dev/on-scale-up]",
        '"restart" is not one of wait, requeue',
    ),
    (
        "on-scale-up requeue with policy basic",
        job({keys.POLICY_ANNOTATION: "basic", keys.ON_SCALE_UP_ANNOTATION: "requeue"}),
        "metadata.annotations[phalanx.dev/on-scale-up]",
        '"requeue" needs policy gang',
    ),
    (
        "unknown phalanx.dev/ annotation, close to a known one",
        job({"phalanx.dev/topolgy-key": "topology.kubernetes.io/zone"}),
        "metadata.annotations[phalanx.dev/topolgy-key]",
        "unknown Phalanx annotation; did you mean phalanx.dev/topology-key?",
    ),
    (
        "unknown phalanx.dev/ annotation, close to none",
        job({"phalanx.dev/gang-timeout": "30s"}),
        "metadata.annotations[phalanx.dev/gang-timeout]",
        "unknown Phalanx annotation; the known annotations are phalanx.dev/policy, phalanx.dev/min-count",
    ),
    (
        "unknown phalanx.dev/ label",
        job(labels={**MANAGED, "phalanx.dev/polcy": "gang"}),
        "metadata.labels[phalanx.dev/polcy]",
        "unknown Phalanx label; did you mean phalanx.dev/policy (an annotation)?",
    ),
    (
        "an annotation written as a label",
        job(labels={**MANAGED, keys.MIN_COUNT_ANNOTATION: "2"}),
        "metadata.labels[phalanx.dev/min-count]",
        "is an annotation, not a label",
    ),
    (
        "the managed label written as an annotation",
        job({keys.MANAGED_LABEL: "true"}),
        "metadata.annotations[phalanx.dev/managed]",
        "is a label, not an annotation",
    ),
    (
        "a misspelt prefix",
        job({"phalanx.io/min-count": "2"}),
        "metadata.annotations[phalanx.io/min-count]",
        "Phalanx reads phalanx.dev/ keys only, so this one is ignored; did you mean phalanx.dev/min-count?",
    ),
    (
        "managed label with a bad value",
        job(labels={keys.MANAGED_LABEL: "True"}),
        "metadata.labels[phalanx.dev/managed]",
        '"True" is not one of true, false (values are case-sensitive',
    ),
    (
        "a key only Phalanx writes",
        job({keys.REQUEUED_ANNOTATION: "preempted by x"}),
        "metadata.annotations[phalanx.dev/requeued]",
        "is written by Phalanx",
    ),
    (
        "a gang of pods bound by hand",
        job(nodeName="n1"),
        "spec.template.spec.nodeName",
        "must not be set for a gang",
    ),
    (
        "min-count of more digits than Python reads (4300)",
        job({keys.MIN_COUNT_ANNOTATION: "9" * 5000}),
        "metadata.annotations[phalanx.dev/min-count]",
        '"999999999999999999999999..." (5000 digits) is out of range: more digits than a 32-bit integer has',
    ),
    (
        "slice-size of more digits than Python reads (4300)",
        job({keys.SLICE_SIZE_ANNOTATION: "1" * 5000, keys.SLICE_TOPOLOGY_KEY_ANNOTATION: "rack"}),
        "metadata.annotations[phalanx.dev/slice-size]",
        "(5000 digits) is out of range",
    ),
    (
        "a system PriorityClass (above what a PodGroup's priority may be)",
        job(priorityClassName="system-cluster-critical"),
        "spec.template.spec.priorityClassName",
        '"system-cluster-critical" is a system PriorityClass, whose value is above 1000000000',
    ),
    (
        "a system PriorityClass on a basic Job (its PodGroup carries the priority too)",
        job({keys.POLICY_ANNOTATION: "basic"}, priorityClassName="system-node-critical"),
        "spec.template.spec.priorityClassName",
        '"system-node-critical" is a system PriorityClass',
    ),
]


@pytest.mark.parametrize(("kind", "body", "field", "words"), JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_every_kind_of_bad_job_is_refused_naming_its_field(
    kind: str, body: dict[str, Any], field: str, words: str
) -> None:
    message = refusal(body)
    assert message.startswith(f"{field}: "), message
    assert words in message, message
    assert "\n" not in message


def test_the_kinds_are_distinct_and_there_are_enough() -> None:
    messages = {refusal(copy.deepcopy(body)) for _, body, _, _ in JOB_CASES}
    assert len(messages) == len(JOB_CASES) >= 20


def test_every_problem_of_a_job_is_named_at_once() -> None:
    message = refusal(
        job(
            {"phalanx.dev/mincount": "2", keys.POLICY_ANNOTATION: "fifo"},
            labels={keys.MANAGED_LABEL: "yes"},
        )
    )
    fields = [part.split(": ")[0] for part in message.split("; ") if part.startswith("metadata.")]
    assert fields == [
        "metadata.annotations[phalanx.dev/mincount]",
        "metadata.labels[phalanx.dev/managed]",
        "metadata.annotations[phalanx.dev/policy]",
    ]


def test_an_integer_of_leading_zeros_beyond_pythons_limit_is_read_as_its_value() -> None:
    patch = kopf.Patch()
    gate_job(body=kopf.Body(job({keys.MIN_COUNT_ANNOTATION: "0" * 5000 + "2"})), patch=patch)
    assert parse_job_policy(job({keys.MIN_COUNT_ANNOTATION: "0" * 5000 + "2"})).min_count == 2


def test_a_job_labelled_false_is_left_alone_and_true_with_known_keys_passes() -> None:
    patch = kopf.Patch()
    gate_job(
        body=kopf.Body(job({"phalanx.dev/whatever": "x"}, labels={keys.MANAGED_LABEL: "false"})), patch=patch
    )
    assert not patch
    gate_job(body=kopf.Body(job({keys.MIN_COUNT_ANNOTATION: "2", "example.com/team": "ml"})), patch=patch)
    assert patch["spec"]["template"]["spec"]["schedulingGates"] == [{"name": keys.ADMISSION_GATE}]


def test_a_key_phalanx_writes_is_fine_once_the_job_runs() -> None:
    body = job({keys.REQUEUED_ANNOTATION: "preempted by x"})
    assert key_problems(body, creating=False) == []
    assert parse_job_policy(body, running=True).is_gang


# ---------------------------------------------------------------------- edits of a running Job
def update(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    try:
        validate_job_update(body=kopf.Body(new), old=kopf.Body(old))
    except kopf.AdmissionError as e:
        return str(e)
    return None


def test_an_edit_adding_a_misspelt_key_is_refused_but_old_mistakes_do_not_block_edits() -> None:
    old = job()
    message = update(old, job({"phalanx.dev/min-cout": "2"}))
    assert message is not None
    assert message.startswith(
        "metadata.annotations[phalanx.dev/min-cout]: unknown Phalanx annotation; did you"
    )
    # Created around the webhook with a bad key: Phalanx's own suspend (and other edits) still go through.
    legacy = job({"phalanx.dev/min-cout": "2"})
    suspended = copy.deepcopy(legacy)
    suspended["spec"]["suspend"] = True
    suspended["metadata"]["annotations"][keys.REQUEUED_ANNOTATION] = "below its minCount"
    assert update(legacy, suspended) is None


def test_an_edit_of_a_fixed_setting_or_to_a_bad_label_value_is_refused() -> None:
    message = update(job(), job({keys.TOPOLOGY_KEY_ANNOTATION: "rack"}))
    assert message is not None and message.startswith(
        "metadata.annotations[phalanx.dev/topology-key]: cannot"
    )
    message = update(job(), job(labels={keys.MANAGED_LABEL: "yes"}))
    assert message is not None and message.startswith("metadata.labels[phalanx.dev/managed]: ")
    assert update(job(), job(labels={})) is None  # released from Phalanx


# ---------------------------------------------------------------------- hand-written CRD fields
def _template(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": 2}}, **extra}


# (kind, Workload spec, the message)
WORKLOAD_CASES: list[tuple[str, Any, str]] = [
    (
        "template name used twice across the tree",
        {
            "compositePodGroupTemplates": [
                {
                    "name": "top",
                    "schedulingPolicy": {"basic": {}},
                    "podGroupTemplates": [_template("top")],
                }
            ]
        },
        "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name: template name 'top' is used twice "
        "(first at compositePodGroupTemplates[0]): names must be unique across the Workload",
    ),
    (
        "templates with different priorities",
        {"podGroupTemplates": [_template("a"), _template("b", priority=5)]},
        "spec.podGroupTemplates[1]: priorityClassName None and priority 5 differ from podGroupTemplates[0]'s "
        "(None, None): all templates must have the same priorityClassName and priority",
    ),
    (
        "both template lists",
        {"podGroupTemplates": [_template("a")], "compositePodGroupTemplates": []},
        "spec.compositePodGroupTemplates: List should have at least 1 item",
    ),
    (
        "disruption mode all with a basic template",
        {"podGroupTemplates": [_template("a", schedulingPolicy={"basic": {}}, disruptionMode={"all": {}})]},
        "spec.podGroupTemplates[0]: disruptionMode all needs schedulingPolicy gang",
    ),
    (
        "a template name that is no DNS label",
        {"podGroupTemplates": [_template("Big_Name")]},
        'spec.podGroupTemplates[0].name: "Big_Name" is not a valid DNS label',
    ),
    ("no spec", None, "spec: Required value"),
]


@pytest.mark.parametrize(("kind", "spec", "message"), WORKLOAD_CASES, ids=[c[0] for c in WORKLOAD_CASES])
def test_workload_rules_the_schema_cannot_express_are_refused_by_the_webhook(
    kind: str, spec: Any, message: str
) -> None:
    body = {"apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "Workload", "metadata": {"name": "w"}}
    if spec is not None:
        body["spec"] = spec
    with pytest.raises(kopf.AdmissionError) as caught:
        validate_workload(body=kopf.Body(body))
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_valid_workload_passes_the_webhook() -> None:
    spec = {"podGroupTemplates": [_template("a", priority=5), _template("b", priority=5)]}
    validate_workload(body=kopf.Body({"spec": spec}))
    assert workload_problems(spec) == []


def test_a_basic_pod_group_cannot_be_disrupted_all_at_once() -> None:
    with pytest.raises(ValueError, match="disruptionMode all needs schedulingPolicy gang"):
        PodGroupSpec.model_validate({"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}})
    spec = PodGroupSpec.model_validate(
        {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}}
    )
    assert spec.disruption_mode.all is not None


# ---------------------------------------------------------------------- did-you-mean
@given(st.sampled_from(keys.JOB_ANNOTATIONS[:-1] + keys.JOB_LABELS), st.data())
def test_one_slip_in_a_known_key_is_traced_back_to_it(key: str, data: st.DataObject) -> None:
    name = key.removeprefix("phalanx.dev/")
    i = data.draw(st.integers(0, len(name) - 1))
    slip = data.draw(
        st.sampled_from(
            [
                name[:i] + name[i + 1 :],  # a letter dropped
                name[:i] + "x" + name[i + 1 :],  # one replaced
                name[:i] + name[i : i + 2][::-1] + name[i + 2 :],  # two swapped
            ]
        )
    )
    if slip == name:
        return
    others = [k.removeprefix("phalanx.dev/") for k in keys.JOB_ANNOTATIONS + keys.JOB_LABELS]
    assert closest(slip, others) == name
    problems = key_problems(job({f"phalanx.dev/{slip}": "x"}))
    assert [p.annotation for p in problems] == [f"phalanx.dev/{slip}"]
    assert f"did you mean {key}" in problems[0].problem


def test_edit_distance_counts_swaps_once() -> None:
    assert edit_distance("topolgy", "topology") == 1
    assert edit_distance("mni", "min") == 1
    assert edit_distance("", "abc") == 3
    assert did_you_mean("min_count", ["min-count"]) == "; did you mean min-count?"
    assert did_you_mean("zebra", ["min-count"]) == ""


# ---------------------------------------------------------------------- fuzzing: accepted or refused
_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=12)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_key_names = st.one_of(
    st.sampled_from([*keys.JOB_ANNOTATIONS, *keys.JOB_LABELS, "phalanx.io/min-count", "phalnx.dev/policy"]),
    st.builds(lambda s: f"phalanx.dev/{s}", st.text(string.ascii_letters + "-_.", max_size=14)),
    st.text(max_size=20),
)
_values = st.one_of(
    st.sampled_from(
        ["gang", "basic", "single", "all", "Never", "PreemptLowerPriority", "true", "false", "4"]
    ),
    st.integers(-5, 10).map(str),
    st.sampled_from(["topology.kubernetes.io/zone", "a/b/c", "", " 2 "]),
    _json,
)
_maps = st.one_of(st.dictionaries(_key_names, _values, max_size=5), _json)
_jobs = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.one_of(
            st.fixed_dictionaries(
                {"labels": st.one_of(st.just(MANAGED), _maps)},
                optional={"annotations": _maps, "namespace": _json},
            ),
            _json,
        ),
        "spec": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "parallelism": st.one_of(st.integers(-2, 9), _json),
                    "completions": st.one_of(st.integers(-2, 9), _json),
                    "template": st.one_of(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "spec": st.one_of(
                                    st.fixed_dictionaries(
                                        {},
                                        optional={
                                            "nodeName": _json,
                                            "priorityClassName": _json,
                                            "schedulingGates": _json,
                                        },
                                    ),
                                    _json,
                                )
                            },
                        ),
                        _json,
                    ),
                },
            ),
            _json,
        ),
    },
)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _named(message: str) -> None:
    assert message, "a refusal always says why"
    assert message.startswith(("metadata", "spec")), message


@FUZZ
@given(_jobs, st.booleans())
def test_the_annotation_parser_accepts_or_refuses_any_job(body: dict[str, Any], running: bool) -> None:
    try:
        policy = parse_job_policy(body, running=running)
    except JobPolicyError as e:
        assert e.problems and all(p.problem for p in e.problems)
        assert all(f.startswith(("metadata", "spec")) for f in e.fields)
        return
    assert isinstance(policy, JobPolicy)


@FUZZ
@given(_jobs)
def test_the_job_webhook_accepts_patches_or_refuses_any_body(body: dict[str, Any]) -> None:
    patch = kopf.Patch()
    try:
        gate_job(body=kopf.Body(body), patch=patch, warnings=[])
    except kopf.AdmissionError as e:
        _named(str(e))
        return
    gates = patch.get("spec", {}).get("template", {}).get("spec", {}).get("schedulingGates")
    assert gates is None or {"name": keys.ADMISSION_GATE} in gates


@FUZZ
@given(_jobs, _jobs)
def test_the_job_update_webhook_accepts_or_refuses_any_pair(old: dict[str, Any], new: dict[str, Any]) -> None:
    try:
        validate_job_update(body=kopf.Body(new), old=kopf.Body(old))
    except kopf.AdmissionError as e:
        _named(str(e))


_specs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "schedulingPolicy": st.one_of(
                st.fixed_dictionaries(
                    {}, optional={"gang": st.one_of(st.just({"minCount": 2}), _json), "basic": _json}
                ),
                _json,
            ),
            "priority": _json,
        },
    ),
    _json,
)


@FUZZ
@given(_specs, _specs, st.sampled_from(["", keys.JOB_UID_LABEL, OWNER_UID_LABEL]))
def test_the_pod_group_webhook_accepts_or_refuses_any_pair(old: Any, new: Any, label: str) -> None:
    labels = {label: "uid-1"} if label else {}
    body = {"metadata": {"name": "g", "labels": labels}, "spec": new}
    try:
        validate_pod_group_update(body=kopf.Body(body), old=kopf.Body({"spec": old}))
    except kopf.AdmissionError as e:
        assert str(e).startswith("spec") and ": PodGroup g " in str(e), str(e)
        assert label, "a hand-made PodGroup stays editable"


_templates = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "top", "Bad_Name"])},
        optional={
            "schedulingPolicy": st.one_of(st.just({"gang": {"minCount": 1}}), st.just({"basic": {}}), _json),
            "priority": st.one_of(st.integers(-3, 3), _json),
            "priorityClassName": st.sampled_from(["high", "low"]),
            "disruptionMode": st.one_of(st.just({"all": {}}), st.just({"single": {}}), _json),
        },
    ),
    max_size=3,
)
_workload_specs = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "podGroupTemplates": _templates,
            "compositePodGroupTemplates": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["top", "a", "c"]), "schedulingPolicy": st.just({"basic": {}})},
                    optional={"podGroupTemplates": _templates},
                ),
                max_size=2,
            ),
        },
    ),
    _json,
)


@FUZZ
@given(_workload_specs)
def test_the_workload_webhook_accepts_or_refuses_any_spec(spec: Any) -> None:
    problems = workload_problems(spec)
    assert all(p.startswith("spec") for p in problems), problems
    try:
        validate_workload(body=kopf.Body({"spec": spec}))
    except kopf.AdmissionError as e:
        assert str(e) == "; ".join(problems)
        return
    assert not problems
    WorkloadSpec.model_validate(spec)  # accepted means valid
