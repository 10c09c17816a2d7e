"""A pod that lost Phalanx's gate to someone else (pure): another controller (or a user) removed
`phalanx.dev/admission` from a gang's pod before Phalanx admitted it, so kube-scheduler places it alone,
outside the gang's placement. Phalanx releases a pod only pinned to its node (nodeSelector), so an ungated
pod of a gang without that pin was not released by Phalanx. Said once per change, on the owner."""

from __future__ import annotations

from collections.abc import Mapping

from phalanx.api import keys
from phalanx.controller.kinds.base import OwnerState
from phalanx.controller.kinds.common import announce_once
from phalanx.controller.model.actions import Action
from phalanx.controller.model.records import PodRecord
from phalanx.controller.model.refs import ObjectRef


def ungated_by_others(pods: tuple[PodRecord, ...]) -> list[PodRecord]:
    return [p for p in pods if not p.gated and not p.node_selector_host and not p.terminal and not p.deleting]


def lost_gate(state: OwnerState, ref: ObjectRef, kind: str, announced: Mapping[str, str]) -> list[Action]:
    """One Warning on the owner naming the pods of its gang that lost Phalanx's gate to someone else."""
    lost = ungated_by_others(state.pods)
    if not lost:
        return []
    names = ", ".join(p.name for p in lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
    message = (
        f"{len(lost)} pod(s) of the {kind}'s gang lost the {keys.ADMISSION_GATE} scheduling gate to someone "
        f"else before Phalanx admitted them ({names}): kube-scheduler places them alone, outside the gang's "
        "placement; nothing but Phalanx should remove that gate"
    )
    return announce_once(announced, ref, "lost-gate", "GateRemoved", message)
