"""`preferred_domain` (issue 17: a JobSet's failurePolicy restart goes back to the block it had): the engine
tries that domain first and takes it when the group (or the whole tree) fits there, else decides as if no
preference were given. The reference is independent of the engine's search order: the same request on a
snapshot holding only the preferred domain's nodes."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from placement_testkit import GPU, LOCAL_BLOCK, NETWORK_BLOCK, article_nodes, busy, gang

from phalanx.placement import (
    Admit,
    BoundPod,
    CompositeAdmit,
    CompositeRequest,
    GroupRequest,
    PodRequest,
    PodRequirements,
    Snapshot,
    decide,
    decide_composite,
)


def _domain_of(snapshot: Snapshot, nodes: list[str]) -> set[str]:
    labels = {n.name: n.labels for n in snapshot.nodes}
    return {labels[n][NETWORK_BLOCK] for n in nodes}


def _only(domain: str, bound: list[BoundPod]) -> Snapshot:
    """The cluster cut down to one network block (the pods bound there stay)."""
    nodes = [n for n in article_nodes() if n.labels[NETWORK_BLOCK] == domain]
    names = {n.name for n in nodes}
    return Snapshot.build(nodes, [p for p in bound if p.node in names])


def test_a_gang_goes_to_the_domain_it_had_though_the_usual_rule_picks_another() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    plain = decide(snapshot, gang(4, 4, NETWORK_BLOCK))
    assert isinstance(plain, Admit) and plain.domain == "nb-a"  # the smallest name wins the tie
    again = decide(snapshot, dataclasses.replace(gang(4, 4, NETWORK_BLOCK), preferred_domain="nb-b"))
    assert isinstance(again, Admit) and again.domain == "nb-b"
    assert _domain_of(snapshot, [n for _, n in again.assignments]) == {"nb-b"}


def test_the_domain_it_had_wins_over_best_fit() -> None:
    snapshot = Snapshot.build(article_nodes(), busy(1))  # nb-a is the tighter fit for a gang of 2
    plain = decide(snapshot, gang(2, 2, NETWORK_BLOCK))
    assert isinstance(plain, Admit) and plain.domain == "nb-a"
    again = decide(snapshot, dataclasses.replace(gang(2, 2, NETWORK_BLOCK), preferred_domain="nb-b"))
    assert isinstance(again, Admit) and again.domain == "nb-b"


def test_a_gang_whose_domain_no_longer_fits_goes_elsewhere_whole() -> None:
    snapshot = Snapshot.build(article_nodes(), busy(5))
    again = decide(snapshot, dataclasses.replace(gang(4, 4, NETWORK_BLOCK), preferred_domain="nb-b"))
    assert isinstance(again, Admit) and again.domain == "nb-a"


def test_a_domain_no_node_has_is_ignored() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    request = gang(4, 4, NETWORK_BLOCK)
    assert decide(snapshot, dataclasses.replace(request, preferred_domain="gone")) == decide(
        snapshot, request
    )


def _tree(pods: int, preferred: str | None) -> CompositeRequest:
    req = PodRequirements(requests=((GPU, 8),))
    slices = tuple(
        GroupRequest(f"s{i}", tuple(PodRequest(f"s{i}-{j}", req) for j in range(pods)), pods, LOCAL_BLOCK)
        for i in range(2)
    )
    return CompositeRequest("root", slices, 2, NETWORK_BLOCK, preferred_domain=preferred)


def test_a_tree_goes_back_whole_to_the_domain_its_root_had_or_elsewhere_whole() -> None:
    empty = Snapshot.build(article_nodes(), [])
    plain = decide_composite(empty, _tree(2, None))
    assert isinstance(plain, CompositeAdmit) and plain.domain("root") == "nb-a"
    again = decide_composite(empty, _tree(2, "nb-b"))
    assert isinstance(again, CompositeAdmit) and again.domain("root") == "nb-b"
    assert _domain_of(empty, [n for _, a in again.admits for _, n in a.assignments]) == {"nb-b"}
    # nb-b has a busy node in one local block: no two whole local blocks there, the tree goes to nb-a.
    moved = decide_composite(Snapshot.build(article_nodes(), busy(7)), _tree(2, "nb-b"))
    assert isinstance(moved, CompositeAdmit) and moved.domain("root") == "nb-a"


BUSY = st.lists(st.integers(1, 8), unique=True, max_size=6)
SIZES = st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=6)  # GPUs of each pod (mixed shapes)


@settings(max_examples=150, deadline=None)
@given(busy_nodes=BUSY, sizes=SIZES, min_count=st.integers(1, 6), preferred=st.sampled_from(["nb-a", "nb-b"]))
def test_a_gang_takes_its_preferred_domain_exactly_when_it_fits_there(
    busy_nodes: list[int], sizes: list[int], min_count: int, preferred: str
) -> None:
    bound = busy(*busy_nodes)
    snapshot = Snapshot.build(article_nodes(), bound)
    pods = tuple(PodRequest(f"p{i}", PodRequirements(requests=((GPU, g),))) for i, g in enumerate(sizes))
    request = GroupRequest("g", pods, min(min_count, len(pods)), NETWORK_BLOCK)
    decision = decide(snapshot, dataclasses.replace(request, preferred_domain=preferred))
    there = decide(_only(preferred, bound), request)
    if isinstance(there, Admit):
        assert isinstance(decision, Admit) and decision.domain == preferred
        assert len(decision.assignments) == len(there.assignments)
        assert _domain_of(snapshot, [n for _, n in decision.assignments]) == {preferred}
    else:
        assert decision == decide(snapshot, request)  # the usual rule, as without a preference


@settings(max_examples=100, deadline=None)
@given(busy_nodes=BUSY, pods=st.integers(1, 3), preferred=st.sampled_from(["nb-a", "nb-b"]))
def test_a_tree_takes_its_preferred_domain_exactly_when_it_fits_there_whole(
    busy_nodes: list[int], pods: int, preferred: str
) -> None:
    bound = busy(*busy_nodes)
    snapshot = Snapshot.build(article_nodes(), bound)
    decision = decide_composite(snapshot, _tree(pods, preferred))
    if isinstance(decide_composite(_only(preferred, bound), _tree(pods, None)), CompositeAdmit):
        assert isinstance(decision, CompositeAdmit) and decision.domain("root") == preferred
        nodes = [n for _, a in decision.admits for _, n in a.assignments]
        assert len(nodes) == 2 * pods and _domain_of(snapshot, nodes) == {preferred}
    else:
        plain = decide_composite(snapshot, _tree(pods, None))
        if isinstance(plain, CompositeAdmit):
            assert decision == plain  # the usual rule, as without a preference
        else:  # refused alike (its explanation then starts from the domain it had)
            assert not isinstance(decision, CompositeAdmit) and decision.reason == plain.reason
