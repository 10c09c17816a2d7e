from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.placement import (
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Snapshot,
    Taint,
    Toleration,
    node_eligible,
    taints_tolerated,
    tolerates,
)

Req = NodeSelectorRequirement

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GPU_TAINT, True),
        (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"), GPU_TAINT, True),
        (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "Exists"), GPU_TAINT, True),  # empty effect matches all effects
        (Toleration("other", "Exists"), GPU_TAINT, False),
        (Toleration("", "Exists"), GPU_TAINT, True),  # empty key + Exists tolerates everything
        (Toleration("", "Exists", "", "NoExecute"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "", "present"), GPU_TAINT, True),  # empty operator means Equal
        (
            Toleration("nvidia.com/gpu", "Gt", "1"),
            Taint("nvidia.com/gpu", "2", "NoSchedule"),
            False,
        ),  # alpha, off
        (Toleration("nvidia.com/gpu", "Bogus", "present"), GPU_TAINT, False),
    ],
)
def test_tolerates(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_is_ignored_and_all_blocking_taints_need_a_toleration() -> None:
    taints = (Taint("soft", "", "PreferNoSchedule"), GPU_TAINT, Taint("maint", "", "NoExecute"))
    assert not taints_tolerated(taints, ())
    assert not taints_tolerated(taints, (Toleration("nvidia.com/gpu", "Exists"),))
    assert taints_tolerated(taints, (Toleration("nvidia.com/gpu", "Exists"), Toleration("maint", "Exists")))
    assert taints_tolerated((Taint("soft", "", "PreferNoSchedule"),), ())


def node(name: str = "n1", labels: dict[str, str] | None = None, **kw: object) -> NodeInfo:
    return NodeInfo(name=name, labels=labels or {}, allocatable={"cpu": 1000, "pods": 10}, **kw)  # type: ignore[arg-type]


def affinity(*terms: NodeSelectorTerm) -> PodRequirements:
    return PodRequirements(requests=(), affinity_terms=terms)


def term(
    *exprs: NodeSelectorRequirement, fields: tuple[NodeSelectorRequirement, ...] = ()
) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=exprs, match_fields=fields)


def eligible(n: NodeInfo, req: PodRequirements) -> bool:
    """Scalar reference and the snapshot's vectorised mask must agree; return the answer."""
    scalar = node_eligible(n, req.node_selector, req.affinity_terms, req.tolerations)
    vector = bool(Snapshot.build([n], []).eligible(req)[0])
    assert scalar == vector
    return scalar


LABELS = {"zone": "z1", "gen": "5", "weird": "05x"}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (Req("zone", "In", ("z1", "z2")), True),
        (Req("zone", "In", ("z2",)), False),
        (Req("missing", "In", ("z1",)), False),
        (Req("zone", "NotIn", ("z2",)), True),
        (Req("zone", "NotIn", ("z1",)), False),
        (Req("missing", "NotIn", ("z1",)), True),  # NotIn matches nodes without the label
        (Req("zone", "Exists"), True),
        (Req("missing", "Exists"), False),
        (Req("missing", "DoesNotExist"), True),
        (Req("zone", "DoesNotExist"), False),
        (Req("gen", "Gt", ("4",)), True),
        (Req("gen", "Gt", ("5",)), False),
        (Req("gen", "Lt", ("6",)), True),
        (Req("gen", "Lt", ("+5",)), False),
        (Req("gen", "Gt", ("-1",)), True),
        (Req("weird", "Gt", ("1",)), False),  # label not an integer
        (Req("missing", "Lt", ("9",)), False),
        # Invalid requirements make the whole term match nothing.
        (Req("zone", "In", ()), False),
        (Req("zone", "Exists", ("z1",)), False),
        (Req("gen", "Gt", ("4", "3")), False),
        (Req("gen", "Gt", ("four",)), False),
        (Req("gen", "Gt", ("1_0",)), False),
        (Req("zone", "Equals", ("z1",)), False),
    ],
)
def test_affinity_operators(requirement: NodeSelectorRequirement, expected: bool) -> None:
    assert eligible(node(labels=LABELS), affinity(term(requirement))) is expected


def test_affinity_terms_are_ored_and_expressions_anded() -> None:
    n = node(labels=LABELS)
    z1, z2, gen = Req("zone", "In", ("z1",)), Req("zone", "In", ("z2",)), Req("gen", "Gt", ("3",))
    assert eligible(n, affinity(term(z1, gen)))
    assert not eligible(n, affinity(term(z2, gen)))
    assert eligible(n, affinity(term(z2), term(gen)))
    # An invalid term does not spoil the others.
    assert eligible(n, affinity(term(Req("zone", "In", ())), term(z1)))


