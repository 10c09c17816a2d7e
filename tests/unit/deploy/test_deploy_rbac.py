"""The chart's RBAC follows the code: every access of the operator and every Kopf watch is granted, and
nothing else is (least privilege). A new call fails here until the chart grants it.

The operator's own client refuses any request outside controller/process/access.py's `declared()` (so
every test that runs the operator checks the code against the declaration); here the declaration, for the
chart's own settings, is checked against the chart. Kopf's watches come from its handler registry.
tests/integration/test_install.py then runs the operator under exactly these rules.
"""

from __future__ import annotations

from typing import Any

from deploy_testkit import ROOT, needs_helm, render, rules_of, settings_of

from phalanx.controller.process.access import declared
from phalanx.controller.process.settings import Settings

pytestmark = needs_helm

Need = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

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


def code_needs(settings: Settings) -> dict[Need, set[str]]:
    """Every permission the operator asks for with these settings, with where it does."""
    needs: dict[Need, set[str]] = {}
    for access in declared(settings):
        needs.setdefault((access.group, access.resource, access.verb), set()).add("process/access.py")
    from phalanx.controller.process.runtime import Runtime

    for handler in Runtime().registry()._watching.get_all_handlers():
        selector = handler.selector
        resource = selector.plural or selector.any_name
        for verb in ("list", "watch"):
            needs.setdefault((selector.group or "", resource, verb), set()).add(f"kopf watch {handler.id}")
    for need in KOPF:
        needs.setdefault(need, set()).add("kopf")
    from phalanx.controller.kinds import OWNER_KINDS

    for kind in OWNER_KINDS:
        r = kind.resource
        if r.group == "batch":
            continue  # a Job's finalizers: OWNER_REFERENCES
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


def test_the_chart_settings_need_the_calls_they_should() -> None:
    settings = settings_of(render())
    assert settings.leader_election and settings.webhook_secret and not settings.install_crds
    needs = code_needs(settings)
    assert ("", "pods", "patch") in needs and ("", "pods/eviction", "create") in needs
    assert ("coordination.k8s.io", "leases", "update") in needs  # leader.py: the Lease renewed
    assert ("", "secrets", "update") in needs  # webhook_tls.py: a renewed certificate
    assert ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch") in needs
    assert ("", "events", "get") in needs  # events.py: an Event made before this process knew it
    assert ("", "nodes", "watch") in needs and ("batch", "jobs", "list") in needs
    assert ("scheduling.phalanx.dev", "podgroups/status", "patch") in needs
    assert ("apiextensions.k8s.io", "customresourcedefinitions", "patch") not in needs


def test_every_call_of_the_operator_is_granted() -> None:
    docs = render()
    missing = {
        need: where for need, where in code_needs(settings_of(docs)).items() if need not in granted(docs)
    }
    assert not missing, "the chart's (Cluster)Role lacks:\n" + "\n".join(
        f"  {g or 'core'}/{r} {v}  (used by {', '.join(sorted(w))})"
        for (g, r, v), w in sorted(missing.items())
    )


def test_nothing_is_granted_that_the_operator_does_not_call() -> None:
    docs = render()
    needs = set(code_needs(settings_of(docs)))
    implied = {(g, r, "get") for g, r, v in needs if v == "list"}  # get reveals nothing list does not
    extra = granted(docs) - needs - implied
    assert not extra, f"granted but never used: {sorted(extra)}"


def test_the_cert_manager_variant_drops_what_phalanx_then_does_not_call() -> None:
    docs = render("certManager.enabled=true")
    needs = set(code_needs(settings_of(docs)))
    assert needs <= granted(docs), sorted(needs - granted(docs))
    names = {r for _, r, _ in granted(docs)}
    assert "secrets" not in names
    assert "mutatingwebhookconfigurations" not in names and "validatingwebhookconfigurations" not in names
