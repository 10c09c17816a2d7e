"""Shared builders and an independent brute-force reference for the placement tests.

The reference works from NodeInfo/BoundPod directly (not from the Snapshot arrays) and uses
Fractions, so it checks the engine rather than re-running it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from phalanx.placement import (
    BoundPod,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    node_eligible,
)

NETWORK_BLOCK = "oci.oraclecloud.com/rdma.network_block_id"
LOCAL_BLOCK = "oci.oraclecloud.com/rdma.local_block_id"
GPU = "nvidia.com/gpu"
GIB = 2**30


def worker(i: int) -> str:
    """The article's kind node names: was-worker, was-worker2 ... was-worker8."""
    return "was-worker" if i == 1 else f"was-worker{i}"


def article_nodes() -> list[NodeInfo]:
    local_blocks = ["lb-a1", "lb-a1", "lb-a2", "lb-a2", "lb-b1", "lb-b1", "lb-b2", "lb-b2"]
    return [
        NodeInfo(
            name=worker(i),
            labels={NETWORK_BLOCK: "nb-a" if i <= 4 else "nb-b", LOCAL_BLOCK: local_blocks[i - 1]},
            allocatable={GPU: 8, "cpu": 64_000, "memory": 512 * GIB, "pods": 110},
        )
        for i in range(1, 9)
    ]


def busy(*workers: int) -> list[BoundPod]:
    """One full-node (8 GPU) pod on each given worker."""
    return [BoundPod(id=f"busy-{i}", node=worker(i), requests={GPU: 8}) for i in workers]


GPU_POD = PodRequirements(requests=((GPU, 8),))


def gang(
    count: int,
    min_count: int,
    key: str | None,
    bound: Sequence[str] = (),
    requirements: PodRequirements = GPU_POD,
    name: str = "g",
) -> GroupRequest:
    pods = tuple(PodRequest(id=f"{name}-{i}", requirements=requirements) for i in range(count))
    return GroupRequest(
        name=name, pending=pods, min_count=min_count, topology_key=key, bound_nodes=tuple(bound)
    )


# --- brute-force reference ------------------------------------------------------------------


def usage(nodes: Iterable[NodeInfo], pods: Iterable[BoundPod]) -> dict[str, dict[str, int]]:
    """Per node: summed requests plus one pod slot per pod (last pod wins on duplicate ids)."""
    names = {n.name for n in nodes}
    latest = {p.id: p for p in pods}
    used: dict[str, dict[str, int]] = {name: {} for name in names}
    for pod in latest.values():
        if pod.node not in names:
            continue
        u = used[pod.node]
        u["pods"] = u.get("pods", 0) + 1
        for r, v in pod.requests.items():
            if r != "pods" and v > 0:
                u[r] = u.get(r, 0) + v
    return used


def checked(requests: Mapping[str, int]) -> dict[str, int]:
    """Resources a fit check looks at: positive requests plus one pod slot."""
    out = {r: v for r, v in requests.items() if v > 0 and r != "pods"}
    out["pods"] = 1
    return out


def fits(node: NodeInfo, used: Mapping[str, int], requests: Mapping[str, int], k: int = 1) -> bool:
    return all(used.get(r, 0) + k * v <= node.allocatable.get(r, 0) for r, v in checked(requests).items())


def scored_resources(group: GroupRequest) -> list[str]:
    requested = {r for p in group.pending for r, v in p.requirements.requests if v > 0 and r != "pods"}
    return sorted(requested) or ["pods"]


