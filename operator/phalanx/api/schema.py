"""Pydantic models to structural OpenAPI v3 schemas, the kind a CRD must carry.

pydantic emits JSON Schema 2020-12: ``$ref``s into ``$defs``, ``anyOf`` with null for optional
fields, titles and ``default: null``. The apiserver wants a structural schema: everything inlined,
a ``type`` on every node, no ``anyOf`` carrying types. This module bridges the two and checks the
result, so a model change that cannot become a CRD fails here, not at ``kubectl apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

Schema = dict[str, Any]

# Keys whose values are schemas (or maps of schemas) and are walked into.
_SCHEMA_MAPS = ("properties",)
_SCHEMA_VALUES = ("items", "additionalProperties")
_K8S_EXTENSIONS_OK_WITHOUT_TYPE = ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields")


class _TooDeep:
    """Stands for a recursive model past its nesting limit, until the list holding it is capped."""


_TOO_DEEP = _TooDeep()


class StructuralJsonSchema(GenerateJsonSchema):
    """pydantic's generator, with optional fields as their plain type and no titles.

    An optional field is not marked ``nullable``: the apiserver then prunes an explicit null as if
    the field were absent (and applies its default), which is what ``exclude_none`` dumps mean.
    """

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def structural_schema(model: type[BaseModel], nesting_limits: Mapping[str, int] | None = None) -> Schema:
    """The structural schema of ``model``, every ``$ref`` inlined.

    A model that contains itself (a template tree) is expanded ``nesting_limits[name]`` times; a
    list that would hold one more level gets ``maxItems: 0``, so the apiserver rejects deeper
    trees instead of pruning them silently. Recursion without a limit is an error.
    """
    raw = model.model_json_schema(schema_generator=StructuralJsonSchema, mode="validation")
    definitions = raw.pop("$defs", {})
    result = _Inliner(definitions, dict(nesting_limits or {})).walk(raw, ())
    if not isinstance(result, dict):
        raise ValueError(f"{model.__name__} is recursive at its root")
    problems = structural_problems(result)
    if problems:
        raise ValueError(f"{model.__name__} has no structural schema: " + "; ".join(problems))
    return result


class _Inliner:
    def __init__(self, definitions: dict[str, Schema], limits: dict[str, int]) -> None:
        self.definitions = definitions
        self.limits = limits

    def walk(self, node: Schema, stack: tuple[str, ...]) -> Schema | _TooDeep:
        node = dict(node)
        if "allOf" in node and len(node["allOf"]) == 1:
            # Older pydantic wraps a $ref with siblings in a one-element allOf.
            node.update(node.pop("allOf")[0])
        if "$ref" in node:
            return self._inline(node, stack)
        return self._clean(node, stack)

    def _inline(self, node: Schema, stack: tuple[str, ...]) -> Schema | _TooDeep:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        limit = self.limits.get(name)
        if limit is None and name in stack:
            raise ValueError(f"{name} contains itself; give it a nesting limit")
        if limit is not None and stack.count(name) >= limit:
            return _TOO_DEEP
        target = self.walk(self.definitions[name], (*stack, name))
        if isinstance(target, _TooDeep):
            return target
        siblings = self._clean(node, stack)
        merged = {**target, **siblings}
        rules = target.get("x-kubernetes-validations", []) + siblings.get("x-kubernetes-validations", [])
        if rules:
            merged["x-kubernetes-validations"] = rules
        return dict(sorted(merged.items()))

    def _clean(self, node: Schema, stack: tuple[str, ...]) -> Schema:
        node.pop("title", None)
        if "default" in node:
            if node["default"] is None:
                del node["default"]
            else:
                node["default"] = _without_nones(node["default"])
        if node.get("uniqueItems") is True:
            # Structural schemas forbid uniqueItems; a set-typed list says the same thing.
            del node["uniqueItems"]
            node.setdefault("x-kubernetes-list-type", "set")
        if node.get("additionalProperties") is False:
            # Unknown fields are pruned by the apiserver, not rejected.
            del node["additionalProperties"]
        for key in ("anyOf", "oneOf", "allOf", "not"):
            if key in node:
                raise ValueError(f"cannot make {key} structural: {node[key]!r}")
        if "properties" in node:
            properties = {}
            for name, child in node["properties"].items():
                walked = self.walk(child, stack)
                if isinstance(walked, _TooDeep):
                    raise ValueError(f"property {name} nests too deep outside a list")
                properties[name] = walked
            if properties:
                node["properties"] = properties
            else:
                del node["properties"]
        if isinstance(node.get("items"), dict):
            items = self.walk(node["items"], stack)
            if isinstance(items, _TooDeep):
                return _empty_list(node)
            node["items"] = items
        if isinstance(node.get("additionalProperties"), dict):
            values = self.walk(node["additionalProperties"], stack)
            if isinstance(values, _TooDeep):
                raise ValueError("map values nest too deep")
            node["additionalProperties"] = values
        return dict(sorted(node.items()))


def _empty_list(node: Schema) -> Schema:
    """A list one nesting level too deep: it keeps its name but can hold nothing."""
    description = node.get("description", "")
    note = "Not allowed at this depth: the nesting limit is reached."
    return {
        "description": f"{description} {note}".strip(),
        "items": {"type": "object"},
        "maxItems": 0,
        "type": "array",
    }


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nones(v) for v in value]
    return value


def structural_problems(schema: Schema, path: str = "") -> list[str]:
    """Why ``schema`` is not structural, or [] if it is (a local, partial check of the apiserver's)."""
    problems = []
    where = path or "<root>"
    if not any(key in schema for key in ("type", *_K8S_EXTENSIONS_OK_WITHOUT_TYPE)):
        problems.append(f"{where}: no type")
    for key in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "uniqueItems"):
        if key in schema:
            problems.append(f"{where}: has {key}")
    if "default" in schema and schema["default"] is None:
        problems.append(f"{where}: default is null")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{where}: additionalProperties beside properties")
    if schema.get("x-kubernetes-list-type") == "map":
        item = schema.get("items", {})
        for key in schema.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []):
                problems.append(f"{where}: list-map key {key} is not required in the items")
    for key in _SCHEMA_MAPS:
        for name, child in schema.get(key, {}).items():
            problems.extend(structural_problems(child, f"{path}.{name}"))
    for key in _SCHEMA_VALUES:
        if isinstance(schema.get(key), dict):
            problems.extend(structural_problems(schema[key], f"{path}[{key}]"))
    return problems
