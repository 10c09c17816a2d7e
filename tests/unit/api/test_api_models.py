"""The API models read and write the same JSON as the apiserver, and reject what it rejects."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from phalanx.api.models import (
    CompositePodGroup,
    DisruptionMode,
    GangSchedulingPolicy,
    PodGroup,
    PodGroupSpec,
    PodGroupStatus,
    SchedulingPolicy,
    Workload,
    WorkloadSpec,
)

API_VERSION = "scheduling.phalanx.dev/v1beta1"
NOW = "2025-03-01T12:00:00Z"

POD_GROUP: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "PodGroup",
    "metadata": {"name": "train-6695f68766-train-pgt-0-655cb76fc6", "namespace": "ml"},
    "spec": {
        "workloadRef": {"workloadName": "train-6695f68766", "templateName": "train-pgt-0"},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
        "disruptionMode": {"all": {}},
        "priorityClassName": "high",
        "priority": 1000,
        "preemptionPolicy": "Never",
    },
    "status": {
        "conditions": [
            {
                "type": "PodGroupInitiallyScheduled",
                "status": "True",
                "observedGeneration": 1,
                "lastTransitionTime": NOW,
                "reason": "Scheduled",
                "message": "",
            },
            {
                "type": "Admitted",
                "status": "True",
                "lastTransitionTime": NOW,
                "reason": "Admitted",
                "message": "4 pods admitted in zone-a",
            },
        ],
        "phase": "Admitted",
        "policy": "Gang",
        "domain": "zone-a",
        "admission": {
            "domain": "zone-a",
            "assignments": [{"pod": "train-0", "node": "n1"}, {"pod": "train-1", "node": "n2"}],
            "admittedAt": NOW,
            "attempt": 0,
        },
        "scheduled": 2,
        "waiting": 2,
    },
}


def _template(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": 2}}, **extra}


def _composite(name: str, levels: int) -> dict[str, Any]:
    """A composite template with a leaf, nested ``levels`` composites deep."""
    template: dict[str, Any] = {
        "name": name,
        "schedulingPolicy": {"basic": {}},
        "podGroupTemplates": [_template(f"{name}-leaf")],
    }
    if levels > 1:
        template["compositePodGroupTemplates"] = [_composite(f"{name}-c", levels - 1)]
    return template


WORKLOAD: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "Workload",
    "metadata": {"name": "train-6695f68766"},
    "spec": {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
        "podGroupTemplates": [
            _template("train-pgt-0", disruptionMode={"single": {}}, preemptionPolicy="PreemptLowerPriority")
        ],
    },
}

COMPOSITE_WORKLOAD: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "Workload",
    "metadata": {"name": "lws"},
    "spec": {"compositePodGroupTemplates": [_composite("top", 3)]},
}

COMPOSITE_POD_GROUP: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "CompositePodGroup",
    "metadata": {"name": "lws-top"},
    "spec": {
        "parentCompositePodGroupName": "root",
        "workloadRef": {"workloadName": "lws", "templateName": "top"},
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "disruptionMode": {"single": {}},
        "preemptionPolicy": "PreemptLowerPriority",
    },
    "status": {"phase": "Pending", "policy": "Gang"},
}


@pytest.mark.parametrize(
    ("model", "document"),
    [
        (PodGroup, POD_GROUP),
        (Workload, WORKLOAD),
        (Workload, COMPOSITE_WORKLOAD),
        (CompositePodGroup, COMPOSITE_POD_GROUP),
    ],
    ids=["podgroup", "workload", "composite-workload", "compositepodgroup"],
)
def test_api_json_round_trips(model: type[BaseModel], document: dict[str, Any]) -> None:
    parsed = model.model_validate(document)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_none=True) == document


def test_marker_objects_stay_present_and_empty() -> None:
    spec = PodGroupSpec.model_validate({"schedulingPolicy": {"basic": {}}})
    assert spec.to_api()["schedulingPolicy"] == {"basic": {}}
    assert spec.to_api()["disruptionMode"] == {"single": {}}


def test_defaults_match_the_crd_defaults() -> None:
    spec = PodGroupSpec(scheduling_policy=SchedulingPolicy.of_gang(3))
    assert spec.to_api() == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "disruptionMode": {"single": {}},
        "preemptionPolicy": "PreemptLowerPriority",
    }


def test_defaults_are_not_shared_between_instances() -> None:
    first = PodGroupSpec(scheduling_policy=SchedulingPolicy.of_basic())
    second = PodGroupSpec(scheduling_policy=SchedulingPolicy.of_basic())
    assert first.disruption_mode is not second.disruption_mode


def test_fields_accept_python_names_and_api_names() -> None:
    assert GangSchedulingPolicy(min_count=2) == GangSchedulingPolicy.model_validate({"minCount": 2})


def test_null_and_unknown_fields_are_ignored_as_the_apiserver_prunes_them() -> None:
    spec = PodGroupSpec.model_validate(
        {"schedulingPolicy": {"basic": {"future": 1}, "gang": None}, "somethingNew": True}
    )
    assert spec.to_api()["schedulingPolicy"] == {"basic": {}}


def test_timestamps_are_aware_and_written_back_in_rfc3339() -> None:
    status = PodGroupStatus.model_validate(POD_GROUP["status"])
    assert status.admission is not None
    assert status.admission.admitted_at == datetime(2025, 3, 1, 12, tzinfo=UTC)
    assert status.to_api()["admission"]["admittedAt"] == NOW
    with pytest.raises(ValidationError, match="timezone"):
        PodGroupStatus.model_validate({"admission": {"admittedAt": "2025-03-01T12:00:00", "attempt": 0}})


def test_condition_lookup() -> None:
    status = PodGroupStatus.model_validate(POD_GROUP["status"])
    admitted = status.condition("Admitted")
    assert admitted is not None and admitted.reason == "Admitted"
    assert status.condition("DisruptionTarget") is None


def test_union_helpers() -> None:
    assert SchedulingPolicy.of_basic().to_api() == {"basic": {}}
    assert DisruptionMode.of_all().to_api() == {"all": {}}


def _with(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``document`` with the dotted ``path`` set to ``value``."""
    result = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = result
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return result


