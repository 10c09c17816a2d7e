"""One group's failure to apply never blocks another: a ResourceQuota on PodGroups in one namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace, bound, delete_namespace, new_namespace, wait_for
from .test_phalanx_admission import group_of, managed_job, wait_bound

pytestmark = pytest.mark.integration


@pytest.fixture
def quota_ns(
    stock_cluster: ClusterState, phalanx: OperatorProcess, request: pytest.FixtureRequest
) -> Iterator[Namespace]:
    """A namespace where only one PodGroup may exist."""
    namespace = new_namespace(stock_cluster, "quota")
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "one-podgroup"},
        "spec": {"hard": {"count/podgroups.scheduling.phalanx.dev": "1"}},
    }
    path = f"/api/v1/namespaces/{namespace.name}/resourcequotas/one-podgroup"

    def counted() -> bool:
        used = namespace.get(path).get("status", {}).get("used", {})
        return "count/podgroups.scheduling.phalanx.dev" in used

    # The quota admission refuses every PodGroup until the quota controller has counted what is used. On a
    # fresh cluster its first count can come before kube-controller-manager discovered the PodGroup CRD (it
    # looks every 30 s), and a quota is counted again only when its spec.hard changes or at the 5-minute
    # resync: made anew after the discovery, it is counted at once.
    for attempt in range(1, 7):
        namespace.create(quota)
        try:
            wait_for("the quota to be counted", counted, timeout=20)
            break
        except AssertionError:
            if attempt == 6:
                raise
            namespace.api.request("DELETE", path)
            wait_for(
                "the uncounted quota to go",
                lambda: not namespace.get(path.rsplit("/", 1)[0])["items"],
                timeout=30,
            )
    yield namespace
    delete_namespace(namespace)


def test_a_quota_refusing_one_pod_group_does_not_stop_other_jobs(quota_ns: Namespace, ns: Namespace) -> None:
    """Two gangs in the quota namespace (the second PodGroup is refused with 403), one elsewhere: the
    refused Job gets a Warning saying why; the other Jobs — in both namespaces — are admitted."""
    quota_ns.create(managed_job("first", 1))
    wait_for("the first PodGroup", lambda: group_of(quota_ns, "first"), timeout=60)
    quota_ns.create(managed_job("second", 1))
    ns.create(managed_job("elsewhere", 2))

    wait_bound(ns, "elsewhere", 2)
    wait_bound(quota_ns, "first", 1)

    def refusal() -> dict[str, object] | None:
        for event in quota_ns.events("involvedObject.name=second"):
            if event["type"] == "Warning" and event["reason"] == "FailedCreate":
                return dict(event)
        return None

    event = wait_for("a FailedCreate Warning on the refused Job", refusal, timeout=30)
    message = str(event["message"])
    print(f"event on the refused Job: {event['reason']}: {message} (count {event.get('count')})")
    assert "creating PodGroup" in message and "exceeded quota" in message
    assert group_of(quota_ns, "second") is None
    assert not bound(quota_ns.job_pods("second"))

    # A Job created after the failure is admitted too: the failing group only backs off.
    ns.create(managed_job("later", 1))
    wait_bound(ns, "later", 1)
