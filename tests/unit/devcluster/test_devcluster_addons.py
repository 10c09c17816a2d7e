"""Which Kueue frameworks the dev cluster turns on for the addons it runs, and which of Kueue's webhooks it
keeps for them (devcluster/addons.py): a webhook of a framework that is off has no handler in Kueue and would
fail every request it sees; one of a framework that is on must be kept, or Kueue never suspends (queues) the
objects of that kind. Hooks shaped as in Kueue v0.17.0's config/components/webhook/manifests.yaml; no
module source or cluster needed (test_addons.py renders the real manifests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from phalanx.devcluster.addons import (
    ADDONS,
    KUEUE_FRAMEWORKS,
    Started,
    configuration,
    keep_webhook,
    kueue_frameworks,
    parse,
    unsupported,
)
from phalanx.devcluster.cluster import ClusterError, DevCluster

JOB = "batch/job"
JOBSET = "jobset.x-k8s.io/jobset"
LWS = "leaderworkerset.x-k8s.io/leaderworkerset"
TRAINJOB = "trainer.kubeflow.org/trainjob"


@pytest.mark.parametrize(
    ("addons", "frameworks"),
    [
        (["kueue"], [JOB]),
        (["jobset", "kueue"], [JOB, JOBSET]),
        (["lws", "kueue"], [JOB, LWS]),
        (["jobset", "trainer", "kueue"], [JOB, JOBSET, TRAINJOB]),
        (["jobset", "lws", "trainer", "kueue"], [JOB, JOBSET, LWS, TRAINJOB]),
    ],
)
def test_kueue_turns_on_a_framework_for_each_addon_that_runs(
    addons: list[str], frameworks: list[str]
) -> None:
    assert kueue_frameworks(addons) == frameworks


def _hook(name: str, group: str, resource: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "rules": [
            {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}
        ],
        **extra,
    }


MTRAINJOB = _hook("mtrainjob.kb.io", "trainer.kubeflow.org", "trainjobs")
VTRAINJOB = _hook("vtrainjob.kb.io", "trainer.kubeflow.org", "trainjobs")
MJOBSET = _hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets")
MPOD = _hook("mpod.kb.io", "", "pods")
MWORKLOAD = _hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads")


@pytest.mark.parametrize(
    ("hook", "addons", "kept"),
    [
        (MTRAINJOB, ["jobset", "trainer", "kueue"], True),
        (VTRAINJOB, ["jobset", "trainer", "kueue"], True),
        (MTRAINJOB, ["jobset", "kueue"], False),  # no Trainer: the framework is off, no handler
        (VTRAINJOB, ["jobset", "lws", "kueue"], False),
        (MJOBSET, ["jobset", "trainer", "kueue"], True),
        (MJOBSET, ["lws", "kueue"], False),
        (MWORKLOAD, ["kueue"], True),  # Kueue's own kinds, always
        (MPOD, ["jobset", "trainer", "kueue"], False),  # pod webhooks only for LWS
        (MPOD, ["lws", "kueue"], True),
    ],
)
def test_kueues_webhooks_are_kept_for_its_own_kinds_and_the_frameworks_on(
    hook: dict[str, Any], addons: list[str], kept: bool
) -> None:
    assert keep_webhook(ADDONS["kueue"], hook, kueue_frameworks(addons)) is kept


def test_each_framework_names_the_group_and_resource_of_its_webhooks_and_its_reconciler() -> None:
    assert KUEUE_FRAMEWORKS[TRAINJOB] == ("trainer.kubeflow.org", "trainjobs", "trainjob")


def _started(name: str) -> Started:
    return Started(
        name=name,
        version=ADDONS[name].version,
        binary=f"/cache/{name}",
        pid_name=f"addon-{name}",
        log=f"/logs/addon-{name}.log",
        config=f"/dir/addons/{name}/config.yaml",
        cert_dir=f"/dir/addons/{name}/certs",
        webhook_port=1001,
        metrics_port=1002,
        health_port=1003,
        frameworks=[JOB, TRAINJOB] if name == "kueue" else [],
    )


FAIR_SHARING = {
    "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
}


def test_a_restart_merges_its_overrides_into_the_configuration_up_writes_and_keeps_the_rest() -> None:
    """`restart(..., overrides)` (Kueue's fair sharing for one test): the Configuration `up` wrote, with the
    overrides merged in, maps deeply; without overrides exactly what `up` wrote."""
    s = _started("kueue")
    plain = configuration("kueue", s)
    assert "fairSharing" not in plain
    assert plain["integrations"] == {"frameworks": [JOB, TRAINJOB]}
    fair = configuration("kueue", s, FAIR_SHARING)
    assert fair == {**plain, **FAIR_SHARING}
    # A nested override keeps the map's other keys.
    gates = configuration("kueue", s, {"featureGates": {"FairSharingPreemptWithinNominal": False}})
    assert gates["featureGates"] == {
        "TopologyAwareScheduling": True,
        "VisibilityOnDemand": False,
        "FairSharingPreemptWithinNominal": False,
    }
    assert configuration("kueue", s) == plain  # the overrides were not kept


# What v1.30.14's kube-apiserver answers to JobSet v0.11.1's CRD (and to Trainer v2.2.0's runtimes, which
# embed its spec): its rule reads t.metadata.namespace, a CEL reserved word taken as a field name from v1.32.
CEL = "undefined field 'namespace'"


@pytest.mark.parametrize(
    ("asked", "version", "refused"),
    [
        ("jobset", "v1.30.14", {"jobset": CEL}),
        ("trainer", "v1.30.14", {"jobset": CEL, "trainer": CEL}),  # trainer brings jobset along
        ("jobset,lws,trainer,kueue", "v1.31.0", {"jobset": CEL, "trainer": CEL}),
        ("lws,kueue", "v1.30.14", {}),
        ("jobset,lws,trainer,kueue", "v1.32.0", {}),
        ("jobset,lws,trainer,kueue", "v1.33.13", {}),
        ("jobset,lws,trainer,kueue", "v1.37.2", {}),
        ("jobset,lws,trainer,kueue", "v1.38.0-beta.0", {}),
    ],
)
def test_an_addon_is_unsupported_on_a_version_whose_apiserver_refuses_its_crds(
    asked: str, version: str, refused: dict[str, str]
) -> None:
    names, _ = parse(asked)
    found = {name: why for name in names if (why := unsupported(name, version))}
    assert sorted(found) == sorted(refused)
    for name, why in found.items():
        assert why.startswith(f"{name} {ADDONS[name].version} needs Kubernetes v1.32 or newer: ")
        assert refused[name] in why


def test_up_refuses_an_addon_the_version_does_not_run_before_anything_starts(tmp_path: Path) -> None:
    """Refused before a binary is looked for or a process started: no state, nothing in the folder."""
    with pytest.raises(ClusterError) as refusal:
        DevCluster(tmp_path / "c").up(
            kubernetes_version="v1.30.14", addons="trainer,kueue", log=lambda _m: None
        )
    message = str(refusal.value)
    assert "jobset v0.11.1 needs Kubernetes v1.32 or newer" in message
    assert "trainer v2.2.0 needs Kubernetes v1.32 or newer" in message
    assert message.endswith("On v1.30.14 these run: lws, kueue")
    assert not (tmp_path / "c").exists()
