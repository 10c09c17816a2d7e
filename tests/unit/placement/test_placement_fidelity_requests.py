"""Reading the fields of a pod spec that the filters depending on other pods and on volumes look at."""

from __future__ import annotations

from phalanx.placement import (
    HostPort,
    LabelSelector,
    NodeSelectorRequirement,
    SpreadConstraint,
    host_ports_conflict,
    pod_requirements,
    pod_traits,
    selector_matches,
    term_matches,
)
from phalanx.placement.selectors import merged_spread_selector

HOST = "kubernetes.io/hostname"


def test_affinity_terms_keep_their_namespaces_the_way_the_scheduler_reads_them() -> None:
    spec = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": HOST},
                    {
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                        "topologyKey": HOST,
                        "namespaces": ["x"],
                    },
                    {"labelSelector": {}, "topologyKey": HOST, "namespaceSelector": {}},
                    {"topologyKey": HOST, "namespaceSelector": {"matchLabels": {"team": "t"}}},
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "topologyKey": HOST}}
                ],
            }
        }
    }
    own, listed, everywhere, by_labels = pod_requirements(spec).pod_anti_affinity
    assert own.own_namespace and not own.namespaces
    assert term_matches(own, "ns", "ns", {"app": "a"}) is True
    assert term_matches(own, "ns", "other", {"app": "a"}) is False
    assert not listed.own_namespace and listed.namespaces == ("x",)
    assert term_matches(listed, "ns", "ns", {"app": "b"}) is False
    assert term_matches(listed, "ns", "x", {"app": "b"}) is True
    assert everywhere.all_namespaces and everywhere.selector == LabelSelector()
    assert term_matches(everywhere, "ns", "anything", {}) is True
    # No labelSelector: the nil selector matches no pod; an unknown namespaceSelector says "maybe".
    assert by_labels.selector.nothing
    assert term_matches(by_labels, "ns", "y", {"app": "a"}) is False
    by_labels_any = by_labels.__class__(
        LabelSelector(), HOST, own_namespace=False, namespace_selector=by_labels.namespace_selector
    )
    assert term_matches(by_labels_any, "ns", "y", {}) is None
    assert not pod_requirements(spec).unsupported, "anti-affinity with a namespaceSelector is modelled"


def test_selectors_follow_label_requirements() -> None:
    sel = LabelSelector(
        requirements=(
            NodeSelectorRequirement("app", "In", ("a", "b")),
            NodeSelectorRequirement("tier", "NotIn", ("db",)),
            NodeSelectorRequirement("gpu", "Exists"),
            NodeSelectorRequirement("spot", "DoesNotExist"),
        )
    )
    assert selector_matches(sel, {"app": "a", "gpu": "1"})
    assert not selector_matches(sel, {"app": "a", "gpu": "1", "tier": "db"})
    assert not selector_matches(sel, {"app": "a", "gpu": "1", "spot": ""})
    assert not selector_matches(sel, {"app": "c", "gpu": "1"})
    assert selector_matches(LabelSelector(), {})
    assert not selector_matches(LabelSelector(nothing=True), {})


def test_host_ports_of_containers_and_sidecars_with_defaults() -> None:
    spec = {
        "initContainers": [
            {"name": "init", "ports": [{"containerPort": 1, "hostPort": 1}]},
            {"name": "side", "restartPolicy": "Always", "ports": [{"containerPort": 2, "hostPort": 2}]},
        ],
        "containers": [
            {
                "name": "w",
                "ports": [
                    {"containerPort": 29500, "hostPort": 29500},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"containerPort": 8080},
                ],
            }
        ],
    }
    assert pod_requirements(spec).host_ports == (
        HostPort(2),
        HostPort(29500),
        HostPort(53, "UDP", "10.0.0.1"),
    )
    assert host_ports_conflict(HostPort(80), HostPort(80, "TCP", "10.0.0.1"))
    assert not host_ports_conflict(HostPort(80, "TCP", "10.0.0.2"), HostPort(80, "TCP", "10.0.0.1"))
    assert not host_ports_conflict(HostPort(80, "UDP"), HostPort(80))
    assert not host_ports_conflict(HostPort(80), HostPort(81))


def test_only_do_not_schedule_spread_constraints_with_their_defaults() -> None:
    spec = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 2,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "a"}},
                "matchLabelKeys": ["rev"],
            },
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"},
            {
                "maxSkew": 1,
                "topologyKey": HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "minDomains": 3,
                "nodeAffinityPolicy": "Ignore",
                "nodeTaintsPolicy": "Honor",
            },
        ]
    }
    zone, host = pod_requirements(spec).spread
    assert zone == SpreadConstraint(
        2,
        "zone",
        LabelSelector(requirements=(NodeSelectorRequirement("app", "In", ("a",)),)),
        ("rev",),
        1,
        "Honor",
        "Ignore",
    )
    assert (host.min_domains, host.node_affinity_policy, host.node_taints_policy) == (3, "Ignore", "Honor")
    assert host.selector.nothing
    merged = merged_spread_selector(zone.selector, zone.match_label_keys, {"app": "a", "rev": "7"})
    assert selector_matches(merged, {"app": "a", "rev": "7"})
    assert not selector_matches(merged, {"app": "a", "rev": "6"})


def test_node_features_a_pod_needs() -> None:
    spec = {
        "hostNetwork": True,
        "hostUsers": False,
        "containers": [
            {"name": "w", "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": ["ro"]}]}
        ],
        "initContainers": [{"name": "i", "restartPolicyRules": [{"action": "RestartAllContainers"}]}],
    }
    assert pod_requirements(spec).required_features == (
        "RestartAllContainersOnContainerExits",
        "UserNamespacesHostNetworkSupport",
        "VolumeBindMountOptions",
    )
    assert pod_requirements({"hostNetwork": True, "containers": []}).required_features == ()


def test_fields_phalanx_does_not_model_are_named() -> None:
    spec = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        "volumes": [{"name": "disk", "gcePersistentDisk": {"pdName": "d"}}],
        "containers": [],
    }
    unsupported = pod_requirements(spec).unsupported
    assert unsupported[0].startswith("spec.resourceClaims")
    assert unsupported[1].startswith("spec.volumes[disk].gcePersistentDisk")


def test_traits_name_the_claims_a_pod_mounts() -> None:
    spec = {
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "tmp", "emptyDir": {}},
        ]
    }
    traits = pod_traits({"name": "p-0", "namespace": "ns", "labels": {"b": "2", "a": "1"}}, spec)
    assert traits.claims == ("shared", "p-0-scratch")
    assert traits.labels == (("a", "1"), ("b", "2"))
    assert traits.namespace == "ns"
