"""Status that stays true (issue 16 item 9), on the dev cluster: a running gang's DOMAIN follows a node of
it relabelled into another network block, and comes back when the label does; a gang one of whose indexes
succeeded still says the whole gang (its counters, its phase, the apiserver's printer columns)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from phalanx.devcluster.http import RestClient

from .kube import NB_KEY, Namespace, bound, relabel, wait_for
from .test_completed_members import by_index, end, phase_of
from .test_phalanx_admission import group_of, managed_job, wait_bound

pytestmark = pytest.mark.integration


def domain(ns: Namespace, job: str) -> str | None:
    found: str | None = ((group_of(ns, job) or {}).get("status") or {}).get("domain")
    return found


def both_bound(ns: Namespace) -> list[dict[str, Any]] | None:
    pods = bound(ns.job_pods("train"))
    return pods if len(pods) == 2 else None


def test_domain_follows_a_relabelled_node_of_a_running_gang(ns: Namespace, blocks: dict[str, str]) -> None:
    ns.create(managed_job("train", 2, NB_KEY))
    pods = wait_for("train bound", lambda: both_bound(ns))
    home = wait_for("train's domain", lambda: domain(ns, "train"))
    other = next(v for v in sorted(set(blocks.values())) if v != home)
    moved = sorted(p["spec"]["nodeName"] for p in pods)[-1]

    relabel(ns.api, moved, other)
    both = ",".join(sorted((home, other)))
    wait_for(f"DOMAIN {both}", lambda: domain(ns, "train") == both or None, timeout=90)

    relabel(ns.api, moved, home)
    wait_for(f"DOMAIN {home} again", lambda: domain(ns, "train") == home or None, timeout=90)


def table_row(api: RestClient, path: str, name: str) -> dict[str, Any]:
    """The apiserver's own rendering of an object's printer columns (what `kubectl get` prints)."""
    conn = http.client.HTTPSConnection("127.0.0.1", api.port, context=api.context, timeout=30)
    try:
        headers = {
            "Authorization": f"Bearer {api.token}",
            "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",
        }
        conn.request("GET", path, headers=headers)
        table = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    names = [column["name"] for column in table["columnDefinitions"]]
    row = next(r for r in table["rows"] if r["cells"][0] == name)
    return dict(zip(names, row["cells"], strict=True))


def test_a_gang_whose_index_succeeded_still_counts_the_whole_gang(ns: Namespace) -> None:
    ns.create(managed_job("train", 4, NB_KEY))
    pods = wait_bound(ns, "train", 4)
    first = by_index(pods)[0][0]
    end(ns, first, 0)
    wait_for("index 0 succeeded", lambda: phase_of(ns, first["metadata"]["name"]) == "Succeeded")

    def counted() -> dict[str, Any] | None:
        status = (group_of(ns, "train") or {}).get("status") or {}
        return status if (status.get("scheduled"), status.get("succeeded")) == (3, 1) else None

    status = wait_for("the PodGroup counts 3 scheduled and 1 succeeded", counted, timeout=90)
    print(ns.where("job-name=train"))
    assert status["phase"] == "Running" and status["waiting"] == 0, status
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "Admitted", admitted
    assert admitted["message"].startswith("3 pod(s) admitted in "), admitted
    assert admitted["message"].endswith("; 1 more succeeded"), admitted
    group = group_of(ns, "train")
    assert group is not None
    row = table_row(
        ns.api,
        f"/apis/scheduling.phalanx.dev/v1beta1/namespaces/{ns.name}/podgroups",
        group["metadata"]["name"],
    )
    print(row)
    assert (row["Min"], row["Scheduled"], row["Succeeded"], row["Waiting"]) == (4, 3, 1, 0), row
    assert row["Status"] == "Running", row
