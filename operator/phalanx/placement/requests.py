"""What a pod asks of a node, read from a plain pod-spec dict (JSON from the API, camelCase keys).

Requests follow k8s.io/component-helpers/resource.PodRequests (v1.37) so Phalanx and
kube-scheduler agree on whether a pod fits.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from phalanx.bodies import mapping

from .interning import Interner, text
from .model import (
    DEFAULT_BIND_ALL_IP,
    HONOR,
    IGNORE,
    PODS,
    HostPort,
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodRequirements,
    PodTraits,
    SpreadConstraint,
    Toleration,
)
from .quantity import canonical_amount, parse_quantity
from .volume_limits import migrated_volume

__all__ = [
    "host_ports",
    "label_selector",
    "node_selector_terms",
    "pod_affinity_terms",
    "pod_requests",
    "pod_requirements",
    "pod_traits",
]

# NodeDeclaredFeatures (v1.37): the features a pod spec needs from its node (component-helpers
# nodedeclaredfeatures/features, the ones whose InferForScheduling can be true).
RESTART_ALL_CONTAINERS_FEATURE = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK_FEATURE = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS_FEATURE = "VolumeBindMountOptions"
# Inline volume types whose same-node conflicts VolumeRestrictions checks.
_RESTRICTED_INLINE_VOLUMES = ("gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd")

# Pod-level resources (spec.resources) the scheduler honours; hugepages-* are matched by prefix.
_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_HUGEPAGES_PREFIX = "hugepages-"

_ResourceList = dict[str, Fraction]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _resource_list(value: Any) -> _ResourceList:
    return {str(name): parse_quantity(q) for name, q in mapping(value).items()}


def _container_requests(container: Mapping[str, Any]) -> _ResourceList:
    # API defaulting copies a limit into a missing request; doing it here too keeps
    # specs that never went through the API server (templates, tests) consistent.
    resources = mapping(container.get("resources"))
    requests = _resource_list(resources.get("requests"))
    for name, limit in _resource_list(resources.get("limits")).items():
        requests.setdefault(name, limit)
    return requests


def _add(into: _ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, q in other.items():
        into[name] = into.get(name, Fraction(0)) + q


def _max(into: _ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, q in other.items():
        if name not in into or q > into[name]:
            into[name] = q


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _effective_requests(spec: Mapping[str, Any]) -> _ResourceList:
    total: _ResourceList = {}
    for container in _as_list(spec.get("containers")):
        _add(total, _container_requests(mapping(container)))

    # Sidecars (restartable init containers) run for the pod's whole life, so they add to the
    # sum; a regular init container runs alone next to the sidecars started before it.
    sidecars: _ResourceList = {}
    init_peak: _ResourceList = {}
    for raw in _as_list(spec.get("initContainers")):
        container = mapping(raw)
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            need = dict(requests)
            _add(need, sidecars)
            _max(init_peak, need)
    _max(total, init_peak)

    pod_level = _resource_list(mapping(spec.get("resources")).get("requests"))
    if any(_is_pod_level_resource(name) for name in pod_level):
        for name, q in pod_level.items():
            if _is_pod_level_resource(name):
                total[name] = q

    _add(total, _resource_list(spec.get("overhead")))
    return total


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a pod, in canonical integers (cpu in millicores, the rest in units).

    Like PodRequests: max(sum of containers and sidecars, peak init need), then pod-level
    requests for cpu/memory/hugepages, plus overhead. Never contains "pods".
    """
    return {
        name: canonical_amount(name, q)
        for name, q in sorted(_effective_requests(pod_spec).items())
        if name != PODS
    }


def _requirement(raw: Any) -> NodeSelectorRequirement:
    item = mapping(raw)
    return NodeSelectorRequirement(
        key=str(item.get("key", "")),
        operator=str(item.get("operator", "")),
        values=tuple(str(v) for v in _as_list(item.get("values"))),
    )


def _terms(raw_terms: Iterable[Any]) -> tuple[NodeSelectorTerm, ...]:
    terms = []
    for raw in raw_terms:
        term = mapping(raw)
        terms.append(
            NodeSelectorTerm(
                match_expressions=tuple(_requirement(r) for r in _as_list(term.get("matchExpressions"))),
                match_fields=tuple(_requirement(r) for r in _as_list(term.get("matchFields"))),
            )
        )
    return tuple(terms)


def node_selector_terms(raw_terms: Any) -> tuple[NodeSelectorTerm, ...]:
    """A core/v1 NodeSelector's nodeSelectorTerms (as a PersistentVolume's node affinity has them)."""
    return _terms(_as_list(raw_terms))


