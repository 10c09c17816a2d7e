"""Fixtures the issue 18 files (test_gang_semantics.py, test_topology_victims.py) share, made per module.

Each file needs its own PriorityClasses (named apart, so that a file's teardown never deletes another's)
for the whole module, and a Topology of (network block, local block) for some tests. The fixtures are made
by factories, so that a module names its own classes and Topology prefix and gets fixtures of the usual
names (`priority_classes`, autouse; `block_topology`):

    priority_classes = module_priority_classes({"phalanx-gs-low": 10, "phalanx-gs-high": 1000})
    block_topology = block_topology_fixture("gs")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState

from .kube import LB_KEY, NB_KEY, PRIORITY_CLASSES, Namespace, active_topology, ensure_priority_class


def module_priority_classes(values: Mapping[str, int]) -> Callable[..., Any]:
    """An autouse module fixture `priority_classes`: the PriorityClasses of `values` (name: value) exist
    for the module (one of the same value left by an interrupted run is reused) and are deleted after it."""

    @pytest.fixture(scope="module", autouse=True)
    def priority_classes(stock_cluster: ClusterState) -> Iterator[None]:
        api = stock_cluster.client()
        for name, value in values.items():
            ensure_priority_class(api, name, value)
        yield
        for name in values:
            api.request("DELETE", f"{PRIORITY_CLASSES}/{name}")

    return priority_classes


def block_topology_fixture(prefix: str) -> Callable[..., Any]:
    """A fixture `block_topology`: a Topology of (network block, local block), active for the test (named
    after `prefix` and the namespace); its name."""

    @pytest.fixture
    def block_topology(ns: Namespace) -> Iterator[str]:
        with active_topology(ns.api, f"{prefix}-{ns.name}"[:60], NB_KEY, LB_KEY) as name:
            yield name

    return block_topology
