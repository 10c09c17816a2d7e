"""A Job's Phalanx policy: read from its annotations, checked, and rendered as upstream's spec.scheduling.

A Job opts in with the label ``phalanx.dev/managed: "true"`` and tunes the policy with
``phalanx.dev/*`` annotations (see ``phalanx.api.keys``). Every problem is reported at once, each naming
its field (``metadata.annotations[phalanx.dev/min-count]: ...``), so a user fixes the Job in one go.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar, get_args

from phalanx.api.formats import label_key_problems
from phalanx.api.keys import (
    DISRUPTION_MODE_ANNOTATION,
    JOB_ANNOTATIONS,
    JOB_LABELS,
    MANAGED_LABEL,
    MANAGED_VALUE,
    MIN_COUNT_ANNOTATION,
    ON_SCALE_UP_ANNOTATION,
    POLICY_ANNOTATION,
    PREEMPTION_POLICY_ANNOTATION,
    PREFIX,
    TOPOLOGY_KEY_ANNOTATION,
    UNMANAGED_VALUE,
    WRITTEN_BY_PHALANX,
)
from phalanx.api.scheduling import HIGHEST_USER_PRIORITY, INT32_MAX
from phalanx.api.suggest import closest, edit_distance
from phalanx.bodies import mapping

PolicyKind = Literal["gang", "basic"]
DisruptionModeKind = Literal["single", "all"]
PreemptionPolicyKind = Literal["PreemptLowerPriority", "Never"]
ScaleUpKind = Literal["wait", "requeue"]
POLICY_GANG: Final = "gang"
POLICY_BASIC: Final = "basic"
MODE_SINGLE: Final = "single"
MODE_ALL: Final = "all"
DEFAULT_POLICY: PolicyKind = POLICY_GANG
DEFAULT_DISRUPTION_MODE: DisruptionModeKind = MODE_SINGLE
SCALE_UP_WAIT: Final = "wait"
SCALE_UP_REQUEUE: Final = "requeue"

_INTEGER = re.compile(r"[+-]?[0-9]+")
SYSTEM_PRIORITY_CLASS_PREFIX: Final = "system-"
_T = TypeVar("_T", bound=str)
KeyPlace = Literal["annotation", "label", "field"]


@dataclass(frozen=True)
class PolicyProblem:
    """One thing wrong with one annotation, label or spec field of a Job."""

    annotation: str
    """The annotation or label key (``phalanx.dev/min-count``), or a field path (``spec.parallelism``)."""
    problem: str
    place: KeyPlace | None = None
    """Where it is; None: an annotation, or a field when the name is a path (``spec.``, ``metadata.``)."""

    @property
    def field(self) -> str:
        """The field at fault, named as the apiserver does: ``metadata.annotations[phalanx.dev/policy]``."""
        place = self.place
        if place is None:
            place = "field" if self.annotation.startswith(("spec.", "metadata.")) else "annotation"
        if place == "label":
            return f"metadata.labels[{self.annotation}]"
        if place == "annotation":
            return f"metadata.annotations[{self.annotation}]"
        return self.annotation

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


class JobPolicyError(ValueError):
    """A Job's Phalanx annotations are invalid; ``str()`` names every field and problem."""

    def __init__(self, annotation: str, problem: str, *more: PolicyProblem) -> None:
        self.problems: tuple[PolicyProblem, ...] = (PolicyProblem(annotation, problem), *more)
        super().__init__("; ".join(str(p) for p in self.problems))

    @classmethod
    def of(cls, problems: Sequence[PolicyProblem]) -> JobPolicyError:
        first, *rest = problems
        error = cls(first.annotation, first.problem, *rest)
        if first.place is not None:  # keep where the first one is, which the constructor cannot say
            error.problems = (first, *rest)
            error.args = ("; ".join(str(p) for p in error.problems),)
        return error

    @property
    def annotation(self) -> str:
        """The first annotation at fault."""
        return self.problems[0].annotation

    @property
    def problem(self) -> str:
        """What is wrong with the first annotation at fault."""
        return self.problems[0].problem

    @property
    def annotations(self) -> tuple[str, ...]:
        """Every annotation at fault, in the order reported."""
        return tuple(p.annotation for p in self.problems)

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field at fault (``metadata.annotations[...]``, ``metadata.labels[...]``, ``spec...``)."""
        return tuple(p.field for p in self.problems)


@dataclass(frozen=True)
class JobPolicy:
    """How Phalanx schedules one Job's pods."""

    policy: PolicyKind = DEFAULT_POLICY
    min_count: int | None = 1
    """Pods admitted together; None for basic."""
    topology_key: str | None = None
    """The node label all pods must share a value of; None for anywhere."""
    disruption_mode: DisruptionModeKind = DEFAULT_DISRUPTION_MODE
    priority_class_name: str | None = None
    """From the pod template."""
    preemption_policy: PreemptionPolicyKind | None = None
    """From the annotation; None: the PriorityClass's (PreemptLowerPriority without one)."""
    parallelism: int = 1
    """The Job's parallelism (1 when unset)."""
    on_scale_up: ScaleUpKind = SCALE_UP_WAIT
    """A running gang scaled up whose new pods do not fit beside the running ones: they wait (`wait`), or
    the whole gang is requeued to be placed again whole at its new size (`requeue`)."""

    def __post_init__(self) -> None:
        # A JobPolicy is always a valid one, however it was made.
        if self.policy == POLICY_GANG:
            if self.min_count is None or not 1 <= self.min_count <= max(self.parallelism, 1):
                raise ValueError(f"gang needs 1 <= min_count <= parallelism, got {self.min_count}")
        elif self.min_count is not None:
            raise ValueError("min_count only applies to gang")
        if self.policy == POLICY_BASIC and self.disruption_mode == MODE_ALL:
            raise ValueError("disruption mode all needs policy gang")
        if self.policy == POLICY_BASIC and self.topology_key is not None:
            raise ValueError("a topology key needs policy gang")
        if self.policy == POLICY_BASIC and self.on_scale_up != SCALE_UP_WAIT:
            raise ValueError("on-scale-up requeue needs policy gang")
        if self.topology_key is not None and label_key_problems(self.topology_key):
            raise ValueError(f"{self.topology_key!r} is not a valid label key")

    @property
    def is_gang(self) -> bool:
        return self.policy == POLICY_GANG


