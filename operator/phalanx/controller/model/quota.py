"""ResourceQuotas as Phalanx reads them: why a gang's owner cannot create its pods. Pure.

A gang's pods are born gated, and gated pods count against their namespace's ResourceQuotas like any
other. Two gangs whose pods the owner controllers create at once can each get part of their pods made
and then `exceeded quota`: neither reaches its minCount, and nothing ever frees the quota. Phalanx reads
the quotas (spec.hard, status.used, their scopes) and what one pod of the owner would add to them, as the
quota admission plugin counts a pod (pkg/quota/v1/evaluator/core/pods.go, v1.37): `pods` and
`count/pods` one each; `cpu`/`requests.cpu`, `memory`/`requests.memory`, `ephemeral-storage`/
`requests.ephemeral-storage`, `requests.<extended>` and `requests.hugepages-*` from the pod's effective
requests (PodRequests: init containers, sidecars, pod-level resources, overhead); `limits.*` from its
effective limits. That is enough to say which quota refuses a pod, whether a gang could ever fit one,
and when there is room for a whole gang again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from phalanx.bodies import mapping
from phalanx.placement import QuantityError, parse_quantity

_POD_COUNTS = ("pods", "count/pods")
_PLAIN = {"cpu": "cpu", "memory": "memory", "ephemeral-storage": "ephemeral-storage"}
_PREFIXED = ("requests.", "limits.")
_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass")


def _quantities(raw: Any) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, value in mapping(raw).items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            continue  # the apiserver validates quotas; a value it let in that we cannot read is skipped
    return out


@dataclass(frozen=True)
class ScopeRequirement:
    """One `scopeSelector.matchExpressions` entry (or a plain `scopes` entry: operator Exists)."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuotaRecord:
    namespace: str
    name: str
    hard: Mapping[str, Fraction]
    used: Mapping[str, Fraction]
    text: Mapping[str, str] = field(default_factory=dict, compare=False)  # hard as written, for messages
    scopes: tuple[ScopeRequirement, ...] = ()
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> QuotaRecord:
        meta, spec = mapping(body.get("metadata")), mapping(body.get("spec"))
        status = mapping(body.get("status"))
        scopes = [ScopeRequirement(str(s)) for s in spec.get("scopes") or []]
        for raw in mapping(spec.get("scopeSelector")).get("matchExpressions") or []:
            item = mapping(raw)
            scopes.append(
                ScopeRequirement(
                    str(item.get("scopeName") or ""),
                    str(item.get("operator") or ""),
                    tuple(str(v) for v in item.get("values") or []),
                )
            )
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            hard=_quantities(spec.get("hard")),
            used=_quantities(status.get("used")),
            text={str(k): str(v) for k, v in mapping(spec.get("hard")).items()},
            scopes=tuple(scopes),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def matches(self, pod_spec: Mapping[str, Any], usage: Mapping[str, Fraction]) -> bool:
        """Whether the quota counts such a pod (its scopes, as the quota evaluator matches them). A
        scope Phalanx does not know is taken to match: it then says too much rather than too little."""
        return all(_scope_matches(s, pod_spec, usage) for s in self.scopes)


def _scope_matches(
    scope: ScopeRequirement, pod_spec: Mapping[str, Any], usage: Mapping[str, Fraction]
) -> bool:
    terminating = pod_spec.get("activeDeadlineSeconds") is not None
    # QoS BestEffort: no cpu or memory request or limit in any container
    best_effort = not any(usage.get(f"{p}{r}") for p in _PREFIXED for r in ("cpu", "memory"))
    known = {
        "Terminating": terminating,
        "NotTerminating": not terminating,
        "BestEffort": best_effort,
        "NotBestEffort": not best_effort,
    }
    if scope.scope in known:
        holds = known[scope.scope]
        return holds if scope.operator in ("Exists", "In") else not holds
    if scope.scope == "PriorityClass":
        name = str(pod_spec.get("priorityClassName") or "")
        if scope.operator == "Exists":
            return bool(name)
        if scope.operator == "DoesNotExist":
            return not name
        if scope.operator == "In":
            return name in scope.values
        if scope.operator == "NotIn":
            return name not in scope.values
    return True


def _container_list(container: Mapping[str, Any], part: str) -> dict[str, Fraction]:
    resources = mapping(container.get("resources"))
    own = _quantities(resources.get(part))
    if part == "requests":  # API defaulting copies a limit into a missing request
        for name, value in _quantities(resources.get("limits")).items():
            own.setdefault(name, value)
    return own


