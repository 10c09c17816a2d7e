"""cache/: the cluster as Phalanx sees it, fed by watch events and by our own writes.

store.py         ClusterCache: upsert/delete for every kind, indexes, the live snapshot, ClusterView
owned.py         Phalanx's own objects (PodGroups, CompositePodGroups, Workloads) by key and by owner
shown.py         what a watch event must show for a write of ours to count as seen
expectations.py  our writes the watch has not shown yet (resourceVersion is opaque)
volumes.py       claims, volumes, classes and CSI objects resolved like kube-scheduler's filters
csi.py           CSI records (CSINode, VolumeAttachment, CSIDriver, CSIStorageCapacity)
"""