def is_managed(job: Mapping[str, Any]) -> bool:
    """Whether the Job opted in to Phalanx with the managed label."""
    labels = mapping(mapping(job.get("metadata")).get("labels"))
    return labels.get(MANAGED_LABEL) == MANAGED_VALUE


def default_min_count(parallelism: int) -> int:
    """The gang size when min-count is not given: all of parallelism, and at least 1 (as upstream)."""
    return max(1, parallelism)


def key_problems(
    job: Mapping[str, Any], *, creating: bool = True, annotations: tuple[str, ...] = JOB_ANNOTATIONS
) -> list[PolicyProblem]:
    """The Job's ``phalanx.dev/`` keys Phalanx does not know, or finds in the wrong place, each with a
    did-you-mean; a managed label that is neither true nor false; a key only Phalanx writes, set at creation.

    A misspelt key would otherwise be ignored in silence and the Job scheduled other than asked.
    `annotations`: the Phalanx annotations this kind of object takes (a Job's by default).
    """
    meta = mapping(job.get("metadata"))
    problems: list[PolicyProblem] = []
    sides: tuple[tuple[KeyPlace, tuple[str, ...], tuple[str, ...]], ...] = (
        ("annotation", annotations, JOB_LABELS),
        ("label", JOB_LABELS, annotations),
    )
    for place, own, other in sides:
        keys = mapping(meta.get(f"{place}s"))
        for raw_key, value in keys.items():
            key = str(raw_key)
            text = _key_problem(key, place, own, other, creating)
            if text:
                problems.append(PolicyProblem(key, text, place))
            elif place == "label" and key == MANAGED_LABEL:
                text = _managed_value_problem(value)
                if text:
                    problems.append(PolicyProblem(key, text, "label"))
    return problems