def _toleration(raw: Any) -> Toleration:
    item = mapping(raw)
    return _shared_tolerations(
        Toleration(
            key=text(item.get("key") or ""),
            operator=text(item.get("operator") or "Equal"),
            value=text(item.get("value") or ""),
            effect=text(item.get("effect") or ""),
        )
    )


# Read-only values many pods repeat (a template's tolerations, nodeSelector and requests; Job labels),
# one object for all of them (interning's docstring says why).
_shared_tolerations: Interner[Toleration] = Interner()
_shared_tuples: Interner[tuple[Any, ...]] = Interner()
_shared_pairs: Interner[tuple[str, str]] = Interner(limit=65536)


def label_selector(raw: Any) -> LabelSelector:
    """metav1.LabelSelector: None is the nil selector (matches nothing), {} matches everything."""
    if not isinstance(raw, Mapping):
        return LabelSelector(nothing=True)
    match_labels = tuple(
        NodeSelectorRequirement(str(k), "In", (str(v),))
        for k, v in sorted(mapping(raw.get("matchLabels")).items())
    )
    expressions = tuple(_requirement(r) for r in _as_list(raw.get("matchExpressions")))
    return LabelSelector(requirements=match_labels + expressions)


def _is_empty_selector(raw: Any) -> bool:
    return (
        isinstance(raw, Mapping) and not raw.get("matchLabels") and not _as_list(raw.get("matchExpressions"))
    )


def pod_affinity_terms(raw_terms: Any) -> tuple[PodAffinityTerm, ...]:
    """Required PodAffinityTerms as framework.GetAffinityTerms reads them (labelSelector, namespaces)."""
    terms = []
    for raw in _as_list(raw_terms):
        term = mapping(raw)
        namespaces = tuple(str(n) for n in _as_list(term.get("namespaces")))
        ns_selector = term.get("namespaceSelector")
        has_ns_selector = isinstance(ns_selector, Mapping)
        terms.append(
            PodAffinityTerm(
                selector=label_selector(term.get("labelSelector")),
                topology_key=str(term.get("topologyKey") or ""),
                namespaces=namespaces,
                own_namespace=not namespaces and not has_ns_selector,
                all_namespaces=has_ns_selector and _is_empty_selector(ns_selector),
                namespace_selector=(
                    label_selector(ns_selector)
                    if has_ns_selector and not _is_empty_selector(ns_selector)
                    else None
                ),
            )
        )
    return tuple(terms)


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def host_ports(pod_spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """util.GetHostPorts: ports with hostPort > 0 of sidecars (restartable init containers) and containers."""
    containers = [c for c in map(mapping, _as_list(pod_spec.get("initContainers"))) if _is_sidecar(c)]
    containers += [mapping(c) for c in _as_list(pod_spec.get("containers"))]
    ports = []
    for container in containers:
        for raw in _as_list(container.get("ports")):
            port = mapping(raw)
            host_port = port.get("hostPort")
            if isinstance(host_port, int) and host_port > 0:
                ports.append(
                    HostPort(
                        port=host_port,
                        protocol=str(port.get("protocol") or "TCP"),
                        ip=str(port.get("hostIP") or DEFAULT_BIND_ALL_IP),
                    )
                )
    return tuple(ports)


def _spread_constraints(pod_spec: Mapping[str, Any]) -> tuple[SpreadConstraint, ...]:
    out = []
    for raw in _as_list(pod_spec.get("topologySpreadConstraints")):
        c = mapping(raw)
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue  # ScheduleAnyway only scores
        min_domains = c.get("minDomains")
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew") or 1),
                topology_key=str(c.get("topologyKey") or ""),
                selector=label_selector(c.get("labelSelector")),
                match_label_keys=tuple(str(k) for k in _as_list(c.get("matchLabelKeys"))),
                min_domains=int(min_domains) if isinstance(min_domains, int) else 1,
                node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
                node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            )
        )
    return tuple(out)


