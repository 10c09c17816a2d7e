"""A Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) as Phalanx reads it: whether it is finished,
and the runtime patch through which its Phalanx label and annotations reach the JobSet Trainer makes.

Trainer always materialises a TrainJob as a JobSet named like it, but copies only its runtime's labels to
that JobSet. `spec.runtimePatches` is Trainer's door for other managers (Kueue's is
`kueue.x-k8s.io/manager`): an entry may patch the JobSet template's metadata. Phalanx's entry (manager
`phalanx.dev/manager`; Trainer refuses a manager that is not a domain-prefixed path) carries the managed
label and the JobSet annotations of the TrainJob, so the JobSet is gated and placed as any managed JobSet.
Trainer lets runtimePatches change only while the TrainJob is suspended: Phalanx writes its entry at
creation and never after.

The runtime a TrainJob refers to (`spec.runtimeRef`: a ClusterTrainingRuntime, or a TrainingRuntime of its
namespace) holds the JobSet template Trainer copies, pod template annotations and all: the TrainJob's
webhook reads it (watched; live when not seen yet) to refuse Kueue's Topology-Aware Scheduling annotations
there (`runtime_ref`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from phalanx.api import keys
from phalanx.api.jobset import JOBSET_ANNOTATIONS
from phalanx.bodies import items, mapping

API_GROUP: Final = "trainer.kubeflow.org"
API_VERSION: Final = f"{API_GROUP}/v1alpha1"
KIND: Final = "TrainJob"
PATCH_MANAGER: Final = "phalanx.dev/manager"
# The runtimes a TrainJob may refer to, by kind: their plural (a ClusterTrainingRuntime is cluster-scoped,
# a TrainingRuntime is in the TrainJob's namespace).
RUNTIME_PLURALS: Final = {
    "ClusterTrainingRuntime": "clustertrainingruntimes",
    "TrainingRuntime": "trainingruntimes",
}


def finished_how(status: Mapping[str, Any]) -> str:
    """'succeeded', 'failed (<reason>: <message>)', or '' while it runs (Trainer's Complete/Failed)."""
    how = ""
    for condition in items(status.get("conditions")):
        condition = mapping(condition)
        if condition.get("status") != "True" or condition.get("type") not in ("Complete", "Failed"):
            continue
        why = ": ".join(str(x) for x in (condition.get("reason"), condition.get("message")) if x)
        how = "succeeded" if condition["type"] == "Complete" else f"failed ({why})" if why else "failed"
    return how


def phalanx_patch(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Phalanx's entry of the TrainJob's runtimePatches (None: it has none: the webhook did not see it)."""
    patches = items(mapping(body.get("spec")).get("runtimePatches"))
    return next((mapping(p) for p in patches if mapping(p).get("manager") == PATCH_MANAGER), None)


def runtime_patches(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The TrainJob's `spec.runtimePatches` with Phalanx's own entry (the managed label and the Phalanx
    annotations for its JobSet) in place of any earlier one of ours; None when it is there already."""
    meta = mapping(body.get("metadata"))
    annotations = {k: str(v) for k, v in mapping(meta.get("annotations")).items() if k in JOBSET_ANNOTATIONS}
    ours = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {keys.MANAGED_LABEL: keys.MANAGED_VALUE}, "annotations": annotations}
            }
        },
    }
    existing = [dict(mapping(p)) for p in items(mapping(body.get("spec")).get("runtimePatches"))]
    others = [p for p in existing if p.get("manager") != PATCH_MANAGER]
    current = phalanx_patch(body)
    if current is not None and current.get("trainingRuntimeSpec") == ours["trainingRuntimeSpec"]:
        return None
    return [*others, ours]


def runtime_ref(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the runtime the TrainJob refers to (`spec.runtimeRef`; its kind and API group default
    as the CRD's schema defaults them), or None: none named, or not one of Trainer's runtimes."""
    ref = mapping(mapping(body.get("spec")).get("runtimeRef"))
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    name = ref.get("name")
    if (ref.get("apiGroup") or API_GROUP) != API_GROUP or kind not in RUNTIME_PLURALS:
        return None
    return (str(kind), name) if isinstance(name, str) and name else None
