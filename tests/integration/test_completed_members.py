"""Members that completed count toward their gang (issue 18, docs/design.md "Members that completed").

Upstream's gang never completes when an index fails after another succeeded (kubernetes#142330): the
failed index's replacement waits for minCount pods to be schedulable together, and the succeeded one is not
one of them any more. Here an Indexed Job of 4 in one network block runs; index 0 succeeds, then index 1
fails: the replacement of index 1 goes into the gang's block (the other block is free, so a decision that
forgot the running pods could put it there) and the Job completes.
"""

from __future__ import annotations

from typing import Any

import pytest

from .kube import NB_KEY, Namespace, bound, domains_of, node_labels, wait_for
from .test_phalanx_admission import group_of, managed_job, wait_bound

pytestmark = pytest.mark.integration

INDEX = "batch.kubernetes.io/job-completion-index"


def by_index(pods: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for p in pods:
        out.setdefault(int(p["metadata"]["labels"][INDEX]), []).append(p)
    return out


def end(ns: Namespace, pod: dict[str, Any], exit_code: int) -> None:
    """Ask the simulated kubelet to end a running pod now (kwok stage pod-complete)."""
    notes = {"sim.phalanx.dev/complete-after": "1s", "sim.phalanx.dev/exit-code": str(exit_code)}
    ns.api.request(
        "PATCH",
        f"/api/v1/namespaces/{ns.name}/pods/{pod['metadata']['name']}",
        {"metadata": {"annotations": notes}},
        "application/merge-patch+json",
    )


def phase_of(ns: Namespace, name: str) -> str:
    return str(ns.get(f"/api/v1/namespaces/{{ns}}/pods/{name}").get("status", {}).get("phase", ""))


def test_an_index_that_fails_after_another_succeeded_is_replaced_in_the_gangs_block_and_it_completes(
    ns: Namespace,
) -> None:
    ns.create(managed_job("train", 4, key=NB_KEY))
    pods = wait_bound(ns, "train", 4)
    (block,) = domains_of(ns.api, pods, NB_KEY)
    first = by_index(pods)

    end(ns, first[0][0], 0)
    wait_for("index 0 succeeded", lambda: phase_of(ns, first[0][0]["metadata"]["name"]) == "Succeeded")
    end(ns, first[1][0], 1)
    failed = first[1][0]["metadata"]["name"]
    wait_for("index 1 failed", lambda: phase_of(ns, failed) == "Failed")

    def replacement() -> dict[str, Any] | None:
        again = [p for p in by_index(ns.job_pods("train")).get(1, []) if p["metadata"]["name"] != failed]
        return next((p for p in again if p["spec"].get("nodeName")), None)

    new = wait_for("index 1 made again and bound", replacement, timeout=90)
    labels = node_labels(ns.api)
    print(ns.where("job-name=train"))
    assert labels[new["spec"]["nodeName"]][NB_KEY] == block  # into the gang's domain, with its running pods
    group = group_of(ns, "train")
    assert group is not None
    admitted = next(c for c in group["status"]["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "Admitted", admitted

    # The gang completes: every index left ends well.
    running = [p for p in bound(ns.job_pods("train")) if p["status"].get("phase") == "Running"]
    assert len(running) == 3
    for p in running:
        end(ns, p, 0)

    def complete() -> bool:
        job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
        conditions = job.get("status", {}).get("conditions", [])
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    wait_for("the Job complete", complete, timeout=90)
    job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
    assert job["status"]["succeeded"] == 4 and job["status"].get("failed") == 1
    wait_for(
        "the PodGroup finished",
        lambda: ((group_of(ns, "train") or {}).get("status") or {}).get("phase") == "Finished",
    )
