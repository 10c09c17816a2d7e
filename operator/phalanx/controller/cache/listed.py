"""The resource names some node lists in its allocatable now, kept as nodes come, change and go: what the
webhooks ask of every review ("does any node list it?"), rather than gathered from every node per review."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from phalanx.placement import NodeInfo


class ListedResources:
    def __init__(self) -> None:
        self._count: Counter[str] = Counter()  # resource name -> how many nodes list it

    def count(self, node: NodeInfo, by: int) -> None:
        """Count `node`'s resources in (`by` 1) or out (-1)."""
        for name in node.allocatable:
            self._count[name] += by
            if not self._count[name]:
                del self._count[name]

    @property
    def names(self) -> Collection[str]:
        return self._count.keys()
