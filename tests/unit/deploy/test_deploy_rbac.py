"""The chart's RBAC follows the code: every API call in operator/phalanx/controller and every Kopf watch is
granted, and nothing else is (least privilege). A new call fails here until the chart grants it.

The calls are found in the source: each kubernetes-asyncio method named in a module that constructs its
API class, mapped to (group, resource, verb) through the path and HTTP method in kubernetes-asyncio's own
generated code. Kopf's watches come from its handler registry. tests/integration/test_install.py then runs
the operator under exactly these rules.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from deploy_testkit import ROOT, needs_helm, render, rules_of, settings_of
from kubernetes_asyncio import client

pytestmark = needs_helm

CONTROLLER = ROOT / "operator" / "phalanx" / "controller"
Need = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

# The custom-object calls take the plural as an argument: which of Phalanx's own resources each verb is
# used on (kube.py through apply.py, runtime.py's cache priming). Keep this with apply.py.
CUSTOM_PLURALS: dict[tuple[str, str], tuple[str, ...]] = {
    ("create", ""): ("workloads", "podgroups", "compositepodgroups"),  # compositepodgroups: a Job's slices
    ("get", ""): ("workloads", "podgroups", "compositepodgroups"),  # a create meeting 409 reads the object
    ("delete", ""): ("workloads", "podgroups", "compositepodgroups"),
    ("list", ""): ("workloads", "podgroups", "topologies"),  # topologies: the cache and the webhook
    ("patch", ""): ("podgroups",),
    ("patch", "status"): ("podgroups", "compositepodgroups", "topologies"),
}
# Calls the chart never makes: the CRDs come with it (--no-install-crds).
NOT_IN_THE_CHART = {"patch_custom_resource_definition", "read_custom_resource_definition"}
# Kopf's own requests, beside the watches of the handlers: its resource scan lists and watches CRDs
# (verified: without the rule it logs 403s and retries), its event poster creates core/v1 Events. (Writing
# webhook configurations is only for --webhook-config managed, not the chart.)
KOPF: set[Need] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
    ("", "events", "create"),
}
# Not a call: Workloads and PodGroups are created owned by their Job with blockOwnerDeletion
# (api/builders.py), which the OwnerReferencesPermissionEnforcement admission plugin allows only to who
# may update the Job's finalizers.
OWNER_REFERENCES: set[Need] = {("batch", "jobs/finalizers", "update")}
# Granted ahead of the code that is on its way (preemption and requeue): evict a victim through the
# Eviction API after marking it a DisruptionTarget, and suspend/resume a Job to requeue it.
COMING: set[Need] = {
    ("", "pods/eviction", "create"),
    ("", "pods/status", "patch"),
    ("batch", "jobs", "patch"),
}

CALL = re.compile(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'")


def endpoint(api_class: type, method: str) -> tuple[str, str]:
    source = inspect.getsource(getattr(api_class, f"{method}_with_http_info"))
    match = CALL.search(source)
    assert match, f"{api_class.__name__}.{method}: no call_api in its generated code"
    return match.group(1), match.group(2)


def need_of(path: str, http_method: str) -> list[Need]:
    """`/apis/batch/v1/namespaces/{namespace}/jobs/{name}`, PATCH -> [("batch", "jobs", "patch")]."""
    parts = [p for p in path.strip("/").split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[:2] == ["namespaces", "{namespace}"]:
        rest = rest[2:]
    resource, named, sub = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else ""
    verb = {
        "GET": "get" if named else "list",
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete" if named else "deletecollection",
    }[http_method]
    if resource == "{plural}":
        assert group == "{group}"
        key = (verb, sub)
        assert key in CUSTOM_PLURALS, f"a custom-object call {verb} {sub or ''}: add it to CUSTOM_PLURALS"
        return [("scheduling.phalanx.dev", p + (f"/{sub}" if sub else ""), verb) for p in CUSTOM_PLURALS[key]]
    return [(group, resource + (f"/{sub}" if sub else ""), verb)]


def code_needs() -> dict[Need, set[str]]:
    """Every permission the operator's code asks for, with where (module.method) it does."""
    needs: dict[Need, set[str]] = {}
    for path in sorted(CONTROLLER.rglob("*.py")):
        source = path.read_text()
        classes = [getattr(client, name) for name in set(re.findall(r"client\.(\w+Api)\(", source))]
        for name in sorted(set(re.findall(r"\.([a-z][a-z0-9_]+)\b", source))):
            owners = [cls for cls in classes if callable(getattr(cls, f"{name}_with_http_info", None))]
            if not owners or name in NOT_IN_THE_CHART:
                continue
            assert len(owners) == 1, f"{path.name}: {name} is ambiguous between {owners}"
            for need in need_of(*endpoint(owners[0], name)):
                needs.setdefault(need, set()).add(f"{path.stem}.{name}")
    from phalanx.controller.process.runtime import Runtime

    for handler in Runtime().registry()._watching.get_all_handlers():
        selector = handler.selector
        resource = selector.plural or selector.any_name
        for verb in ("list", "watch"):
            needs.setdefault((selector.group or "", resource, verb), set()).add(f"kopf watch {handler.id}")
    from phalanx.controller.watch.watched import INFORMER, served_by

    for row in served_by(INFORMER, True):  # nodes and pods: watched by watch/informer.py, not Kopf
        for verb in ("list", "watch"):
            needs.setdefault((row.resource.group, row.plural, verb), set()).add(f"informer {row.kind}")
    for need in KOPF:
        needs.setdefault(need, set()).add("kopf")
    from phalanx.controller.kinds import OWNER_KINDS

    for kind in OWNER_KINDS:
        r = kind.resource
        if r.group == "batch":
            continue  # Jobs: patched through BatchV1Api (found by the scan), finalizers in OWNER_REFERENCES
        if kind.suspends:  # Kube.patch_owner: a requeue suspends and resumes the owner itself
            needs.setdefault((r.group, r.plural, "patch"), set()).add(f"kube.patch_owner {kind.name}")
        if kind.owns_groups:  # our groups are owned by it with blockOwnerDeletion (api/owned.py)
            owned = (r.group, f"{r.plural}/finalizers", "update")
            needs.setdefault(owned, set()).add("api/owned.py ownerReferences")
    builders = (ROOT / "operator" / "phalanx" / "api" / "builders.py").read_text()
    if '"blockOwnerDeletion": True' in builders:
        for need in OWNER_REFERENCES:
            needs.setdefault(need, set()).add("api/builders.py ownerReferences")
    return needs