def _key_problem(key: str, place: KeyPlace, own: Sequence[str], other: Sequence[str], creating: bool) -> str:
    other_place = "label" if place == "annotation" else "annotation"
    if key in own:
        if creating and key in WRITTEN_BY_PHALANX:
            return "is written by Phalanx when it requeues the Job, not by users; remove it"
        return ""
    if key in other:
        return (
            f"is {_a(other_place)}, not {_a(place)}: Phalanx does not read it here "
            f"(move it to metadata.{other_place}s)"
        )
    prefix, _, name = key.rpartition("/")
    if prefix == PREFIX:
        return f"unknown Phalanx {place}" + _suggestion(name, place, own, other, show_known=True)
    if prefix and _looks_like_our_prefix(prefix):
        hint = _suggestion(name, place, own, other, show_known=False)
        if hint:  # a key of somebody else's that merely resembles ours is left alone
            return f"Phalanx reads {PREFIX}/ keys only, so this one is ignored" + hint
    return ""


def _looks_like_our_prefix(prefix: str) -> bool:
    lowered = prefix.lower()
    return "phalanx" in lowered or edit_distance(lowered, PREFIX) <= 2


def _suggestion(
    name: str, place: KeyPlace, own: Sequence[str], other: Sequence[str], show_known: bool
) -> str:
    names = {k.rpartition("/")[2]: k for k in (*own, *other) if k not in WRITTEN_BY_PHALANX}
    match = closest(name, names)
    if match is not None:
        key = names[match]
        where = "" if key in own else f" ({_a(_place_of(key))})"
        return f"; did you mean {key}{where}?"
    if not show_known:
        return ""
    known = [k for k in own if k not in WRITTEN_BY_PHALANX]
    return f"; the known {place}s are {', '.join(known)}"


def _a(place: str) -> str:
    return f"an {place}" if place[0] in "aeiou" else f"a {place}"


def _place_of(key: str) -> str:
    return "label" if key in JOB_LABELS else "annotation"


