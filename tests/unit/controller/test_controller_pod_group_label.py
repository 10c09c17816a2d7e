"""Pods that join a PodGroup by the label phalanx.dev/pod-group: the webhook that gates them at creation, how
their records read, and what today's plan does with them (nothing: they wait gated for the engine)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from testkit import StaticContext

from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.loop.scheduler import plan_input
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan import plan
from phalanx.controller.watch.registry import GATE_POD_ID, build_registry
from phalanx.controller.watch.webhooks import Webhooks

CONTEXT = StaticContext()

GATE = {"name": "phalanx.dev/admission"}


def pod(
    name: str = "p0",
    namespace: str = "ml",
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": {"phalanx.dev/pod-group": "slices-0", **(labels or {})},
            **({"ownerReferences": owners} if owners else {}),
        },
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def gate(body: dict[str, Any]) -> kopf.Patch:
    patch = kopf.Patch()
    Webhooks(CONTEXT).gate_pod(body=kopf.Body(body), patch=patch)
    return patch


@pytest.fixture(autouse=True)
def all_namespaces() -> Iterator[None]:
    CONTEXT.namespaces = ()
    yield
    CONTEXT.namespaces = ()


def test_a_labelled_pod_is_gated_keeping_the_gates_it_had() -> None:
    assert gate(pod())["spec"]["schedulingGates"] == [GATE]
    other = {"name": "example.com/quota"}
    assert gate(pod(schedulingGates=[other]))["spec"]["schedulingGates"] == [other, GATE]
    assert not gate(pod(schedulingGates=[GATE])), "already gated: nothing to patch"


def test_a_label_that_cannot_name_a_podgroup_is_refused() -> None:
    with pytest.raises(kopf.AdmissionError) as error:
        gate(pod(labels={"phalanx.dev/pod-group": "Slices_0"}))
    assert str(error.value).startswith("label phalanx.dev/pod-group: 'Slices_0' is not a PodGroup name: ")


def test_a_pod_bound_by_hand_cannot_join() -> None:
    with pytest.raises(kopf.AdmissionError, match=r"spec\.nodeName is set: a pod bound by hand cannot join"):
        gate(pod(nodeName="n1"))


def test_pods_of_jobs_kube_system_and_other_operators_namespaces_are_left_alone() -> None:
    job_owner = [{"kind": "Job", "name": "j", "uid": "j", "controller": True}]
    assert not gate(pod(owners=job_owner))
    assert not gate(pod(namespace="kube-system"))
    CONTEXT.namespaces = ("research",)
    assert not gate(pod(namespace="ml"))
    assert gate(pod(namespace="research"))


def test_the_webhook_selects_labelled_pods_no_job_made() -> None:
    import kopf._core.engines.admission as admission

    (handler,) = [
        h for h in build_registry(StaticContext())._webhooks.get_all_handlers() if h.id == GATE_POD_ID
    ]
    assert not handler.ignore_failures and list(handler.operations or []) == ["CREATE"]
    assert admission._build_labels_selector(handler.labels) == {
        "matchExpressions": [
            {"key": "phalanx.dev/pod-group", "operator": "Exists"},
            {"key": "batch.kubernetes.io/controller-uid", "operator": "DoesNotExist"},
        ]
    }


def test_a_pod_joins_the_group_its_label_names_unless_a_job_made_it() -> None:
    record = PodRecord.from_body(pod(schedulingGates=[GATE]))
    assert record.joins_group == "slices-0" and record.gated and not record.job_uid
    job_pod = PodRecord.from_body(pod(labels={"batch.kubernetes.io/controller-uid": "j"}))
    assert job_pod.job_uid == "j" and job_pod.joins_group == "", "a Job's pod belongs to its Job's group"
    assert PodRecord.from_body(pod(labels={"phalanx.dev/pod-group": ""})).joins_group == ""


def test_the_cache_indexes_labelled_pods_by_group_and_follows_relabels_and_deletes() -> None:
    cache = ClusterCache()
    cache.upsert("Pod", pod("a"))
    cache.upsert("Pod", pod("b"))
    cache.upsert("Pod", pod("c", labels={"batch.kubernetes.io/controller-uid": "j"}))
    assert sorted(p.name for p in cache.pods_joining("ml", "slices-0")) == ["a", "b"]
    cache.upsert("Pod", pod("b", labels={"phalanx.dev/pod-group": "slices-1"}))
    assert [p.name for p in cache.pods_joining("ml", "slices-0")] == ["a"]
    assert [p.name for p in cache.pods_joining("ml", "slices-1")] == ["b"]
    cache.delete("Pod", {"metadata": {"namespace": "ml", "name": "a", "uid": "uid-a"}})
    assert list(cache.pods_joining("ml", "slices-0")) == []
    assert "ml/slices-0" not in cache.pods_by_group_label


def test_todays_plan_leaves_gated_labelled_pods_alone() -> None:
    """No Job, so no JobState: nothing ungates, labels or releases them; they hold no capacity."""
    cache = ClusterCache()
    cache.upsert(
        "Node",
        {
            "metadata": {"name": "n1", "labels": {}},
            "status": {
                "allocatable": {"cpu": "8", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    cache.upsert("Pod", pod("a", schedulingGates=[GATE]))
    state = plan_input(cache)
    assert plan(state, dt.datetime(2026, 1, 1, tzinfo=dt.UTC)).actions == []
    assert cache.pods["ml/a"].usage_node == ""
