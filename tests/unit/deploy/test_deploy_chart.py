"""The Helm chart (charts/phalanx) and the single-file install rendered from it (manifests/phalanx.yaml):
lint-clean, never stale, and saying what the operator's code does (webhook paths and rules, flags, RBAC).

Runs the real helm binary (hack/build.sh builds it into .cache/); skipped only when it is not there.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
import yaml
from deploy_testkit import (
    CHART,
    HELM,
    NAMESPACE,
    ROOT,
    container,
    helm,
    needs_helm,
    one,
    render,
    rules_of,
    settings_of,
    verbs,
)

pytestmark = needs_helm


# ---------------------------------------------------------------------- lint and drift
@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("certManager.enabled=true",),
        ("leaderElection.enabled=false", "replicaCount=1"),
        ("webhook.deployment.enabled=true", "certManager.enabled=true"),
        (
            "metrics.serviceMonitor.enabled=true",
            "rbac.explain.subjects[0].kind=User",
            "rbac.explain.subjects[0].name=a",
        ),
    ],
    ids=["default", "cert-manager", "one-replica", "webhook-deployment", "monitor-and-explain-binding"],
)
def test_helm_lint_is_clean(sets: tuple[str, ...]) -> None:
    argv = ["lint", str(CHART), "--strict", "--namespace", NAMESPACE]
    for value in sets:
        argv += ["--set", value]
    result = helm(*argv)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_charts_crds_and_the_single_file_install_are_not_stale() -> None:
    """hack/manifests.sh --check: charts/phalanx/crds == crds/, manifests/phalanx.yaml == a fresh render."""
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "manifests.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HELM": str(HELM)},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) and shipped
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests" / "phalanx.yaml").read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds.count("CustomResourceDefinition") == len(shipped)
    assert one(docs, "Namespace")["metadata"]["name"] == NAMESPACE
    assert all(d["metadata"].get("namespace", NAMESPACE) == NAMESPACE for d in docs)


# ---------------------------------------------------------------------- the chart says what the code does
def kopf_webhooks() -> dict[str, Any]:
    """Phalanx's admission handlers as the operator registers them (watch/registry.py), by id."""
    from phalanx.controller.process.runtime import Runtime

    return {h.id: h for h in Runtime().registry()._webhooks.get_all_handlers()}


def selector_expressions(selector: dict[str, Any]) -> list[dict[str, Any]]:
    expressions = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    return expressions + list(selector.get("matchExpressions") or [])


def test_the_webhooks_are_the_handlers_kopf_serves() -> None:
    from kopf._core.engines.admission import _build_labels_selector

    handlers = kopf_webhooks()
    docs = render()
    configs = {
        "mutating": one(docs, "MutatingWebhookConfiguration", "phalanx.dev"),
        "validating": one(docs, "ValidatingWebhookConfiguration", "phalanx.dev"),
    }
    served = {}
    for reason, config in configs.items():
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            handler = handlers[path.removeprefix("/")]  # Kopf serves each handler at /<id>
            served[handler.id] = webhook
            assert handler.reason.value == reason
            assert webhook["name"] == f"{handler.id}.phalanx.dev"
            assert webhook["failurePolicy"] == ("Ignore" if handler.ignore_failures else "Fail")
            assert webhook["sideEffects"] == ("NoneOnDryRun" if handler.side_effects else "None")
            (rule,) = webhook["rules"]
            assert rule["operations"] == list(handler.operations)
            selector = handler.selector
            assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == (
                [selector.group],
                [selector.version],
                [selector.plural or selector.any_name],
            )
            expected = (_build_labels_selector(handler.labels) or {}).get("matchExpressions") or []
            assert selector_expressions(webhook.get("objectSelector") or {}) == expected
            assert webhook["clientConfig"]["service"] == {
                "name": "phalanx",
                "namespace": NAMESPACE,
                "port": 443,
                "path": path,
            }
            assert "caBundle" not in webhook["clientConfig"], "Phalanx (or cert-manager) injects it"
            if rule["scope"] == "Cluster":
                assert "namespaceSelector" not in webhook, "it never applies to cluster-scoped objects"
                continue
            assert rule["scope"] == "Namespaced"
            (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
            assert excluded == {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", NAMESPACE],
            }
    assert served.keys() == handlers.keys(), "every handler has a webhook and no webhook lacks a handler"
    assert served["gate-job"]["failurePolicy"] == "Fail"
    assert served["validate-job"]["failurePolicy"] == served["validate-podgroup"]["failurePolicy"] == "Ignore"
    assert served["gate-pod"]["failurePolicy"] == "Fail"
    assert served["validate-topology"]["failurePolicy"] == "Ignore"


def test_the_namespace_selector_follows_the_operators_namespaces() -> None:
    docs = render("operator.namespaces={ml,research}", "webhook.excludeNamespaces={ml,batch}")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(docs, kind)["webhooks"]:
            if webhook["rules"][0]["scope"] == "Cluster":
                continue
            assert webhook["namespaceSelector"]["matchExpressions"] == [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", NAMESPACE, "ml", "batch"],
                },
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml", "research"]},
            ]
    assert settings_of(docs).namespaces == ("ml", "research")


