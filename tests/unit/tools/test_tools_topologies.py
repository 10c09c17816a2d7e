"""`phalanx topology`: the presets are valid Topologies of the labels their platforms write, and the nesting
check finds levels in the wrong order, values under two parents and nodes missing a level."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from tools_testkit import LB, NB, seed_nodes

from phalanx.api.topology import Topology
from phalanx.devcluster.topology import RACK_KEY, racks_topology
from phalanx.tools.topologies import (
    PRESETS,
    check_nesting,
    cluster_topologies,
    levels_of_key,
    preset,
    presets_yaml,
    render_report,
    report_json,
)

ISLAND = "oci.oraclecloud.com/rdma.hpc_island_id"


def test_every_preset_is_a_valid_topology_of_known_labels() -> None:
    names = [p.name for p in PRESETS]
    assert len(set(names)) == len(names)
    assert {"topograph", "topograph-accelerator", "gke", "aws", "oci", "zone"} <= set(names)
    for p in PRESETS:
        body = p.topology()
        assert Topology.model_validate(body).spec.labels == p.levels
        assert body["metadata"] == {"name": p.name} and "status" not in body
        assert p.source
    assert preset("topograph").levels == (
        "fabric.topograph.run/tier-2",
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
    )
    assert preset("topograph-accelerator").levels == (
        "accelerator.topograph.run/domain",
        "accelerator.topograph.run/sub-domain",
    )
    assert preset("oci").levels == (ISLAND, NB, LB)
    with pytest.raises(ValueError, match="no preset 'nope'; the presets are topograph, "):
        preset("nope")


def test_the_presets_yaml_is_a_stream_kubectl_applies() -> None:
    text = presets_yaml(PRESETS)
    docs = list(yaml.safe_load_all(text))
    assert [d["metadata"]["name"] for d in docs] == [p.name for p in PRESETS]
    assert all(d["kind"] == "Topology" and d["apiVersion"] == "scheduling.phalanx.dev/v1beta1" for d in docs)
    assert text.startswith("# NVIDIA Topograph")


def nodes_labelled(rows: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    return [{"metadata": {"name": name, "labels": labels}} for name, labels in rows]


def test_the_articles_labels_nest() -> None:
    report = check_nesting("oci", (ISLAND, NB, LB), seed_nodes())
    assert report.nests and report.complete == 8 and not report.misfits and not report.partial
    assert [(c.label, c.values, c.nodes) for c in report.counts] == [(ISLAND, 1, 8), (NB, 2, 8), (LB, 4, 8)]
    assert render_report(report).splitlines()[-1] == (
        "The labels nest: every value of a level is under one value of the level above; "
        "8 nodes carry every level."
    )


def test_levels_in_the_wrong_order_do_not_nest() -> None:
    report = check_nesting("backwards", (LB, NB), seed_nodes())
    assert not report.nests
    assert [(m.level, m.value, [p for p, _ in m.parents]) for m in report.misfits] == [
        (NB, "nb-a", ["lb-a1", "lb-a2"]),
        (NB, "nb-b", ["lb-b1", "lb-b2"]),
    ]
    text = render_report(report)
    assert f"  {NB}=nb-a is under 2 values of {LB}: lb-a1 (2 nodes: was-worker, was-worker2); " in text
    assert "The labels do not nest:" in text


def test_values_unique_only_within_their_parent_nest_as_paths() -> None:
    nodes = [spec.manifest() for spec in racks_topology()]
    strict = check_nesting("racks", (NB, RACK_KEY), nodes)
    assert not strict.nests and {m.value for m in strict.misfits} == {"r1", "r2"}
    assert "--paths accepts it" in render_report(strict)
    paths = check_nesting("racks", (NB, RACK_KEY), nodes, paths=True)
    assert paths.nests
    assert "nest as paths" in render_report(paths)


def test_nodes_missing_a_level_and_nodes_outside() -> None:
    nodes = nodes_labelled(
        [
            ("a", {NB: "nb-a", LB: "lb-a1"}),
            ("b", {LB: "lb-a1"}),  # a finer level without the coarser one
            ("c", {NB: "nb-a"}),  # the coarse level only
            ("cpu-0", {}),  # outside the Topology: fine
        ]
    )
    report = check_nesting("t", (NB, LB), nodes)
    assert not report.nests
    assert [(p.node, p.has, p.lacks) for p in report.partial] == [("b", (LB,), (NB,)), ("c", (NB,), (LB,))]
    assert report.unlabelled == ("cpu-0",)
    text = render_report(report)
    assert f"  b has {LB} but not {NB}: it is in no domain" in text
    assert "1 node carry none of its labels (outside this Topology): cpu-0" in text
    body = report_json(report)
    assert body["nests"] is False and body["completeNodes"] == 1
    assert body["partialNodes"][0] == {"node": "b", "has": [LB], "lacks": [NB]}


def test_labels_no_node_carries_do_not_nest() -> None:
    report = check_nesting("gke", preset("gke").levels, seed_nodes())
    assert not report.nests and report.complete == 0 and len(report.unlabelled) == 8
    assert "No node carries all of its labels" in render_report(report)


def test_cluster_topologies_and_which_one_a_key_uses() -> None:
    bodies = [
        {"metadata": {"name": "b"}, "spec": {"levels": [{"nodeLabel": NB}, {"nodeLabel": LB}]}},
        {
            "metadata": {"name": "a"},
            "spec": {"levels": [{"nodeLabel": "x/y"}]},
            "status": {"conditions": [{"type": "Active", "status": "False", "reason": "LabelConflict"}]},
        },
        {"metadata": {"name": "broken"}, "spec": {"levels": []}},
    ]
    found = cluster_topologies(bodies)
    assert [(t.name, t.levels, t.active) for t in found] == [("a", ("x/y",), False), ("b", (NB, LB), True)]
    assert levels_of_key(found, LB) == (NB, LB)
    assert levels_of_key(found, "x/y") == ()
    assert levels_of_key(found, None) == ()
