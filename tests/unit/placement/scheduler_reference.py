"""A small, independent model of kube-scheduler v1.37's filters, one pod onto one node.

Written from the plugins' Go code (nodeports, interpodaffinity, podtopologyspread, volumebinding /
volumezone / volumerestrictions as the controller resolves claims, nodevolumelimits' CSILimits),
straightforwardly and without
numpy, to check the engine's placements: a released pod is pinned to its node by a nodeSelector, and
kube-scheduler binds the released pods one by one in an order Phalanx does not know.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from phalanx.placement import (
    BoundPod,
    ClaimInfo,
    LabelSelector,
    NodeInfo,
    NodeSelectorRequirement,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    node_eligible,
)
from phalanx.placement.model import NO_CSI, CSIView, CSIVolume

HOSTNAME = "kubernetes.io/hostname"
ZONE_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
GA = {ZONE_LABELS[0]: ZONE_LABELS[2], ZONE_LABELS[1]: ZONE_LABELS[3]}


@dataclass(frozen=True)
class Pod:
    """A pod as kube-scheduler's NodeInfo holds it."""

    id: str
    node: str
    namespace: str
    labels: Mapping[str, str]
    requirements: PodRequirements
    requests: Mapping[str, int]
    terminating: bool = False
    claims: tuple[str, ...] = ()
    inline_csi: tuple[CSIVolume, ...] = ()


def existing(pod: BoundPod) -> Pod:
    """A pod of the snapshot (its anti-affinity and ports are all other pods' filters look at)."""
    return Pod(
        id=pod.id,
        node=pod.node,
        namespace=pod.traits.namespace,
        labels=pod.traits.label_map(),
        requirements=PodRequirements(
            requests=(), pod_anti_affinity=pod.anti_affinity, host_ports=pod.host_ports
        ),
        requests=pod.requests,
        terminating=pod.terminating,
        claims=pod.traits.claims,
        inline_csi=pod.traits.inline_csi,
    )


def incoming(request: PodRequest, node: str, *, pinned: bool = True) -> Pod:
    req = request.requirements
    if pinned:  # what Phalanx's release adds
        req = replace(req, node_selector=tuple(sorted({*req.node_selector, (HOSTNAME, node)})))
    return Pod(
        id=request.id,
        node=node,
        namespace=request.traits.namespace,
        labels=request.traits.label_map(),
        requirements=req,
        requests=req.request_map(),
        claims=request.traits.claims,
        inline_csi=request.traits.inline_csi,
    )


# --- matching ---------------------------------------------------------------------------------


