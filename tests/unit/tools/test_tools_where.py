"""`phalanx where`: the article's where.sh table from plain API dicts, its columns from the cluster's
Topologies (else topology.kubernetes.io/zone), and its `-o json` shape."""

from __future__ import annotations

from tools_testkit import LB, NB, fillers, job_pod, seed_nodes

from phalanx.devcluster.tools import format_table
from phalanx.tools.topologies import ClusterTopology, default_columns
from phalanx.tools.where import ARTICLE_LEVELS, level_header, parse_levels, where_json, where_table

ISLAND = "oci.oraclecloud.com/rdma.hpc_island_id"


def test_the_article_table() -> None:
    pods = [
        job_pod("gang-4", i, gated=False, node=n, phase="Running")
        for i, n in enumerate(("was-worker3", "was-worker4"))
    ]
    pods += [job_pod("gang-4", 2)]
    assert where_table(pods, seed_nodes(), ARTICLE_LEVELS).splitlines() == [
        "POD          PHASE    NODE         NB    LB",
        "gang-4-0-x0  Running  was-worker3  nb-a  lb-a2",
        "gang-4-1-x1  Running  was-worker4  nb-a  lb-a2",
        "gang-4-2-x2  Pending  -            -     -",
    ]


def test_levels_choose_the_columns_and_all_namespaces_adds_one() -> None:
    pods = fillers("was-worker5", namespace="b") + fillers("was-worker", namespace="a")
    table = where_table(pods, seed_nodes(), (ISLAND, "kubernetes.io/hostname", "zone"), namespaces=True)
    assert table == format_table(
        ("NAMESPACE", "POD", "PHASE", "NODE", "ISLAND", "HOSTNAME", "ZONE"),
        [
            ("a", "filler-was-worker", "Running", "was-worker", "isl-1", "was-worker", "-"),
            ("b", "filler-was-worker5", "Running", "was-worker5", "isl-1", "was-worker5", "-"),
        ],
    )


def test_the_columns_are_the_clusters_topology_levels_else_the_zone() -> None:
    assert default_columns([]) == ("topology.kubernetes.io/zone",)
    oci = ClusterTopology("oci", (ISLAND, NB, LB), True)
    racks = ClusterTopology("racks", ("example.com/row", "example.com/rack", "kubernetes.io/hostname"), True)
    ignored = ClusterTopology("zz-conflict", ("example.com/other",), False)
    assert default_columns([oci, racks, ignored]) == (ISLAND, NB, LB, "example.com/row", "example.com/rack")
    assert default_columns([ignored]) == ("topology.kubernetes.io/zone",)
    assert where_table([], seed_nodes(), default_columns([oci])) == "POD  PHASE  NODE  ISLAND  NB  LB"


def test_no_pods_prints_the_header() -> None:
    assert where_table([], seed_nodes(), ARTICLE_LEVELS) == "POD  PHASE  NODE  NB  LB"


def test_levels_from_flags() -> None:
    assert parse_levels(None) is None
    assert parse_levels(["a/b,c", " d "]) == ("a/b", "c", "d")
    assert parse_levels([""]) == ()
    assert [level_header(k) for k in (*ARTICLE_LEVELS, "topology.kubernetes.io/zone", "rack")] == [
        "NB",
        "LB",
        "ZONE",
        "RACK",
    ]


def test_the_json_shape() -> None:
    pods = [job_pod("gang-4", 0, gated=False, node="was-worker3", phase="Running"), job_pod("gang-4", 1)]
    body = where_json(pods, seed_nodes(), (NB, "topology.kubernetes.io/zone"))
    assert body == {
        "kind": "PodPlacementList",
        "version": 1,
        "levels": [NB, "topology.kubernetes.io/zone"],
        "items": [
            {
                "namespace": "ml",
                "pod": "gang-4-0-x0",
                "phase": "Running",
                "node": "was-worker3",
                "domains": {NB: "nb-a", "topology.kubernetes.io/zone": None},
            },
            {
                "namespace": "ml",
                "pod": "gang-4-1-x1",
                "phase": "Pending",
                "node": None,
                "domains": {NB: None, "topology.kubernetes.io/zone": None},
            },
        ],
    }
