"""Preferred and auto leaves inside a hand-made composite (issue 18, item 2), on the dev cluster.

A hand-made tree (Workload, CompositePodGroup keyed to network blocks, one PodGroup keyed to local blocks)
whose slice has 3 pods of 8 GPUs: it can never fit a 2-node local block. Its leaf's
`phalanx.dev/topology-mode` decides: required waits (and says so on the leaf), preferred and auto place
the slice in one network block (its parent's domain) over the fewest local blocks, and the leaf's Admitted
condition says which rule applied. Before, a preferred leaf inside a composite was refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import GPU_KEY, LB_KEY, NB_KEY, Namespace, bound, domains_of, hold, wait_for
from .slice_scenarios import condition

pytestmark = pytest.mark.integration

API = "scheduling.phalanx.dev/v1beta1"
SIZE = 3


def tree(ns: Namespace, mode: str) -> None:
    """The Workload, the CompositePodGroup `tree`, its PodGroup `slice` (leaf mode `mode`), its pods."""
    slice_rule = {
        "schedulingPolicy": {"gang": {"minCount": SIZE}},
        "schedulingConstraints": {"topology": [{"key": LB_KEY}]},
    }
    tree_rule = {
        "schedulingPolicy": {"gang": {"minGroupCount": 1}},
        "schedulingConstraints": {"topology": [{"key": NB_KEY}]},
    }
    ns.create(
        {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {"name": "tree"},
            "spec": {
                "compositePodGroupTemplates": [
                    {"name": "job", **tree_rule, "podGroupTemplates": [{"name": "slice", **slice_rule}]}
                ]
            },
        }
    )
    ns.create(
        {
            "apiVersion": API,
            "kind": "CompositePodGroup",
            "metadata": {"name": "tree"},
            "spec": {"workloadRef": {"workloadName": "tree", "templateName": "job"}, **tree_rule},
        }
    )
    ns.create(
        {
            "apiVersion": API,
            "kind": "PodGroup",
            "metadata": {"name": "slice", "annotations": {"phalanx.dev/topology-mode": mode}},
            "spec": {
                "parentCompositePodGroupName": "tree",
                "workloadRef": {"workloadName": "tree", "templateName": "slice"},
                **slice_rule,
            },
        }
    )
    for i in range(SIZE):
        limits = {GPU_KEY: "8"}
        container = {"name": "w", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"slice-{i}", "labels": {"app": "tree", "phalanx.dev/pod-group": "slice"}},
            "spec": {"containers": [container]},
        }
        ns.create(pod)


def leaf(ns: Namespace) -> dict[str, Any]:
    obj: dict[str, Any] = ns.get(f"/apis/{API}/namespaces/{{ns}}/podgroups/slice")
    return obj


def admitted(ns: Namespace, status: str, reason: str | None = None) -> dict[str, Any]:
    """The leaf's Admitted condition once it has `status` (and `reason`, if given): the pods are created
    one by one, so the leaf first says WaitingForPods before it can say why the whole slice waits."""

    def probe() -> dict[str, Any] | None:
        cond = condition(leaf(ns), "Admitted")
        if not cond or cond["status"] != status:
            return None
        return cond if reason is None or cond["reason"] == reason else None

    return wait_for(f"the leaf Admitted={status} {reason or ''}", probe, timeout=90)


def test_a_required_leaf_that_can_never_fit_its_local_block_waits(ns: Namespace) -> None:
    tree(ns, "required")
    cond = admitted(ns, "False", "Unschedulable")
    print(cond)
    hold("no slice pod bound", lambda: not bound(ns.pods("app=tree")), seconds=3)


@pytest.mark.parametrize("mode", ["preferred", "auto"])
def test_a_preferred_or_auto_leaf_takes_the_fewest_local_blocks_of_one_network_block(
    ns: Namespace, mode: str
) -> None:
    tree(ns, mode)
    pods = wait_for(
        "the slice bound",
        lambda: ps if len(bound(ps := ns.pods("app=tree"))) == SIZE else None,
        timeout=90,
    )
    print(ns.where("app=tree"))
    assert len(domains_of(ns.api, pods, NB_KEY)) == 1
    assert len(domains_of(ns.api, pods, LB_KEY)) == 2  # the fewest local blocks that hold three pods
    cond = admitted(ns, "True")
    print(cond["message"])
    if mode == "auto":
        assert f"auto: {SIZE} pods can never fit one domain of {LB_KEY}" in cond["message"], cond
    else:
        assert "topology mode preferred" in cond["message"], cond
