"""Nothing Phalanx cannot keep is let through in silence (issue 16, items 3 and 6), on the dev cluster: a
gang naming another scheduler is refused (or, when configured, its released pods no scheduler binds are
rolled back), Phalanx keys on a pod template and slice keys no finer than the Job's are refused, a pod
joining another namespace's PodGroup is refused, a labelled Job outside --namespaces is warned about, and a
pod whose gate someone else removed is reported."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import LB_KEY, NB_KEY, Namespace, delete_namespace, gpu_job, new_namespace, wait_for
from .test_bad_input import refusal as refused
from .test_phalanx_admission import MANAGED, managed_job

pytestmark = pytest.mark.integration

TOPOLOGIES = "/apis/scheduling.phalanx.dev/v1beta1/topologies"


def eventually_refused(ns: Namespace, make: Callable[[], dict[str, Any]], plural: str) -> str:
    """Refused once the operator's cache has seen what the refusal rests on (its watch lags the API)."""

    def attempt() -> str | None:
        body = make()
        try:
            ns.create(body)
        except ApiError as e:
            return str(json.loads(e.body)["message"])
        ns.api.request("DELETE", f"{plural}/{body['metadata']['name']}", {"propagationPolicy": "Background"})
        return None

    message = wait_for("the refusal", attempt, timeout=60, interval=1.0)
    print(message)
    return message


def reasons(ns: Namespace, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in ns.events(f"involvedObject.name={name}")}


# ---------------------------------------------------------------------- refused at creation
def test_a_gang_naming_another_scheduler_is_refused_and_a_basic_job_is_not(ns: Namespace) -> None:
    body = managed_job("volcano", 2)
    body["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    message = refused(ns, body)
    assert (
        "spec.template.spec.schedulerName: 'volcano' is not a scheduler Phalanx releases gangs to" in message
    )
    body["metadata"]["annotations"]["phalanx.dev/policy"] = "basic"
    ns.create(body)  # left to that scheduler


def test_a_gang_with_dra_resource_claims_is_refused_and_a_basic_job_is_not(ns: Namespace) -> None:
    """Issue 16 item 7, in part: device claims are not modelled; refused while policy basic can be chosen."""
    body = managed_job("claims", 2)
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    body["spec"]["template"]["spec"]["resourceClaims"] = claims
    message = refused(ns, body)
    assert "spec.template.spec.resourceClaims: Phalanx does not model DRA device claims" in message
    assert "create the Job with phalanx.dev/policy: basic" in message
    body["metadata"]["annotations"]["phalanx.dev/policy"] = "basic"
    ns.create(body)  # kube-scheduler allocates its devices pod by pod


def test_phalanx_keys_on_the_pod_template_are_refused_pointing_at_the_jobs_metadata(ns: Namespace) -> None:
    body = managed_job("tas-style", 2)
    body["spec"]["template"]["metadata"]["annotations"]["phalanx.dev/topology-key"] = NB_KEY
    message = refused(ns, body)
    assert message.endswith(
        "spec.template.metadata.annotations[phalanx.dev/topology-key]: Phalanx reads its keys from the Job's "
        "own "
        "metadata, not from its pod template, where it would be ignored; move it to metadata.annotations of "
        "the Job"
    )


@pytest.fixture
def oci_topology(ns: Namespace) -> Iterator[None]:
    ns.api.request(
        "POST",
        TOPOLOGIES,
        {
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "Topology",
            "metadata": {"name": "quality-oci"},
            "spec": {"levels": [{"nodeLabel": k} for k in (NB_KEY, LB_KEY, "kubernetes.io/hostname")]},
        },
    )
    yield
    ns.api.request("DELETE", f"{TOPOLOGIES}/quality-oci")


def test_a_slice_key_coarser_than_the_jobs_key_is_refused(ns: Namespace, oci_topology: None) -> None:
    def sliced() -> dict[str, Any]:
        notes = {
            "phalanx.dev/topology-key": LB_KEY,
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": NB_KEY,
        }
        return gpu_job("wide-slices", 4, labels=MANAGED, annotations=notes)

    message = eventually_refused(ns, sliced, f"/apis/batch/v1/namespaces/{ns.name}/jobs")
    assert (
        f"[phalanx.dev/slice-topology-key]: {NB_KEY!r} is not finer than phalanx.dev/topology-key" in message
    )


def test_a_pod_joining_a_pod_group_of_another_namespace_is_refused(
    ns: Namespace, stock_cluster: ClusterState
) -> None:
    other = new_namespace(stock_cluster, "other-group")
    try:
        other.create(
            {
                "apiVersion": "scheduling.phalanx.dev/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "elsewhere"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
            }
        )

        def pod() -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "joiner", "labels": {"phalanx.dev/pod-group": "elsewhere"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            }

        message = eventually_refused(ns, pod, f"/api/v1/namespaces/{ns.name}/pods")
        assert f"PodGroup 'elsewhere' is in namespace {other.name}, not {ns.name}" in message
    finally:
        delete_namespace(other)


# ---------------------------------------------------------------------- said afterwards
def test_a_pod_that_lost_the_gate_to_someone_else_is_reported(ns: Namespace) -> None:
    ns.create(managed_job("robbed", 2, key="example.com/no-such-label"))  # waits gated
    pods = wait_for("robbed's pods", lambda: ps if len(ps := ns.job_pods("robbed")) == 2 else None)
    name = pods[0]["metadata"]["name"]
    ns.api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns.name}/pods/{name}",
        {"spec": {"schedulingGates": [{"$patch": "delete", "name": "phalanx.dev/admission"}]}},
        "application/strategic-merge-patch+json",
    )
    said = wait_for("a GateRemoved Warning", lambda: reasons(ns, "robbed").get("GateRemoved"), timeout=60)
    print(said)
    assert (
        "lost the phalanx.dev/admission scheduling gate to someone else before Phalanx admitted them "
        f"({name})" in said
    )


