"""Status that stays true (issue 16 item 9), on the dev cluster: a running gang's DOMAIN follows a node of
it relabelled into another network block, and comes back when the label does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.http import RestClient

from .kube import NB_KEY, Namespace, bound, node_labels, wait_for
from .test_phalanx_admission import group_of, managed_job

pytestmark = pytest.mark.integration

MERGE = "application/merge-patch+json"


def relabel(api: RestClient, node: str, value: str) -> None:
    api.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {NB_KEY: value}}}, MERGE)


def domain(ns: Namespace, job: str) -> str | None:
    found: str | None = ((group_of(ns, job) or {}).get("status") or {}).get("domain")
    return found


def both_bound(ns: Namespace) -> list[dict[str, Any]] | None:
    pods = bound(ns.job_pods("train"))
    return pods if len(pods) == 2 else None


@pytest.fixture
def restored(ns: Namespace) -> Iterator[dict[str, str]]:
    """Every node's network block as it was, put back after the test."""
    before = {name: labels[NB_KEY] for name, labels in node_labels(ns.api).items() if NB_KEY in labels}
    yield before
    for name, value in before.items():
        relabel(ns.api, name, value)


def test_domain_follows_a_relabelled_node_of_a_running_gang(ns: Namespace, restored: dict[str, str]) -> None:
    ns.create(managed_job("train", 2, NB_KEY))
    pods = wait_for("train bound", lambda: both_bound(ns))
    home = wait_for("train's domain", lambda: domain(ns, "train"))
    other = next(v for v in sorted(set(restored.values())) if v != home)
    moved = sorted(p["spec"]["nodeName"] for p in pods)[-1]

    relabel(ns.api, moved, other)
    both = ",".join(sorted((home, other)))
    wait_for(f"DOMAIN {both}", lambda: domain(ns, "train") == both or None, timeout=90)

    relabel(ns.api, moved, home)
    wait_for(f"DOMAIN {home} again", lambda: domain(ns, "train") == home or None, timeout=90)
