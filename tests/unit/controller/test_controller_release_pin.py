"""A released pod is pinned by its node's name too when it has no required node affinity of its own
(model/actions.py ReleasePod): the plan says which (`by_name`), and the records read such a pod as its
nodeSelector pin alone (api/cluster_objects.py placement_spec), so the name pin changes nothing the engine
sees. tests/integration/test_release_pin.py does it on the real apiserver and kube-scheduler."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from testkit import NB, NOW, TOPOLOGY, cluster, group_of, job_body, node_body, only, pod_body

from phalanx.api.cluster_objects import REQUIRED, name_pin, placement_spec
from phalanx.controller.model.actions import ReleasePod
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan import plan

OWN = {"nodeSelectorTerms": [{"matchExpressions": [{"key": NB, "operator": "In", "values": ["nb-a"]}]}]}


def test_pods_without_node_affinity_are_released_by_name_too_and_others_by_their_node_selector() -> None:
    plain = job_body("plain", 2, annotations=TOPOLOGY)
    own = job_body("own", 2, annotations=TOPOLOGY)
    own_pods = [pod_body("own", i) for i in range(2)]
    for pod in own_pods:
        pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: OWN}}
    state = cluster(
        [
            (plain, group_of(plain), [pod_body("plain", i) for i in range(2)]),
            (own, group_of(own), own_pods),
        ]
    )
    releases = only(plan(state, NOW).actions, ReleasePod)
    assert sorted((r.pod.name, r.by_name) for r in releases) == [
        ("own-0", False),
        ("own-1", False),
        ("plain-0", True),
        ("plain-1", True),
    ]


def test_a_release_pins_the_nodes_labels_of_the_topology_keys_its_gang_was_placed_by() -> None:
    """A node relabelled into another domain between the release and the binding no longer matches: kube-
    scheduler binds nothing there (model/actions.py ReleasePod). A Job keyed on its network block: the
    network block; one without a key: nothing but its node."""
    keyed = job_body("keyed", 2, annotations=TOPOLOGY)
    plain = job_body("plain", 1)
    state = cluster(
        [
            (keyed, group_of(keyed), [pod_body("keyed", i) for i in range(2)]),
            (plain, group_of(plain), [pod_body("plain", 0)]),
        ]
    )
    releases = {r.pod.name: r for r in only(plan(state, NOW).actions, ReleasePod)}
    keyed_releases = [r for n, r in releases.items() if n.startswith("keyed")]
    assert len(keyed_releases) == 2
    for r in keyed_releases:
        assert r.domain == ((NB, node_body(r.node)["metadata"]["labels"][NB]),)
    assert releases["plain-0"].domain == ()


def released(body: dict[str, Any], node: str, by_name: bool) -> dict[str, Any]:
    """The pod as the API answers Phalanx's release patch (kube.release_pod)."""
    out = copy.deepcopy(body)
    out["spec"]["schedulingGates"] = []
    out["metadata"]["labels"]["phalanx.dev/pod-group"] = "train"
    out["spec"]["nodeSelector"] = {**out["spec"].get("nodeSelector", {}), "kubernetes.io/hostname": node}
    if by_name:
        affinity = out["spec"].setdefault("affinity", {})
        affinity.setdefault("nodeAffinity", {})[REQUIRED] = name_pin(node)
    return out


def test_the_name_pin_changes_nothing_the_engine_reads() -> None:
    body = pod_body("train", 0)
    body["spec"]["affinity"] = {"podAntiAffinity": {REQUIRED: []}, "nodeAffinity": {"preferred": [1]}}
    with_name = PodRecord.from_body(released(body, "n3", by_name=True))
    without = PodRecord.from_body(released(body, "n3", by_name=False))
    assert with_name.requirements is without.requirements  # one shared object, as before the name pin
    assert with_name.node_selector_host == "n3" and with_name.usage_node == "n3"


spec_parts = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(
            st.sampled_from(["kubernetes.io/hostname", "zone"]), st.sampled_from(["n1", "n2"]), max_size=2
        ),
        "affinity": st.fixed_dictionaries(
            {},
            optional={
                "nodeAffinity": st.fixed_dictionaries(
                    {},
                    optional={
                        REQUIRED: st.sampled_from([name_pin("n1"), name_pin("n2"), OWN, {}]),
                        "preferredDuringSchedulingIgnoredDuringExecution": st.just([]),
                    },
                ),
                "podAffinity": st.just({}),
            },
        ),
    },
)


@given(spec_parts)
def test_placement_spec_drops_the_name_pin_of_its_own_node_and_nothing_else(spec: dict[str, Any]) -> None:
    before = copy.deepcopy(spec)
    out = placement_spec(spec)
    assert spec == before  # the body is never changed
    host = spec.get("nodeSelector", {}).get("kubernetes.io/hostname")
    node_affinity = spec.get("affinity", {}).get("nodeAffinity", {})
    ours = host is not None and node_affinity.get(REQUIRED) == name_pin(host)
    if not ours:
        assert out == spec
        return
    expected = copy.deepcopy(spec)
    del expected["affinity"]["nodeAffinity"][REQUIRED]
    if not expected["affinity"]["nodeAffinity"]:
        del expected["affinity"]["nodeAffinity"]
    assert out == expected
