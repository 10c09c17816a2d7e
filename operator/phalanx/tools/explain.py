"""`phalanx explain job/NAME`: why a Job's gang waits now, in plain words.

It reads the Job, its PodGroup and pods, and every node and pod of the cluster; says what the PodGroup's
status says (conditions, phase, counts); and, for a gang that waits, runs the pure placement engine on a
snapshot of the live cluster, as one pass of Phalanx's scheduling loop would: per topology domain how many
of the gang's pods fit, and for the nodes that take none, what stops them (a resource, a taint, a
selector). Everything but `gather` is pure and works on plain API dicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from phalanx.api import conditions as c
from phalanx.api import keys
from phalanx.api.cluster_objects import node_info
from phalanx.api.group import API_VERSION
from phalanx.api.job_policy import JobPolicyError, parse_job_policy
from phalanx.api.naming import pod_group_label_value
from phalanx.bodies import mapping
from phalanx.placement import (
    Admit,
    Decision,
    GroupRequest,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    decide,
)
from phalanx.placement.filters import affinity_matches, scheduling_taints, tolerates
from phalanx.placement.model import PODS, Taint
from phalanx.tools.kube import KubeError, NotFoundError, Reader
from phalanx.tools.view import PodView, snapshot_of

MAX_DOMAINS = 8
"""Domains listed, best first; the rest are summed up in one line."""
MAX_NODE_NAMES = 5
"""Node names listed per reason; the rest are counted."""
MAX_REASONS = 3
"""Reasons listed per domain."""
BINARY_RESOURCES = ("memory", "ephemeral-storage")

JOB_WORDS = frozenset({"job", "jobs", "job.batch", "jobs.batch"})
POD_GROUP_WORDS = frozenset(
    {"podgroup", "podgroups", "pg", "podgroup.scheduling.phalanx.dev", "podgroups.scheduling.phalanx.dev"}
)


# ------------------------------------------------------------------ what to explain


@dataclass(frozen=True)
class Target:
    kind: Literal["job", "podgroup"]
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def parse_target(text: str) -> Target:
    """`job/NAME` or `podgroup/NAME` (also jobs/, job.batch/, podgroups/, pg/)."""
    kind, sep, name = text.partition("/")
    if not sep or not name or "/" in name:
        raise ValueError(f"{text!r}: say job/NAME or podgroup/NAME")
    word = kind.lower()
    if word in JOB_WORDS:
        return Target("job", name)
    if word in POD_GROUP_WORDS:
        return Target("podgroup", name)
    raise ValueError(f"{text!r}: {kind} is not a kind phalanx explain knows; say job/NAME or podgroup/NAME")


@dataclass(frozen=True)
class Facts:
    """Everything `explain` reads, as the API returned it."""

    target: Target
    namespace: str
    job: Mapping[str, Any] | None
    group: Mapping[str, Any] | None
    group_pods: Sequence[Mapping[str, Any]]
    """The Job's pods (or, for a group without a Job, the pods labelled with the group), terminal ones too."""
    nodes: Sequence[Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]]
    """Every pod of the cluster that is not Succeeded or Failed."""


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return mapping((obj or {}).get("metadata"))


