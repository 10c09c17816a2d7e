"""`phalanx convert`: Jobs written for upstream's `spec.scheduling` rewritten in the Phalanx form.

A stock apiserver (no `WorkloadWithJob` gate) prunes the unknown field `spec.scheduling` without a word,
so `kubectl apply` of such a Job creates a plain Job and the gang is lost. The Phalanx form says the same
with the label `phalanx.dev/managed: "true"` and `phalanx.dev/*` annotations
(`phalanx.api.job_policy.from_upstream_scheduling` and `annotations_for`), and drops `spec.scheduling`.

Input is a YAML (or JSON) stream of any number of documents. A document is rewritten only if it is a Job
with `spec.scheduling` (or a CronJob whose `jobTemplate` has it, or a `List` holding such items); every
other document is copied byte for byte, comments included. Anything upstream means that Phalanx cannot
keep is an error that names the document and the field, and nothing is written then.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from phalanx.api.admission_checks import DEFAULT_SCHEDULER, job_creation_problems, scheduler_problems
from phalanx.api.job_policy import (
    MODE_ALL,
    MODE_SINGLE,
    POLICY_BASIC,
    POLICY_GANG,
    JobPolicyError,
    annotations_for,
    from_upstream_scheduling,
    parse_job_policy,
)
from phalanx.api.keys import (
    DISRUPTION_MODE_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_VALUE,
    MIN_COUNT_ANNOTATION,
    POLICY_ANNOTATION,
    POLICY_ANNOTATIONS,
    TOPOLOGY_KEY_ANNOTATION,
)

UPSTREAM_GROUP = "scheduling.k8s.io"
UPSTREAM_KINDS = ("Workload", "PodGroup", "CompositePodGroup")
# A document starts at a line that is `---` alone or followed by a space or tab (YAML 1.1/1.2).
_MARKER = re.compile(r"^---(?=[ \t]|\r?$)", re.MULTILINE)


class ConvertError(ValueError):
    """The input cannot be converted; ``problems`` lists every reason, each naming its document."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Converted:
    text: str
    """The output stream."""
    converted: tuple[str, ...]
    """The objects rewritten, e.g. ``Job gang-4``."""
    warnings: tuple[str, ...]
    """Things passed through that a stock cluster will not take as meant (not errors)."""


# ------------------------------------------------------------------ one object


