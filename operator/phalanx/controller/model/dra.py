"""Which extended resources a DRA DeviceClass serves (pure), so the webhooks can tell a gang that asks for
one: since Kubernetes v1.37 (DRAExtendedResource, GA and locked on) kube-scheduler lets a pod request
`spec.extendedResourceName` of a DeviceClass, or its implicit name
`deviceclass.resource.kubernetes.io/<class>`, like any extended resource, and allocates devices of the
class from the node's ResourceSlices when no node lists the resource in its allocatable. Phalanx does not
model that allocation (the class's CEL selectors, the slices' devices, the allocated claims), so it refuses
such a gang at creation with advice that can be followed (api/admission_checks.py, docs/reliability.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def served_resources(body: Mapping[str, Any]) -> frozenset[str]:
    """The extended resource names a DeviceClass serves: its implicit one, and its spec's, when set."""
    name = str((body.get("metadata") or {}).get("name") or "")
    explicit = (body.get("spec") or {}).get("extendedResourceName")
    names = {f"{IMPLICIT_PREFIX}{name}"} if name else set()
    if isinstance(explicit, str) and explicit:
        names.add(explicit)
    return frozenset(names)
