"""Pure placement engine: gang (all-or-nothing) and topology-aware placement of pod groups.

No Kubernetes client, no I/O: the controller turns API objects into these values, keeps a
`LiveSnapshot` up to date from its watches, takes one `Snapshot` from it per scheduling pass
and calls `decide` per group.
"""

from .engine import admitted_usage, decide
from .filters import node_eligible, taints_tolerated, tolerates
from .live import LiveSnapshot
from .model import (
    Admit,
    BoundPod,
    Decision,
    GroupRequest,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequest,
    PodRequirements,
    Reject,
    RejectReason,
    Taint,
    Toleration,
)
from .quantity import QuantityError, canonical_amount, parse_quantity
from .requests import pod_requests, pod_requirements
from .snapshot import Snapshot

__all__ = [
    "Admit",
    "BoundPod",
    "Decision",
    "GroupRequest",
    "LiveSnapshot",
    "NodeInfo",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodRequest",
    "PodRequirements",
    "QuantityError",
    "Reject",
    "RejectReason",
    "Snapshot",
    "Taint",
    "Toleration",
    "admitted_usage",
    "canonical_amount",
    "decide",
    "node_eligible",
    "parse_quantity",
    "pod_requests",
    "pod_requirements",
    "taints_tolerated",
    "tolerates",
]
