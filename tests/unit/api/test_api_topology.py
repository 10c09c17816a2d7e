"""The Topology model: levels coarse to fine, each a distinct valid label key, the hostname only last."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from phalanx.api.crdgen import crd_documents
from phalanx.api.topology import HOSTNAME_LABEL, MAX_LEVELS, Topology, TopologySpec, level_problems

NB = "oci.oraclecloud.com/rdma.network_block_id"
LB = "oci.oraclecloud.com/rdma.local_block_id"


def spec(*labels: str) -> dict[str, Any]:
    return {"levels": [{"nodeLabel": label} for label in labels]}


def test_levels_keep_their_order_and_round_trip_in_camel_case() -> None:
    topology = Topology.model_validate({"metadata": {"name": "rdma"}, "spec": spec(NB, LB, HOSTNAME_LABEL)})
    assert topology.spec.labels == (NB, LB, HOSTNAME_LABEL)
    body = topology.to_api()
    assert body["apiVersion"] == "scheduling.phalanx.dev/v1beta1" and body["kind"] == "Topology"
    assert body["spec"] == spec(NB, LB, HOSTNAME_LABEL)
    assert Topology.model_validate(body) == topology


@pytest.mark.parametrize(
    ("levels", "says"),
    [
        ((), "at least 1 item"),
        (tuple(f"example.com/l{i}" for i in range(MAX_LEVELS + 1)), "at most 8 items"),
        ((NB, LB, NB), f"nodeLabel '{NB}' appears in more than one level"),
        ((HOSTNAME_LABEL, LB), "kubernetes.io/hostname can only be the last (finest) level"),
        (("rack/with/two/slashes",), "at most one '/'"),
        (("-rack",), "start and end with an alphanumeric character"),
    ],
)
def test_invalid_levels_are_refused_with_the_reason(levels: tuple[str, ...], says: str) -> None:
    with pytest.raises(ValidationError) as error:
        TopologySpec.model_validate(spec(*levels))
    assert says in str(error.value)


def test_the_crd_carries_the_same_rules() -> None:
    (document,) = [d for d in crd_documents() if d["spec"]["names"]["kind"] == "Topology"]
    schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    levels = schema["spec"]["properties"]["levels"]
    assert (levels["minItems"], levels["maxItems"], levels["x-kubernetes-list-type"]) == (1, 8, "atomic")
    messages = [v["message"] for v in levels["x-kubernetes-validations"]]
    assert messages == [
        "each nodeLabel may appear in one level only",
        "kubernetes.io/hostname can only be the last (finest) level",
    ]
    assert schema["spec"]["x-kubernetes-validations"][0]["message"] == "levels is immutable"
    assert schema["status"]["properties"]["nodes"] == {
        "description": schema["status"]["properties"]["nodes"]["description"],
        "minimum": 0,
        "type": "integer",
    }
    columns = document["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns if not c.get("priority")] == [
        ("Nodes", ".status.nodes"),
        ("Age", ".metadata.creationTimestamp"),
    ]


LABELS = st.sampled_from([NB, LB, "rack", "example.com/block", HOSTNAME_LABEL])


@given(st.lists(LABELS, min_size=1, max_size=MAX_LEVELS))
def test_the_model_accepts_exactly_what_level_problems_allows(labels: list[str]) -> None:
    """Distinct labels with the hostname, if any, last: accepted; anything else refused."""
    expected_ok = len(set(labels)) == len(labels) and HOSTNAME_LABEL not in labels[:-1]
    assert (level_problems(labels) == []) == expected_ok
    try:
        TopologySpec.model_validate(spec(*labels))
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == expected_ok