def granted(docs: list[dict[str, Any]]) -> set[Need]:
    return {
        (group, resource, verb)
        for rule in rules_of(docs, "ClusterRole") + rules_of(docs, "Role")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_scan_finds_the_calls_it_should() -> None:
    needs = code_needs()
    assert needs[("", "pods", "patch")] == {"kube.patch_namespaced_pod"}
    assert ("coordination.k8s.io", "leases", "update") in needs  # leader.py: replace_namespaced_lease
    assert ("", "secrets", "update") in needs  # webhook_tls.py: replace_namespaced_secret
    assert ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch") in needs
    assert ("", "events", "get") in needs  # events.py: read_namespaced_event
    assert ("", "nodes", "watch") in needs and ("batch", "jobs", "list") in needs
    assert ("scheduling.phalanx.dev", "podgroups/status", "patch") in needs


def test_every_call_of_the_operator_is_granted() -> None:
    docs = render()
    assert settings_of(docs).install_crds is False, "why NOT_IN_THE_CHART holds"
    missing = {need: where for need, where in code_needs().items() if need not in granted(docs)}
    assert not missing, "the chart's (Cluster)Role lacks:\n" + "\n".join(
        f"  {g or 'core'}/{r} {v}  (used by {', '.join(sorted(w))})"
        for (g, r, v), w in sorted(missing.items())
    )


def test_nothing_is_granted_that_the_operator_does_not_call() -> None:
    needs = set(code_needs())
    implied = {(g, r, "get") for g, r, v in needs if v == "list"}  # get reveals nothing list does not
    extra = granted(render()) - needs - implied - COMING
    assert not extra, f"granted but never used: {sorted(extra)}"
    assert not (COMING & needs) or needs | granted(render()) >= COMING


def test_the_cert_manager_variant_drops_what_phalanx_then_does_not_call() -> None:
    docs = render("certManager.enabled=true")
    names = {r for _, r, _ in granted(docs)}
    assert "secrets" not in names
    assert "mutatingwebhookconfigurations" not in names and "validatingwebhookconfigurations" not in names
