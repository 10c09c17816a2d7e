"""Kopf's diff-base storage for watch-only registries (watch/registry.py WatchOnlyDiffBase): what it may skip
rests on build_registry registering no change-detecting handler."""

from __future__ import annotations

import kopf
import pytest
from testkit import StaticContext

from phalanx.controller.watch.registry import WatchOnlyDiffBase, build_registry

JOB = kopf.Body(
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "labels": {"a": "b"}, "annotations": {"x": "y"}},
        "spec": {"parallelism": 8, "template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {"active": 8},
    }
)


def test_the_registry_has_only_watching_admission_and_activity_handlers() -> None:
    registry = build_registry(StaticContext())
    assert registry._watching.get_all_handlers()
    assert registry._webhooks.get_all_handlers()
    assert not registry._changing.get_all_handlers()  # on.create/update/delete/resume/field
    assert not registry._spawning.get_all_handlers()  # daemons, timers
    assert not registry._indexing.get_all_handlers()


def test_it_keeps_no_essence_and_refuses_to_store_one() -> None:
    storage = WatchOnlyDiffBase()
    assert storage.build(body=JOB) == {}
    assert storage.build(body=JOB, extra_fields=["status.active"]) == {}
    assert storage.fetch(body=JOB) is None
    with pytest.raises(RuntimeError, match="change-detecting handler"):
        storage.store(body=JOB, patch=kopf.Patch(), essence=kopf.BodyEssence())


def test_kopfs_own_storage_would_deep_copy_the_body_on_every_event() -> None:
    """What it saves: Kopf's default builds the essence (spec, labels, annotations) from a deep copy."""
    essence = kopf.AnnotationsDiffBaseStorage().build(body=JOB)
    assert essence["spec"] == JOB["spec"] and essence["spec"] is not JOB["spec"]
