"""The Job webhook as a plain function: what it patches and what it rejects."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from phalanx.controller.handlers import gate_job


def job(annotations: dict[str, str] | None = None, **pod_spec: Any) -> kopf.Body:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "i"}], **pod_spec},
            },
        },
    }
    return kopf.Body(body)


def test_a_gang_job_gets_the_gate_keeping_what_it_had_and_no_label_in_its_template() -> None:
    patch = kopf.Patch()
    gate_job(body=job(schedulingGates=[{"name": "other.io/gate"}]), patch=patch)
    template = patch["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [
        {"name": "other.io/gate"},
        {"name": "phalanx.dev/admission"},
    ]
    # The opt-in label stays on the Job only: Job defaulting would copy it back from the template.
    assert "metadata" not in template


def test_a_basic_job_is_never_gated() -> None:
    patch = kopf.Patch()
    gate_job(body=job({"phalanx.dev/policy": "basic"}), patch=patch)
    assert not patch


def test_bad_annotations_are_rejected_with_every_problem_named() -> None:
    with pytest.raises(kopf.AdmissionError) as error:
        gate_job(body=job({"phalanx.dev/min-count": "9", "phalanx.dev/policy": "fifo"}), patch=kopf.Patch())
    assert "phalanx.dev/min-count" in str(error.value) and "phalanx.dev/policy" in str(error.value)


def test_a_gang_of_hand_bound_pods_is_rejected() -> None:
    with pytest.raises(kopf.AdmissionError, match=r"spec\.template\.spec\.nodeName: must not be set"):
        gate_job(body=job(nodeName="n1"), patch=kopf.Patch())


def test_a_priority_class_that_does_not_exist_is_a_warning_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from phalanx.controller import handlers
    from phalanx.controller.records import PriorityClassRecord

    monkeypatch.setattr(handlers.runtime.health, "cache_primed", True)
    monkeypatch.setattr(
        handlers.runtime.cache,
        "priority_classes",
        {"high": PriorityClassRecord.from_body({"metadata": {"name": "high"}, "value": 100})},
    )
    warnings: list[str] = []
    gate_job(body=job(priorityClassName="nope"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == [
        "spec.template.spec.priorityClassName: PriorityClass 'nope' does not exist: the Job controller "
        "cannot create the Job's pods until it does (the Priority admission plugin refuses them)"
    ]
    warnings.clear()
    gate_job(body=job(priorityClassName="high"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == []
    monkeypatch.setattr(handlers.runtime.health, "cache_primed", False)  # an empty cache proves nothing
    gate_job(body=job(priorityClassName="nope"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == []
