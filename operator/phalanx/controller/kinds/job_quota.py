"""A Job's gang against its namespace's ResourceQuotas (pure): which quota refuses the pods the gang still
lacks, whether the gang could ever be created whole under it, and whether a Job Phalanx requeued to break
a quota deadlock may be resumed (only once its quotas have room for the whole gang, or it would take the
quota back at once and deadlock again). The rules of counting are model/quota.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from phalanx.api.keys import MIN_COUNT_ANNOTATION
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import ClusterView, Owner
from phalanx.controller.kinds.job_record import JobRecord
from phalanx.controller.model.quota import QUOTA_DEADLOCK, PodsRefused, QuotaRecord, shortfall
from phalanx.controller.model.records import PodRecord


def _template(job: JobRecord) -> Mapping[str, Any]:
    return mapping(mapping(mapping(job.body.get("spec")).get("template")).get("spec"))


def gang_size(job: JobRecord, *, sliced: bool = False) -> int:
    """The pods the gang needs at once: minCount (a sliced Job: every slice), no more than are left."""
    policy = job.policy
    if policy is None or not policy.is_gang or policy.min_count is None:
        return 0
    size = policy.parallelism if sliced else policy.min_count
    if job.remaining is not None:
        size = min(size, job.remaining)
    return max(size, 0)


def pods_refused(
    job: JobRecord, pods: tuple[PodRecord, ...], view: ClusterView, *, sliced: bool = False
) -> PodsRefused | None:
    """A quota that refuses the pods the Job's gang lacks now (None: nothing known stops them)."""
    if job.suspended or job.finished:
        return None
    size = gang_size(job, sliced=sliced)
    missing = size - sum(1 for p in pods if not p.terminal and not p.deleting)
    if missing <= 0:
        return None
    quotas = view.resource_quotas(job.namespace)
    if not quotas:
        return None
    spec = _template(job)
    never = shortfall(quotas, spec, size, against_hard=True)
    if never is not None:
        return PodsRefused(
            f"its gang of {size} pods can never be created whole in namespace {job.namespace}: "
            f"{never.hard_text(size)}; lower the gang size or raise the quota",
            (never.quota.key,),
            never=True,
        )
    short = shortfall(quotas, spec, missing)
    if short is None:
        return None
    return PodsRefused(
        f"the Job controller cannot create the other {missing} pod(s): {short.text(missing)}",
        (short.quota.key,),
    )


def with_quota(
    owner: Owner, job: JobRecord, pods: tuple[PodRecord, ...], view: ClusterView, *, sliced: bool = False
) -> Owner:
    """The Owner, told which quota refuses its gang's missing pods."""
    refused = pods_refused(job, pods, view, sliced=sliced)
    return owner if refused is None else dataclasses.replace(owner, pods_refused=refused)


def held_for_quota(job: JobRecord, view: ClusterView, *, sliced: bool = False) -> bool:
    """Requeued to break a quota deadlock and its quotas have no room for the whole gang yet: it stays
    suspended (its pods are gone, so what the quotas use now is everyone else's)."""
    if not job.requeued.startswith(QUOTA_DEADLOCK) or not job.suspended:
        return False
    quotas = view.resource_quotas(job.namespace)
    return shortfall(quotas, _template(job), gang_size(job, sliced=sliced)) is not None


def creation_refusal(body: Mapping[str, Any], size: int, quotas: tuple[QuotaRecord, ...]) -> str | None:
    """At a gang Job's creation: a quota of its namespace too small for the whole gang, ever."""
    spec = mapping(mapping(mapping(body.get("spec")).get("template")).get("spec"))
    never = shortfall(quotas, spec, size, against_hard=True)
    if never is None:
        return None
    return (
        f"spec.template.spec: the gang of {size} pods can never be created whole: {never.hard_text(size)} "
        f"(gated pods count against quotas, so the Job would wait for ever); lower "
        f"{MIN_COUNT_ANNOTATION} or spec.parallelism, or raise the quota"
    )