def test_empty_terms_match_nothing() -> None:
    n = node(labels=LABELS)
    assert not eligible(n, affinity())
    assert not eligible(n, affinity(term()))
    assert eligible(n, affinity(term(), term(Req("zone", "Exists"))))
    assert eligible(n, PodRequirements(requests=(), affinity_terms=None))


def test_match_fields_on_node_name() -> None:
    n = node("gpu-7", LABELS)
    by_name = Req("metadata.name", "In", ("gpu-7",))
    assert eligible(n, affinity(term(fields=(by_name,))))
    assert not eligible(n, affinity(term(fields=(Req("metadata.name", "In", ("gpu-8",)),))))
    assert eligible(n, affinity(term(fields=(Req("metadata.name", "NotIn", ("gpu-8",)),))))
    assert not eligible(
        n, affinity(term(fields=(Req("metadata.name", "In", ("gpu-7", "gpu-8")),)))
    )  # needs 1 value
    assert not eligible(n, affinity(term(fields=(Req("metadata.name", "Exists"),))))
    assert eligible(n, affinity(term(Req("zone", "In", ("z1",)), fields=(by_name,))))
    assert not eligible(n, affinity(term(Req("zone", "In", ("z2",)), fields=(by_name,))))


def test_node_selector() -> None:
    n = node(labels=LABELS)
    assert eligible(n, PodRequirements(requests=(), node_selector=(("zone", "z1"),)))
    assert eligible(n, PodRequirements(requests=(), node_selector=(("gen", "5"), ("zone", "z1"))))
    assert not eligible(n, PodRequirements(requests=(), node_selector=(("gen", "5"), ("zone", "z2"))))
    assert not eligible(n, PodRequirements(requests=(), node_selector=(("missing", ""),)))


def test_cordoned_and_not_ready_nodes_are_skipped() -> None:
    req = PodRequirements(requests=(), tolerations=(Toleration("", "Exists"),))
    assert eligible(node(), req)
    assert not eligible(node(unschedulable=True), req)
    assert not eligible(node(ready=False), req)


def test_taints_on_nodes() -> None:
    tainted = node(taints=(GPU_TAINT, Taint("soft", "x", "PreferNoSchedule")))
    assert not eligible(tainted, PodRequirements(requests=()))
    assert eligible(
        tainted, PodRequirements(requests=(), tolerations=(Toleration("nvidia.com/gpu", "Exists"),))
    )


# --- the vectorised masks agree with the per-node reference on random input -----------------

label_values = st.sampled_from(["a", "b", "1", "7", "-3", "012", "x1"])
operators = st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"])
keys = st.sampled_from(["k1", "k2", "k3"])
requirements = st.builds(Req, keys, operators, st.lists(label_values, max_size=2).map(tuple))
field_reqs = st.builds(
    Req,
    st.sampled_from(["metadata.name", "spec.other"]),
    st.sampled_from(["In", "NotIn", "Exists"]),
    st.lists(st.sampled_from(["n0", "n1", "n5", ""]), min_size=0, max_size=2).map(tuple),
)
terms = st.builds(
    NodeSelectorTerm,
    st.lists(requirements, max_size=3).map(tuple),
    st.lists(field_reqs, max_size=1).map(tuple),
)
taints = st.builds(
    Taint,
    st.sampled_from(["t1", "t2"]),
    st.sampled_from(["", "v"]),
    st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
)
tolerations = st.builds(
    Toleration,
    st.sampled_from(["", "t1", "t2"]),
    st.sampled_from(["Equal", "Exists", ""]),
    st.sampled_from(["", "v"]),
    st.sampled_from(["", "NoSchedule", "NoExecute"]),
)
nodes = st.lists(
    st.builds(
        NodeInfo,
        name=st.just(""),
        labels=st.dictionaries(keys, label_values, max_size=3),
        allocatable=st.just({"pods": 1}),
        taints=st.lists(taints, max_size=2).map(tuple),
        unschedulable=st.booleans(),
        ready=st.booleans(),
    ),
    min_size=1,
    max_size=6,
)
pod_reqs = st.builds(
    PodRequirements,
    requests=st.just(()),
    node_selector=st.dictionaries(keys, label_values, max_size=2).map(lambda d: tuple(sorted(d.items()))),
    affinity_terms=st.one_of(st.none(), st.lists(terms, max_size=3).map(tuple)),
    tolerations=st.lists(tolerations, max_size=2).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(nodes, pod_reqs)
def test_vectorised_filters_match_reference(raw_nodes: list[NodeInfo], req: PodRequirements) -> None:
    named = [
        NodeInfo(f"n{i}", n.labels, n.allocatable, n.taints, n.unschedulable, n.ready)
        for i, n in enumerate(raw_nodes)
    ]
    snapshot = Snapshot.build(named, [])
    mask = snapshot.eligible(req)
    for i, n in enumerate(named):
        assert bool(mask[i]) == node_eligible(n, req.node_selector, req.affinity_terms, req.tolerations), (
            n.name
        )