async def gather(reader: Reader, target: Target, namespace: str) -> Facts:
    """Read what `explain` needs from the cluster (GETs only)."""
    ns = namespace
    groups_path = f"/apis/{API_VERSION}/namespaces/{ns}/podgroups"
    job: Mapping[str, Any] | None = None
    group: Mapping[str, Any] | None = None
    if target.kind == "job":
        try:
            job = await reader.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{target.name}")
        except NotFoundError as e:
            raise KubeError(f"job {target.name} not found in namespace {ns}") from e
        uid = _meta(job).get("uid")
        try:
            candidates = await reader.list(
                groups_path, {"labelSelector": f"{keys.JOB_NAME_LABEL}={target.name}"}
            )
        except NotFoundError:
            candidates = []  # Phalanx's CRDs are not installed
        group = next(
            (g for g in candidates if mapping(_meta(g).get("labels")).get(keys.JOB_UID_LABEL) == uid), None
        )
    else:
        try:
            group = await reader.get(f"{groups_path}/{target.name}")
        except NotFoundError as e:
            raise KubeError(
                f"podgroup {target.name} not found in namespace {ns} (or Phalanx's CRDs are not installed)"
            ) from e
        owner = next(
            (
                o
                for o in _meta(group).get("ownerReferences") or []
                if o.get("kind") == "Job" and o.get("controller")
            ),
            None,
        )
        if owner is not None:
            try:
                job = await reader.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{owner.get('name')}")
            except NotFoundError:
                job = None
    if job is not None:
        selector = _job_selector(job)
    else:
        selector = f"{keys.POD_GROUP_LABEL}={pod_group_label_value(target.name)}"
    group_pods = await reader.list(f"/api/v1/namespaces/{ns}/pods", {"labelSelector": selector})
    nodes = await reader.list("/api/v1/nodes")
    pods = await reader.list(
        "/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
    )
    return Facts(target, ns, job, group, group_pods, nodes, pods)


def _job_selector(job: Mapping[str, Any]) -> str:
    match = mapping(mapping(mapping(job.get("spec")).get("selector")).get("matchLabels"))
    if match:
        return ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    return f"batch.kubernetes.io/controller-uid={_meta(job).get('uid')}"


# ------------------------------------------------------------------ words


def format_amount(resource: str, amount: int) -> str:
    """A canonical amount (millicores for cpu, units otherwise) as a person writes it: 500m, 2, 16Gi."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource in BINARY_RESOURCES or resource.startswith("hugepages-"):
        for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            unit = 1 << power
            if abs(amount) >= unit:
                return f"{amount // unit}{suffix}" if amount % unit == 0 else f"{amount / unit:.1f}{suffix}"
    return str(amount)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _names(nodes: Sequence[str]) -> str:
    if len(nodes) > MAX_NODE_NAMES:
        return ", ".join(nodes[:MAX_NODE_NAMES]) + f" and {len(nodes) - MAX_NODE_NAMES} more"
    if len(nodes) == 1:
        return nodes[0]
    return ", ".join(nodes[:-1]) + " and " + nodes[-1]


def _taint_text(taint: Taint) -> str:
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def describe_requests(requirements: PodRequirements) -> str:
    """What one pod asks of a node, e.g. `nvidia.com/gpu 8, cpu 500m` (a pod slot always)."""
    parts = [f"{r} {format_amount(r, a)}" for r, a in requirements.requests if a > 0]
    text = ", ".join(parts) if parts else "no resources (a pod slot only)"
    if requirements.node_selector:
        text += ", nodeSelector " + ",".join(f"{k}={v}" for k, v in requirements.node_selector)
    return text


# ------------------------------------------------------------------ the placement analysis


@dataclass(frozen=True)
class Blocker:
    """Nodes of one domain that take none of the gang's pods, for one reason."""

    nodes: tuple[str, ...]
    singular: str
    """e.g. 'has 0 of 8 nvidia.com/gpu free'."""
    plural: str

    def __str__(self) -> str:
        return f"{_names(self.nodes)} {self.singular if len(self.nodes) == 1 else self.plural}"


@dataclass(frozen=True)
class DomainFit:
    domain: str | None
    """The topology value; None: all nodes (no topology key)."""
    fit: int
    """How many of the gang's waiting pods the engine places here, on the free capacity of now."""
    nodes: int
    blockers: tuple[Blocker, ...]


@dataclass(frozen=True)
class Analysis:
    decision: Decision
    topology_key: str | None
    min_count: int
    pending: int
    """Waiting pods the engine tries to place."""
    placed: int
    """Pods of the group already holding a node (bound or released)."""
    pinned: str | None
    """The domain the placed pods hold, if any."""
    domains: tuple[DomainFit, ...]
    """Best first (most pods fit, then name), at most MAX_DOMAINS."""
    more_domains: int
    more_fit: int
    """The most pods that fit in any domain not listed."""
    unlabelled: int
    """Nodes without the topology key (never candidates)."""
    asks: str

    @property
    def need(self) -> int:
        """Pods that must fit together now for the gang to start."""
        return max(0, self.min_count - self.placed)