def _required_features(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """NodeDeclaredFeatures' InferForPodScheduling for the v1.37 feature registry."""
    features = set()
    if pod_spec.get("hostNetwork") is True and pod_spec.get("hostUsers") is False:
        features.add(USER_NAMESPACES_HOST_NETWORK_FEATURE)
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for raw in _as_list(pod_spec.get(kind)):
            container = mapping(raw)
            rules = container.get("restartPolicyRules")
            if (
                rules
                and kind != "ephemeralContainers"
                and any(mapping(rule).get("action") == "RestartAllContainers" for rule in _as_list(rules))
            ):
                features.add(RESTART_ALL_CONTAINERS_FEATURE)
            mounts = container.get("volumeMounts")
            if mounts and any(mapping(m).get("bindMountOptions") for m in _as_list(mounts)):
                features.add(VOLUME_BIND_MOUNT_OPTIONS_FEATURE)
    return tuple(sorted(features))


def _unsupported(pod_spec: Mapping[str, Any], pod_affinity: tuple[PodAffinityTerm, ...]) -> tuple[str, ...]:
    """Fields kube-scheduler filters on that the engine cannot check: such pods are never released."""
    out = []
    if _as_list(pod_spec.get("resourceClaims")):
        out.append("spec.resourceClaims (DynamicResources: device claims are not modelled)")
    for i, term in enumerate(pod_affinity):
        if term.namespace_selector is not None:
            out.append(
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                f"[{i}].namespaceSelector (namespace labels are not modelled)"
            )
    for raw in _as_list(pod_spec.get("volumes")):
        volume = mapping(raw)
        for kind in _RESTRICTED_INLINE_VOLUMES:
            if volume.get(kind):
                out.append(
                    f"spec.volumes[{volume.get('name', '')}].{kind} "
                    "(VolumeRestrictions: inline disk conflicts are not modelled)"
                )
    return tuple(out)


def pod_traits(metadata: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> PodTraits:
    """Namespace, labels, mounted claims (ephemeral.VolumeClaimName for ephemeral volumes) and the inline
    volumes NodeVolumeLimits counts."""
    name = str(metadata.get("name") or "")
    claims = []
    inline = []
    for raw in _as_list(pod_spec.get("volumes")):
        volume = mapping(raw)
        claim = mapping(volume.get("persistentVolumeClaim"))
        if claim:
            claims.append(str(claim.get("claimName") or ""))
        elif isinstance(volume.get("ephemeral"), Mapping):
            claims.append(f"{name}-{volume.get('name', '')}")
        else:
            # NodeVolumeLimits counts inline in-tree volumes it can migrate to CSI (not inline csi volumes).
            migrated = migrated_volume(volume)
            if migrated is not None:
                inline.append(migrated)
    return PodTraits(
        namespace=sys.intern(str(metadata.get("namespace") or "")),
        # Interned: pods of one Job repeat the same keys and most values (a fresh copy per watch event).
        labels=tuple(
            sorted(_shared_pairs((text(k), text(v))) for k, v in mapping(metadata.get("labels")).items())
        ),
        claims=tuple(claims),
        inline_csi=tuple(inline),
    )


def pod_requirements(
    pod_spec: Mapping[str, Any], requests: Mapping[str, int] | None = None
) -> PodRequirements:
    """What the engine filters on: positive requests, nodeSelector, required node affinity, tolerations,
    required pod (anti-)affinity, host ports, DoNotSchedule spread constraints, node features.

    `requests`: `pod_requests(pod_spec)` when the caller has it already (it is the costly part)."""
    if requests is None:
        requests = pod_requests(pod_spec)
    positive = _shared_tuples(tuple((text(name), amount) for name, amount in requests.items() if amount > 0))
    node_selector = _shared_tuples(
        tuple(
            sorted(
                _shared_pairs((text(k), text(v))) for k, v in mapping(pod_spec.get("nodeSelector")).items()
            )
        )
    )

    affinity_terms: tuple[NodeSelectorTerm, ...] | None = None
    affinity = mapping(pod_spec.get("affinity"))
    node_affinity = mapping(affinity.get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if isinstance(required, Mapping):
        # Present but without terms matches no node, exactly like the scheduler.
        affinity_terms = _terms(_as_list(required.get("nodeSelectorTerms")))

    tolerations = _shared_tuples(tuple(_toleration(t) for t in _as_list(pod_spec.get("tolerations"))))
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    pod_affinity = pod_affinity_terms(mapping(affinity.get("podAffinity")).get(required))
    return PodRequirements(
        requests=positive,
        node_selector=node_selector,
        affinity_terms=affinity_terms,
        tolerations=tolerations,
        pod_affinity=pod_affinity,
        pod_anti_affinity=pod_affinity_terms(mapping(affinity.get("podAntiAffinity")).get(required)),
        host_ports=host_ports(pod_spec),
        spread=_spread_constraints(pod_spec),
        required_features=_required_features(pod_spec),
        unsupported=_unsupported(pod_spec, pod_affinity),
    )