def managed_label_problem(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    """What an edit of an object's managed label does wrong ("" when nothing): a value other than true or
    false, as at creation (a misspelt value would let go of the gang in silence). A value the object
    already had (made around the webhook) is not said again: its other edits and Phalanx's writes pass."""
    labels = mapping(mapping(new.get("metadata")).get("labels"))
    if MANAGED_LABEL not in labels:
        return ""  # removed: opting out is allowed
    value = labels[MANAGED_LABEL]
    before = mapping(mapping(old.get("metadata")).get("labels")) if old is not None else {}
    if MANAGED_LABEL in before and str(before[MANAGED_LABEL]) == str(value):
        return ""
    problem = _managed_value_problem(value)
    return str(PolicyProblem(MANAGED_LABEL, problem, "label")) if problem else ""


def managed_by_label(labels: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether an object's managed label keeps it managed, and what is wrong with its value ("" when
    nothing): `true` manages it, no label or `false` lets it go. Any other value is refused by the webhooks
    (a misspelt `true` would let its gang go pod by pod), but they fail open while no replica answers: such
    an object stays managed — its pods stay held, its gangs placed whole — and says why."""
    if MANAGED_LABEL not in labels:
        return False, ""
    value = labels[MANAGED_LABEL]
    problem = _managed_value_problem(value)
    if not problem:
        return str(value) == MANAGED_VALUE, ""
    said = str(PolicyProblem(MANAGED_LABEL, problem, "label"))
    return True, (
        f"{said}{' ' if said.endswith('?') else '; '}Phalanx goes on holding its pods and placing its gangs "
        f"whole until the label is {MANAGED_VALUE}, or {UNMANAGED_VALUE} (or removed) to let it go"
    )


def _managed_value_problem(value: Any) -> str:
    text = str(value)
    if text in (MANAGED_VALUE, UNMANAGED_VALUE):
        return ""
    hint = ""
    match = closest(text, (MANAGED_VALUE, UNMANAGED_VALUE), limit=1)
    if match is not None:
        hint = f"; did you mean {match}?"
    return (
        f"{_quote(text)} is not one of {MANAGED_VALUE}, {UNMANAGED_VALUE} (values are case-sensitive: "
        f"{MANAGED_VALUE} opts the Job in, {UNMANAGED_VALUE} or no label leaves it alone){hint}"
    )


def parse_job_policy(job: Mapping[str, Any], *, running: bool = False) -> JobPolicy:
    """The policy a Job asks for; raises JobPolicyError listing every invalid annotation.

    `running`: the Job exists and may have been scaled below its min-count (to drain it, say); the gang
    then clamps to what the Job runs at once, as for its last wave, instead of being an error. At
    creation (`running=False`) such a min-count is refused, and so are unknown ``phalanx.dev/`` keys
    (see `key_problems`); a running Job is judged on what it asks for, not on keys it was created with.
    """
    problems: list[PolicyProblem] = []

    def problem(annotation: str, text: str) -> None:
        problems.append(PolicyProblem(annotation, text))

    raw_meta = job.get("metadata")
    meta = mapping(raw_meta)
    raw_annotations = meta.get("annotations")
    annotations = mapping(raw_annotations)
    if raw_meta is not None and not isinstance(raw_meta, Mapping):
        problem("metadata", "must be an object")
    if raw_annotations is not None and not isinstance(raw_annotations, Mapping):
        problem("metadata.annotations", "must be a map of strings to strings")
    if not running:
        problems.extend(key_problems(job))
    raw_spec = job.get("spec")
    if raw_spec is not None and not isinstance(raw_spec, Mapping):
        problem("spec", "must be an object")
    spec = mapping(raw_spec)

    parallelism = spec.get("parallelism")
    if parallelism is None:
        parallelism = 1
    elif isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 0:
        problem("spec.parallelism", f"{parallelism!r} is not a non-negative integer")
        parallelism = 1

    # The Job never runs more pods at once than it has completions left to make.
    completions = spec.get("completions")
    at_once = parallelism
    if isinstance(completions, int) and not isinstance(completions, bool) and 0 <= completions < parallelism:
        at_once = completions

    raw_policy = _value(annotations, POLICY_ANNOTATION)
    policy: PolicyKind | None = DEFAULT_POLICY
    if raw_policy is not None:
        policy = _choice(raw_policy, get_args(PolicyKind))
        if policy is None:
            problem(POLICY_ANNOTATION, f"{_quote(raw_policy)} is not one of {_listing(PolicyKind)}")
    policy_text = f"{POLICY_ANNOTATION} is {POLICY_BASIC}"

    raw_min = _value(annotations, MIN_COUNT_ANNOTATION)
    min_count: int | None = default_min_count(at_once)
    if raw_min is not None:
        if policy == POLICY_BASIC:
            problem(MIN_COUNT_ANNOTATION, f"{_quote(raw_min)} only applies to policy gang, but {policy_text}")
        elif not _INTEGER.fullmatch(raw_min):
            problem(MIN_COUNT_ANNOTATION, f"{_quote(raw_min)} is not an integer")
        elif (value := bounded_int(raw_min)) is None:
            problem(MIN_COUNT_ANNOTATION, out_of_range(raw_min))
        else:
            min_count = value
            if min_count < 1:
                problem(MIN_COUNT_ANNOTATION, f"{min_count} must be at least 1")
            elif running and min_count > at_once:
                min_count = default_min_count(at_once)
            elif min_count > parallelism:
                problem(MIN_COUNT_ANNOTATION, f"{min_count} is greater than parallelism {parallelism}")
            elif min_count > at_once:
                problem(MIN_COUNT_ANNOTATION, f"{min_count} is greater than completions {at_once}")

    topology_key = _value(annotations, TOPOLOGY_KEY_ANNOTATION)
    if topology_key is not None:
        bad_key = node_label_problem(TOPOLOGY_KEY_ANNOTATION, topology_key)
        if bad_key is not None:
            problems.append(bad_key)
        elif policy == POLICY_BASIC:
            # A basic group's pods are placed one by one by kube-scheduler, which knows no group domain:
            # accepting the key would promise one domain and not keep it.
            problem(
                TOPOLOGY_KEY_ANNOTATION,
                f"{_quote(topology_key)} needs policy gang (pods placed one by one cannot be held in one "
                f"domain), but {policy_text}",
            )

    raw_mode = _value(annotations, DISRUPTION_MODE_ANNOTATION)
    mode: DisruptionModeKind | None = DEFAULT_DISRUPTION_MODE
    if raw_mode is not None:
        mode = _choice(raw_mode, get_args(DisruptionModeKind))
        if mode is None:
            choices = _listing(DisruptionModeKind)
            problem(DISRUPTION_MODE_ANNOTATION, f"{_quote(raw_mode)} is not one of {choices}")
        elif mode == MODE_ALL and policy == POLICY_BASIC:
            # KEP-5710: a basic group's pods are independent, so they cannot be disrupted as one.
            problem(DISRUPTION_MODE_ANNOTATION, f"{_quote(raw_mode)} needs policy gang, but {policy_text}")

    raw_preemption = _value(annotations, PREEMPTION_POLICY_ANNOTATION)
    preemption: PreemptionPolicyKind | None = None
    if raw_preemption is not None:
        preemption = _choice(raw_preemption, get_args(PreemptionPolicyKind))
        if preemption is None:
            choices = _listing(PreemptionPolicyKind)
            problem(PREEMPTION_POLICY_ANNOTATION, f"{_quote(raw_preemption)} is not one of {choices}")
        elif policy == POLICY_BASIC and not running:
            # Phalanx never preempts for a basic group: kube-scheduler places its pods one by one, with
            # their PriorityClass's preemptionPolicy. Accepting the annotation would promise what is not done.
            problem(
                PREEMPTION_POLICY_ANNOTATION,
                f"{_quote(raw_preemption)} only applies to policy gang (kube-scheduler places a basic "
                f"group's pods one by one, with their PriorityClass's preemptionPolicy), but {policy_text}",
            )

    on_scale_up = _scale_up(annotations, policy, policy_text, problem)
    template_spec = mapping(mapping(spec.get("template")).get("spec"))
    priority_class = template_spec.get("priorityClassName")
    system = priority_class_problem(priority_class, "spec.template.spec.priorityClassName", "Job")
    if system is not None:
        problems.append(system)
    if problems:
        raise JobPolicyError.of(problems)
    assert policy is not None and mode is not None  # every None above was recorded as a problem
    return JobPolicy(
        policy=policy,
        min_count=min_count if policy == POLICY_GANG else None,
        topology_key=topology_key,
        disruption_mode=mode,
        priority_class_name=priority_class if isinstance(priority_class, str) and priority_class else None,
        preemption_policy=preemption,
        parallelism=parallelism,
        on_scale_up=on_scale_up,
    )


def bounded_int(digits: str) -> int | None:
    """An annotation's integer (ASCII digits, a sign allowed), or None when it has more digits than any
    32-bit integer: no field Phalanx fills takes such a value, and Python refuses to read one of more than
    4300 digits (a ValueError, which the webhook would answer with a 500 naming no field)."""
    significant = digits.lstrip("+-").lstrip("0")  # leading zeros count towards Python's limit too
    if len(significant) > len(str(INT32_MAX)):
        return None
    return int(("-" if digits.startswith("-") else "") + (significant or "0"))


def out_of_range(digits: str) -> str:
    """What is wrong with an integer `bounded_int` refuses (quoted in part: it may be thousands of digits)."""
    shown = _quote(digits) if len(digits) <= 24 else f"{_quote(digits[:24] + '...')} ({len(digits)} digits)"
    return f"{shown} is out of range: more digits than a 32-bit integer has (at most {INT32_MAX})"


def priority_class_problem(name: Any, field: str, owner: str) -> PolicyProblem | None:
    """A pod template of a gang naming a system PriorityClass. The apiserver keeps the `system-` names for
    its own two classes (2000000000 and 2000001000, never a global default); every other class is at most
    HIGHEST_USER_PRIORITY, which is also the most a PodGroup's priority may be, upstream's and Phalanx's
    alike: the gang's groups could not be made with such a class."""
    if not isinstance(name, str) or not name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        return None
    return PolicyProblem(
        field,
        f"{_quote(name)} is a system PriorityClass, whose value is above {HIGHEST_USER_PRIORITY}, the "
        "highest priority a PodGroup may have (as upstream's), so Phalanx cannot make the gang's groups; use "
        f"a PriorityClass of your own, or create the {owner} without the {MANAGED_LABEL} label",
        "field",
    )


def node_label_problem(annotation: str, value: str) -> PolicyProblem | None:
    """What is wrong with `value` as the node label an annotation names (a topology key), worded alike for
    every kind: a key the builders would put in a PodGroup must be one the apiserver takes, or the plan could
    not make the group. `value` as the kinds read it, without surrounding whitespace."""
    why = label_key_problems(value)
    if not why:
        return None
    return PolicyProblem(annotation, f"{_quote(value)} is not a valid label key: {'; '.join(why)}")


def _scale_up(
    annotations: Mapping[str, Any],
    policy: PolicyKind | None,
    policy_text: str,
    problem: Callable[[str, str], None],
) -> ScaleUpKind:
    """`phalanx.dev/on-scale-up`: one of its values, and `requeue` only for a gang (a basic group's pods
    are placed one by one: there is no whole to requeue)."""
    raw = _value(annotations, ON_SCALE_UP_ANNOTATION)
    if raw is None:
        return SCALE_UP_WAIT
    chosen: ScaleUpKind | None = _choice(raw, get_args(ScaleUpKind))
    if chosen is None:
        problem(ON_SCALE_UP_ANNOTATION, f"{_quote(raw)} is not one of {_listing(ScaleUpKind)}")
        return SCALE_UP_WAIT
    if chosen == SCALE_UP_REQUEUE and policy == POLICY_BASIC:
        problem(
            ON_SCALE_UP_ANNOTATION,
            f"{_quote(raw)} needs policy gang (a basic group's pods are placed one by one, so there is no "
            f"whole gang to requeue), but {policy_text}",
        )
        return SCALE_UP_WAIT
    return chosen


def _value(annotations: Mapping[str, Any], name: str) -> str | None:
    value = annotations.get(name)
    # Annotation values are strings; surrounding whitespace is a YAML accident, not a choice.
    return None if value is None else str(value).strip()


def _choice(value: str, choices: tuple[_T, ...]) -> _T | None:
    return next((c for c in choices if c == value), None)


def _listing(choices: Any) -> str:
    return ", ".join(get_args(choices))


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def annotations_for(policy: JobPolicy) -> dict[str, str]:
    """The annotations that make parse_job_policy return ``policy`` (for the same Job spec)."""
    annotations: dict[str, str] = {
        POLICY_ANNOTATION: policy.policy,
        DISRUPTION_MODE_ANNOTATION: policy.disruption_mode,
    }
    # Left out when it is the default: with parallelism 0 the default gang of 1 cannot be written.
    if policy.min_count is not None and policy.min_count != default_min_count(policy.parallelism):
        annotations[MIN_COUNT_ANNOTATION] = str(policy.min_count)
    if policy.topology_key is not None:
        annotations[TOPOLOGY_KEY_ANNOTATION] = policy.topology_key
    if policy.preemption_policy is not None:
        annotations[PREEMPTION_POLICY_ANNOTATION] = policy.preemption_policy
    if policy.on_scale_up != SCALE_UP_WAIT:
        annotations[ON_SCALE_UP_ANNOTATION] = policy.on_scale_up
    return annotations


def upstream_scheduling(policy: JobPolicy) -> dict[str, Any]:
    """The upstream Job ``spec.scheduling`` (batch/v1, Kubernetes 1.37) that asks for the same thing."""
    scheduling: dict[str, Any] = {}
    if policy.min_count is not None:
        scheduling["schedulingPolicy"] = {"gang": {"minCount": policy.min_count}}
    else:
        scheduling["schedulingPolicy"] = {"basic": {}}
    if policy.topology_key is not None:
        scheduling["schedulingConstraints"] = {"topology": [{"key": policy.topology_key}]}
    scheduling["disruptionMode"] = {policy.disruption_mode: {}}
    return scheduling


def from_upstream_scheduling(
    scheduling: Mapping[str, Any] | None,
    *,
    parallelism: int | None = None,
    priority_class_name: str | None = None,
) -> JobPolicy:
    """The JobPolicy equivalent to an upstream Job's ``spec.scheduling`` (unset means basic, as upstream)."""
    scheduling = scheduling or {}
    parallelism = 1 if parallelism is None else parallelism
    scheduling_policy = scheduling.get("schedulingPolicy") or {}
    topology = (scheduling.get("schedulingConstraints") or {}).get("topology") or []
    mode: DisruptionModeKind = MODE_ALL if "all" in (scheduling.get("disruptionMode") or {}) else MODE_SINGLE
    gang = scheduling_policy.get("gang")
    min_count = None
    if gang is not None:
        min_count = gang.get("minCount") or default_min_count(parallelism)
    return JobPolicy(
        policy=POLICY_GANG if gang is not None else POLICY_BASIC,
        min_count=min_count,
        topology_key=topology[0]["key"] if topology else None,
        disruption_mode=mode,
        priority_class_name=priority_class_name or None,
        parallelism=parallelism,
    )