def _why_not(snapshot: Snapshot, free: np.ndarray, i: int, req: PodRequirements) -> list[tuple[str, str]]:
    """(singular, plural) phrases saying why node i takes no pod with `req`, in kube-scheduler's order."""
    node = snapshot.nodes[i]
    reasons: list[tuple[str, str]] = []
    if not node.ready:
        reasons.append(("is not Ready", "are not Ready"))
    if node.unschedulable:
        reasons.append(("is cordoned", "are cordoned"))
    untolerated = [
        t for t in scheduling_taints(node.taints) if not any(tolerates(tol, t) for tol in req.tolerations)
    ]
    if untolerated:
        word = "taint" if len(untolerated) == 1 else "taints"
        text = ", ".join(_taint_text(t) for t in untolerated)
        reasons.append((f"has the {word} {text}, not tolerated", f"have the {word} {text}, not tolerated"))
    mismatched = [f"{k}={v}" for k, v in req.node_selector if node.labels.get(k) != v]
    if mismatched:
        text = ",".join(mismatched)
        reasons.append((f"does not match nodeSelector {text}", f"do not match nodeSelector {text}"))
    if req.affinity_terms is not None and not affinity_matches(req.affinity_terms, node.labels, node.name):
        reasons.append(
            ("does not match the required node affinity", "do not match the required node affinity")
        )
    if reasons:
        return reasons
    short: list[str] = []
    for resource, amount in [*req.requests, (PODS, 1)]:
        if amount <= 0:
            continue
        row = snapshot.resource_index(resource)
        allocatable = int(node.allocatable.get(resource, 0))
        what = "pod slots" if resource == PODS else resource
        if row is None or allocatable <= 0:
            short.append(f"no {what}")
            continue
        left = int(free[row, i])
        if left < amount:
            short.append(
                f"{format_amount(resource, max(left, 0))} of "
                f"{format_amount(resource, allocatable)} {what} free"
            )
    text = " and ".join(short) if short else "no room"
    return [(f"has {text}", f"have {text}")]