def test_the_deployment_runs_phalanx_as_the_chart_promises() -> None:
    docs = render()
    s = settings_of(docs)
    assert not s.kopf_manages_webhooks and s.webhook_config_name == "phalanx.dev"
    assert (s.webhook_host, s.webhook_port, s.metrics_host, s.metrics_port) == (
        "0.0.0.0",
        9443,
        "0.0.0.0",
        8080,
    )
    assert s.webhook_service == one(docs, "Service")["metadata"]["name"]
    assert s.webhook_secret == "phalanx-webhook-tls" and s.webhook_namespace == NAMESPACE
    assert s.install_crds is False, "the chart ships the CRDs"
    assert s.leader_election and (s.lease_name, s.lease_namespace) == ("phalanx-leader", NAMESPACE)
    assert s.identity == "phalanx-0" and s.log_format == "json"

    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    c = container(docs)
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"webhook": 9443, "metrics": 8080}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["PHALANX_IDENTITY"] == "metadata.name"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts[s.webhook_cert_dir]]["emptyDir"]["medium"] == "Memory"
    assert "emptyDir" in volumes[mounts["/tmp"]]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        anti["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )

    service = one(docs, "Service")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "webhook": (443, "webhook"),
        "metrics": (8080, "metrics"),
    }
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def selects(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in match_labels.items())


