"""Kinds of workload: the one interface the state machine sees (`base.py`) and its implementations.

    base.py        Owner, Leaf, Tree, Unit; the OwnerKind and WorkloadKind protocols; ClusterView
    common.py      what every owner does alike: priority, preemption policy, notes once, letting go
    job_record.py  a batch/v1 Job as read (JobRecord) and as the state machine sees it (Owner)
    job.py         the Job kind: a plain Job is one gang
    job_slices.py  a sliced Job is one tree of slices
    jobset.py      a JobSet is one tree: a PodGroup per child Job
    lws.py         each LeaderWorkerSet group (of one revision) is one gang (a tree with subgroups)
    trainjob.py    a TrainJob reaches its JobSet through a runtime patch; its JobSet's unit names it
    handmade.py    hand-made PodGroup / CompositePodGroup trees (no owner)

Adding a kind is a module and a row below. Pure: no Kopf, no API client, no asyncio.
"""

from __future__ import annotations

from phalanx.controller.kinds.base import OwnerKind, WorkloadKind
from phalanx.controller.kinds.handmade import HandMadeKind
from phalanx.controller.kinds.job import JobKind
from phalanx.controller.kinds.jobset import JobSetKind
from phalanx.controller.kinds.lws import LwsKind
from phalanx.controller.kinds.trainjob import TrainJobKind

# Owners with API objects of their own: watched, listed, cached by uid, their pods indexed by owner.
OWNER_KINDS: tuple[OwnerKind, ...] = (JobKind(), JobSetKind(), LwsKind(), TrainJobKind())
# Every kind whose units are scheduled (owners first; the plan orders units by rule, not by this order).
KINDS: tuple[WorkloadKind, ...] = (*OWNER_KINDS, HandMadeKind())


def owner_kind(name: str) -> OwnerKind:
    """The owner kind called `name` ("Job")."""
    return next(k for k in OWNER_KINDS if k.name == name)