def totals(nodes: Sequence[NodeInfo]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in nodes:
        for r, v in n.allocatable.items():
            out[r] = out.get(r, 0) + max(v, 0)
    return out


def normalised_free(
    nodes: Iterable[NodeInfo],
    used: Mapping[str, Mapping[str, int]],
    resources: Sequence[str],
    total: Mapping[str, int],
) -> Fraction:
    score = Fraction(0)
    for node in nodes:
        for r in resources:
            if total.get(r, 0) > 0:
                score += Fraction(max(0, node.allocatable.get(r, 0) - used[node.name].get(r, 0)), total[r])
    return score


@dataclass(frozen=True)
class DomainResult:
    domain: str | None
    placed: int
    leftover: Fraction


@dataclass(frozen=True)
class Reference:
    kind: str  # "admit" | "Unschedulable" | "NoDomain" | "DomainConflict" | "TooFew"
    results: tuple[DomainResult, ...] = ()
    best: DomainResult | None = None


def eligible_for(node: NodeInfo, req: PodRequirements) -> bool:
    return node_eligible(node, req.node_selector, req.affinity_terms, req.tolerations)


def max_placed_brute(
    domain_nodes: Sequence[NodeInfo], used: Mapping[str, Mapping[str, int]], req: PodRequirements, count: int
) -> int:
    """Largest number of identical pods that fit, trying every per-node count vector."""
    requests = dict(req.requests)
    # Ineligible nodes take no pod; eligible ones are tried with every count up to the budget.
    caps = [count if eligible_for(n, req) else 0 for n in domain_nodes]
    best = 0

    def search(i: int, budget: int, placed: int) -> None:
        # Every per-node count vector with total <= count that fits; keep the largest total.
        nonlocal best
        if i == len(domain_nodes):
            best = max(best, placed)
            return
        node = domain_nodes[i]
        for k in range(min(caps[i], budget) + 1):
            if k and not fits(node, used[node.name], requests, k):
                break  # more pods fit even less
            search(i + 1, budget - k, placed + k)

    search(0, count, 0)
    return best


def brute_force(nodes: Sequence[NodeInfo], pods: Sequence[BoundPod], group: GroupRequest) -> Reference:
    """Reference decision for a homogeneous group (rules 2-4 of decide)."""
    m = max(1, group.min_count)
    bound = len(group.bound_nodes)
    if len(group.pending) + bound < m:
        return Reference("TooFew")
    key = group.topology_key
    by_name = {n.name: n for n in nodes}
    if key is None:
        domains: dict[str | None, list[NodeInfo]] = {None: sorted(nodes, key=lambda n: n.name)}
    else:
        domains = {}
        for n in sorted(nodes, key=lambda n: n.name):
            if key in n.labels:
                domains.setdefault(n.labels[key], []).append(n)
        if not domains:
            return Reference("NoDomain")
        if group.bound_nodes:
            values = set()
            for b in group.bound_nodes:
                if b not in by_name or key not in by_name[b].labels:
                    return Reference("DomainConflict")
                values.add(by_name[b].labels[key])
            if len(values) > 1:
                return Reference("DomainConflict")
            domains = {d: ns for d, ns in domains.items() if d in values}
    if not group.pending:
        return Reference("admit", (), DomainResult(next(iter(domains)), 0, Fraction(0)))

    req = group.pending[0].requirements
    assert all(p.requirements == req for p in group.pending), "reference handles homogeneous groups"
    used = usage(nodes, pods)
    total = totals(nodes)
    resources = scored_resources(group)
    requests = dict(req.requests)
    results = []
    for d in sorted(domains, key=lambda v: (v is not None, v or "")):
        dn = domains[d]
        placed = max_placed_brute(dn, used, req, len(group.pending))
        eligible = [n for n in dn if eligible_for(n, req)]
        leftover = normalised_free(eligible, used, resources, total) - sum(
            (
                Fraction(placed * requests.get(r, 1 if r == "pods" else 0), total[r])
                for r in resources
                if total.get(r, 0) > 0
            ),
            Fraction(0),
        )
        results.append(DomainResult(d, placed, leftover))
    feasible = [r for r in results if r.placed + bound >= m]
    if not feasible:
        return Reference("Unschedulable", tuple(results))
    best = min(feasible, key=lambda r: (-r.placed, r.leftover, r.domain or ""))
    return Reference("admit", tuple(results), best)


def reference_packing(
    nodes: Sequence[NodeInfo], pods: Sequence[BoundPod], group: GroupRequest, domain: str | None
) -> list[tuple[str, str]]:
    """The node rule for a homogeneous group inside one domain, with Fractions: the fewest nodes, the
    last one the tightest (Kueue's BestFit at the node level).

    Each node holds `cap` pods of the group (at most all of them). Nodes by capacity, most first, then
    least normalised free capacity (fullest), then name; the first k of them that hold every pod that
    fits; the k-th swapped for the node after the first k-1 with the smallest capacity that still holds
    what is left (then fullest, then name). Pods in pending order, each node filled to its capacity.
    """
    key = group.topology_key
    req = group.pending[0].requirements
    requests = dict(req.requests)
    used = usage(nodes, pods)
    total = totals(nodes)
    resources = scored_resources(group)
    members = [n for n in nodes if (key is None or n.labels.get(key) == domain) and eligible_for(n, req)]
    cap = {n.name: node_capacity(n, used[n.name], requests, len(group.pending)) for n in members}
    free = {n.name: normalised_free([n], used, resources, total) for n in members}
    members = [n for n in members if cap[n.name] > 0]
    need = min(len(group.pending), sum(cap.values()))
    ranked = sorted(members, key=lambda n: (-cap[n.name], free[n.name], n.name))
    chosen: list[NodeInfo] = []
    held = 0
    for n in ranked:
        if held >= need:
            break
        chosen.append(n)
        held += cap[n.name]
    if chosen:
        left = need - (held - cap[chosen[-1].name])
        rest = ranked[len(chosen) - 1 :]
        tightest = min(
            (n for n in rest if cap[n.name] >= left), key=lambda n: (cap[n.name], free[n.name], n.name)
        )
        chosen[-1] = tightest
    out = []
    queue = iter(group.pending)
    placed = 0
    for n in chosen:
        for _ in range(min(cap[n.name], need - placed)):
            out.append((next(queue).id, n.name))
            placed += 1
    return out


def node_capacity(node: NodeInfo, used: Mapping[str, int], requests: Mapping[str, int], most: int) -> int:
    """How many pods with `requests` the node holds, at most `most`."""
    k = 0
    while k < most and fits(node, used, requests, k + 1):
        k += 1
    return k
