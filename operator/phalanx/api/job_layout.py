"""A Job's topology mode and slices, read from its annotations (beside `job_policy`, which they refine).

- ``phalanx.dev/topology-mode: required | preferred | auto`` (default required): with preferred, a gang
  whose ``phalanx.dev/topology-key`` domain is full climbs to the next wider level of the key's Topology
  (and then anywhere) instead of waiting; with auto, the key is required when the gang can ever fit one
  of its domains on this cluster's nodes (their allocatable), else the narrowest wider level where it can
  (NVLink racks: a 4-node job waits for a rack of its own, a 32-node job takes the fewest racks).
- ``phalanx.dev/slice-size: N`` with ``phalanx.dev/slice-topology-key: <label>``: the Job is placed as a
  CompositePodGroup of parallelism / N PodGroups (slices), each slice inside one domain of the slice key,
  all slices inside one domain of ``phalanx.dev/topology-key`` (when given). Completion index i belongs
  to slice i // N, so ranks that talk most share the tightest domain. Slices need an Indexed Job (a
  NonIndexed Job's pods have no rank to assign them by), policy gang, a size that divides parallelism,
  the whole Job as the gang (min-count unset or equal to parallelism), and completions equal to
  parallelism (one wave: the tree is placed once; waves are refused, not placed one by one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from phalanx.api.formats import label_key_problems
from phalanx.api.job_policy import JobPolicy, JobPolicyError, PolicyProblem, bounded_int, out_of_range
from phalanx.api.keys import (
    MIN_COUNT_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    SLICE_TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
)
from phalanx.bodies import mapping

TopologyModeKind = Literal["required", "preferred", "auto"]
REQUIRED: Final = "required"
PREFERRED: Final = "preferred"
AUTO: Final = "auto"
TOPOLOGY_MODES: Final = get_args(TopologyModeKind)
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class JobLayout:
    topology_mode: TopologyModeKind = REQUIRED
    slice_size: int | None = None
    slice_topology_key: str | None = None

    @property
    def sliced(self) -> bool:
        return self.slice_size is not None

    def slices(self, parallelism: int) -> int:
        return max(1, parallelism // self.slice_size) if self.slice_size else 1


NO_LAYOUT: Final = JobLayout()


def group_topology_mode(meta: Mapping[str, Any]) -> TopologyModeKind:
    """The topology mode a PodGroup keeps in its `phalanx.dev/topology-mode` annotation (required if none):
    a Job's mode as it was when Phalanx made the group (a later change on the Job is not applied)."""
    mode = mapping(meta.get("annotations")).get(TOPOLOGY_MODE_ANNOTATION)
    return PREFERRED if mode == PREFERRED else AUTO if mode == AUTO else REQUIRED


def parse_job_layout(job: Mapping[str, Any], policy: JobPolicy) -> JobLayout:
    """The Job's topology mode and slices; raises JobPolicyError naming every field at fault."""
    meta = mapping(job.get("metadata"))
    annotations = mapping(meta.get("annotations"))
    spec = mapping(job.get("spec"))
    problems: list[PolicyProblem] = []

    def problem(annotation: str, text: str) -> None:
        problems.append(PolicyProblem(annotation, text))

    def value(name: str) -> str | None:
        raw = annotations.get(name)
        return None if raw is None else str(raw).strip()

    mode: TopologyModeKind = REQUIRED
    raw_mode = value(TOPOLOGY_MODE_ANNOTATION)
    if raw_mode is not None:
        if raw_mode not in TOPOLOGY_MODES:
            problem(TOPOLOGY_MODE_ANNOTATION, f'"{raw_mode}" is not one of {", ".join(TOPOLOGY_MODES)}')
        elif policy.topology_key is None:
            problem(
                TOPOLOGY_MODE_ANNOTATION,
                f"needs {TOPOLOGY_KEY_ANNOTATION}: it says how strictly that key holds",
            )
        else:
            mode = PREFERRED if raw_mode == PREFERRED else AUTO if raw_mode == AUTO else REQUIRED

    size: int | None = None
    raw_size = value(SLICE_SIZE_ANNOTATION)
    slice_key = value(SLICE_TOPOLOGY_KEY_ANNOTATION)
    if raw_size is not None:
        digits = raw_size.isascii() and raw_size.isdigit()  # "١" is a digit to isdigit
        number = bounded_int(raw_size) if digits else None
        if not digits or (number is not None and number < 1):
            problem(SLICE_SIZE_ANNOTATION, f'"{raw_size}" is not a positive integer')
        elif number is None:
            problem(SLICE_SIZE_ANNOTATION, out_of_range(raw_size))
        else:
            size = number
    if slice_key is not None:
        why = label_key_problems(slice_key)
        if why:
            problem(
                SLICE_TOPOLOGY_KEY_ANNOTATION, f'"{slice_key}" is not a valid label key: {"; ".join(why)}'
            )
        elif slice_key == policy.topology_key:
            problem(
                SLICE_TOPOLOGY_KEY_ANNOTATION,
                f"is the same label as {TOPOLOGY_KEY_ANNOTATION}: slices need a tighter domain than the "
                "Job's",
            )
    if (raw_size is None) != (slice_key is None):
        missing = SLICE_TOPOLOGY_KEY_ANNOTATION if slice_key is None else SLICE_SIZE_ANNOTATION
        present = SLICE_SIZE_ANNOTATION if slice_key is None else SLICE_TOPOLOGY_KEY_ANNOTATION
        problem(present, f"needs {missing} too (a slice is a number of pods inside one domain of a label)")
    if raw_size is not None and slice_key is not None:
        parallelism = policy.parallelism
        if not policy.is_gang:
            problem(SLICE_SIZE_ANNOTATION, "slices need policy gang (the Job is placed as a whole)")
        elif policy.min_count != parallelism and MIN_COUNT_ANNOTATION in annotations:
            problem(
                MIN_COUNT_ANNOTATION,
                f"{policy.min_count} differs from parallelism {parallelism}: slices place the whole Job, "
                "leave min-count unset",
            )
        if size is not None and parallelism % size:
            problem(SLICE_SIZE_ANNOTATION, f"{size} does not divide parallelism {parallelism}")
        completions = spec.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool) and completions != parallelism:
            # The tree is made once, for parallelism / slice-size slices: a later wave's indices (>=
            # parallelism) would join no slice and stay gated; fewer completions never fill the slices.
            problem(
                "spec.completions",
                f"{completions} differs from parallelism {parallelism}: a sliced Job is placed as one tree "
                "of its parallelism's slices, once, so the indices of later waves would belong to no slice; "
                "run each wave as its own Job (completions = parallelism), or leave slice-size unset",
            )
        if spec.get("completionMode") != "Indexed":
            problem(
                "spec.completionMode",
                "slices need completionMode Indexed: completion index i goes to slice i // slice-size, and "
                "a NonIndexed Job's pods have no index to assign them by",
            )
        if mode in (PREFERRED, AUTO):
            problem(TOPOLOGY_MODE_ANNOTATION, f"{mode} is not supported with slices (each slice is required)")
    if problems:
        raise JobPolicyError.of(problems)
    return JobLayout(mode, size if slice_key is not None else None, slice_key if size is not None else None)
