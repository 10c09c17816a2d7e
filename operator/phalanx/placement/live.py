"""A snapshot kept up to date one node or pod change at a time, instead of rebuilt every pass.

- Pod changes touch a few cells of a working usage matrix; `snapshot()` then copies that matrix
  once (copy-on-write: the snapshots handed out never see later changes).
- Node changes are collected and applied at the next `snapshot()`: the node table is derived from
  the previous one (table_update.py), usage columns move with a few slice copies, and only pods
  of added or removed nodes are visited in Python. Many nodes at once (startup) build afresh.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import NO_CSI, PODS, BoundPod, ClaimInfo, CSINodeInfo, CSIView, NodeInfo
from .snapshot import NodeTable, Snapshot
from .table_update import MASS_CHANGE, updated_table
from .usage import UsageMatrix

__all__ = ["LiveSnapshot"]


class LiveSnapshot:
    """The cluster as the placement engine sees it, mutable; owned by the controller's cache.

    `snapshot()` is always equal, for every engine query, to `Snapshot.build(nodes, pods, claims)` of
    the current nodes, pods and claims. A pod on a node that is not (or no longer) there is kept by id and
    counts from the moment its node is there, as `Snapshot.build` ignores it while the node is absent.

    Not thread-safe: use it from one thread (the operator's asyncio loop).
    """

    __slots__ = (
        "_claims",
        "_claims_shared",
        "_counted",
        "_counted_shared",
        "_csi",
        "_csi_changed",
        "_csi_nodes",
        "_last",
        "_nodes",
        "_on_node",
        "_pods",
        "_requested",
        "_special",
        "_special_shared",
        "_stale",
        "_table",
        "_touched",
        "_usage",
        "_usage_changed",
    )

    def __init__(self, nodes: Iterable[NodeInfo] = (), pods: Iterable[BoundPod] = ()) -> None:
        """Duplicate node names raise ValueError; with duplicate pod ids the last one wins (as `build`)."""
        self._nodes: dict[str, NodeInfo] = {}
        for node in nodes:
            if node.name in self._nodes:
                raise ValueError("duplicate node names in snapshot")
            self._nodes[node.name] = node
        self._table = NodeTable.of(self._nodes.values())
        self._touched: set[str] = set()
        """Nodes upserted or removed since the table was derived; applied by `snapshot()`."""

        self._pods: dict[str, BoundPod] = {}
        self._on_node: dict[str, tuple[str, ...]] = {}
        """Pod ids by node name, nodes absent from the table included. A tuple, not a set: most nodes hold a
        pod or a few, and at 50,000 nodes a set each was 9 MiB more (a node's pods are rewritten on a
        change, at most a few hundred ids)."""
        self._requested: dict[str, int] = {}
        """Resource -> how many pods ask for it (positive request)."""
        for pod in {pod.id: pod for pod in pods}.values():
            self._remember(pod)
        index = self._table.name_index
        self._counted = {pod_id: pod for pod_id, pod in self._pods.items() if pod.node in index}
        """Pods whose node is in the table: exactly those in the usage matrix."""
        self._counted_shared = False
        """Handed to a snapshot: copy before changing it."""
        self._special = {pod_id: pod for pod_id, pod in self._counted.items() if pod.special}
        """Counted pods with anti-affinity terms or host ports (few), kept so a pass never scans all pods."""
        self._special_shared = False
        self._claims: dict[str, ClaimInfo] = {}
        self._claims_shared = False
        self._csi_nodes: dict[str, CSINodeInfo] = {}
        self._csi: CSIView = NO_CSI
        """Handed to snapshots; `snapshot()` rebuilds it after a CSINode or the strict drivers changed."""
        self._csi_changed = False
        self._usage = UsageMatrix(len(index))
        self._usage.recount(len(index), ((index[p.node], p.requests) for p in self._counted.values()))

        self._last: Snapshot | None = None
        self._stale = True
        """The table or the usage changed since `_last`."""
        self._usage_changed = True
        """The usage matrix changed since `_last` copied it."""

    # --- changes -----------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        if self._nodes.get(node.name) != node:
            self._nodes[node.name] = node
            self._touched.add(node.name)

    def remove_node(self, name: str) -> None:
        """Pods on the node are kept: they count again if the node comes back."""
        if self._nodes.pop(name, None) is not None:
            self._touched.add(name)

    def upsert_pod(self, pod: BoundPod) -> None:
        """A new pod, or a new version of one (another node or other requests replace the old usage)."""
        old = self._pods.get(pod.id)
        if old == pod:
            return
        if old is not None:
            self._forget(old)
        self._remember(pod)
        node = self._table.name_index.get(pod.node)
        if node is not None:
            self._count(pod, node)

    def remove_pod(self, pod_id: str) -> None:
        old = self._pods.get(pod_id)
        if old is not None:
            self._forget(old)

    def set_claim(self, key: str, info: ClaimInfo | None) -> None:
        """A PersistentVolumeClaim ("namespace/name") as the volume filters see it; None: it is gone."""
        if self._claims.get(key) == info:
            return
        if self._claims_shared:
            self._claims = dict(self._claims)
            self._claims_shared = False
        if info is None:
            del self._claims[key]
        else:
            self._claims[key] = info
        self._stale = True

    def set_csi_node(self, name: str, info: CSINodeInfo | None) -> None:
        """A node's CSINode with its VolumeAttachments (NodeVolumeLimits); None: the node has no CSINode."""
        if self._csi_nodes.get(name) == info:
            return
        if info is None:
            del self._csi_nodes[name]
        else:
            self._csi_nodes[name] = info
        self._csi_changed = self._stale = True

    def set_strict_drivers(self, drivers: frozenset[str]) -> bool:
        """CSI drivers whose CSIDriver has preventPodSchedulingIfMissing: true; whether they changed."""
        if drivers == self._csi.strict_drivers:
            return False
        self._csi = CSIView(self._csi.nodes, drivers)
        self._csi_changed = self._stale = True
        return True

    # --- the snapshot ------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current state as an immutable Snapshot; the same object while nothing changed."""
        if self._touched:
            self._apply_node_changes()
        last = self._last
        if last is not None and not self._stale:
            return last
        table = self._table
        if self._csi_changed:
            self._csi = CSIView(dict(self._csi_nodes), self._csi.strict_drivers)
            self._csi_changed = False
        if last is None or self._usage_changed or last.resources != table.resources:
            used = self._usage.select(table.resources)
        else:
            used = last.used_by_resource  # same usage, same rows: share the read-only array
        self._counted_shared = self._special_shared = self._claims_shared = True
        self._last = Snapshot(
            table, used, self._counted, frozenset(), special=self._special, claims=self._claims, csi=self._csi
        )
        self._stale = self._usage_changed = False
        return self._last

    # --- bookkeeping -------------------------------------------------------------------------

    def _remember(self, pod: BoundPod) -> None:
        self._pods[pod.id] = pod
        held = self._on_node.get(pod.node, ())
        if pod.id not in held:
            self._on_node[pod.node] = (*held, pod.id)
        for resource, value in pod.requests.items():
            if resource != PODS and value > 0:
                self._requested[resource] = self._requested.get(resource, 0) + 1

    def _forget(self, pod: BoundPod) -> None:
        del self._pods[pod.id]
        on_node = tuple(pod_id for pod_id in self._on_node[pod.node] if pod_id != pod.id)
        if on_node:
            self._on_node[pod.node] = on_node
        else:
            del self._on_node[pod.node]
        for resource, value in pod.requests.items():
            if resource != PODS and value > 0:
                self._requested[resource] -= 1
                if not self._requested[resource]:
                    del self._requested[resource]
        if pod.id in self._counted:
            del self._own_counted()[pod.id]
            if pod.special:
                del self._own_special()[pod.id]
            self._usage.add(self._table.name_index[pod.node], pod.requests, -1)
            self._usage_changed = self._stale = True

    def _count(self, pod: BoundPod, node: int) -> None:
        self._own_counted()[pod.id] = pod
        if pod.special:
            self._own_special()[pod.id] = pod
        self._usage.add(node, pod.requests)
        self._usage_changed = self._stale = True

    def _own_counted(self) -> dict[str, BoundPod]:
        if self._counted_shared:
            self._counted = dict(self._counted)
            self._counted_shared = False
        return self._counted

    def _own_special(self) -> dict[str, BoundPod]:
        if self._special_shared:
            self._special = dict(self._special)
            self._special_shared = False
        return self._special

    def _apply_node_changes(self) -> None:
        update = updated_table(self._table, self._nodes, self._touched)
        self._touched = set()
        if update is None:
            return
        self._table = update.table
        self._stale = True
        if update.remap.is_identity:
            return  # same nodes in the same order: usage is unchanged
        self._usage_changed = True
        counted = self._own_counted()
        special = self._own_special()
        for name in update.removed:
            for pod_id in self._on_node.get(name, ()):
                del counted[pod_id]
                special.pop(pod_id, None)
        arrivals = [self._pods[pod_id] for name in update.added for pod_id in self._on_node.get(name, ())]
        index = update.table.name_index
        # Clipping changed with the node count, or many pods arrive at once (the cache filling at
        # startup): one vectorised count of every pod beats adding them one by one.
        if self._usage.needs_recount(len(index)) or len(arrivals) > MASS_CHANGE + len(counted) // 8:
            counted.update((pod.id, pod) for pod in arrivals)
            special.update((pod.id, pod) for pod in arrivals if pod.special)
            self._usage.recount(len(index), ((index[p.node], p.requests) for p in counted.values()))
            return
        self._usage.moved(update.remap, self._requested)
        for pod in arrivals:
            self._count(pod, index[pod.node])