def _where(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind") or "object"
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
    return f"{kind} {name}" if name else str(kind)


def _exactly_one(value: Any, path: str, choices: tuple[str, ...], problems: list[str]) -> str | None:
    """The one member set in an upstream union ({basic: {}} or {gang: {...}}), if it is one of choices."""
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be an object with one of {', '.join(choices)}")
        return None
    unknown = [k for k in value if k not in choices]
    for key in unknown:
        problems.append(f"{path}.{key}: unknown field (expected one of {', '.join(choices)})")
    present = [k for k in choices if value.get(k) is not None]
    if len(present) != 1:
        if not unknown:
            problems.append(f"{path}: exactly one of {', '.join(choices)} must be set")
        return None
    return present[0]


def _empty_object(value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be an object ({{}})")
    else:
        problems.extend(f"{path}.{k}: unknown field (it has no fields in Kubernetes 1.37)" for k in value)


def upstream_problems(scheduling: Any) -> list[str]:
    """What in a Job's `spec.scheduling` (batch/v1, Kubernetes 1.37) Phalanx cannot express, by field."""
    path = "spec.scheduling"
    if not isinstance(scheduling, Mapping):
        return [f"{path}: must be an object"]
    problems: list[str] = []
    for key in scheduling:
        if key == "resourceClaims":
            problems.append(
                f"{path}.resourceClaims: not supported: Phalanx has no PodGroup-shared ResourceClaims "
                "(KEP-5729); give each pod its own claim, or keep this Job on an upstream cluster"
            )
        elif key not in ("schedulingPolicy", "schedulingConstraints", "disruptionMode"):
            problems.append(f"{path}.{key}: unknown field of the upstream Job API (Kubernetes 1.37)")

    policy = scheduling.get("schedulingPolicy")
    if policy is not None:
        chosen = _exactly_one(policy, f"{path}.schedulingPolicy", ("basic", "gang"), problems)
        if chosen == "basic":
            _empty_object(policy["basic"], f"{path}.schedulingPolicy.basic", problems)
        elif chosen == "gang":
            gang = policy["gang"]
            gang_path = f"{path}.schedulingPolicy.gang"
            if not isinstance(gang, Mapping):
                problems.append(f"{gang_path}: must be an object")
            else:
                problems.extend(f"{gang_path}.{k}: unknown field" for k in gang if k != "minCount")
                count = gang.get("minCount")
                if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
                    problems.append(f"{gang_path}.minCount: {count!r} is not an integer of at least 1")

    constraints = scheduling.get("schedulingConstraints")
    if constraints is not None:
        c_path = f"{path}.schedulingConstraints"
        if not isinstance(constraints, Mapping):
            problems.append(f"{c_path}: must be an object")
        else:
            problems.extend(f"{c_path}.{k}: unknown field" for k in constraints if k != "topology")
            topology = constraints.get("topology")
            if topology is not None:
                if not isinstance(topology, list):
                    problems.append(f"{c_path}.topology: must be a list")
                elif len(topology) > 1:
                    problems.append(
                        f"{c_path}.topology: {len(topology)} constraints; at most one is allowed "
                        "(as upstream 1.37)"
                    )
                else:
                    for i, item in enumerate(topology):
                        t_path = f"{c_path}.topology[{i}]"
                        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
                            problems.append(f"{t_path}.key: a label key is required")
                            continue
                        problems.extend(f"{t_path}.{k}: unknown field" for k in item if k != "key")

    mode = scheduling.get("disruptionMode")
    if mode is not None:
        chosen = _exactly_one(mode, f"{path}.disruptionMode", ("single", "all"), problems)
        if chosen is not None:
            _empty_object(mode[chosen], f"{path}.disruptionMode.{chosen}", problems)
    return problems


def _scheduling_group_problem(pod_spec: Any, path: str) -> list[str]:
    if isinstance(pod_spec, Mapping) and pod_spec.get("schedulingGroup") is not None:
        return [
            f"{path}.schedulingGroup: not supported: a stock apiserver drops it, and Phalanx gang-schedules "
            "Jobs (by their label and annotations), not pods that name an upstream PodGroup"
        ]
    return []


def _convert_job_parts(
    metadata: dict[str, Any], spec: dict[str, Any], *, spec_path: str = "spec"
) -> tuple[bool, list[str], list[str]]:
    """Rewrite one Job's metadata and spec in place: (changed, problems, warnings). No spec.scheduling:
    unchanged. Nothing is changed when there are problems."""
    problems = _scheduling_group_problem(
        ((spec.get("template") or {}).get("spec")), f"{spec_path}.template.spec"
    )
    scheduling = spec.get("scheduling")
    if scheduling is None:  # absent, or null: a plain Job upstream too
        return False, problems, []
    found = upstream_problems(scheduling)
    problems.extend(p.replace("spec.scheduling", f"{spec_path}.scheduling", 1) for p in found)
    parallelism = spec.get("parallelism")
    if parallelism is not None and (isinstance(parallelism, bool) or not isinstance(parallelism, int)):
        problems.append(f"{spec_path}.parallelism: {parallelism!r} is not an integer")
    if problems:
        return False, problems, []
    template_spec = (spec.get("template") or {}).get("spec") or {}
    # Check the request as Phalanx's webhook will, in the words of its annotations.
    try:
        parse_job_policy({"metadata": {"annotations": _literal_annotations(scheduling)}, "spec": spec})
    except JobPolicyError as e:
        return False, [f"{spec_path}.scheduling: Phalanx would refuse the converted Job: {e}"], []
    policy = from_upstream_scheduling(
        scheduling, parallelism=parallelism, priority_class_name=template_spec.get("priorityClassName")
    )
    wanted = annotations_for(policy)
    labels = dict(metadata.get("labels") or {})
    annotations = dict(metadata.get("annotations") or {})
    for name in POLICY_ANNOTATIONS:
        if name not in annotations:
            continue
        have = str(annotations[name]).strip()
        if name in wanted:
            agrees = have == wanted[name]
        else:  # min-count left out because it is the default: a written one must say the same
            agrees = name == MIN_COUNT_ANNOTATION and have == str(policy.min_count)
        if not agrees:
            asks = repr(wanted[name]) if name in wanted else "no such annotation"
            problems.append(
                f"metadata.annotations[{name}]: {annotations[name]!r} disagrees with spec.scheduling, "
                f"which asks for {asks}; remove the annotation or the field"
            )
    if problems:
        return False, problems, []
    labels[MANAGED_LABEL] = MANAGED_VALUE
    annotations.update({name: wanted[name] for name in POLICY_ANNOTATIONS if name in wanted})
    converted_spec = {k: v for k, v in spec.items() if k != "scheduling"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**metadata, "labels": labels, "annotations": annotations},
        "spec": converted_spec,
    }
    # The whole converted Job, as Phalanx's webhook will check it (its annotations already there too).
    refused = [
        f"Phalanx's webhook would refuse the converted Job: {_at(problem, spec_path)}"
        for problem in job_creation_problems(job)
    ]
    if refused:
        return False, refused, []
    warnings = []
    if policy.is_gang:
        warnings = [
            f"Phalanx's webhook refuses this gang unless it runs with --scheduler-names listing that "
            f"scheduler (the default is {DEFAULT_SCHEDULER}): {_at(problem, spec_path)}"
            for problem in scheduler_problems(converted_spec, (DEFAULT_SCHEDULER,))
        ]
    metadata["labels"] = labels
    metadata["annotations"] = annotations
    del spec["scheduling"]

    return True, [], warnings


def _at(problem: str, spec_path: str) -> str:
    """A problem that names a field of a Job (`spec.…`, `metadata.…`) named where the Job is (a CronJob's
    `spec.jobTemplate.spec.…`)."""
    if spec_path == "spec":
        return problem
    meta_path = spec_path.removesuffix(".spec") + ".metadata"
    if problem.startswith("spec."):
        return spec_path + problem.removeprefix("spec")
    if problem.startswith("metadata."):
        return meta_path + problem.removeprefix("metadata")
    return problem


def _literal_annotations(scheduling: Mapping[str, Any]) -> dict[str, str]:
    """The annotations that say what `scheduling` says, word for word (a given minCount is written)."""
    policy = scheduling.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    annotations = {
        POLICY_ANNOTATION: POLICY_GANG if gang is not None else POLICY_BASIC,
        DISRUPTION_MODE_ANNOTATION: MODE_ALL
        if "all" in (scheduling.get("disruptionMode") or {})
        else MODE_SINGLE,
    }
    if gang is not None and gang.get("minCount") is not None:
        annotations[MIN_COUNT_ANNOTATION] = str(gang["minCount"])
    topology = (scheduling.get("schedulingConstraints") or {}).get("topology") or []
    if topology:
        annotations[TOPOLOGY_KEY_ANNOTATION] = topology[0]["key"]
    return annotations


def convert_object(obj: Any) -> tuple[Any, list[str], list[str], list[str]]:
    """(result, converted, problems, warnings) for one decoded document; `obj` is not modified."""
    if not isinstance(obj, Mapping):
        return obj, [], [], []
    kind = obj.get("kind")
    api_version = str(obj.get("apiVersion") or "")
    if kind == "List" and isinstance(obj.get("items"), list):
        result = dict(obj)
        items: list[Any] = []
        converted: list[str] = []
        problems: list[str] = []
        warnings: list[str] = []
        for i, item in enumerate(obj["items"]):
            new, done, found, warned = convert_object(item)
            items.append(new)
            converted += done
            problems += [
                f"items[{i}] ({_where(item) if isinstance(item, Mapping) else 'item'}): {p}" for p in found
            ]
            warnings += [f"items[{i}]: {w}" for w in warned]
        result["items"] = items
        return (result if converted else obj), converted, problems, warnings

    if api_version.split("/")[0] == UPSTREAM_GROUP and kind in UPSTREAM_KINDS:
        return (
            obj,
            [],
            [],
            [
                f"{api_version} {kind} passed through unchanged: a stock apiserver does not serve it "
                f"(kubectl apply will refuse it); Phalanx makes its own Workload and PodGroup for each "
                "converted Job"
            ],
        )

    result = copy.deepcopy(dict(obj))
    metadata = result.get("metadata")
    spec = result.get("spec")
    if kind == "Job" and api_version.startswith("batch/") and isinstance(spec, dict):
        if not isinstance(metadata, dict):
            metadata = result["metadata"] = {}
        changed, problems, warnings = _convert_job_parts(metadata, spec)
        return (result if changed else obj), ([_where(obj)] if changed else []), problems, warnings
    if kind == "CronJob" and api_version.startswith("batch/") and isinstance(spec, dict):
        template = spec.get("jobTemplate")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            if not isinstance(template.get("metadata"), dict):
                template["metadata"] = {}
            changed, problems, warnings = _convert_job_parts(
                template["metadata"], template["spec"], spec_path="spec.jobTemplate.spec"
            )
            return (result if changed else obj), ([_where(obj)] if changed else []), problems, warnings
    if kind == "Pod" and isinstance(spec, Mapping):
        return obj, [], _scheduling_group_problem(spec, "spec"), []
    if isinstance(spec, Mapping) and isinstance(spec.get("template"), Mapping):
        return obj, [], _scheduling_group_problem(spec["template"].get("spec"), "spec.template.spec"), []
    return obj, [], [], []


# ------------------------------------------------------------------ streams


def split_documents(text: str) -> list[str]:
    """The stream cut before each `---` marker line; joined together they give `text` back."""
    starts = [m.start() for m in _MARKER.finditer(text)]
    bounds = [0, *[s for s in starts if s > 0], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)


def _rewrite_chunk(chunk: str, obj: Any) -> str:
    """The converted object in place of `chunk`, keeping its `---` line and the comments before it."""
    lines = chunk.splitlines(keepends=True)
    head: list[str] = []
    if lines and _MARKER.match(lines[0]):
        marker = lines.pop(0)
        rest = marker[3:].strip()
        head.append(marker if not rest or rest.startswith("#") else "---\n")
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            break
        head.append(line)
    if head and not head[-1].endswith("\n"):
        head[-1] += "\n"
    return "".join(head) + _dump(obj)


def convert_text(text: str, source: str = "-") -> Converted:
    """Convert a YAML stream; raises ConvertError naming every document that cannot be converted."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise ConvertError([f"{source}: not valid YAML: {e}"]) from e
    chunks = split_documents(text)
    parsed: list[Any] = []
    try:
        parsed = [yaml.safe_load(c) for c in chunks]
    except yaml.YAMLError:
        parsed = []
    # Copy untouched documents byte for byte when the marker lines cut the stream as YAML does.
    verbatim = [d for d in parsed if d is not None] == [d for d in documents if d is not None]

    out_objects: list[Any] = []
    converted: list[str] = []
    problems: list[str] = []
    warnings: list[str] = []
    number = 0
    for obj in parsed if verbatim else documents:
        if obj is None:
            out_objects.append(None)
            continue
        number += 1
        label = f"{source}: document {number}" + (f" ({_where(obj)})" if isinstance(obj, Mapping) else "")
        new, done, found, warned = convert_object(obj)
        out_objects.append(new if done else obj)
        converted += done
        problems += [f"{label}: {p}" for p in found]
        warnings += [f"{label}: {w}" for w in warned]
    if problems:
        raise ConvertError(problems)

    if verbatim:
        parts = [
            _rewrite_chunk(chunk, new) if new is not original else chunk
            for chunk, original, new in zip(chunks, parsed, out_objects, strict=True)
        ]
        # Each rewritten part ends with a newline; a copied one may not, before the next marker.
        for i in range(len(parts) - 1):
            if not parts[i].endswith("\n"):
                parts[i] += "\n"
        output = "".join(parts)
    else:
        output = "---\n".join(_dump(o) for o in out_objects if o is not None)
    return Converted(output, tuple(converted), tuple(warnings))
