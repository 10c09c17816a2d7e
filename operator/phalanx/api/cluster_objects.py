"""How Phalanx reads Nodes and Pods: one set of rules for the controller's records and the CLI tools.

The controller (`phalanx.controller.model.records`) and the tools (`phalanx.tools.view`) must agree on which
node a pod holds capacity on, or `phalanx explain` would describe a cluster the operator does not see.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

from phalanx.bodies import mapping
from phalanx.placement import BoundPod, NodeInfo, PodRequirements, PodTraits, Taint, canonical_amount
from phalanx.placement.interning import Interner, MappingInterner, text

HOSTNAME_KEY: Final = "kubernetes.io/hostname"
TERMINAL_PHASES: Final = ("Succeeded", "Failed")
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def name_pin(node: str) -> dict[str, Any]:
    """The required node affinity that pins a released pod to `node` by name (besides its nodeSelector):
    kube-scheduler's NodeAffinity PreFilter turns a `metadata.name` field selector into the one node its
    filters then look at (controller/model/actions.py ReleasePod)."""
    return {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }


def placement_spec(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec the engine reads: without Phalanx's name pin, which says again what the nodeSelector pin
    says (a released pod's requirements are what they were without it: one object per node, not two, and
    no term per pod to keep)."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return spec
    node_affinity = affinity.get("nodeAffinity")
    pinned = mapping(spec.get("nodeSelector")).get(HOSTNAME_KEY)
    if (
        not pinned
        or not isinstance(node_affinity, Mapping)
        or node_affinity.get(REQUIRED) != name_pin(pinned)
    ):
        return spec
    rest = {k: v for k, v in node_affinity.items() if k != REQUIRED}
    others = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
    return {**spec, "affinity": {**others, **({"nodeAffinity": rest} if rest else {})}}


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    """A Node as the placement engine sees it."""
    meta, spec, status = (
        mapping(body.get("metadata")),
        mapping(body.get("spec")),
        mapping(body.get("status")),
    )
    ready = any(
        mapping(c).get("type") == "Ready" and mapping(c).get("status") == "True"
        for c in status.get("conditions") or []
    )
    taints = tuple(
        Taint(
            key=str(mapping(t).get("key", "")),
            value=str(mapping(t).get("value") or ""),
            effect=str(mapping(t).get("effect", "")),
        )
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=text(meta.get("name", "")),  # interned: the same string as its hostname label and its pods' node
        # Interned: every watch event's body brings fresh copies of the same label keys and of values most
        # nodes share (zone, block, product); at 50,000 nodes the copies were a tenth of the cache.
        labels={sys.intern(str(k)): sys.intern(str(v)) for k, v in mapping(meta.get("labels")).items()},
        # Nodes of one shape have the same allocatable: one read-only mapping for all of them.
        allocatable=_shared_allocatable(
            (str(r), canonical_amount(r, q)) for r, q in mapping(status.get("allocatable")).items()
        ),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        declared_features=_shared_features(frozenset(text(f) for f in status.get("declaredFeatures") or [])),
    )


_shared_allocatable: MappingInterner[int] = MappingInterner()
_shared_features: Interner[frozenset[str]] = Interner()


def released(*, node_name: str, gated: bool, pinned_node: str, pod_group: str) -> bool:
    """Released by Phalanx (ungated, pinned to a node by nodeSelector, labelled with its group) and not yet
    bound by kube-scheduler: capacity Phalanx has promised."""
    return not node_name and not gated and bool(pinned_node) and bool(pod_group)


def usage_node(*, terminal: bool, node_name: str, gated: bool, pinned_node: str, pod_group: str) -> str:
    """The node whose capacity a pod takes now ("" if none): its node while bound, the node Phalanx pinned it
    to while released; terminal pods hold none, terminating ones still do."""
    if terminal:
        return ""
    if node_name:
        return node_name
    if released(node_name=node_name, gated=gated, pinned_node=pinned_node, pod_group=pod_group):
        return pinned_node
    return ""


def held_pod(
    *,
    key: str,
    node: str,
    bound: bool,
    deleting: bool,
    requests: Mapping[str, int],
    traits: PodTraits,
    requirements: PodRequirements,
) -> BoundPod:
    """A pod holding capacity on `node`, as the placement engine counts it: its traits, anti-affinity and host
    ports refuse incoming pods; while released and not yet bound, its own affinity and spread still matter
    (pods placed meanwhile could break them)."""
    return BoundPod(
        id=key,
        node=node,
        requests=requests,
        traits=traits,
        anti_affinity=requirements.pod_anti_affinity,
        host_ports=requirements.host_ports,
        assigned=bound,
        terminating=deleting,
        affinity=() if bound else requirements.pod_affinity,
        spread=() if bound else requirements.spread,
    )
