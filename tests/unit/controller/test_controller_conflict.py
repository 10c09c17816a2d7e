"""A write of ours applied with its answer lost: the watch then shows a version the cache takes for older than
its last write. A 409 on the next preconditioned decision says the cache is behind: the held-back event is
applied at once, instead of conflicting until the expectation lapses (30 s, seen in the API-fault soak)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, cast

from phalanx.api.status import Admission, Assignment
from phalanx.controller.apply.applier import Applier
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import RecordAdmission, UnitPlan
from phalanx.controller.model.refs import ObjectRef
from phalanx.kubeclient import ApiException


def group(version: str, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pg",
            "namespace": "ml",
            "uid": "u",
            "resourceVersion": version,
            "generation": 1,
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
        "status": status,
    }


class ConflictingKube:
    async def patch_status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise ApiException(status=409, reason="Conflict")


class Events:
    async def post(self, *args: Any) -> None:
        pass


ADMISSION = Admission(
    domain=None,
    assignments=[Assignment(pod="train-0", node="n1")],
    admitted_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
    attempt=0,
)


def test_a_conflict_applies_the_event_held_back_as_older() -> None:
    cache = ClusterCache()
    cache.upsert("PodGroup", group("5", {}), own_write=True)  # our last write whose answer came back
    recorded = group("7", {"admission": ADMISSION.to_api()})  # a later write of ours, answer lost
    cache.upsert("PodGroup", recorded)  # the watch shows it: taken for older than our write, held back
    assert cache.pod_groups.get("ml/pg").resource_version == "5"  # type: ignore[union-attr]

    ref = ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", "ml", "pg", "u")
    job = ObjectRef("batch/v1", "Job", "ml", "train", "j")
    applier = Applier(cache, cast(Kube, ConflictingKube()), Events())
    (result,) = asyncio.run(
        applier.apply([UnitPlan("ml/train", (RecordAdmission(ref, ADMISSION, "5"),), job)])
    )

    assert not result.ok and result.error.startswith("409")
    current = cache.pod_groups.get("ml/pg")
    assert current is not None and current.resource_version == "7"
    assert current.status.admission is not None  # the next pass finishes the recorded decision
