"""How a released pod is pinned, on the real apiserver and kube-scheduler: by its nodeSelector and, when it
has no required node affinity of its own, by the node's name too (kube-scheduler's NodeAffinity PreFilter
then filters that node alone: model/actions.py ReleasePod); a pod with its own required node affinity keeps
it untouched (a gated pod's terms may only grow) and is pinned by the nodeSelector alone. Both bind where
Phalanx placed them. The nodeSelector pins the node's label of the gang's topology key too, so a node
relabelled into another domain between the release and the binding binds nothing."""

from __future__ import annotations

from typing import Any

import pytest

from .kube import NB_KEY, Namespace, bound, gpu_job, node_labels, wait_for

pytestmark = pytest.mark.integration

MANAGED = {"phalanx.dev/managed": "true"}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def bound_pods(ns: Namespace, job: str, count: int) -> list[dict[str, Any]]:
    return wait_for(
        f"{count} {job} pods bound",
        lambda: ps if len(bound(ps := ns.job_pods(job))) == count else None,
        timeout=90,
    )


def test_a_released_pod_is_pinned_by_its_nodes_name_too_and_binds_there(ns: Namespace) -> None:
    ns.create(gpu_job("named", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY}))
    for pod in bound_pods(ns, "named", 2):
        spec = pod["spec"]
        node = spec["nodeName"]
        block = node_labels(ns.api)[node][NB_KEY]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": node, NB_KEY: block}
        terms = spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]


def test_a_pod_with_its_own_node_affinity_keeps_it_and_is_pinned_by_its_node_selector(ns: Namespace) -> None:
    job = gpu_job("own", 2, labels=MANAGED, annotations={"phalanx.dev/topology-key": NB_KEY})
    own = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": NB_KEY, "operator": "In", "values": ["nb-a", "nb-b"]}]}
        ]
    }
    job["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {REQUIRED: own},
        "podAntiAffinity": {
            REQUIRED: [
                {
                    "labelSelector": {"matchLabels": {"job-name": "own"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }
    ns.create(job)
    for pod in bound_pods(ns, "own", 2):
        spec = pod["spec"]
        block = node_labels(ns.api)[spec["nodeName"]][NB_KEY]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": spec["nodeName"], NB_KEY: block}
        assert spec["affinity"]["nodeAffinity"][REQUIRED] == own
        assert (
            spec["affinity"]["podAntiAffinity"]
            == job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        )
