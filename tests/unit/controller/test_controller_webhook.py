"""The Job webhook as a plain function: what it patches and what it rejects."""

from __future__ import annotations

import asyncio
import copy
import inspect
from typing import Any

import kopf
import pytest
from testkit import StaticContext

from phalanx.api.admission_checks import job_creation_problems
from phalanx.controller.watch.webhooks import Webhooks

CONTEXT = StaticContext()
HOOKS = Webhooks(CONTEXT)
gate_job = HOOKS.gate_job
validate_job_update = HOOKS.validate_job_update


def job(annotations: dict[str, str] | None = None, **pod_spec: Any) -> kopf.Body:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": 4,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "i"}], **pod_spec},
            },
        },
    }
    return kopf.Body(body)


def test_a_gang_job_gets_the_gate_keeping_what_it_had_and_no_label_in_its_template() -> None:
    patch = kopf.Patch()
    gate_job(body=job(schedulingGates=[{"name": "other.io/gate"}]), patch=patch)
    template = patch["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [
        {"name": "other.io/gate"},
        {"name": "phalanx.dev/admission"},
    ]
    # The opt-in label stays on the Job only: Job defaulting would copy it back from the template.
    assert "metadata" not in template


def test_a_basic_job_is_never_gated() -> None:
    patch = kopf.Patch()
    gate_job(body=job({"phalanx.dev/policy": "basic"}), patch=patch)
    assert not patch


def test_bad_annotations_are_rejected_with_every_problem_named() -> None:
    with pytest.raises(kopf.AdmissionError) as error:
        gate_job(body=job({"phalanx.dev/min-count": "9", "phalanx.dev/policy": "fifo"}), patch=kopf.Patch())
    assert "phalanx.dev/min-count" in str(error.value) and "phalanx.dev/policy" in str(error.value)


def test_a_gang_of_hand_bound_pods_is_rejected() -> None:
    with pytest.raises(kopf.AdmissionError, match=r"spec\.template\.spec\.nodeName: must not be set"):
        gate_job(body=job(nodeName="n1"), patch=kopf.Patch())


@pytest.mark.parametrize(
    ("annotations", "pod_spec", "template_meta"),
    [
        ({}, {}, {}),
        ({"phalanx.dev/topolgy-key": "x"}, {}, {}),
        ({"phalanx.dev/topology-mode": "auto"}, {}, {}),
        ({"phalanx.dev/topology-key": "zone", "phalanx.dev/topology-mode": "auto"}, {}, {}),
        ({"phalanx.dev/slice-size": "2"}, {}, {}),
        ({}, {"nodeName": "n1"}, {}),
        ({"phalanx.dev/policy": "basic"}, {"nodeName": "n1"}, {}),
        ({}, {"resourceClaims": [{"name": "gpu"}]}, {}),
        ({"phalanx.dev/policy": "basic"}, {"resourceClaims": [{"name": "gpu"}]}, {}),
        ({}, {}, {"annotations": {"phalanx.dev/topology-key": "zone"}}),
        ({}, {}, {"annotations": {"kueue.x-k8s.io/podset-required-topology": "zone"}}),
        ({"kueue.x-k8s.io/job-min-parallelism": "1", "phalanx.dev/min-count": "3"}, {}, {}),
        ({}, {"nodeName": "n1", "resourceClaims": [{"name": "gpu"}]}, {}),
    ],
)
def test_what_the_job_alone_shows_is_refused_by_the_webhook_and_by_job_creation_problems(
    annotations: dict[str, str], pod_spec: dict[str, Any], template_meta: dict[str, Any]
) -> None:
    """api/admission_checks.job_creation_problems (what `phalanx convert` runs) refuses exactly what gate_job
    refuses of a Job alone, in the same words (the webhook stops at its first refusing step: a gang's claims
    are said before its nodeName; convert says them all)."""
    body = job(annotations, **pod_spec)
    if template_meta:
        body["spec"]["template"]["metadata"].update(template_meta)
    problems = job_creation_problems(body)
    try:
        gate_job(body=body, patch=kopf.Patch())
    except kopf.AdmissionError as e:
        said = [str(e) == "; ".join(problems[:n]) for n in range(1, len(problems) + 1)]
        assert any(said), (problems, str(e))
    else:
        assert problems == []


