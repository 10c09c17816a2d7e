"""The Phalanx scheduling API group, its version and kinds."""

from __future__ import annotations

GROUP = "scheduling.phalanx.dev"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

WORKLOAD_KIND = "Workload"
POD_GROUP_KIND = "PodGroup"
COMPOSITE_POD_GROUP_KIND = "CompositePodGroup"
TOPOLOGY_KIND = "Topology"  # cluster-scoped

# Plural resource names, as used in URLs and by kubectl.
WORKLOADS = "workloads"
POD_GROUPS = "podgroups"
COMPOSITE_POD_GROUPS = "compositepodgroups"
TOPOLOGIES = "topologies"
