"""Checks at creation that the webhooks share across kinds (pure functions of the body): what Phalanx would
otherwise let through and never keep its promise for.

- **Another scheduler.** Phalanx releases a gang's pods pinned to their nodes and a scheduler binds them.
  Only the names listed in `--scheduler-names` (default `default-scheduler`: kube-scheduler) are known to
  bind such pods; a gang whose pods name another `schedulerName` would be admitted and then wait for a
  scheduler that may not exist, holding its nodes. It is refused, naming the field, with what to do.
- **Phalanx keys on a pod template.** Phalanx reads its annotations from the owner's metadata (where
  Kueue's TAS annotations go on the pod template): a `phalanx.dev/` key on a template would be ignored.

Pod specs are found wherever the kind keeps them (a Job's `spec.template.spec`, a JobSet's replicated
Jobs, a LeaderWorkerSet's leader and worker templates, a pod's own `spec`): any object with a
`containers` list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.bodies import mapping

DEFAULT_SCHEDULER = "default-scheduler"


def pod_specs(value: Any, path: str = "spec") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, pod spec) of every pod spec inside `value` (the body's spec)."""
    if isinstance(value, Mapping):
        if isinstance(value.get("containers"), list):
            yield path, value
            return
        for key, item in value.items():
            yield from pod_specs(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from pod_specs(item, f"{path}[{i}]")


def pod_templates(value: Any, path: str = "spec") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field path, template) of every pod template (an object whose `spec` is a pod spec)."""
    if isinstance(value, Mapping):
        if isinstance(mapping(value.get("spec")).get("containers"), list):
            yield path, value
            return
        for key, item in value.items():
            yield from pod_templates(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from pod_templates(item, f"{path}[{i}]")


def scheduler_problems(spec: Any, allowed: tuple[str, ...], *, root: str = "spec") -> list[str]:
    """Pod specs naming a scheduler that is not known to bind Phalanx's released pods."""
    problems = []
    for path, pod_spec in pod_specs(spec, root):
        name = pod_spec.get("schedulerName")
        if name is None or name == "" or name in allowed:
            continue
        problems.append(
            f"{path}.schedulerName: {str(name)!r} is not a scheduler Phalanx releases gangs to (it pins a "
            f"gang's pods to their nodes and {', '.join(allowed)} binds them; another scheduler would never "
            f"see them and the gang would hold its nodes for nothing); remove schedulerName, set "
            f"{keys.POLICY_ANNOTATION}: basic to leave the pods to that scheduler, or run Phalanx with "
            f"--scheduler-names={','.join((*allowed, str(name)))} if that scheduler binds pods pinned by "
            "nodeSelector"
        )
    return problems


def template_key_problems(spec: Any, owner: str = "Job", *, root: str = "spec") -> list[str]:
    """`phalanx.dev/` keys on pod templates: Phalanx reads them on the owner's own metadata only."""
    problems = []
    for path, template in pod_templates(spec, root):
        meta = mapping(template.get("metadata"))
        for place in ("annotations", "labels"):
            for key in mapping(meta.get(place)):
                if str(key).startswith(f"{keys.PREFIX}/"):
                    problems.append(
                        f"{path}.metadata.{place}[{key}]: Phalanx reads its keys from the {owner}'s own "
                        f"metadata, not from its pod template, where it would be ignored; move it to "
                        f"metadata.{place} of the {owner}"
                    )
    return problems