def test_a_priority_class_that_does_not_exist_is_a_warning_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CONTEXT, "cache_primed", True)
    CONTEXT.cache.upsert("PriorityClass", {"metadata": {"name": "high"}, "value": 100})
    warnings: list[str] = []
    gate_job(body=job(priorityClassName="nope"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == [
        "spec.template.spec.priorityClassName: PriorityClass 'nope' does not exist: the Job controller "
        "cannot create the Job's pods until it does (the Priority admission plugin refuses them)"
    ]
    warnings.clear()
    gate_job(body=job(priorityClassName="high"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == []
    monkeypatch.setattr(CONTEXT, "cache_primed", False)  # an empty cache proves nothing
    gate_job(body=job(priorityClassName="nope"), patch=kopf.Patch(), warnings=warnings)
    assert warnings == []


# ---------------------------------------------------------------------- edits of slices and topology mode
NB = "oci.oraclecloud.com/rdma.network_block_id"
LB = "oci.oraclecloud.com/rdma.local_block_id"
SLICED = {
    "phalanx.dev/topology-key": NB,
    "phalanx.dev/slice-size": "2",
    "phalanx.dev/slice-topology-key": LB,
}


def indexed(annotations: dict[str, str], parallelism: int = 4) -> dict[str, Any]:
    body = dict(job(annotations))
    spec = {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed"}
    body["spec"] = {**body["spec"], **spec}
    return body


def edit(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    try:
        validate_job_update(body=kopf.Body(new), old=kopf.Body(old))
    except kopf.AdmissionError as e:
        return str(e)
    return None


@pytest.mark.parametrize(
    ("before", "after", "refused"),
    [
        # Slices added to, changed on or removed from a Job that exists.
        (
            {"phalanx.dev/topology-key": NB},
            SLICED,
            "metadata.annotations[phalanx.dev/slice-size]: cannot change from None to '2' after creation",
        ),
        (
            SLICED,
            {**SLICED, "phalanx.dev/slice-size": "4"},
            "metadata.annotations[phalanx.dev/slice-size]: cannot change from '2' to '4' after creation",
        ),
        (
            SLICED,
            {**SLICED, "phalanx.dev/slice-topology-key": "example.com/rack"},
            "metadata.annotations[phalanx.dev/slice-topology-key]: cannot change from "
            f"'{LB}' to 'example.com/rack' after creation",
        ),
        (
            SLICED,
            {"phalanx.dev/topology-key": NB},
            "metadata.annotations[phalanx.dev/slice-size]: cannot change from '2' to None after creation",
        ),
        # The topology mode, either way.
        (
            {"phalanx.dev/topology-key": LB},
            {"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"},
            "metadata.annotations[phalanx.dev/topology-mode]: cannot change from 'required' to 'preferred' "
            "after creation",
        ),
        (
            {"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "preferred"},
            {"phalanx.dev/topology-key": LB},
            "metadata.annotations[phalanx.dev/topology-mode]: cannot change from 'preferred' to 'required' "
            "after creation",
        ),
    ],
)
def test_slices_and_the_topology_mode_are_fixed_once_the_job_exists(
    before: dict[str, str], after: dict[str, str], refused: str
) -> None:
    message = edit(indexed(before), indexed(after))
    assert message is not None and refused in message, message


def test_edits_that_change_no_fixed_setting_pass() -> None:
    # The default written out is no change; nor is Phalanx's own suspend of a sliced Job.
    assert (
        edit(
            indexed({"phalanx.dev/topology-key": LB}),
            indexed({"phalanx.dev/topology-key": LB, "phalanx.dev/topology-mode": "required"}),
        )
        is None
    )
    suspended = indexed(SLICED)
    suspended["spec"] = {**suspended["spec"], "suspend": True}
    assert edit(indexed(SLICED), suspended) is None


def test_a_sliced_jobs_parallelism_is_fixed_but_a_plain_gangs_may_change() -> None:
    message = edit(indexed(SLICED), indexed(SLICED, parallelism=8))
    assert message is not None and message.startswith("spec.parallelism: cannot change from 4 to 8"), message
    plain = {"phalanx.dev/topology-key": NB}
    assert edit(indexed(plain), indexed(plain, parallelism=2)) is None


def test_a_sliced_job_with_waves_is_refused_at_creation() -> None:
    """Issue 16: completions beyond parallelism left the later waves' indices outside every slice."""
    waves = indexed(SLICED)
    waves["spec"] = {**waves["spec"], "completions": 8}
    with pytest.raises(kopf.AdmissionError) as refused:
        gate_job(body=kopf.Body(waves), patch=kopf.Patch())
    assert str(refused.value).startswith(
        "spec.completions: 8 differs from parallelism 4: a sliced Job is placed as one tree of its "
        "parallelism's slices, once, so the indices of later waves would belong to no slice"
    )
    gate_job(body=kopf.Body(indexed(SLICED)), patch=kopf.Patch())  # one wave: fine


def test_numeric_annotations_take_ascii_digits_only() -> None:
    for annotation in ("phalanx.dev/slice-size", "phalanx.dev/min-count"):
        body = indexed({**SLICED, annotation: "\u0662"})  # ARABIC-INDIC DIGIT TWO: isdigit() says yes
        with pytest.raises(kopf.AdmissionError) as refused:
            gate_job(body=kopf.Body(body), patch=kopf.Patch())
        assert str(refused.value).startswith(f"metadata.annotations[{annotation}]: "), refused.value


def test_every_webhook_handler_runs_in_kopfs_loop_not_its_thread_pool() -> None:
    """Kopf runs a plain function in a worker thread (a hand-off and a wait for the GIL per review): each
    handler is registered as a coroutine function, and answers as the plain one does."""
    from phalanx.controller.process.runtime import Runtime

    handlers = {h.id: h for h in Runtime().registry()._webhooks.get_all_handlers()}
    assert handlers and all(inspect.iscoroutinefunction(h.fn) for h in handlers.values())
    gate = next(h for h in handlers.values() if h.id.startswith("gate-job"))
    patch = kopf.Patch()
    asyncio.run(gate.fn(body=job(), patch=patch, warnings=[]))
    assert patch["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "phalanx.dev/admission"}]
    with pytest.raises(kopf.AdmissionError, match=r"spec\.template\.spec\.nodeName"):
        asyncio.run(gate.fn(body=job(nodeName="n1"), patch=kopf.Patch(), warnings=[]))


def test_the_slice_key_warning_follows_the_nodes_labels() -> None:
    """A slice key no finer than the Job's key on the nodes now is said at creation (admission_checks.py
    slice_key_warning); the webhook keeps its answer per labelling of the nodes, so a relabel is seen."""
    from testkit import LB, NB, node_body

    from phalanx.controller.cache.store import ClusterCache

    ctx = StaticContext(cache=ClusterCache(), cache_primed=True)
    hooks = Webhooks(ctx)
    for n in range(1, 9):
        ctx.cache.upsert("Node", node_body(n))
    coarse = {
        "phalanx.dev/topology-key": LB,
        "phalanx.dev/slice-size": "2",
        "phalanx.dev/slice-topology-key": NB,
    }

    def said() -> list[str]:
        warnings: list[str] = []
        body = job(coarse)
        body["spec"]["completionMode"] = "Indexed"  # type: ignore[index]
        hooks.gate_job(body=body, patch=kopf.Patch(), warnings=warnings)
        return [w for w in warnings if "slice-topology-key" in w]

    assert len(said()) == 1  # every local block lies inside one network block
    assert len(said()) == 1
    body = node_body(5)  # of nb-b, now in local block lb-a1, whose other nodes are in nb-a
    body["metadata"]["labels"][LB] = "lb-a1"
    ctx.cache.upsert("Node", body)
    assert said() == []


# ---------------------------------------------------------------------- edits of the managed label
def _review(
    webhook: str, old: dict[str, Any], new: dict[str, Any], ctx: StaticContext | None = None
) -> dict[str, Any]:
    """The answer to an UPDATE review, through the registered label filter (watch/review.py, as Kopf)."""
    from phalanx.controller.watch.registry import reviewers
    from phalanx.controller.watch.review import answer

    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "operation": "UPDATE",
            "object": new,
            "oldObject": old,
            "userInfo": {"username": "alice"},
        },
    }
    answered = asyncio.run(answer(review, reviewers(ctx or StaticContext())[webhook]))
    assert answered is not None
    response: dict[str, Any] = answered["response"]
    return response


def _labelled(body: dict[str, Any], value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(body)
    labels = out["metadata"].setdefault("labels", {})
    labels.pop("phalanx.dev/managed", None)
    if value is not None:
        labels["phalanx.dev/managed"] = value
    return out


def _owner_bodies() -> dict[str, dict[str, Any]]:
    from testkit import jobset_body, lws_body

    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "ml", "uid": "uid-tj", "labels": {}, "annotations": {}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    return {
        "validate-job": dict(job()),
        "validate-jobset": jobset_body(),
        "validate-leaderworkerset": lws_body(),
        "validate-trainjob": trainjob,
    }


BAD_VALUE = 'metadata.labels[phalanx.dev/managed]: "{}" is not one of true, false'


@pytest.mark.parametrize(
    ("webhook", "before", "after", "refused"),
    [
        # A misspelt value mid-admission would make plan() let go of the gang: refused, as at creation.
        ("validate-job", "true", "True", BAD_VALUE.format("True")),
        ("validate-job", "true", "yes", BAD_VALUE.format("yes")),
        ("validate-jobset", "true", "True", BAD_VALUE.format("True")),
        ("validate-leaderworkerset", "true", "yes", BAD_VALUE.format("yes")),
        ("validate-leaderworkerset", "true", "TRUE", BAD_VALUE.format("TRUE")),
        ("validate-trainjob", "true", "True", BAD_VALUE.format("True")),
        ("validate-job", "false", "ture", BAD_VALUE.format("ture")),
        # Leaving Phalanx stays allowed: false, or no label.
        ("validate-job", "true", "false", None),
        ("validate-job", "true", None, None),
        ("validate-jobset", "true", "false", None),
        ("validate-leaderworkerset", "true", "false", None),
        ("validate-leaderworkerset", "true", None, None),
        ("validate-trainjob", "true", None, None),
        # A value it already had (made around the webhook) does not block its other edits.
        ("validate-job", "True", "True", None),
        ("validate-leaderworkerset", "yes", "yes", None),
        # Fixing it is an edit like any other.
        ("validate-job", "True", "true", None),
    ],
)
def test_an_edit_of_the_managed_label_to_a_value_other_than_true_or_false_is_refused(
    webhook: str, before: str | None, after: str | None, refused: str | None
) -> None:
    body = _owner_bodies()[webhook]
    response = _review(webhook, _labelled(body, before), _labelled(body, after))
    if refused is None:
        assert response["allowed"] is True, response
    else:
        assert response["allowed"] is False and response["status"]["message"].startswith(refused), response


def test_a_job_labelled_false_is_left_alone_in_an_edit_as_at_its_creation() -> None:
    """false opts out in so many words: gate-job does not read its annotations, nor does validate-job."""
    old = _labelled(dict(job()), "false")
    new = _labelled(dict(job({"phalanx.dev/min-cont": "2"})), "false")
    assert _review("validate-job", old, new)["allowed"] is True
    assert _review("validate-job", _labelled(old, "true"), _labelled(new, "true"))["allowed"] is False


# ---------------------------------------------------------------------- edits of the PodGroups Phalanx made
def _made_groups() -> dict[str, dict[str, Any]]:
    """A PodGroup as Phalanx makes it for each kind of owner (api/builders.py, api/owned.py)."""
    from testkit import job_body

    from phalanx.api.builders import build_pod_group, build_sliced_objects
    from phalanx.api.job_layout import parse_job_layout
    from phalanx.api.job_policy import parse_job_policy
    from phalanx.api.owned import Leaf, Owner, build_group, build_tree

    train = job_body("train", 4)
    plain = build_pod_group(train, "train-wl", parse_job_policy(train), None, workload_uid="wl-uid")
    lws = Owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "ml", "serve", "uid-lws-serve")
    _, lws_group = build_group(lws, "0-r1", 4, topology_key=None, priority_class_name=None, priority=None)
    tree = {"topology_key": None, "leaf_topology_key": None, "priority_class_name": None, "priority": None}
    _, _, (subgroup, _) = build_tree(lws, [Leaf("s0", 2, "subgroup"), Leaf("s1", 2, "subgroup")], **tree)
    jobset = Owner("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "uid-js-train")
    _, _, (child,) = build_tree(jobset, [Leaf("workers-0", 4, "workers")], **tree)
    of_trainjob = Owner("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "llm", "uid-js-llm", "TrainJob/llm")
    _, _, (trainer,) = build_tree(of_trainjob, [Leaf("node-0", 4, "node")], **tree)
    sliced = job_body("sliced", 4, annotations=SLICED, indexed=True)
    sliced_policy = parse_job_policy(sliced)
    _, _, slices = build_sliced_objects(sliced, sliced_policy, parse_job_layout(sliced, sliced_policy), None)
    bodies = {
        "Job": plain,
        "Job slice": slices[0].to_api(),
        "LeaderWorkerSet": lws_group.to_api(),
        "LeaderWorkerSet subgroup": subgroup.to_api(),
        "JobSet": child.to_api(),
        "TrainJob": trainer.to_api(),
    }
    hand_made = copy.deepcopy(bodies["LeaderWorkerSet"])
    hand_made["metadata"] = {"name": "mine", "namespace": "ml"}
    bodies["hand-made"] = hand_made
    return bodies


def _min_count(body: dict[str, Any], count: int) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["spec"]["schedulingPolicy"]["gang"]["minCount"] = count
    return out


def _unlabelled(body: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["labels"] = {}
    return out


MIN_COUNT = "spec.schedulingPolicy.gang.minCount: PodGroup "
SLICE = "is a slice of the sliced Job sliced: its size (the Job's phalanx.dev/slice-size) and the rest"
FOLLOWS_JOB = "follows its Job train: set the Job's phalanx.dev/min-count annotation (or its parallelism)"


def _made_for(owner: str) -> str:
    kind = owner.partition("/")[0]
    return f"was made by Phalanx for {owner} and follows it: its gang size comes from the {kind}'s spec"


@pytest.mark.parametrize(
    ("group", "edit", "refused", "said"),
    [
        # A plain Job's PodGroup: only minCount, and only to the Job's (2, its min-count annotation).
        ("Job", lambda b: _min_count(b, 2), None, ""),
        ("Job", lambda b: _min_count(b, 1), MIN_COUNT + "train-", FOLLOWS_JOB),
        (
            "Job",
            lambda b: {**b, "spec": {**b["spec"], "priority": 5}},
            "spec.priority: PodGroup ",
            FOLLOWS_JOB,
        ),
        # A sliced Job's slice: its minCount is the slice size (2), never the Job's min-count (4).
        ("Job slice", lambda b: _min_count(b, 4), MIN_COUNT + "sliced-", SLICE),
        ("Job slice", lambda b: _min_count(b, 1), MIN_COUNT + "sliced-", SLICE),
        # The groups of the other owner kinds: their gang sizes come from the owner's spec.
        ("LeaderWorkerSet", lambda b: _min_count(b, 1), MIN_COUNT, _made_for("LeaderWorkerSet/serve")),
        (
            "LeaderWorkerSet",
            lambda b: _unlabelled(_min_count(b, 1)),
            MIN_COUNT,
            _made_for("LeaderWorkerSet/serve"),
        ),
        (
            "LeaderWorkerSet subgroup",
            lambda b: _min_count(b, 1),
            MIN_COUNT,
            _made_for("LeaderWorkerSet/serve"),
        ),
        ("JobSet", lambda b: _min_count(b, 1), MIN_COUNT, _made_for("JobSet/train")),
        ("TrainJob", lambda b: _min_count(b, 2), MIN_COUNT, _made_for("TrainJob/llm")),
        # A key added, even with a null value, is named.
        ("JobSet", lambda b: {**b, "spec": {**b["spec"], "x": None}}, "spec.x: PodGroup ", "JobSet/train"),
        # What stays allowed: metadata edits of Phalanx's groups, any edit of a hand-made one.
        ("LeaderWorkerSet", lambda b: {**b, "metadata": {**b["metadata"], "finalizers": ["x"]}}, None, ""),
        ("hand-made", lambda b: _min_count(b, 1), None, ""),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v.strip() else None,
)
def test_the_spec_of_a_pod_group_phalanx_made_follows_its_owner_whatever_its_kind(
    group: str, edit: Any, refused: str | None, said: str
) -> None:
    from testkit import job_body

    ctx = StaticContext()
    ctx.cache.upsert("Job", job_body("train", 4, annotations={"phalanx.dev/min-count": "2"}))
    ctx.cache.upsert("Job", job_body("sliced", 4, annotations=SLICED, indexed=True))
    old = _made_groups()[group]
    response = _review("validate-podgroup", old, edit(old), ctx)
    if refused is None:
        assert response["allowed"] is True, response
        return
    assert response["allowed"] is False, response
    message = response["status"]["message"]
    assert message.startswith(refused) and said in message, message


def test_no_field_of_a_composite_pod_groups_spec_can_change_so_no_webhook_guards_them() -> None:
    """The CompositePodGroups Phalanx makes (a sliced Job's, a JobSet's, a LeaderWorkerSet's) need no
    validating webhook: the CRD refuses every change of their spec (upstream freezes the whole policy,
    minGroupCount included). Should a field become mutable, a webhook would have to refuse its edits on
    Phalanx's composites, as validate-podgroup does on its PodGroups."""
    from pathlib import Path

    import yaml

    crd = yaml.safe_load(
        (Path(__file__).parents[3] / "crds" / "scheduling.phalanx.dev_compositepodgroups.yaml").read_text()
    )
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    frozen = {r["message"].removesuffix(" is immutable") for r in spec["x-kubernetes-validations"]}
    assert set(spec["properties"]) <= frozen, set(spec["properties"]) - frozen


# ---------------------------------------------------------------------- Phalanx's gate taken off in an edit
GATE_REMOVED = "{}.schedulingGates: phalanx.dev/admission cannot be removed while Phalanx manages the {}: "
JOB_POD = "spec.template.spec"
RJOB_POD = "spec.replicatedJobs[{}].template.spec.template.spec"
WORKER = "spec.leaderWorkerTemplate.workerTemplate.spec"
LEADER = "spec.leaderWorkerTemplate.leaderTemplate.spec"


def _spec_at(body: dict[str, Any], path: str) -> dict[str, Any]:
    """The pod spec at a field path (`spec.replicatedJobs[1].template.spec.template.spec`)."""
    node: Any = body["spec"]
    for part in path.removeprefix("spec.").replace("]", "").replace("[", ".").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node  # type: ignore[no-any-return]


def _gates(body: dict[str, Any], path: str) -> list[str]:
    return [g["name"] for g in _spec_at(body, path).get("schedulingGates") or []]


def _edit(body: dict[str, Any], *, drop: tuple[str, ...] = (), label: str | None = "true", **add: Any) -> Any:
    """The body edited: the Phalanx gate dropped from the pod specs at `drop`, the managed label set (None:
    removed), and `add`'s templates added (leaderTemplate)."""
    out = _labelled(body, label)
    for path in drop:
        spec = _spec_at(out, path)
        spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or [] if g["name"] != GATE]
    if "leader" in add:
        out["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = add["leader"]
    return out


GATE = "phalanx.dev/admission"


def _gate_cases() -> list[tuple[str, str, dict[str, Any], dict[str, Any], str | None, dict[str, bool]]]:
    from testkit import job_body, jobset_body, lws_body

    suspended = job_body(suspend=True)
    two_gates = copy.deepcopy(suspended)
    two_gates["spec"]["template"]["spec"]["schedulingGates"].insert(0, {"name": "other.io/gate"})
    only_other = copy.deepcopy(two_gates)
    only_other["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
    js = jobset_body(replicated=(("driver", 1, 1), ("workers", 2, 2)), suspend=True)
    lws = lws_body()
    leader = {"spec": {"containers": [{"name": "l", "image": "x"}]}}
    return [
        # Jobs (while suspended, the only time a Job's template may change) and JobSets: refused.
        (
            "job",
            "validate-job",
            suspended,
            _edit(suspended, drop=(JOB_POD,)),
            GATE_REMOVED.format(JOB_POD, "Job"),
            {},
        ),
        ("job-other-gate", "validate-job", two_gates, only_other, None, {JOB_POD: True}),
        ("job-false", "validate-job", suspended, _edit(suspended, drop=(JOB_POD,), label="false"), None, {}),
        (
            "job-unlabelled",
            "validate-job",
            suspended,
            _edit(suspended, drop=(JOB_POD,), label=None),
            None,
            {},
        ),
        (
            "job-labelled-late",
            "validate-job",
            job_body(suspend=True, labelled_late=True),
            _edit(job_body(labelled_late=True)),
            None,
            {JOB_POD: False},
        ),
        (
            "jobset",
            "validate-jobset",
            js,
            _edit(js, drop=(RJOB_POD.format(1),)),
            GATE_REMOVED.format(RJOB_POD.format(1), "JobSet"),
            {},
        ),
        (
            "jobset-false",
            "validate-jobset",
            js,
            _edit(js, drop=(RJOB_POD.format(0),), label="false"),
            None,
            {},
        ),
        # LeaderWorkerSets (templates change at any time): the gate is put back, the edit passes.
        ("lws", "regate-leaderworkerset", lws, _edit(lws, drop=(WORKER,)), None, {WORKER: True}),
        (
            "lws-leader",
            "regate-leaderworkerset",
            lws,
            _edit(lws, leader=leader),
            None,
            {LEADER: True, WORKER: True},
        ),
        ("lws-kept", "regate-leaderworkerset", lws, _edit(lws), None, {WORKER: True}),
        (
            "lws-never-gated",
            "regate-leaderworkerset",
            lws_body(gated=False),
            _edit(lws_body(gated=False)),
            None,
            {WORKER: False},
        ),
        (
            "lws-false",
            "regate-leaderworkerset",
            lws,
            _edit(lws, drop=(WORKER,), label="false"),
            None,
            {WORKER: False},
        ),
        ("lws-validated", "validate-leaderworkerset", lws, _edit(lws, drop=(WORKER,)), None, {}),
    ]


@pytest.mark.parametrize(
    ("webhook", "old", "new", "refused", "gated"),
    [case[1:] for case in _gate_cases()],
    ids=[case[0] for case in _gate_cases()],
)
def test_phalanxs_gate_taken_off_a_managed_owners_template_is_refused_or_put_back(
    webhook: str,
    old: dict[str, Any],
    new: dict[str, Any],
    refused: str | None,
    gated: dict[str, bool],
) -> None:
    import base64
    import json

    import jsonpatch

    response = _review(webhook, old, new)
    if refused is not None:
        assert response["allowed"] is False and response["status"]["message"].startswith(refused), response
        return
    assert response["allowed"] is True, response
    after = new
    if "patch" in response:
        after = jsonpatch.apply_patch(copy.deepcopy(new), json.loads(base64.b64decode(response["patch"])))
    for path, held in gated.items():
        assert (GATE in _gates(after, path)) is held, (path, _gates(after, path))
    if webhook.startswith("regate-") and not any(
        held and GATE not in _gates(new, p) for p, held in gated.items()
    ):
        assert "patch" not in response, "nothing to put back: no patch"
