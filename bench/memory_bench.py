"""Where the operator's memory goes per node and per pod (issue 19, item 3), without a 50,000-node cluster.

    python bench/memory_bench.py                 # 1,000, 5,000 and 50,000 nodes (as many pods)
    python bench/memory_bench.py --sizes 1000    # one size

Each size runs in a fresh interpreter (no fragmentation carried over) and measures, with tracemalloc,
what stays allocated after the objects a watch delivers have gone through each consumer:

- `bodies`: the watch events' bodies themselves (shaped as the apiserver sends kwok nodes and bound
  pods: managedFields, conditions, a GPU request), kept alive only for this row, as the yardstick;
- `cache`: Phalanx's ClusterCache after `upsert("Node", ...)` and `upsert("Pod", ...)` of every body (the
  bodies dropped afterwards): typed records and the engine's live snapshot, what a decision needs;
- `kopf memories`: Kopf 1.45's per-object ResourceMemory (memo copy, throttler, indexing and daemons
  memory), which Kopf keeps for every object any handler of the resource saw, `on.event` included, until
  the object is deleted: what the Kopf watch path costs on top of the cache (--no-informers);
- `informer`: the same nodes and pods as one watch stream's JSON lines through Phalanx's own watch path
  (watch/informer.py: `Lines`, `parse_event`, `Informer.apply`) into a fresh cache: what that path keeps
  on top of the cache (the default for nodes and pods), and its CPU per event (decode + cache upsert).

The rows say how much each costs per 1,000 objects, so a watch path that skips Kopf for pods and nodes
can be weighed against what it saves. Written into docs/performance.md under "## Memory per object".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
SECTION = "## Memory per object"
ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "network.example.com/block", "network.example.com/rack"


def _stamp(i: int) -> str:
    return f"2026-12-02T01:{i % 60:02d}:{(i * 7) % 60:02d}Z"


def node_body(i: int) -> dict[str, Any]:
    """A kwok node as the apiserver returns it (labels of a zone/block/rack topology, 8 GPUs)."""
    name = f"node-{i:05d}"
    conditions = [
        {
            "type": t,
            "status": "True" if t == "Ready" else "False",
            "lastHeartbeatTime": _stamp(i),
            "lastTransitionTime": _stamp(i + 1),
            "reason": f"Kubelet{t}",
            "message": f"kubelet reports {t}",
        }
        for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    resources = {
        "cpu": "96",
        "memory": "1536Gi",
        "nvidia.com/gpu": "8",
        "pods": "110",
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": _stamp(i),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "gpu-8x",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "type": "kwok",
                ZONE: f"zone-{i // 1000}",
                BLOCK: f"block-{i // 100}",
                RACK: f"rack-{i // 10}",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [
                {
                    "manager": m,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": _stamp(i),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in ("a", "b", "c", "d")}}},
                }
                for m in ("kwok", "kube-controller-manager", "phalanx-dev-cluster")
            ],
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 256 % 256}.{i % 256}"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "operatingSystem": "linux",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
            },
        },
    }


def pod_body(i: int) -> dict[str, Any]:
    """A bound pod of an Indexed Job's gang, one per node, 8 GPUs."""
    job = f"train-{i // 8:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{i % 8}-abcde",
            "namespace": "team-a",
            "uid": f"11111111-0000-0000-0000-{i:012d}",
            "resourceVersion": str(900000 + i),
            "creationTimestamp": _stamp(i),
            "labels": {
                "batch.kubernetes.io/job-name": job,
                "job-name": job,
                "batch.kubernetes.io/controller-uid": f"22222222-0000-0000-0000-{i // 8:012d}",
                "controller-uid": f"22222222-0000-0000-0000-{i // 8:012d}",
                "batch.kubernetes.io/job-completion-index": str(i % 8),
                "scheduling.phalanx.dev/pod-group": job,
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(i % 8)},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": f"22222222-0000-0000-0000-{i // 8:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": m,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": _stamp(i),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:nodeSelector": {}}, "f:status": {"f:conditions": {}}},
                }
                for m in ("kube-controller-manager", "phalanx", "kube-scheduler", "kwok")
            ],
        },
        "spec": {
            "nodeName": f"node-{i:05d}",
            "nodeSelector": {"kubernetes.io/hostname": f"node-{i:05d}"},
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example.com/train:1",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "8", "cpu": "32"},
                        "limits": {"nvidia.com/gpu": "8"},
                    },
                    "env": [{"name": "JOB_COMPLETION_INDEX", "value": str(i % 8)}],
                }
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": _stamp(i)}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "hostIP": f"10.1.{i // 256 % 256}.{i % 256}",
            "podIP": f"10.244.{i // 256 % 256}.{i % 256}",
            "startTime": _stamp(i),
        },
    }


def decoded(body: dict[str, Any]) -> dict[str, Any]:
    """As a watch delivers it: parsed from the stream's JSON, every string a fresh object."""
    return json.loads(json.dumps(body))  # type: ignore[no-any-return]


