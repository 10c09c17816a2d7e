"""crds/*.yaml are what the models generate, and they are structural CRDs the apiserver accepts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from phalanx.api.crdgen import crd_documents, crd_filename, main, render, stale_files
from phalanx.api.group import GROUP, VERSION
from phalanx.api.schema import structural_problems

CRDS = Path(__file__).resolve().parents[3] / "crds"
REGENERATE = "run `python -m phalanx.api.crdgen` and commit crds/"

DOCUMENTS = {doc["spec"]["names"]["kind"]: doc for doc in crd_documents()}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = DOCUMENTS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or "<root>", schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")


def test_crd_files_match_the_models() -> None:
    diffs = stale_files(CRDS)
    assert not diffs, f"crds/ is stale; {REGENERATE}\n" + "\n".join(diffs.values())


def test_no_stray_crd_files() -> None:
    assert sorted(p.name for p in CRDS.glob("*.yaml")) == sorted(render())


def test_files_are_plain_yaml_without_anchors() -> None:
    for text in render().values():
        assert "&id" not in text and "*id" not in text


def test_documents_are_independent_copies() -> None:
    first, second = crd_documents(), crd_documents()
    first[0]["spec"]["versions"][0]["additionalPrinterColumns"].clear()
    assert second[0]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert crd_documents() == second


def test_files_on_disk_load_to_the_documents() -> None:
    for document in crd_documents():
        assert yaml.safe_load((CRDS / crd_filename(document)).read_text()) == document


def test_check_mode_reports_drift_and_write_mode_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "+kind: CustomResourceDefinition" in capsys.readouterr().out
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "scheduling.phalanx.dev_podgroups.yaml").write_text("edited\n")
    assert main(["--check", "--out", str(tmp_path)]) == 1


@pytest.mark.parametrize(
    ("kind", "plural", "short", "scope"),
    [
        ("Workload", "workloads", "wl", "Namespaced"),
        ("PodGroup", "podgroups", "pg", "Namespaced"),
        ("CompositePodGroup", "compositepodgroups", "cpg", "Namespaced"),
        ("Topology", "topologies", "topo", "Cluster"),
    ],
)
def test_names_scope_and_subresources(kind: str, plural: str, short: str, scope: str) -> None:
    document = DOCUMENTS[kind]
    assert document["metadata"]["name"] == f"{plural}.{GROUP}"
    spec = document["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == scope
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        "shortNames": [short],
        "categories": ["phalanx"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    assert version["subresources"] == {"status": {}}
    root = version["schema"]["openAPIV3Schema"]
    assert root["type"] == "object"
    assert root["required"] == ["spec"]
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert root["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_schema_is_structural(kind: str) -> None:
    """An independent walk of the rules in "Specifying a structural schema" (apiextensions v1)."""
    assert structural_problems(_schema(kind)) == []
    for path, node in _nodes(_schema(kind)):
        assert "type" in node or "x-kubernetes-preserve-unknown-fields" in node, path
        for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "uniqueItems"):
            assert forbidden not in node, (path, forbidden)
        assert not ("default" in node and node["default"] is None), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        if node.get("x-kubernetes-list-type") == "map":
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in node["items"]["required"], (path, key)


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_cel_rules_name_fields_that_exist(kind: str) -> None:
    """Catches a rule left behind by a field rename (the apiserver would refuse the CRD)."""
    for path, node in _nodes(_schema(kind)):
        fields = set(node.get("properties", {}))
        for validation in node.get("x-kubernetes-validations", []):
            assert validation["message"], path
            if node.get("type") != "object":
                continue
            for name in re.findall(r"(?:self|oldSelf)\.(\w+)", validation["rule"]):
                assert name in fields, (path, validation["rule"], name)


def _uncorrelated_transition_rules(node: dict[str, Any], correlatable: bool, path: str) -> list[str]:
    found = [
        f"{path}: {v['rule']}"
        for v in node.get("x-kubernetes-validations", [])
        if "oldSelf" in v["rule"] and not correlatable
    ]
    for name, child in node.get("properties", {}).items():
        found += _uncorrelated_transition_rules(child, correlatable, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        is_map = node.get("x-kubernetes-list-type") == "map"
        found += _uncorrelated_transition_rules(node["items"], correlatable and is_map, f"{path}[]")
    return found


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_transition_rules_only_where_old_and_new_correlate(kind: str) -> None:
    """oldSelf needs every list on the way down to be a list-map (or the rule to sit on the list)."""
    assert _uncorrelated_transition_rules(_schema(kind), True, kind) == []


def _at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    json_path = re.sub(r"\[\?\(.*?\)\]", "", json_path)  # a filter ([?(@.type=="Admitted")]) picks an item
    for part in re.findall(r"\.(\w+)(?:\[\d+\])?", json_path):
        if node is None:
            return None
        node = node.get("properties", {}).get(part) or node.get("items", {}).get("properties", {}).get(part)
    return node


@pytest.mark.parametrize("kind", list(DOCUMENTS))
def test_printer_columns_point_at_fields_of_their_type(kind: str) -> None:
    columns = DOCUMENTS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns[:-1]:
        if column["jsonPath"].startswith((".metadata.annotations.", ".metadata.labels.")):
            # ObjectMeta is the apiserver's, not in the CRD's schema: label and annotation values are strings.
            assert column["type"] == "string", column
            continue
        node = _at(_schema(kind), column["jsonPath"])
        assert node is not None, column
        assert node["type"] == column["type"], column


def test_podgroup_columns_are_the_documented_ones() -> None:
    columns = DOCUMENTS["PodGroup"]["spec"]["versions"][0]["additionalPrinterColumns"]
    shown = [(c["name"], c["jsonPath"]) for c in columns if not c.get("priority")]
    assert shown == [
        ("Owner", ".metadata.annotations.phalanx\\.dev/owner"),
        ("Policy", ".status.policy"),
        ("Min", ".spec.schedulingPolicy.gang.minCount"),
        ("Scheduled", ".status.scheduled"),
        ("Succeeded", ".status.succeeded"),
        ("Waiting", ".status.waiting"),
        ("Status", ".status.phase"),
        ("Domain", ".status.domain"),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_marker_objects_are_plain_objects() -> None:
    """``basic: {}`` survives pruning: an object without properties is kept, emptied."""
    policy = _schema("PodGroup")["properties"]["spec"]["properties"]["schedulingPolicy"]
    assert policy["properties"]["basic"] == {
        "description": policy["properties"]["basic"]["description"],
        "type": "object",
    }


def test_podgroup_spec_defaults() -> None:
    spec = _schema("PodGroup")["properties"]["spec"]["properties"]
    assert spec["disruptionMode"]["default"] == {"single": {}}
    assert spec["preemptionPolicy"]["default"] == "PreemptLowerPriority"


def test_composite_templates_are_inlined_three_levels_then_closed() -> None:
    node = _schema("Workload")["properties"]["spec"]
    for _ in range(3):
        node = node["properties"]["compositePodGroupTemplates"]
        assert node["x-kubernetes-list-type"] == "map"
        node = node["items"]
        assert "podGroupTemplates" in node["properties"]
    closed = node["properties"]["compositePodGroupTemplates"]
    assert closed["maxItems"] == 0
    assert "x-kubernetes-preserve-unknown-fields" not in str(_schema("Workload"))
