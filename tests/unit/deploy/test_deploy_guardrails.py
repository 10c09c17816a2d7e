"""The chart refuses what would install a broken Phalanx, and documents itself.

values.schema.json: a misspelt key or a wrong type, enum or range fails to render with a message naming
it; the templates refuse what the schema cannot say (two scheduling loops without leader election, lease
timings client-go would refuse). The roles for the cluster's users (aggregated into view/edit/admin, and
the one for `phalanx explain`), the optional ServiceMonitor, and README.md generated from the values'
comments (never stale). Runs the real helm binary.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from deploy_testkit import CHART, NAMESPACE, ROOT, helm, needs_helm, one, render, rules_of, verbs

from phalanx.tools import chart_readme
from phalanx.tools.targets import OWNER_KINDS

pytestmark = needs_helm


def refused(*sets: str) -> str:
    """helm template with these values fails; its error output."""
    argv = ["template", "phalanx", str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        argv += ["--set", value]
    result = helm(*argv)
    assert result.returncode != 0, f"{sets} rendered:\n{result.stdout[:2000]}"
    assert result.stdout == ""
    return result.stderr


# ---------------------------------------------------------------------- the schema
def test_a_misspelt_value_fails_to_render_and_names_the_key() -> None:
    error = refused("leaderElection.enable=false")
    assert "values don't meet the specifications of the schema" in error
    assert "at '/leaderElection': additional properties 'enable' not allowed" in error
    assert "additional properties 'replicas' not allowed" in refused("replicas=3")
    assert "at '/metrics/serviceMonitor': additional properties 'enable' not allowed" in refused(
        "metrics.serviceMonitor.enable=true"
    )
    assert "at '/rbac/explain': additional properties 'subject' not allowed" in refused(
        "rbac.explain.subject[0].name=x"
    )


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("replicaCount=two", "/replicaCount"),
        ("replicaCount=0", "/replicaCount"),
        ("webhook.timeoutSeconds=31", "/webhook/timeoutSeconds"),
        ("webhook.port=70000", "/webhook/port"),
        ("operator.logFormat=xml", "/operator/logFormat"),
        ("operator.resyncSeconds=0", "/operator/resyncSeconds"),
        ("operator.namespaces={Team_A}", "/operator/namespaces/0"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("leaderElection.enabled=maybe", "/leaderElection/enabled"),
        ("leaderElection.leaseName=Not A Name", "/leaderElection/leaseName"),
        ("certManager.duration=1year", "/certManager/duration"),
        ("metrics.serviceMonitor.interval=often", "/metrics/serviceMonitor/interval"),
        ("podDisruptionBudget.minAvailable=half", "/podDisruptionBudget/minAvailable"),
        ("rbac.explain.subjects[0].kind=Robot", "/rbac/explain/subjects/0"),
        ("service.type=ExternalName", "/service/type"),
        ("webhook.deployment.replicaCount=0", "/webhook/deployment/replicaCount"),
        ("webhook.deployment.enabled=yes", "/webhook/deployment/enabled"),
    ],
)
def test_wrong_types_enums_and_ranges_fail_to_render(value: str, where: str) -> None:
    error = refused(value)
    assert f"at '{where}'" in error, error


def test_the_defaults_and_every_documented_alternative_render() -> None:
    for sets in [
        (),
        ("leaderElection.enabled=false", "replicaCount=1"),
        ("replicaCount=3", "podDisruptionBudget.minAvailable=50%"),
        (
            "certManager.enabled=true",
            "certManager.issuerRef.name=corp",
            "certManager.issuerRef.kind=ClusterIssuer",
        ),
        ("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.scrapeTimeout=10s"),
        ("rbac.aggregateToView=false", "rbac.aggregateToEdit=false", "rbac.explain.create=false"),
        ("livenessProbe=null",),
        ("webhook.deployment.enabled=true", "webhook.deployment.replicaCount=1", "replicaCount=1"),
        ("webhook.deployment.enabled=true", "leaderElection.enabled=false", "replicaCount=1"),
    ]:
        assert render(*sets), sets


# ---------------------------------------------------------------------- rules between values
def test_two_scheduling_loops_without_leader_election_fail_to_render() -> None:
    for replicas in ("2", "3"):
        error = refused("leaderElection.enabled=false", f"replicaCount={replicas}")
        assert (
            f"replicaCount is {replicas} but leaderElection.enabled is false: "
            "every replica would run its own scheduling loop"
        ) in error
    docs = render("leaderElection.enabled=false", "replicaCount=1")
    assert one(docs, "Deployment")["spec"]["replicas"] == 1


def test_lease_timings_client_go_would_refuse_fail_to_render() -> None:
    assert (
        "leaseDurationSeconds (10) must be greater than leaderElection.renewDeadlineSeconds (10)"
        in refused("leaderElection.leaseDurationSeconds=10")
    )
    assert "renewDeadlineSeconds (2) must be greater than leaderElection.retryPeriodSeconds (2)" in refused(
        "leaderElection.renewDeadlineSeconds=2"
    )
    # Without election they are not used.
    assert render("leaderElection.enabled=false", "replicaCount=1", "leaderElection.leaseDurationSeconds=1")


def test_explain_subjects_without_the_role_fail_to_render() -> None:
    error = refused(
        "rbac.explain.create=false", "rbac.explain.subjects[0].kind=User", "rbac.explain.subjects[0].name=a"
    )
    assert "rbac.explain.subjects is set but rbac.explain.create is false" in error


# ---------------------------------------------------------------------- roles for users
PHALANX_GROUP = "scheduling.phalanx.dev"
KINDS = ("podgroups", "compositepodgroups", "workloads", "topologies")


def test_view_edit_and_admin_aggregate_phalanxs_kinds() -> None:
    docs = render()
    view = one(docs, "ClusterRole", "phalanx-view")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    for kind in KINDS:
        assert verbs(view["rules"], PHALANX_GROUP, kind) == {"get": {"*"}, "list": {"*"}, "watch": {"*"}}
    edit = one(docs, "ClusterRole", "phalanx-edit")
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in labels
    for kind in ("podgroups", "compositepodgroups", "workloads"):
        assert set(verbs(edit["rules"], PHALANX_GROUP, kind)) == {
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        }
    # Never the status Phalanx writes, never the admin's cluster-scoped Topologies.
    for resource in ("podgroups/status", "compositepodgroups/status", "topologies", "topologies/status"):
        assert verbs(edit["rules"], PHALANX_GROUP, resource) == {}
    for rule in rules_of(docs, "ClusterRole", name=None):
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    off = render("rbac.aggregateToView=false", "rbac.aggregateToEdit=false")
    assert not [d for d in off if d["metadata"]["name"] in ("phalanx-view", "phalanx-edit")]


def test_the_explain_role_reads_only_and_binds_the_given_subjects() -> None:
    docs = render()
    role = one(docs, "ClusterRole", "phalanx-explain")
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list"}, rule
    assert set(verbs(role["rules"], "", "nodes")) == set(verbs(role["rules"], "", "pods")) == {"get", "list"}
    # Every owner kind explain reads (a target, or a PodGroup's owner): a new row of the table needs its rule.
    for row in OWNER_KINDS:
        group = row.api_version.rpartition("/")[0]
        assert set(verbs(role["rules"], group, row.plural)) == {"get", "list"}, row.kind
    for kind in KINDS:
        assert set(verbs(role["rules"], PHALANX_GROUP, kind)) == {"get", "list"}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"] == ["phalanx"]
    subjects = [{"kind": "Group", "name": "ml", "apiGroup": "rbac.authorization.k8s.io"}]
    bound = render(*(f"rbac.explain.subjects[0].{k}={v}" for k, v in subjects[0].items()))
    binding = one(bound, "ClusterRoleBinding", "phalanx-explain")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "phalanx-explain",
    }
    assert binding["subjects"] == subjects
    assert not [d for d in render("rbac.explain.create=false") if d["metadata"]["name"] == "phalanx-explain"]


# ---------------------------------------------------------------------- ServiceMonitor, Chart.yaml, README
def test_the_service_monitor_scrapes_the_metrics_port_of_the_service() -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]
    docs = render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
        "metrics.serviceMonitor.interval=15s",
    )
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s"}
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}


def test_chart_yaml_says_where_the_project_lives() -> None:
    import yaml

    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["home"].startswith("https://")
    assert meta["sources"] and all(s.startswith("https://") for s in meta["sources"])


def test_the_readme_is_generated_from_the_values_comments_and_not_stale() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "phalanx.tools.chart_readme", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    text = (CHART / "README.md").read_text()
    assert "| `leaderElection.enabled` | bool | `true` | Run the scheduling loop only" in text
    assert '| `operator.logFormat` | "plain" \\| "json" | `"json"` |' in text


def test_the_readme_generator_refuses_undocumented_and_unknown_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = (CHART / "values.yaml").read_text()
    assert chart_readme.rows(values, schema)
    undocumented = values.replace("  # -- The Lease's name.\n", "")
    with pytest.raises(chart_readme.ChartDocError, match=r"leaderElection\.leaseName: no `# --` comment"):
        chart_readme.rows(undocumented, schema)
    unknown = values.replace(
        "  leaseName: phalanx-leader\n", "  leaseName: phalanx-leader\n  # -- x\n  extra: 1\n"
    )
    with pytest.raises(
        chart_readme.ChartDocError, match=r"leaderElection\.extra: not in values\.schema\.json"
    ):
        chart_readme.rows(unknown, schema)
    missing = values.replace("  # -- The Lease's name.\n  leaseName: phalanx-leader\n", "")
    with pytest.raises(chart_readme.ChartDocError, match=r"declares leaseName, values\.yaml does not set it"):
        chart_readme.rows(missing, schema)


def test_comments_attach_to_the_key_below_and_skip_list_items() -> None:
    text = (
        "# header, not a description\n\n"
        "# -- first line\n# second line\na:\n"
        "  # -- inner\n  b: 1\n"
        "  list:\n    - name: x\n      value: y\n"
        "  c: 2\n"
        "# -- top\nd: {}\n"
        "#   example: not a description\n"
    )
    assert chart_readme.comments(text) == {
        ("a",): "first line second line",
        ("a", "b"): "inner",
        ("a", "list"): None,
        ("a", "c"): None,
        ("d",): "top",
    }
