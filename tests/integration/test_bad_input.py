"""Bad input against the real control plane: refused at creation by the CRD schema or Phalanx's webhooks,
in words naming the field; what is only knowable later gets a condition and one event; the operator keeps
running.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.devcluster.http import ApiError
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import NB_KEY, Namespace, gpu_job, hold, wait_for
from .test_phalanx_admission import MANAGED, condition, group_of, managed_job, wait_condition

API = "scheduling.phalanx.dev/v1beta1"


def refusal(ns: Namespace, body: dict[str, Any]) -> str:
    """The apiserver's message for an object it refuses (from the schema, CEL or a webhook)."""
    with pytest.raises(ApiError) as refused:
        ns.create(body)
    assert refused.value.status in (400, 422), refused.value
    message = str(json.loads(refused.value.body)["message"])
    print(message)
    return message


def pod_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def template(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": 2}}, **extra}


# ---------------------------------------------------------------------- refused at creation
JOBS = [
    (
        "misspelt annotation",
        managed_job("typo", 2, **{"phalanx.dev/topolgy-key": NB_KEY}),
        "metadata.annotations[phalanx.dev/topolgy-key]: unknown Phalanx annotation; "
        "did you mean phalanx.dev/topology-key?",
    ),
    (
        "managed label with a bad value",
        gpu_job("cap", 2, labels={"phalanx.dev/managed": "True"}),
        'metadata.labels[phalanx.dev/managed]: "True" is not one of true, false',
    ),
    (
        "min-count above parallelism",
        managed_job("big", 2, **{"phalanx.dev/min-count": "3"}),
        "metadata.annotations[phalanx.dev/min-count]: 3 is greater than parallelism 2",
    ),
    (
        "annotation written as a label",
        gpu_job("label", 2, labels={**MANAGED, "phalanx.dev/min-count": "2"}),
        "metadata.labels[phalanx.dev/min-count]: is an annotation, not a label",
    ),
    (
        "topology key with bad syntax",
        managed_job("syntax", 2, "Zone Name"),
        'metadata.annotations[phalanx.dev/topology-key]: "Zone Name" is not a valid label key',
    ),
    (
        "preemption policy with policy basic",
        managed_job("basic", 2, **{"phalanx.dev/policy": "basic", "phalanx.dev/preemption-policy": "Never"}),
        'metadata.annotations[phalanx.dev/preemption-policy]: "Never" only applies to policy gang',
    ),
]


@pytest.mark.parametrize(("kind", "body", "words"), JOBS, ids=[j[0] for j in JOBS])
def test_a_bad_job_is_refused_by_the_webhook_naming_the_field(
    ns: Namespace, kind: str, body: dict[str, Any], words: str
) -> None:
    message = refusal(ns, body)
    assert 'admission webhook "gate-job.' in message and words in message


CRDS = [
    (
        "minCount below 1",
        pod_group("zero", schedulingPolicy={"gang": {"minCount": 0}}),
        "spec.schedulingPolicy.gang.minCount: Invalid value: 0",
    ),
    (
        "minCount of the wrong type",
        pod_group("text", schedulingPolicy={"gang": {"minCount": "four"}}),
        'spec.schedulingPolicy.gang.minCount: Invalid value: "string": '
        "spec.schedulingPolicy.gang.minCount in body must be of type integer",
    ),
    (
        "both basic and gang",
        pod_group("both", schedulingPolicy={"basic": {}, "gang": {"minCount": 2}}),
        "spec.schedulingPolicy: Invalid value: exactly one of basic or gang must be set",
    ),
    (
        "disruption mode all with a basic policy",
        pod_group("all", schedulingPolicy={"basic": {}}, disruptionMode={"all": {}}),
        "spec.disruptionMode: Invalid value: disruptionMode all needs schedulingPolicy gang",
    ),
    (
        "topology key with bad syntax",
        pod_group("key", schedulingConstraints={"topology": [{"key": "a/b/c"}]}),
        'spec.schedulingConstraints.topology[0].key: Invalid value: "a/b/c"',
    ),
    (
        "two topology constraints",
        pod_group("two", schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}),
        "spec.schedulingConstraints.topology: Too many: 2: must have at most 1 item",
    ),
    (
        "an unknown preemption policy",
        pod_group("pre", preemptionPolicy="Sometimes"),
        'spec.preemptionPolicy: Unsupported value: "Sometimes"',
    ),
    (
        "a priority above the user range",
        pod_group("prio", priority=2_000_000_000),
        "spec.priority: Invalid value: 2000000000",
    ),
    (
        "composite minGroupCount below 1",
        {
            "apiVersion": API,
            "kind": "CompositePodGroup",
            "metadata": {"name": "cpg"},
            "spec": {
                "workloadRef": {"workloadName": "w", "templateName": "t"},
                "schedulingPolicy": {"gang": {"minGroupCount": 0}},
            },
        },
        "spec.schedulingPolicy.gang.minGroupCount: Invalid value: 0",
    ),
    (
        "a template name used twice across the tree",
        {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {"name": "twice"},
            "spec": {
                "compositePodGroupTemplates": [
                    {"name": "top", "schedulingPolicy": {"basic": {}}, "podGroupTemplates": [template("top")]}
                ]
            },
        },
        "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name: template name 'top' is used twice",
    ),
    (
        "templates with different priorities",
        {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {"name": "prios"},
            "spec": {"podGroupTemplates": [template("a", priority=1), template("b", priority=2)]},
        },
        "spec.podGroupTemplates[1]: priorityClassName None and priority 2 differ from podGroupTemplates[0]'s",
    ),
]


