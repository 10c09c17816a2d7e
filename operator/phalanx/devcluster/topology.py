"""Simulated worker nodes: the article's 8-node RDMA topology, or a B×R×N grid for scale work."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ISLAND_KEY = "oci.oraclecloud.com/rdma.hpc_island_id"
NETWORK_BLOCK_KEY = "oci.oraclecloud.com/rdma.network_block_id"
LOCAL_BLOCK_KEY = "oci.oraclecloud.com/rdma.local_block_id"
HOSTNAME_KEY = "kubernetes.io/hostname"
RACK_KEY = "topology.phalanx.dev/rack"  # the "racks" topology: rack names repeat under each block
# kwok manages only nodes with this label; removing it stops the node's heartbeats (failure injection).
SIMULATED_LABEL = "sim.phalanx.dev/kubelet"
SIMULATED_VALUE = "kwok"

# A bare-metal 8-GPU node (BM.GPU.H100.8-like): 112 cores, 2 TiB, 8 GPUs.
GPU_NODE_CAPACITY: dict[str, str] = {
    "cpu": "112",
    "memory": "2Ti",
    "ephemeral-storage": "30Ti",
    "pods": "110",
    "nvidia.com/gpu": "8",
}

# The seed article's assignment: was-worker..was-worker8, two nodes per local block.
_SEED_BLOCKS = [
    ("nb-a", "lb-a1"),
    ("nb-a", "lb-a1"),
    ("nb-a", "lb-a2"),
    ("nb-a", "lb-a2"),
    ("nb-b", "lb-b1"),
    ("nb-b", "lb-b1"),
    ("nb-b", "lb-b2"),
    ("nb-b", "lb-b2"),
]


@dataclass(frozen=True)
class NodeSpec:
    name: str
    labels: dict[str, str]
    capacity: dict[str, str] = field(default_factory=lambda: dict(GPU_NODE_CAPACITY))

    def manifest(self) -> dict[str, object]:
        labels = {
            HOSTNAME_KEY: self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "BM.GPU.H100.8",
            SIMULATED_LABEL: SIMULATED_VALUE,
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": {"capacity": dict(self.capacity), "allocatable": dict(self.capacity)},
        }


def seed_topology() -> list[NodeSpec]:
    nodes = []
    for i, (nb, lb) in enumerate(_SEED_BLOCKS, start=1):
        name = "was-worker" if i == 1 else f"was-worker{i}"
        nodes.append(NodeSpec(name, {ISLAND_KEY: "isl-1", NETWORK_BLOCK_KEY: nb, LOCAL_BLOCK_KEY: lb}))
    return nodes


def racks_topology() -> list[NodeSpec]:
    """The seed cluster with a rack label whose values repeat under the two network blocks, as real
    clusters name racks: r1 is was-worker..2 in nb-a and was-worker5..6 in nb-b, r2 the other two of each.
    With a Topology listing (network block, rack), nb-a/r1 and nb-b/r1 are different domains."""
    nodes = seed_topology()
    for i, node in enumerate(nodes):
        node.labels[RACK_KEY] = "r1" if i % 4 < 2 else "r2"
    return nodes


def grid_topology(blocks: int, racks: int, per_rack: int) -> list[NodeSpec]:
    """B network blocks × R local blocks each × N nodes each, labelled like the seed cluster."""
    nodes = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(per_rack):
                nodes.append(
                    NodeSpec(
                        f"node-b{b}-r{r}-n{n}",
                        {
                            ISLAND_KEY: "isl-1",
                            NETWORK_BLOCK_KEY: f"nb-{b}",
                            LOCAL_BLOCK_KEY: f"lb-{b}-{r}",
                        },
                    )
                )
    return nodes


_GRID = re.compile(r"^(\d+)x(\d+)x(\d+)$")


def parse_topology(spec: str) -> list[NodeSpec]:
    if spec == "seed":
        return seed_topology()
    if spec == "racks":
        return racks_topology()
    match = _GRID.match(spec)
    if not match:
        raise ValueError(f"--topology must be 'seed', 'racks' or BxRxN (for example 2x2x2), not {spec!r}")
    blocks, racks, per_rack = (int(g) for g in match.groups())
    if min(blocks, racks, per_rack) < 1:
        raise ValueError(f"--topology {spec}: every factor must be at least 1")
    return grid_topology(blocks, racks, per_rack)
