from __future__ import annotations

from typing import Any

from phalanx.placement import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Toleration,
    pod_requests,
    pod_requirements,
)

GI = 2**30


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources, **extra}


def test_sum_of_containers() -> None:
    spec = {
        "containers": [
            container({"cpu": "500m", "memory": "1Gi"}),
            container({"cpu": "1", "memory": "512Mi"}),
        ]
    }
    assert pod_requests(spec) == {"cpu": 1500, "memory": GI + GI // 2}


def test_limit_without_request_is_the_request() -> None:
    spec = {"containers": [container({"cpu": "1"}, {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "8"})]}
    assert pod_requests(spec) == {"cpu": 1000, "memory": GI, "nvidia.com/gpu": 8}


def test_request_wins_over_limit() -> None:
    spec = {"containers": [container({"memory": "1Gi"}, {"memory": "2Gi"})]}
    assert pod_requests(spec) == {"memory": GI}


def test_init_containers_take_the_max() -> None:
    spec = {
        "initContainers": [
            container({"cpu": "2", "memory": "64Mi"}),
            container({"cpu": "500m", "memory": "4Gi"}),
        ],
        "containers": [container({"cpu": "1", "memory": "1Gi"})],
    }
    # cpu: max(1, 2) ; memory: max(1Gi, 4Gi)
    assert pod_requests(spec) == {"cpu": 2000, "memory": 4 * GI}


def test_sidecars_add_up_and_count_for_later_init_containers() -> None:
    spec = {
        "initContainers": [
            container({"cpu": "1"}, restartPolicy="Always"),  # sidecar, runs for the whole pod life
            container({"cpu": "3"}),  # runs next to the sidecar: needs 1 + 3
            container({"cpu": "500m"}, restartPolicy="Always"),  # second sidecar
        ],
        "containers": [container({"cpu": "2"})],
    }
    # sum = 2 + 1 + 0.5 = 3.5 ; init peak = 1 + 3 = 4
    assert pod_requests(spec) == {"cpu": 4000}


def test_sidecar_started_after_an_init_container_does_not_count_for_it() -> None:
    spec = {
        "initContainers": [container({"cpu": "3"}), container({"cpu": "2"}, restartPolicy="Always")],
        "containers": [container({"cpu": "1"})],
    }
    # init peak 3 (alone) ; sum 1 + 2 = 3
    assert pod_requests(spec) == {"cpu": 3000}


def test_overhead_is_added() -> None:
    spec = {
        "containers": [container({"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert pod_requests(spec) == {"cpu": 1250, "memory": GI + 120 * 2**20}


def test_pod_level_requests_override_cpu_memory_and_hugepages_only() -> None:
    spec = {
        "resources": {"requests": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "4Mi"}},
        "containers": [container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {
        "cpu": 4100,
        "memory": 8 * GI,
        "hugepages-2Mi": 4 * 2**20,
        "nvidia.com/gpu": 2,
    }


def test_pod_level_requests_with_only_unsupported_resources_are_ignored() -> None:
    spec = {
        "resources": {"requests": {"nvidia.com/gpu": "8"}},
        "containers": [container({"nvidia.com/gpu": "1"})],
    }
    assert pod_requests(spec) == {"nvidia.com/gpu": 1}


def test_empty_pod_and_pods_resource_excluded() -> None:
    assert pod_requests({}) == {}
    assert pod_requests({"containers": [container({"pods": "3", "cpu": "1"})]}) == {"cpu": 1000}


def test_pod_requirements_full() -> None:
    spec: dict[str, Any] = {
        "containers": [container({"cpu": "1", "memory": "0"}, {"nvidia.com/gpu": 8})],
        "nodeSelector": {"b": "2", "a": "1"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}],
                            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}],
                        },
                        {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "ml"},
            {"operator": "Exists", "tolerationSeconds": 30},
        ],
    }
    assert pod_requirements(spec) == PodRequirements(
        requests=(("cpu", 1000), ("nvidia.com/gpu", 8)),  # zero memory dropped: never checked
        node_selector=(("a", "1"), ("b", "2")),
        affinity_terms=(
            NodeSelectorTerm(
                match_expressions=(NodeSelectorRequirement("zone", "In", ("z1", "z2")),),
                match_fields=(NodeSelectorRequirement("metadata.name", "NotIn", ("n1",)),),
            ),
            NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("gen", "Gt", ("3",)),)),
        ),
        tolerations=(
            Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
            Toleration("dedicated", "Equal", "ml", ""),
            Toleration("", "Exists", "", ""),
        ),
    )


def test_pod_requirements_affinity_presence() -> None:
    assert pod_requirements({"containers": []}).affinity_terms is None
    assert pod_requirements({"affinity": {"nodeAffinity": {}}}).affinity_terms is None
    # Required affinity without terms selects no node (upstream NodeSelector with zero terms).
    spec: dict[str, Any] = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    }
    assert pod_requirements(spec).affinity_terms == ()


def test_equal_specs_give_equal_hashable_requirements() -> None:
    spec = {"containers": [container({"nvidia.com/gpu": "8"})], "tolerations": [{"operator": "Exists"}]}
    a, b = pod_requirements(spec), pod_requirements(dict(spec))
    assert a == b
    assert len({a, b}) == 1