@pytest.fixture
def configured(
    stock_cluster: ClusterState, phalanx: OperatorProcess, tmp_path: Path
) -> Iterator[tuple[Namespace, Namespace]]:
    """An operator that manages one namespace only and trusts a scheduler named volcano to bind released
    pods (none runs), with a short bind timeout; the session's operator is stopped meanwhile."""
    managed, outside = new_namespace(stock_cluster, "managed"), new_namespace(stock_cluster, "outside")
    phalanx.stop()
    args = ["--namespaces", managed.name, "--scheduler-names", "volcano", "--bind-timeout", "6"]
    operator = OperatorProcess(stock_cluster, tmp_path, args, name="configured")
    try:
        operator.start()
        yield managed, outside
    finally:
        operator.stop()
        print(f"configured operator's log: {operator.log_path}")
        delete_namespace(managed)
        delete_namespace(outside)
        phalanx.start()


def test_released_pods_no_scheduler_binds_are_rolled_back_and_a_job_outside_the_namespaces_is_warned(
    configured: tuple[Namespace, Namespace],
) -> None:
    managed, outside = configured
    body = managed_job("volcano", 2)
    body["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    managed.create(body)  # accepted: --scheduler-names lists volcano

    def rolled_back() -> str | None:
        requeued = [
            e["message"] for e in managed.events("involvedObject.name=volcano") if e["reason"] == "Requeued"
        ]
        return requeued[0] if requeued else None

    said = wait_for("the release rolled back", rolled_back, timeout=90)
    print(said)
    assert said.startswith(
        "released but not bound: 2 released pod(s) were not bound within 6 s of the decision"
    )
    assert "to be bound by schedulerName 'volcano'" in said

    outside.create(managed_job("elsewhere", 1))
    warned = wait_for("a NotManagedHere Warning", lambda: reasons(outside, "elsewhere").get("NotManagedHere"))
    print(warned)
    assert (
        f"namespace {outside.name}, which is not among this Phalanx's --namespaces ({managed.name})" in warned
    )