@pytest.mark.parametrize(
    ("model", "document", "message"),
    [
        (
            PodGroup,
            _with(POD_GROUP, "spec.schedulingPolicy", {"basic": {}, "gang": {"minCount": 1}}),
            "exactly one",
        ),
        (PodGroup, _with(POD_GROUP, "spec.schedulingPolicy", {}), "exactly one of basic or gang"),
        (
            PodGroup,
            _with(POD_GROUP, "spec.schedulingPolicy", {"gang": {"minCount": 0}}),
            "greater than or equal to 1",
        ),
        (
            PodGroup,
            _with(POD_GROUP, "spec.disruptionMode", {"single": {}, "all": {}}),
            "exactly one of single or all",
        ),
        (
            PodGroup,
            _with(POD_GROUP, "spec.schedulingConstraints", {"topology": [{"key": "a"}, {"key": "b"}]}),
            "at most 1 item",
        ),
        (
            PodGroup,
            _with(POD_GROUP, "spec.schedulingConstraints", {"topology": [{"key": "bad key!"}]}),
            "is not a valid label key",
        ),
        (PodGroup, _with(POD_GROUP, "spec.priority", 1_000_000_001), "less than or equal to 1000000000"),
        (PodGroup, _with(POD_GROUP, "spec.preemptionPolicy", "Sometimes"), "PreemptLowerPriority"),
        (PodGroup, _with(POD_GROUP, "spec.workloadRef.templateName", "Not_A_Label"), "not a valid DNS label"),
        (
            PodGroup,
            _with(_with(POD_GROUP, "spec.parentCompositePodGroupName", "p"), "spec.workloadRef", None),
            "workloadRef must be set",
        ),
        (PodGroup, _with(POD_GROUP, "status.phase", "Exploded"), "Pending"),
        (
            PodGroup,
            _with(POD_GROUP, "status.conditions.1.type", "PodGroupInitiallyScheduled"),
            "duplicate condition",
        ),
        (PodGroup, _with(POD_GROUP, "status.conditions.0.status", "Maybe"), "'True', 'False' or 'Unknown'"),
        (
            PodGroup,
            _with(POD_GROUP, "status.admission.assignments.1.pod", "train-0"),
            "duplicate assignment for pod",
        ),
        (
            Workload,
            _with(WORKLOAD, "spec.compositePodGroupTemplates", [_composite("c", 1)]),
            "exactly one of",
        ),
        (Workload, _with(WORKLOAD, "spec.podGroupTemplates", None), "exactly one of"),
        (Workload, _with(WORKLOAD, "spec.podGroupTemplates", []), "at least 1 item"),
        (
            Workload,
            _with(WORKLOAD, "spec.podGroupTemplates", [_template(f"t{i}") for i in range(9)]),
            "at most 8",
        ),
        (
            Workload,
            _with(WORKLOAD, "spec.podGroupTemplates", [_template("a"), _template("a")]),
            "'a' is used twice",
        ),
        (
            Workload,
            _with(WORKLOAD, "spec.podGroupTemplates", [_template("a"), _template("b", priority=5)]),
            "same priorityClassName and priority",
        ),
        (
            Workload,
            _with(COMPOSITE_WORKLOAD, "spec.compositePodGroupTemplates", [_composite("c", 4)]),
            "depth is 4",
        ),
        (
            Workload,
            _with(COMPOSITE_WORKLOAD, "spec.compositePodGroupTemplates.0.podGroupTemplates.0.name", "top-c"),
            "'top-c' is used twice",
        ),
        (
            Workload,
            _with(
                COMPOSITE_WORKLOAD,
                "spec.compositePodGroupTemplates",
                [{"name": "lonely", "schedulingPolicy": {"basic": {}}}],
            ),
            "needs at least one child",
        ),
        (CompositePodGroup, _with(COMPOSITE_POD_GROUP, "spec.workloadRef", None), "workloadRef"),
        (
            CompositePodGroup,
            _with(COMPOSITE_POD_GROUP, "spec.schedulingPolicy", {"gang": {"minCount": 2}}),
            "minGroupCount",
        ),
    ],
)
def test_invalid_objects_are_rejected_with_a_reason(
    model: type[BaseModel], document: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        model.model_validate(document)


def test_composite_templates_nest_three_levels() -> None:
    spec = WorkloadSpec.model_validate(COMPOSITE_WORKLOAD["spec"])
    levels = [level for _, level in spec.templates()]
    assert max(levels) == 4  # three composite levels, and leaves under the deepest one