def test_the_webhooks_can_run_in_a_deployment_of_their_own() -> None:
    """webhook.deployment.enabled: `--role controller` in the operator's Deployment (the loop, leader
    elected), `--role webhooks` in `<fullname>-webhooks` behind the Service the configurations call; no
    selector, Service, budget or anti-affinity of one takes the other's pods."""
    docs = render("webhook.deployment.enabled=true", "webhook.deployment.replicaCount=3")
    controller, webhooks = one(docs, "Deployment", "phalanx"), one(docs, "Deployment", "phalanx-webhooks")
    loop, hooks = settings_of(docs, "phalanx"), settings_of(docs, "phalanx-webhooks")

    assert loop.role == "controller" and loop.runs_loop and not loop.serves_webhooks
    assert loop.leader_election and loop.lease_name == "phalanx-leader"
    assert loop.webhook_secret is None and loop.webhook_cert_dir is None
    assert hooks.role == "webhooks" and hooks.serves_webhooks and not hooks.runs_loop
    assert not hooks.leader_election, "no loop, no Lease"
    assert hooks.webhook_secret == "phalanx-webhook-tls" and not hooks.kopf_manages_webhooks
    assert (hooks.webhook_host, hooks.webhook_port) == ("0.0.0.0", 9443)
    assert controller["spec"]["replicas"] == 2 and webhooks["spec"]["replicas"] == 3

    def ports(name: str) -> set[str]:
        return {p["name"] for p in container(docs, name)["ports"]}

    def volumes(deployment: dict[str, Any]) -> set[str]:
        return {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}

    assert ports("phalanx") == {"metrics"} and ports("phalanx-webhooks") == {"webhook", "metrics"}
    assert volumes(controller) == {"tmp"} and volumes(webhooks) == {"tmp", "webhook-tls"}

    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in (controller, webhooks)
    }
    assert pods["phalanx"]["app.kubernetes.io/component"] == "controller"
    assert pods["phalanx-webhooks"]["app.kubernetes.io/component"] == "webhooks"

    def chosen(selector: dict[str, str]) -> set[str]:
        return {name for name, labels in pods.items() if selects(selector, labels)}

    for deployment in (controller, webhooks):
        name = deployment["metadata"]["name"]
        assert chosen(deployment["spec"]["selector"]["matchLabels"]) == {name}
        term = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        anti = term["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert chosen(anti["labelSelector"]["matchLabels"]) == {name}
    # The webhook configurations call the Service by name and port: it must reach the webhook pods.
    service = one(docs, "Service", "phalanx")
    assert hooks.webhook_service == "phalanx" and chosen(service["spec"]["selector"]) == {"phalanx-webhooks"}
    assert {p["name"] for p in service["spec"]["ports"]} == {"webhook", "metrics"}
    metrics = one(docs, "Service", "phalanx-metrics")
    assert chosen(metrics["spec"]["selector"]) == {"phalanx"}
    assert {p["name"]: p["targetPort"] for p in metrics["spec"]["ports"]} == {"metrics": "metrics"}
    budgets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert {name: chosen(b["spec"]["selector"]["matchLabels"]) for name, b in budgets.items()} == {
        "phalanx": {"phalanx"},
        "phalanx-webhooks": {"phalanx-webhooks"},
    }
    monitor = one(
        render("webhook.deployment.enabled=true", "metrics.serviceMonitor.enabled=true"), "ServiceMonitor"
    )
    scraped = {
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "Service"
        and selects(monitor["spec"]["selector"]["matchLabels"], d["metadata"]["labels"])
    }
    assert scraped == {"phalanx", "phalanx-metrics"}, "both Deployments' /metrics"

    # Resources of their own, else the operator's; cert-manager's Secret is mounted by the webhooks alone.
    own = render("webhook.deployment.enabled=true", "webhook.deployment.resources.requests.cpu=2")
    assert container(own, "phalanx-webhooks")["resources"] == {"requests": {"cpu": 2}}
    assert container(own, "phalanx")["resources"] == container(docs, "phalanx-webhooks")["resources"]
    managed = render("webhook.deployment.enabled=true", "certManager.enabled=true")
    assert settings_of(managed, "phalanx-webhooks").webhook_secret is None
    assert volumes(one(managed, "Deployment", "phalanx")) == {"tmp"}
    secret = next(
        v
        for v in one(managed, "Deployment", "phalanx-webhooks")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "webhook-tls"
    )
    assert secret["secret"]["secretName"] == "phalanx-webhook-tls"

    # Off (the default): one Deployment doing both, as before.
    default = render()
    assert [d["metadata"]["name"] for d in default if d["kind"] == "Deployment"] == ["phalanx"]
    assert settings_of(default).role == "all"
    assert [d["metadata"]["name"] for d in default if d["kind"] == "Service"] == ["phalanx"]


def test_rbac_is_scoped_by_namespace_and_name() -> None:
    """Which verbs: test_deploy_rbac.py (derived from the code). Here: where, and on which names."""
    docs = render()
    cluster, namespaced = rules_of(docs, "ClusterRole"), rules_of(docs, "Role")
    for rule in cluster + namespaced:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    assert verbs(cluster, "", "secrets") == {}, "no Secret outside its own namespace"
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        assert verbs(cluster, "admissionregistration.k8s.io", kind) == {
            "get": {"phalanx.dev"},
            "patch": {"phalanx.dev"},
        }
    assert verbs(namespaced, "coordination.k8s.io", "leases") == {
        "create": {"*"},
        "get": {"phalanx-leader"},
        "update": {"phalanx-leader"},
    }
    assert verbs(namespaced, "", "secrets") == {
        "create": {"*"},
        "get": {"phalanx-webhook-tls"},
        "update": {"phalanx-webhook-tls"},
    }
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "phalanx", "namespace": NAMESPACE}]
    assert one(docs, "RoleBinding")["subjects"] == binding["subjects"]
    assert one(docs, "Role")["metadata"]["namespace"] == NAMESPACE