def _current() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def measure(size: int) -> dict[str, int]:
    """Bytes each consumer keeps for `size` nodes and `size` pods (run in a fresh interpreter)."""
    from kopf._cogs.structs import ephemera
    from kopf._core.reactor.inventory import ResourceMemories

    from phalanx.controller.cache.store import ClusterCache

    tracemalloc.start()
    out: dict[str, int] = {}

    base = _current()
    nodes = [decoded(node_body(i)) for i in range(size)]
    pods = [decoded(pod_body(i)) for i in range(size)]
    out["bodies"] = _current() - base
    del nodes, pods

    base = _current()
    cache = ClusterCache()
    for i in range(size):
        cache.upsert("Node", decoded(node_body(i)))
    for i in range(size):
        cache.upsert("Pod", decoded(pod_body(i)))
    cache.live.snapshot()  # what a pass builds from it
    out["cache"] = _current() - base

    base = _current()
    memo = ephemera.AnyMemo(ephemera.Memo())
    memories = ResourceMemories()

    async def recall_all() -> None:
        for i in range(size):
            await memories.recall(decoded(node_body(i)), memobase=memo)  # type: ignore[arg-type]
            await memories.recall(decoded(pod_body(i)), memobase=memo)  # type: ignore[arg-type]

    asyncio.run(recall_all())
    out["kopf memories"] = _current() - base
    assert len(cache.nodes) == size and len(cache.pods) == size  # keep the cache alive through the row
    return out


def through_the_informer(size: int) -> dict[str, int]:
    """What a cache fed through the informer retains, and its CPU per event in nanoseconds. In an interpreter
    of its own: the interning tables the cache row fills (label keys and values) would be counted there."""
    tracemalloc.start()
    from phalanx.controller.cache.store import ClusterCache
    from phalanx.controller.watch.informer import Informer, Lines, parse_event
    from phalanx.controller.watch.watched import watched

    def stream(make: Any) -> list[bytes]:  # as the apiserver sends them: one event per line, in chunks
        text = b"".join(
            json.dumps({"type": "ADDED", "object": make(i)}).encode() + b"\n" for i in range(size)
        )
        return [text[i : i + 65536] for i in range(0, len(text), 65536)]

    chunks = {"Node": stream(node_body), "Pod": stream(pod_body)}

    def feed() -> ClusterCache:
        cache = ClusterCache()
        for kind, parts in chunks.items():
            informer = Informer(watched(kind), cache, transport=None)  # type: ignore[arg-type]
            lines = Lines()
            for chunk in parts:
                for line in lines.feed(chunk):
                    informer.apply(parse_event(line))
        assert len(cache.nodes) == size and len(cache.pods) == size
        return cache

    base = _current()
    cache = feed()
    cache.live.snapshot()
    retained = _current() - base
    del cache
    tracemalloc.stop()  # it slows every allocation: the CPU is measured without it
    cpu = time.process_time_ns()
    feed()
    cpu = time.process_time_ns() - cpu
    return {"informer": retained, "informer ns per event": cpu // (2 * size)}


def run(sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        row: dict[str, Any] = {"size": size}
        for flag in ("--one", "--informer"):
            result = subprocess.run(
                [sys.executable, __file__, flag, str(size)], capture_output=True, text=True, check=True
            )
            row.update(json.loads(result.stdout.strip().splitlines()[-1]))
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| nodes + pods | bodies (yardstick) | Phalanx's cache | Kopf's memories | cache fed by the informer"
        " | cache per 1,000 nodes + pods | Kopf per 1,000 | informer over the cache per 1,000"
        " | informer CPU per event |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    mib = 1024 * 1024
    for r in rows:
        k = r["size"] / 1000
        lines.append(
            f"| {r['size']:,} + {r['size']:,} | {r['bodies'] / mib:.1f} MiB | {r['cache'] / mib:.1f} MiB"
            f" | {r['kopf memories'] / mib:.1f} MiB | {r['informer'] / mib:.1f} MiB"
            f" | {r['cache'] / mib / k:.2f} MiB | {r['kopf memories'] / mib / k:.2f} MiB"
            f" | {(r['informer'] - r['cache']) / mib / k:+.2f} MiB"
            f" | {r['informer ns per event'] / 1000:.0f} µs |"
        )
    return "\n".join(lines)


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def write_doc(text: str, section: str = SECTION) -> None:
    """Put `text` (a section starting with its `## ` heading) in place of `section` in docs/performance.md,
    or at its end; bench/memory_live.py writes its own section through this too."""
    text = text.rstrip("\n") + "\n"
    doc = DOC.read_text()
    start = doc.find(section)
    if start >= 0:
        end = doc.find("\n## ", start + len(section))
        doc = doc[:start] + text + (doc[end:] if end >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    DOC.write_text(doc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1000,5000,50000", help="numbers of nodes (as many pods)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--informer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    if args.informer:
        print(json.dumps(through_the_informer(args.informer)))
        return
    rows = run([int(s) for s in args.sizes.split(",")])
    text = (
        f"{SECTION}\n\n`python bench/memory_bench.py` on {machine()}: bytes still allocated (tracemalloc)"
        " after every node and pod went through each consumer; see the script's docstring.\n\n"
        f"{table(rows)}\n"
    )
    print(text)
    if not args.no_doc:
        write_doc(text)


if __name__ == "__main__":
    main()