def _capacity(snapshot: Snapshot, free: np.ndarray, req: PodRequirements, cap: int) -> np.ndarray:
    """How many pods with `req` fit on each node alone (at most cap), as the engine counts."""
    n = len(snapshot.node_names)
    count = np.full(n, cap, dtype=np.int64)
    for resource, amount in [*req.requests, (PODS, 1)]:
        if amount <= 0:
            continue
        row = snapshot.resource_index(resource)
        if row is None:
            return np.zeros(n, dtype=np.int64)
        np.minimum(count, free[row] // amount, out=count)
    np.maximum(count, 0, out=count)
    result: np.ndarray = count * snapshot.eligible(req)
    return result


def _in_domain(request: GroupRequest, key: str, domain: str) -> GroupRequest:
    """The same pods, allowed only on nodes of one domain, as a group of 1 (to count what fits there)."""
    pending = tuple(
        PodRequest(
            p.id,
            dataclasses.replace(
                p.requirements, node_selector=tuple(sorted({*p.requirements.node_selector, (key, domain)}))
            ),
        )
        for p in request.pending
    )
    return GroupRequest(name=request.name, pending=pending, min_count=1, topology_key=None)


def _fit_exact(snapshot: Snapshot, request: GroupRequest, key: str | None, domain: str | None) -> int:
    probe = (
        _in_domain(request, key, domain)
        if key is not None and domain is not None
        else dataclasses.replace(request, min_count=1, bound_nodes=())
    )
    decision = decide(snapshot, probe)
    return len(decision.assignments) if isinstance(decision, Admit) else 0


def analyze(snapshot: Snapshot, request: GroupRequest) -> Analysis:
    """Decide as the scheduling loop would, then say per domain what fits and what blocks."""
    decision = decide(snapshot, request)
    key = request.topology_key
    names = snapshot.node_names
    n = len(names)
    free = np.asarray(snapshot.allocatable_by_resource) - np.asarray(snapshot.used_by_resource)

    signatures: dict[PodRequirements, int] = {}
    for pod in request.pending:
        signatures[pod.requirements] = signatures.get(pod.requirements, 0) + 1
    pending = len(request.pending)
    capacities = [_capacity(snapshot, free, req, count) for req, count in signatures.items()]
    takes_some = np.zeros(n, dtype=np.bool_)
    for cap in capacities:
        takes_some |= cap > 0

    # Domains: the values of the key (or all nodes), pinned to the one the placed pods hold.
    members: dict[str | None, np.ndarray] = {}
    unlabelled = 0
    pinned: str | None = None
    if key is None:
        members[None] = np.arange(n)
    else:
        groups = snapshot.domain_groups(key)
        unlabelled = int(np.count_nonzero(groups.codes < 0))
        for d, value in enumerate(groups.names):
            members[value] = groups.order[groups.starts[d] : groups.ends[d]]
        for node in request.bound_nodes:
            index = snapshot.node_index(node)
            if index is not None and groups.codes[index] >= 0:
                pinned = groups.names[int(groups.codes[index])]
                break
        if pinned is not None:
            members = {pinned: members[pinned]}

    # Upper bound per domain: each kind of pod alone; exact when the pods are all alike.
    upper = {
        domain: min(pending, sum(int(cap[nodes].sum()) for cap in capacities))
        for domain, nodes in members.items()
    }
    ranked = sorted(members, key=lambda d: (-upper[d], d or ""))
    fits: list[DomainFit] = []
    for place in ranked[:MAX_DOMAINS]:
        nodes = members[place]
        fit = upper[place] if len(signatures) <= 1 else _fit_exact(snapshot, request, key, place)
        grouped: dict[tuple[str, str], list[str]] = {}
        for i in nodes.tolist():
            if takes_some[i]:
                continue
            phrases: list[tuple[str, str]] = []
            for req in signatures:
                for phrase in _why_not(snapshot, free, i, req):
                    if phrase not in phrases:
                        phrases.append(phrase)
            joined = ("; ".join(p[0] for p in phrases), "; ".join(p[1] for p in phrases))
            grouped.setdefault(joined, []).append(names[i])
        blockers = tuple(Blocker(tuple(nodes_), s, p) for (s, p), nodes_ in grouped.items())
        fits.append(DomainFit(place, fit, len(nodes), blockers))
    if len(signatures) > 1:
        fits.sort(key=lambda f: (-f.fit, f.domain or ""))
    rest = ranked[MAX_DOMAINS:]
    if len(signatures) == 1:
        asks = describe_requests(next(iter(signatures)))
    else:
        asks = "; ".join(f"{count} × {describe_requests(req)}" for req, count in signatures.items())
    return Analysis(
        decision=decision,
        topology_key=key,
        min_count=max(1, request.min_count),
        pending=pending,
        placed=len(request.bound_nodes),
        pinned=pinned,
        domains=tuple(fits),
        more_domains=len(rest),
        more_fit=max((upper[d] for d in rest), default=0),
        unlabelled=unlabelled,
        asks=asks,
    )


def verdict(a: Analysis) -> str:
    """One sentence: does the gang fit now, and if not, how close it gets and where."""
    d = a.decision
    if isinstance(d, Admit):
        if not d.assignments:
            return f"its {a.placed} placed pods already meet minCount {a.min_count}; the others wait for room"
        where = f" in {a.topology_key}={d.domain}" if d.domain else ""
        nodes = ", ".join(node for _, node in d.assignments)
        return (
            f"it fits now: {_plural(len(d.assignments), 'pod')}{where} on {nodes}; Phalanx admits it at its "
            "next scheduling pass (if it keeps waiting, check that `phalanx run` is running)"
        )
    assert isinstance(d, Reject)
    if a.pending + a.placed < a.min_count:
        return (
            f"only {a.pending + a.placed} of its {a.min_count} pods exist ({a.placed} placed, {a.pending} "
            "waiting); the gang starts when the Job has created the rest"
        )
    if d.reason == "NoDomain":
        return f"no node has the label {a.topology_key}, so there is no domain to place the gang in"
    if d.reason in ("DomainConflict", "Unsupported"):
        return d.message  # the engine's own words: a conflict, or a field it refuses, named
    best = a.domains[0] if a.domains else None
    got = best.fit if best else 0
    if a.topology_key is None:
        return f"the cluster has room for {got} of the {a.need} pods the gang needs at once"
    if a.pinned is not None:
        return (
            f"its {_plural(a.placed, 'placed pod')} hold it in {a.topology_key}={a.pinned}, which has "
            f"room for {got} of the {a.need} more it needs"
        )
    if best is None or got == 0:
        return f"no {a.topology_key} domain has room for {a.need} pods at once, nor for even one of them"
    closest = f"the closest is {best.domain}, with room for {got}"
    return f"no {a.topology_key} domain has room for {a.need} pods at once; {closest}"


def render_analysis(a: Analysis, node_count: int, holding: int) -> list[str]:
    lines = [
        f"Placement now, computed from {_plural(node_count, 'node')} and the {_plural(holding, 'pod')} "
        f"holding capacity (each pod asks for {a.asks}):",
    ]
    if a.pinned is not None:
        lines.append(
            f"  {_plural(a.placed, 'pod')} of the gang already run in {a.pinned}: only it is considered"
        )
    for fit in a.domains:
        name = fit.domain if fit.domain is not None else "all nodes"
        line = f"  {name}: {fit.fit} of {a.pending} pods fit"
        shown = [str(b) for b in fit.blockers[:MAX_REASONS]]
        if len(fit.blockers) > MAX_REASONS:
            others = sum(len(b.nodes) for b in fit.blockers[MAX_REASONS:])
            verb = "takes" if others == 1 else "take"
            shown.append(f"{_plural(others, 'more node')} {verb} none for other reasons")
        if shown:
            line += "; " + "; ".join(shown)
        lines.append(line)
    if a.more_domains:
        lines.append(
            f"  … and {_plural(a.more_domains, 'more domain')}, none with room for more than {a.more_fit}"
        )
    if a.unlabelled:
        lines.append(
            f"  ({_plural(a.unlabelled, 'node')} without the label {a.topology_key} are never candidates)"
        )
    return lines


# ------------------------------------------------------------------ the whole explanation


@dataclass(frozen=True)
class _Gang:
    gang: bool
    min_count: int
    """As the PodGroup (or the Job's annotations) says."""
    topology_key: str | None
    effective: int = 0
    """What the loop asks for now: min_count, clamped to the pods the Job has left to run."""


def _gang_of(job: Mapping[str, Any] | None, group: Mapping[str, Any] | None) -> _Gang | str:
    """The group's policy from its PodGroup (else the Job's annotations), clamped as the loop does."""
    if group is not None:
        spec = mapping(group.get("spec"))
        gang = mapping(spec.get("schedulingPolicy")).get("gang")
        topology = mapping(spec.get("schedulingConstraints")).get("topology") or []
        key = mapping(topology[0]).get("key") if topology else None
        is_gang = isinstance(gang, Mapping)
        min_count = int(mapping(gang).get("minCount") or 1) if is_gang else 1
        result = _Gang(is_gang, min_count, str(key) if key else None)
    elif job is not None:
        try:
            policy = parse_job_policy(job, running=True)
        except JobPolicyError as e:
            return f"its annotations are invalid: {e}"
        result = _Gang(policy.is_gang, policy.min_count or 1, policy.topology_key)
    else:
        return "neither a Job nor a PodGroup"
    if job is not None and result.gang:
        # Near the end of a Job, fewer pods than minCount may be left to run: the gang shrinks to them.
        spec = mapping(job.get("spec"))
        completions = spec.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool):
            succeeded = int(mapping(job.get("status")).get("succeeded") or 0)
            remaining = max(0, completions - succeeded)
            return dataclasses.replace(result, effective=max(1, min(result.min_count, remaining)))
    return dataclasses.replace(result, effective=result.min_count)