def _effective(pod_spec: Mapping[str, Any], part: str) -> dict[str, Fraction]:
    """PodRequests / PodLimits: containers and sidecars summed, the peak of an init container (next to
    the sidecars started before it), pod-level cpu/memory, plus overhead."""
    total: dict[str, Fraction] = {}

    def add(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
        for k, v in other.items():
            into[k] = into.get(k, Fraction(0)) + v

    for raw in pod_spec.get("containers") or []:
        add(total, _container_list(mapping(raw), part))
    sidecars: dict[str, Fraction] = {}
    peak: dict[str, Fraction] = {}
    for raw in pod_spec.get("initContainers") or []:
        container = mapping(raw)
        own = _container_list(container, part)
        if container.get("restartPolicy") == "Always":
            add(total, own)
            add(sidecars, own)
            need = dict(sidecars)
        else:
            need = dict(own)
            add(need, sidecars)
        for k, v in need.items():
            peak[k] = max(peak.get(k, Fraction(0)), v)
    for k, v in peak.items():
        total[k] = max(total.get(k, Fraction(0)), v)
    pod_level = _quantities(mapping(pod_spec.get("resources")).get(part))
    for k in ("cpu", "memory"):
        if k in pod_level:
            total[k] = pod_level[k]
    add(total, _quantities(pod_spec.get("overhead")))
    return total


def pod_quota_usage(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """What one pod of this spec adds to a quota, by quota resource name."""
    usage: dict[str, Fraction] = {name: Fraction(1) for name in _POD_COUNTS}
    for name, value in _effective(pod_spec, "requests").items():
        usage[f"requests.{name}"] = value
        if name in _PLAIN:
            usage[name] = value
    for name, value in _effective(pod_spec, "limits").items():
        usage[f"limits.{name}"] = value
    return usage


def _show(resource: str, value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    if resource.endswith("cpu") and (value * 1000).denominator == 1:
        return f"{value * 1000}m"
    return str(float(value))


@dataclass(frozen=True)
class Shortfall:
    """A quota that refuses `count` more pods: one of its resources would go over."""

    quota: QuotaRecord
    resource: str
    need: Fraction  # what the pods would add
    free: Fraction  # hard - used now

    def text(self, count: int) -> str:
        q = self.quota
        used = q.used.get(self.resource, Fraction(0))
        return (
            f"ResourceQuota {q.key} ({self.resource}: {_show(self.resource, used)} of "
            f"{q.text.get(self.resource) or _show(self.resource, q.hard[self.resource])} used; "
            f"{count} more pod(s) would add {_show(self.resource, self.need)})"
        )

    def hard_text(self, count: int) -> str:
        """For a shortfall against the hard limit alone: the gang is bigger than the quota."""
        q = self.quota
        hard = q.text.get(self.resource) or _show(self.resource, q.hard[self.resource])
        return (
            f"ResourceQuota {q.key} allows {self.resource} {hard} in all, and the {count} pods ask "
            f"{_show(self.resource, self.need)} together"
        )


def shortfall(
    quotas: Iterable[QuotaRecord],
    pod_spec: Mapping[str, Any],
    count: int,
    *,
    against_hard: bool = False,
    usage: Mapping[str, Fraction] | None = None,
) -> Shortfall | None:
    """The first quota (by name) that has no room for `count` more pods of this spec now (or, with
    `against_hard`, even when nothing else uses it), None when every quota has room."""
    quotas = sorted(quotas, key=lambda q: q.key)
    if count <= 0 or not quotas:
        return None
    usage = usage if usage is not None else pod_quota_usage(pod_spec)
    for quota in quotas:
        if not quota.matches(pod_spec, usage):
            continue
        for resource in sorted(quota.hard):
            per_pod = usage.get(resource)
            if not per_pod:
                continue
            need = per_pod * count
            free = quota.hard[resource] - (Fraction(0) if against_hard else quota.used.get(resource, 0))
            if need > free:
                return Shortfall(quota, resource, need, free)
    return None


# How the requeue note of a gang Phalanx requeued to break a quota deadlock starts: such an owner is
# resumed only once its quotas have room for its whole gang (else it would take the quota back at once).
QUOTA_DEADLOCK = "quota deadlock"


@dataclass(frozen=True)
class PodsRefused:
    """Why an owner cannot create the pods its gang still lacks: the quotas that refuse them."""

    message: str  # "ResourceQuota ns/q (...)": said in the gang's condition
    quotas: tuple[str, ...]  # their keys: gangs refused by one quota may be deadlocked on it
    never: bool = False  # the gang alone exceeds a quota's hard limit: it can never be created whole
