"""The base class of every API model: camelCase JSON and a single way to dump API JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """A piece of a Kubernetes object, with camelCase field names on the wire.

    Unknown fields are ignored rather than rejected: the apiserver prunes them from our CRDs
    anyway, and an older operator must still read objects written by a newer one.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="ignore",
    )

    def to_api(self) -> dict[str, Any]:
        """The object as API JSON: camelCase keys, unset (None) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Marker(ApiModel):
    """An empty object whose presence is the information, such as ``basic: {}``."""
