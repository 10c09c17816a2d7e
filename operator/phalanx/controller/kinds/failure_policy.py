"""What a Job's `podFailurePolicy` does with a pod Phalanx disrupts (pure).

Phalanx marks every pod it evicts or deletes with `DisruptionTarget=True` first, as kube-scheduler does
(apply/kube.py). The Job controller (v1.37) walks `spec.podFailurePolicy.rules` in order and the first rule
that matches decides; a rule on exit codes before the DisruptionTarget one might match the disrupted
container's exit code (137 or 143, not known here), so a `FailJob`/`FailIndex` one there decides too.

Two readers: a Job's failure budget (kinds/job_budget.py: how many pods it may lose), and how a
Kueue-managed owner is requeued (kinds/kueue.py: by deleting its pods only when that costs its Jobs
nothing, else through Kueue, whose suspension counts no failure).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api.conditions import DISRUPTION_TARGET
from phalanx.bodies import mapping

FAILING = ("FailJob", "FailIndex")


def disruption_action(rules: Iterable[Any]) -> str | None:
    """The action the first podFailurePolicy rule a disrupted pod may match takes ("" for "count it"),
    None when no rule matches it (then it counts)."""
    for raw in rules:
        rule = mapping(raw)
        action = str(rule.get("action") or "")
        conditions = [mapping(c) for c in rule.get("onPodConditions") or []]
        if any(
            c.get("type") == DISRUPTION_TARGET and str(c.get("status") or "True") == "True"
            for c in conditions
        ):
            return action
        if rule.get("onExitCodes") is not None and action in FAILING:
            return action  # it may match the disrupted container's exit code
    return None


def job_spec_action(job_spec: Mapping[str, Any]) -> str | None:
    """`disruption_action` of a batch/v1 Job spec (or a Job template's spec)."""
    return disruption_action(mapping(job_spec.get("podFailurePolicy")).get("rules") or [])


def disruptions_ignored(job_specs: Iterable[Mapping[str, Any]]) -> bool:
    """Every one of these Job specs ignores a disrupted pod (a rule with action `Ignore` on the
    DisruptionTarget condition comes first): deleting their pods costs no failure. False for none."""
    specs = list(job_specs)
    return bool(specs) and all(job_spec_action(spec) == "Ignore" for spec in specs)