def test_with_cert_manager_phalanx_only_reads_the_mounted_secret() -> None:
    docs = render("certManager.enabled=true")
    s = settings_of(docs)
    assert s.webhook_secret is None and not s.kopf_manages_webhooks
    certificate = one(docs, "Certificate")
    assert certificate["spec"]["secretName"] == "phalanx-webhook-tls"
    assert "phalanx.phalanx-system.svc" in certificate["spec"]["dnsNames"]
    assert one(docs, "Issuer")["spec"] == {"selfSigned": {}}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(docs, kind)["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/phalanx-webhook"}
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert volume["secret"]["secretName"] == "phalanx-webhook-tls"
    cluster, namespaced = rules_of(docs, "ClusterRole"), rules_of(docs, "Role")
    assert verbs(namespaced, "", "secrets") == {}
    assert verbs(cluster, "admissionregistration.k8s.io", "mutatingwebhookconfigurations") == {}
    with_issuer = render(
        "certManager.enabled=true",
        "certManager.issuerRef.name=corp",
        "certManager.issuerRef.kind=ClusterIssuer",
    )
    assert not [d for d in with_issuer if d["kind"] == "Issuer"]
    assert one(with_issuer, "Certificate")["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer"}


def test_without_leader_election_there_is_no_lease_and_one_replica() -> None:
    docs = render("leaderElection.enabled=false", "replicaCount=1")
    assert settings_of(docs).leader_election is False
    assert verbs(rules_of(docs, "Role"), "coordination.k8s.io", "leases") == {}
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"], (
        "minAvailable 1 of 1 would block drains"
    )


# ---------------------------------------------------------------------- API Priority and Fairness
def flow_subjects(flow: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rule in flow["spec"]["rules"] for s in rule["subjects"]]


@pytest.mark.parametrize(
    ("sets", "account"),
    [
        ((), "phalanx"),
        (("serviceAccount.name=gangs",), "gangs"),
        (("fullnameOverride=gpu-admission",), "gpu-admission"),
    ],
    ids=["default", "named-account", "full-name"],
)
def test_the_operators_requests_go_to_workload_high_as_the_scheduler_s_do(
    sets: tuple[str, ...], account: str
) -> None:
    """Every request of the account the Deployment runs as, and nothing else, goes to workload-high, ahead
    of the built-in `service-accounts` FlowSchema (9000) that would put it in workload-low."""
    docs = render(*sets)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account
    flow = one(docs, "FlowSchema")
    assert flow["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
    assert "namespace" not in flow["metadata"], "cluster-scoped"
    spec = flow["spec"]
    assert spec["priorityLevelConfiguration"] == {"name": "workload-high"}
    assert 900 < spec["matchingPrecedence"] < 9000
    assert flow_subjects(flow) == [
        {"kind": "ServiceAccount", "serviceAccount": {"name": account, "namespace": NAMESPACE}}
    ]
    (rule,) = spec["rules"]
    assert rule["resourceRules"] == [
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
    ]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_the_flow_schema_follows_its_values_and_can_be_left_out() -> None:
    flow = one(render("apiPriority.priorityLevel=gangs", "apiPriority.matchingPrecedence=500"), "FlowSchema")
    assert flow["spec"]["priorityLevelConfiguration"] == {"name": "gangs"}
    assert flow["spec"]["matchingPrecedence"] == 500
    assert not [d for d in render("apiPriority.enabled=false") if d["kind"] == "FlowSchema"]
    refused = helm("template", "phalanx", str(CHART), "--set", "apiPriority.matchingPrecedence=0")
    assert refused.returncode != 0 and "matchingPrecedence" in refused.stderr
