"""`phalanx where`: the article's where.sh table from plain API dicts, with any topology levels."""

from __future__ import annotations

from tools_testkit import fillers, job_pod, seed_nodes

from phalanx.devcluster.tools import format_table
from phalanx.tools.where import DEFAULT_LEVELS, level_header, parse_levels, where_table


def test_the_default_table_is_the_articles() -> None:
    pods = [
        job_pod("gang-4", i, gated=False, node=n, phase="Running")
        for i, n in enumerate(("was-worker3", "was-worker4"))
    ]
    pods += [job_pod("gang-4", 2)]
    assert where_table(pods, seed_nodes()).splitlines() == [
        "POD          PHASE    NODE         NB    LB",
        "gang-4-0-x0  Running  was-worker3  nb-a  lb-a2",
        "gang-4-1-x1  Running  was-worker4  nb-a  lb-a2",
        "gang-4-2-x2  Pending  -            -     -",
    ]


def test_levels_choose_the_columns_and_all_namespaces_adds_one() -> None:
    pods = fillers("was-worker5", namespace="b") + fillers("was-worker", namespace="a")
    table = where_table(
        pods,
        seed_nodes(),
        ("oci.oraclecloud.com/rdma.hpc_island_id", "kubernetes.io/hostname", "zone"),
        namespaces=True,
    )
    assert table == format_table(
        ("NAMESPACE", "POD", "PHASE", "NODE", "ISLAND", "HOSTNAME", "ZONE"),
        [
            ("a", "filler-was-worker", "Running", "was-worker", "isl-1", "was-worker", "-"),
            ("b", "filler-was-worker5", "Running", "was-worker5", "isl-1", "was-worker5", "-"),
        ],
    )


def test_no_pods_prints_the_header() -> None:
    assert where_table([], seed_nodes()) == "POD  PHASE  NODE  NB  LB"


def test_levels_from_flags() -> None:
    assert parse_levels(None) == DEFAULT_LEVELS
    assert parse_levels(["a/b,c", " d "]) == ("a/b", "c", "d")
    assert parse_levels([""]) == ()
    assert [level_header(k) for k in (*DEFAULT_LEVELS, "topology.kubernetes.io/zone", "rack")] == [
        "NB",
        "LB",
        "ZONE",
        "RACK",
    ]