@pytest.mark.parametrize(("kind", "body", "words"), CRDS, ids=[c[0] for c in CRDS])
def test_a_bad_hand_written_object_is_refused_naming_the_field(
    ns: Namespace, kind: str, body: dict[str, Any], words: str
) -> None:
    assert words in refusal(ns, body)


def test_a_job_labelled_false_is_left_alone_and_an_edit_adding_a_misspelt_key_is_refused(
    ns: Namespace,
) -> None:
    left_alone = gpu_job(
        "alone", 1, labels={"phalanx.dev/managed": "false"}, annotations={"phalanx.dev/x": "y"}
    )
    created = ns.create(left_alone)
    assert "schedulingGates" not in created["spec"]["template"]["spec"]
    ns.create(managed_job("fine", 1))
    with pytest.raises(ApiError) as refused:
        ns.patch_job("fine", {"metadata": {"annotations": {"phalanx.dev/min-cont": "1"}}})
    message = str(json.loads(refused.value.body)["message"])
    assert "metadata.annotations[phalanx.dev/min-cont]: unknown Phalanx annotation; did you mean " in message


# ---------------------------------------------------------------------- knowable later: condition + one event
def job_events(ns: Namespace, job: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in ns.events()
        if e["involvedObject"]["kind"] == "Job"
        and e["involvedObject"]["name"] == job
        and e["reason"] == reason
    ]


def one_event(ns: Namespace, job: str, reason: str) -> dict[str, Any]:
    """Exactly one event of `reason` on the Job, and it stays one (not one per scheduling pass)."""
    (event,) = wait_for(f"a {reason} event on {job}", lambda: job_events(ns, job, reason), timeout=60)
    hold(
        f"one {reason} event on {job}",
        lambda: len(found := job_events(ns, job, reason)) == 1 and (found[0].get("count") or 1) == 1,
        seconds=5,
    )
    assert event["type"] == "Warning"
    return event


def test_a_priority_class_that_does_not_exist_is_said_on_the_group_and_in_one_event(
    ns: Namespace, phalanx: OperatorProcess
) -> None:
    ns.create(gpu_job("classless", 2, labels=MANAGED, priority_class="no-such-class"))
    cond = wait_condition(ns, "classless", "Admitted", "False", "PriorityClassNotFound")
    assert cond["message"].startswith(
        "spec.template.spec.priorityClassName: PriorityClass 'no-such-class' does not exist"
    )
    event = one_event(ns, "classless", "PriorityClassNotFound")
    assert event["message"] == cond["message"]
    # Kube's own word for it: the Job controller's pods are refused by the Priority admission plugin.
    failed = wait_for(
        "the Job controller's FailedCreate", lambda: job_events(ns, "classless", "FailedCreate")
    )
    assert "no PriorityClass with name no-such-class was found" in failed[0]["message"]
    assert phalanx.proc is not None and phalanx.proc.poll() is None


def test_a_topology_key_no_node_carries_is_said_with_a_did_you_mean(
    ns: Namespace, phalanx: OperatorProcess
) -> None:
    key = "oci.oraclecloud.com/rdma.network_block"  # the nodes carry ..._block_id
    ns.create(managed_job("nokey", 2, key))
    cond = wait_condition(ns, "nokey", "Admitted", "False", "Unschedulable")
    assert f"0/0 placements are available: no node has the label {key}" in cond["message"]
    assert cond["message"].endswith(f"; did you mean {NB_KEY} (on 8 node(s))?")
    assert one_event(ns, "nokey", "Unschedulable")["message"] == cond["message"]
    assert phalanx.proc is not None and phalanx.proc.poll() is None


def test_requests_no_node_can_ever_satisfy_are_said_once(ns: Namespace, phalanx: OperatorProcess) -> None:
    body = managed_job("huge", 2)
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "9"
    ns.create(body)
    cond = wait_condition(ns, "huge", "Admitted", "False", "Unschedulable")
    assert (
        "it can never fit in this cluster: with every node empty the largest domain holds 0 of the 2 pods"
        in (cond["message"])
    )
    assert "Insufficient nvidia.com/gpu" in cond["message"]
    assert one_event(ns, "huge", "Unschedulable")["message"] == cond["message"]
    assert condition(group_of(ns, "huge"), "PodGroupInitiallyScheduled") is not None
    assert phalanx.proc is not None and phalanx.proc.poll() is None