def selects(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    if selector.nothing:
        return False
    for r in selector.requirements:
        value = labels.get(r.key)
        ok = {
            "In": value is not None and value in r.values,
            "NotIn": value is None or value not in r.values,
            "Exists": value is not None,
            "DoesNotExist": value is None,
        }.get(r.operator, False)
        if not ok:
            return False
    return True


def term_matches(term: PodAffinityTerm, owner_ns: str, pod: Pod) -> bool:
    """AffinityTerm.Matches; a non-empty namespaceSelector counts as matching (labels unknown)."""
    covered = (
        term.all_namespaces
        or pod.namespace in term.namespaces
        or (term.own_namespace and pod.namespace == owner_ns)
        or (term.namespace_selector is not None and not term.namespace_selector.nothing)
    )
    return covered and selects(term.selector, pod.labels)


# --- the filters ------------------------------------------------------------------------------


def fits_resources(node: NodeInfo, pods: Sequence[Pod], pod: Pod) -> bool:
    on = [p for p in pods if p.node == node.name]
    if len(on) + 1 > node.allocatable.get("pods", 0):
        return False
    for r, v in pod.requests.items():
        if r == "pods" or v <= 0:
            continue
        used = sum(p.requests.get(r, 0) for p in on)
        if used + v > node.allocatable.get(r, 0):
            return False
    return True


def node_static(node: NodeInfo, pod: Pod) -> bool:
    req = pod.requirements
    return node_eligible(node, req.node_selector, req.affinity_terms, req.tolerations) and set(
        req.required_features
    ) <= set(node.declared_features)


def ports_ok(pods: Sequence[Pod], pod: Pod, node: NodeInfo) -> bool:
    for other in pods:
        if other.node != node.name:
            continue
        for a in pod.requirements.host_ports:
            for b in other.requirements.host_ports:
                if a.port == b.port and a.protocol == b.protocol and "0.0.0.0" in (a.ip, b.ip):
                    return False
                if a.port == b.port and a.protocol == b.protocol and a.ip == b.ip:
                    return False
    return True


def inter_pod_ok(nodes: Mapping[str, NodeInfo], pods: Sequence[Pod], pod: Pod, node: NodeInfo) -> bool:
    req = pod.requirements
    # Existing pods' anti-affinity.
    for other in pods:
        other_node = nodes.get(other.node)
        if other_node is None:
            continue
        for term in other.requirements.pod_anti_affinity:
            key = term.topology_key
            if (
                term_matches(term, other.namespace, pod)
                and key in other_node.labels
                and node.labels.get(key) == other_node.labels[key]
            ):
                return False
    # The pod's anti-affinity.
    for term in req.pod_anti_affinity:
        key = term.topology_key
        if key not in node.labels:
            continue
        for other in pods:
            other_node = nodes.get(other.node)
            if (
                other_node is not None
                and other_node.labels.get(key) == node.labels[key]
                and term_matches(term, pod.namespace, other)
            ):
                return False
    # The pod's affinity.
    terms = req.pod_affinity
    if terms:
        if any(t.topology_key not in node.labels for t in terms):
            return False
        matching = [
            other
            for other in pods
            if other.node in nodes and all(term_matches(t, pod.namespace, other) for t in terms)
        ]
        counted = [o for o in matching if any(t.topology_key in nodes[o.node].labels for t in terms)]
        found = all(
            any(nodes[o.node].labels.get(t.topology_key) == node.labels[t.topology_key] for o in counted)
            for t in terms
        )
        if not found:
            self_match = all(term_matches(t, pod.namespace, pod) for t in terms)
            if counted or not self_match:
                return False
    return True


def spread_ok(nodes: Mapping[str, NodeInfo], pods: Sequence[Pod], pod: Pod, node: NodeInfo) -> bool:
    req = pod.requirements
    if not req.spread:
        return True
    keys = {c.topology_key for c in req.spread}
    for c in req.spread:
        if c.topology_key not in node.labels:
            return False
        selector = c.selector
        if not selector.nothing and c.match_label_keys:
            extra = tuple(
                NodeSelectorRequirement(k, "In", (pod.labels[k],))
                for k in c.match_label_keys
                if k in pod.labels
            )
            if extra:
                selector = LabelSelector(requirements=extra + selector.requirements)
        counts: dict[str, int] = {}
        for n in nodes.values():
            if not keys <= n.labels.keys():
                continue
            if c.node_affinity_policy == "Honor" and not node_eligible(
                replace(n, ready=True, unschedulable=False, taints=()),
                req.node_selector,
                req.affinity_terms,
                (),
            ):
                continue
            if c.node_taints_policy == "Honor" and not node_eligible(
                replace(n, ready=True, unschedulable=False), (), None, req.tolerations
            ):
                continue
            value = n.labels[c.topology_key]
            counts.setdefault(value, 0)
            if selector.nothing or not selector.requirements:
                continue  # countPodsMatchSelector counts nothing for an empty selector
            counts[value] += sum(
                1
                for p in pods
                if p.node == n.name
                and not p.terminating
                and p.namespace == pod.namespace
                and selects(selector, p.labels)
            )
        low = min(counts.values()) if len(counts) >= c.min_domains and counts else 0
        own = 1 if selects(selector, pod.labels) else 0
        if counts.get(node.labels[c.topology_key], 0) + own - low > c.max_skew:
            return False
    return True


def volumes_ok(claims: Mapping[str, ClaimInfo], pods: Sequence[Pod], pod: Pod, node: NodeInfo) -> bool:
    for name in pod.claims:
        info = claims.get(f"{pod.namespace}/{name}")
        if info is None or info.waiting or info.unsupported:
            return False
        for terms in info.node_terms:
            if not node_eligible(
                replace(node, name="", ready=True, unschedulable=False, taints=()), (), terms, ()
            ):
                return False
        if info.zones and any(k in node.labels for k in ZONE_LABELS):
            for key, values in info.zones:
                value = node.labels.get(key, node.labels.get(GA.get(key, key)))
                if value is None or value not in values:
                    return False
        if info.selected_node and info.selected_node != node.name:
            return False
        if info.capacity_terms is not None and not node_eligible(
            replace(node, ready=True, unschedulable=False, taints=()), (), info.capacity_terms, ()
        ):
            return False  # "node(s) did not have enough free storage"
        if info.read_write_once_pod and any(name in p.claims and p.namespace == pod.namespace for p in pods):
            return False
    return True


def _counted(claims: Mapping[str, ClaimInfo], pod: Pod, has_csinode: bool) -> dict[str, str]:
    """filterAttachableVolumes: unique volume name -> driver (a migrated one only with a CSINode)."""
    out = {}
    volumes = [claims[f"{pod.namespace}/{c}"].csi for c in pod.claims if f"{pod.namespace}/{c}" in claims]
    for v in [*volumes, *pod.inline_csi]:
        if v is not None and (has_csinode or not v.migrated):
            out[v.id] = v.driver
    return out


def csi_limits_ok(
    claims: Mapping[str, ClaimInfo], csi: CSIView, pods: Sequence[Pod], pod: Pod, node: NodeInfo
) -> bool:
    """CSILimits.Filter (VolumeLimitScaling on, as in v1.37)."""
    csinode = csi.nodes.get(node.name)
    new = _counted(claims, pod, csinode is not None)
    if not new:
        return True
    for driver in set(new.values()):
        if driver in csi.strict_drivers and (csinode is None or driver not in csinode.drivers):
            return False  # "<driver> CSI driver is not installed on the node"
    limits = dict(csinode.limits) if csinode is not None else {}
    if not limits:
        return True
    attached: dict[str, str] = {}
    for other in pods:
        if other.node == node.name:
            attached.update(_counted(claims, other, True))
    count = Counter(attached.values())
    for unique in attached:
        new.pop(unique, None)
    assert csinode is not None
    for unique, driver in csinode.attached:
        if unique not in attached:
            count[driver] += 1
    for driver, n in Counter(new.values()).items():
        if driver in limits and count[driver] + n > limits[driver]:
            return False  # "node(s) exceed max volume count"
    return True


def accepts(
    nodes: Mapping[str, NodeInfo],
    pods: Sequence[Pod],
    pod: Pod,
    claims: Mapping[str, ClaimInfo] | None = None,
    csi: CSIView = NO_CSI,
) -> bool:
    """Whether kube-scheduler's filters let `pod` onto `pod.node`, with `pods` on their nodes."""
    node = nodes.get(pod.node)
    if node is None:
        return False
    here = [p for p in pods if p.node in nodes]
    return (
        node_static(node, pod)
        and fits_resources(node, here, pod)
        and ports_ok(here, pod, node)
        and inter_pod_ok(nodes, here, pod, node)
        and spread_ok(nodes, here, pod, node)
        and volumes_ok(claims or {}, here, pod, node)
        and csi_limits_ok(claims or {}, csi, here, pod, node)
    )


def bindable_in_every_order(
    nodes: Iterable[NodeInfo],
    world: Sequence[Pod],
    released: Sequence[Pod],
    claims: Mapping[str, ClaimInfo] | None = None,
    csi: CSIView = NO_CSI,
) -> tuple[Pod, ...] | None:
    """None if every order of binding `released` passes; else the first failing order."""
    by_name = {n.name: n for n in nodes}
    for order in itertools.permutations(released):
        bound: list[Pod] = []
        for pod in order:
            if not accepts(by_name, [*world, *bound], pod, claims, csi):
                return order
            bound.append(pod)
    return None


def bindable_in_some_order(
    nodes: Iterable[NodeInfo],
    world: Sequence[Pod],
    pods: Sequence[Pod],
    claims: Mapping[str, ClaimInfo] | None = None,
    csi: CSIView = NO_CSI,
) -> bool:
    by_name = {n.name: n for n in nodes}
    for order in itertools.permutations(pods):
        bound: list[Pod] = []
        for pod in order:
            if not accepts(by_name, [*world, *bound], pod, claims, csi):
                break
            bound.append(pod)
        else:
            return True
    return False
