"""A Job's failure budget (pure): how many of its running pods it can lose to an eviction without the Job
controller failing it. A `single` preemption victim is taken pod by pod only within this budget; otherwise
it is requeued whole (suspended, which counts no failure), like a `disruptionMode: all` victim.

An evicted pod carries `DisruptionTarget=True` (Phalanx puts it there before the eviction, as
kube-scheduler does). The Job controller (v1.37) then:

- takes the action of the first `spec.podFailurePolicy` rule it may match (kinds/failure_policy.py):
  `Ignore` means evictions never count: no limit. `FailJob` or `FailIndex` fails the Job (or the index)
  at once: budget 0. `Count` counts it as below;
- otherwise counts a failure: the Job fails once `status.failed` exceeds `spec.backoffLimit` (defaulted by
  the apiserver), so `backoffLimit - failed` pods may go;
- with `backoffLimitPerIndex`, an index fails once its pod's failures (annotation
  `batch.kubernetes.io/job-index-failure-count`) exceed it: each running pod is one index, so each may go
  once only if every running index has a failure left; otherwise budget 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.bodies import mapping
from phalanx.controller.kinds.base import Owner
from phalanx.controller.kinds.failure_policy import FAILING, job_spec_action
from phalanx.controller.kinds.job_record import JobRecord
from phalanx.controller.model.records import PodRecord


def failure_budget(spec: Mapping[str, Any], failed: int, pods: Iterable[PodRecord]) -> int | None:
    """How many running pods the Job may lose to evictions (None: any number)."""
    action = job_spec_action(spec)
    if action == "Ignore":
        return None
    if action in FAILING:
        return 0
    limit = spec.get("backoffLimit")
    if not isinstance(limit, int) or isinstance(limit, bool):
        limit = 6  # the API's default (a body that never went through the apiserver)
    budget = max(0, limit - failed)
    per_index = spec.get("backoffLimitPerIndex")
    if isinstance(per_index, int) and not isinstance(per_index, bool):
        running = [p for p in pods if p.usage_node and not p.terminal and not p.deleting]
        if any(p.index_failures >= per_index for p in running):
            return 0
    return budget


def with_budget(owner: Owner, job: JobRecord, pods: Iterable[PodRecord]) -> Owner:
    """The Owner, told its failure budget."""
    spec = mapping(job.body.get("spec"))
    return dataclasses.replace(owner, failure_budget=failure_budget(spec, job.failed, pods))