def _condition(group: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for cond in mapping((group or {}).get("status")).get("conditions") or []:
        if mapping(cond).get("type") == kind:
            return mapping(cond)
    return None


def _condition_line(cond: Mapping[str, Any] | None) -> str:
    if cond is None:
        return "not set"
    text = f"{cond.get('status')} ({cond.get('reason')})"
    return f"{text}: {cond['message']}" if cond.get("message") else text


def _template_gated(job: Mapping[str, Any]) -> bool:
    template = mapping(mapping(mapping(job.get("spec")).get("template")).get("spec"))
    return any(mapping(g).get("name") == keys.ADMISSION_GATE for g in template.get("schedulingGates") or [])


def _job_state(job: Mapping[str, Any] | None) -> str:
    """'suspended', 'succeeded', 'failed' or ''."""
    if job is None:
        return ""
    for cond in mapping(job.get("status")).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") == "Complete":
            return "succeeded"
        if cond.get("status") == "True" and cond.get("type") == "Failed":
            return "failed"
    return "suspended" if mapping(job.get("spec")).get("suspend") else ""


def explain(facts: Facts) -> str:
    """The explanation, first line a verdict, then the group's status, then (when it waits) the placement."""
    job, group = facts.job, facts.group
    views = [PodView.of(p) for p in facts.group_pods]
    live = [p for p in views if not p.terminal and not p.deleting]
    waiting = sorted((p for p in live if p.gated), key=lambda p: p.name)
    placed = sorted((p for p in live if p.usage_node), key=lambda p: p.name)
    bound = [p for p in placed if p.bound]
    ready = [p for p in waiting if not p.other_gates]
    managed = mapping(_meta(job).get("labels")).get(keys.MANAGED_LABEL) == keys.MANAGED_VALUE
    gang = _gang_of(job, group)
    job_state = _job_state(job)
    admitted = _condition(group, c.ADMITTED)
    reason = str(admitted.get("reason")) if admitted is not None else ""

    # Run the engine for a gang whose pods wait now.
    analysis: Analysis | None = None
    holding = 0
    if (
        isinstance(gang, _Gang)
        and gang.gang
        and ready
        and job_state not in ("suspended", "succeeded", "failed")
        and (job is None or (managed and (group is not None or _template_gated(job))))
        and reason not in (c.REASON_ADMITTED, c.REASON_NOT_GATED, c.REASON_WAITING_FOR_GATES)
    ):
        nodes = [node_info(n) for n in facts.nodes]
        cluster_pods = [PodView.of(p) for p in facts.pods]
        snapshot = snapshot_of(nodes, cluster_pods)
        request = GroupRequest(
            name=f"{facts.namespace}/{facts.target.name}",
            pending=tuple(PodRequest(id=p.key, requirements=p.requirements) for p in ready),
            min_count=gang.effective,
            topology_key=gang.topology_key,
            bound_nodes=tuple(p.usage_node for p in placed),
        )
        analysis = analyze(snapshot, request)
        holding = sum(1 for p in cluster_pods if p.usage_node)

    # The verdict.
    status = mapping((group or {}).get("status"))
    if job is not None and not managed:
        summary = (
            f"not managed by Phalanx: the Job has no label {keys.MANAGED_LABEL}=true, so kube-scheduler "
            "places its pods one by one (`kubectl describe pod` says why one waits)"
        )
        if group is not None:
            summary += "; Phalanx is letting go of its PodGroup"
    elif isinstance(gang, str):
        summary = f"Phalanx cannot schedule it: {gang}"
    elif group is None and job is not None and not _template_gated(job):
        summary = (
            f"not held by Phalanx: its pod template has no {keys.ADMISSION_GATE} gate, so Phalanx's webhook "
            "did not see its creation (was `phalanx run` installed then?); kube-scheduler places its pods "
            "one by one"
        )
    elif reason == c.REASON_ADMITTED:
        where = (
            f" in {gang.topology_key}={status.get('domain')}"
            if status.get("domain") and gang.topology_key
            else ""
        )
        summary = f"admitted{where}: {len(bound)} of {len(live)} pods bound"
        if len(placed) > len(bound):
            summary += f", {len(placed) - len(bound)} released to their nodes for kube-scheduler to bind"
    elif job_state == "suspended" or reason == c.REASON_SUSPENDED:
        summary = "suspended: the Job is suspended (spec.suspend), so nothing is held for it"
    elif job_state in ("succeeded", "failed") or reason == c.REASON_FINISHED:
        summary = f"finished: the Job {job_state or 'is finished'}"
    elif reason in (c.REASON_WAITING_FOR_GATES, c.REASON_NOT_GATED, c.REASON_WAITING_FOR_PODS) and admitted:
        summary = f"waiting ({reason}): {admitted.get('message')}"
    elif analysis is not None:
        summary = "waiting: " + verdict(analysis)
    elif not gang.gang:
        summary = "basic policy: Phalanx holds nothing; kube-scheduler places the pods one by one"
    elif group is None:
        summary = (
            "no PodGroup yet: Phalanx creates one at its first pass after the Job's creation (if none "
            "appears, check that `phalanx run` is running)"
        )
    elif not live:
        summary = "no pods yet: the Job has not created them"
    else:
        summary = f"phase {status.get('phase') or 'not set'}" + (f" ({reason})" if reason else "")
    lines = [f"{facts.target} in namespace {facts.namespace}: {summary}"]

    # What the status says.
    if group is not None:
        spec_text = _describe_gang(gang)
        lines.append(f"  PodGroup: {_meta(group).get('name')}{spec_text}")
        phase = status.get("phase") or "not set"
        domain = f", domain {status['domain']}" if status.get("domain") else ""
        lines.append(f"  Phase: {phase}{domain}")
    elif job is not None and managed:
        lines.append(f"  PodGroup: none yet{_describe_gang(gang)}")
    terminal = [p for p in views if p.terminal]
    counts = (
        f"{len(bound)} bound, {len(placed) - len(bound)} released, "
        f"{len(waiting)} held by {keys.ADMISSION_GATE}"
    )
    other = len(live) - len(placed) - len(waiting)
    if other:
        counts += f", {other} pending in kube-scheduler"
    blocked = [p for p in waiting if p.other_gates]
    if blocked:
        gates = sorted({g for p in blocked for g in p.other_gates})
        counts += f" ({len(blocked)} also carry {', '.join(gates)})"
    done = {phase: sum(1 for p in terminal if p.phase == phase) for phase in ("Succeeded", "Failed")}
    counts += "".join(f", {n} {phase.lower()}" for phase, n in done.items() if n)
    lines.append(f"  Pods: {len(live)} ({counts})")
    if group is not None:
        lines.append(f"  {c.ADMITTED}: {_condition_line(admitted)}")
        initially = _condition(group, c.POD_GROUP_INITIALLY_SCHEDULED)
        lines.append(f"  {c.POD_GROUP_INITIALLY_SCHEDULED}: {_condition_line(initially)}")
    if analysis is not None:
        lines.append("")
        lines.extend(render_analysis(analysis, len(facts.nodes), holding))
    return "\n".join(lines)


def _describe_gang(gang: _Gang | str) -> str:
    if isinstance(gang, str):
        return ""
    if not gang.gang:
        return " (Basic)"
    where = f", topology {gang.topology_key}" if gang.topology_key else ", no topology key"
    left = f", {gang.effective} now: the Job's last pods" if gang.effective < gang.min_count else ""
    return f" (Gang, minCount {gang.min_count}{left}{where})"
