"""On the stock dev cluster no JobSet, LeaderWorkerSet or TrainJob CRD is installed: Phalanx runs all the
same (a gang Job is admitted) and says once, per kind, that it is not served (process/runtime.py
`_list_served`), instead of failing its start or repeating it every pass."""

from __future__ import annotations

import pytest

from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace, bound, gpu_job, wait_for

pytestmark = pytest.mark.integration

NOT_SERVED = {
    "JobSet": "jobsets.jobset.x-k8s.io is not served by this cluster",
    "LeaderWorkerSet": "leaderworkersets.leaderworkerset.x-k8s.io is not served by this cluster",
    "TrainJob": "trainjobs.trainer.kubeflow.org is not served by this cluster",
}


def test_without_their_crds_phalanx_runs_and_says_once_per_kind_that_it_is_not_served(
    ns: Namespace, phalanx: OperatorProcess
) -> None:
    crds = {
        c["metadata"]["name"]
        for c in ns.api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    }
    assert not crds & {
        "jobsets.jobset.x-k8s.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "trainjobs.trainer.kubeflow.org",
    }
    ns.create(gpu_job("gang-2", 2, labels={"phalanx.dev/managed": "true"}))
    wait_for("gang-2 admitted", lambda: len(bound(ns.job_pods("gang-2"))) == 2 or None, timeout=60)
    log = phalanx.current_log()
    for kind, line in NOT_SERVED.items():
        said = [x for x in log.splitlines() if line in x]
        print("\n".join(said))
        assert len(said) == 1, f"{kind}: said {len(said)} times"
        assert f"{kind}s are not admitted until its CRD is installed" in said[0]
    assert phalanx.proc is not None and phalanx.proc.poll() is None
