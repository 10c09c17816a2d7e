"""CRD schema annotations that the models attach to themselves.

The models are the single source of truth for the CRDs, so the CEL rules and list semantics the
apiserver needs live next to the fields they constrain, as ``json_schema_extra`` entries.
The rules stick to CEL that every apiserver since 1.30 understands.
"""

from __future__ import annotations

from typing import Any

Rule = dict[str, str]


def rule(expression: str, message: str, field_path: str = "") -> Rule:
    """One ``x-kubernetes-validations`` entry; ``field_path`` (e.g. ``.disruptionMode``) makes the apiserver
    name that field in its error instead of the object holding the rule."""
    entry = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def exactly_one(first: str, second: str) -> Rule:
    """Exactly one of two optional fields is set (the apiserver's union members)."""
    return rule(f"has(self.{first}) != has(self.{second})", f"exactly one of {first} or {second} must be set")


def immutable(field: str) -> Rule:
    """``field`` can be neither added, removed nor changed once the object exists.

    Written on the object holding the field, so that adding and removing are caught too:
    a rule on the field itself only runs when both the old and the new value exist.
    """
    same_presence = f"has(self.{field}) == has(oldSelf.{field})"
    same_value = f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    return rule(f"{same_presence} && {same_value}", f"{field} is immutable")


def same_variant(*members: str) -> Rule:
    """The chosen member of a union stays chosen; the fields inside it may still change."""
    expression = " && ".join(f"has(self.{m}) == has(oldSelf.{m})" for m in members)
    return rule(expression, f"the choice between {' and '.join(members)} is immutable")


def no_added_or_removed_items(key: str) -> Rule:
    """A list-map keeps the same entries (by ``key``) once the object exists."""
    return rule(
        f"self.size() == oldSelf.size() && self.all(x, oldSelf.exists(o, o.{key} == x.{key}))",
        "entries cannot be added or removed",
    )


def validations(*rules: Rule) -> dict[str, Any]:
    """``json_schema_extra`` for a model or field carrying CEL rules."""
    return {"x-kubernetes-validations": list(rules)}


def list_map(*keys: str, rules: tuple[Rule, ...] = ()) -> dict[str, Any]:
    """``json_schema_extra`` for a list whose items are merged by ``keys`` (a list-map)."""
    extra: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}
    if rules:
        extra.update(validations(*rules))
    return extra


ATOMIC_LIST: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
