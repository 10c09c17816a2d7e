"""Pure placement engine: gang (all-or-nothing) and topology-aware placement of pod groups.

No Kubernetes client, no I/O: the controller turns API objects into these values, keeps a
`LiveSnapshot` up to date from its watches, takes one `Snapshot` from it per scheduling pass
and calls `decide` per group.
"""

from .auto import AutoChoice
from .composite import (
    CompositeAdmit,
    CompositeDecision,
    CompositeReject,
    CompositeRejectReason,
    CompositeRequest,
    GroupVerdict,
    composite_usage,
    decide_composite,
    leaves,
)
from .diagnosis import Diagnosis, DomainReport, diagnose
from .engine import admitted_usage, auto_choice, decide, resolve_mode
from .filters import node_eligible, taints_tolerated, tolerates
from .live import LiveSnapshot
from .model import (
    NO_TRAITS,
    Admit,
    AssumedPod,
    BoundPod,
    ClaimInfo,
    Decision,
    GroupRequest,
    HostPort,
    LabelSelector,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    PodTraits,
    Reject,
    RejectReason,
    SpreadConstraint,
    Taint,
    Toleration,
    TopologyMode,
)
from .preemption import DEFAULT_MAX_STEPS, DEFAULT_TREE_STEPS, choose_composite_victims, choose_victims
from .preemption_model import (
    Candidate,
    CompositePreemption,
    DisruptionMode,
    Preemption,
    VictimCost,
    VictimGroup,
)
from .quantity import QuantityError, canonical_amount, parse_quantity
from .requests import node_selector_terms, pod_requests, pod_requirements, pod_traits
from .reservation import Hold, reserve
from .selectors import host_ports_conflict, selector_matches, term_matches
from .snapshot import Snapshot

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TREE_STEPS",
    "NO_TRAITS",
    "Admit",
    "AssumedPod",
    "AutoChoice",
    "BoundPod",
    "Candidate",
    "ClaimInfo",
    "CompositeAdmit",
    "CompositeDecision",
    "CompositePreemption",
    "CompositeReject",
    "CompositeRejectReason",
    "CompositeRequest",
    "Decision",
    "Diagnosis",
    "DisruptionMode",
    "DomainReport",
    "GroupRequest",
    "GroupVerdict",
    "Hold",
    "HostPort",
    "LabelSelector",
    "LiveSnapshot",
    "NodeInfo",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodAffinityTerm",
    "PodRequest",
    "PodRequirements",
    "PodTraits",
    "Preemption",
    "QuantityError",
    "Reject",
    "RejectReason",
    "Snapshot",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "TopologyMode",
    "VictimCost",
    "VictimGroup",
    "admitted_usage",
    "auto_choice",
    "canonical_amount",
    "choose_composite_victims",
    "choose_victims",
    "composite_usage",
    "decide",
    "decide_composite",
    "diagnose",
    "host_ports_conflict",
    "leaves",
    "node_eligible",
    "node_selector_terms",
    "parse_quantity",
    "pod_requests",
    "pod_requirements",
    "pod_traits",
    "reserve",
    "resolve_mode",
    "selector_matches",
    "taints_tolerated",
    "term_matches",
    "tolerates",
]
