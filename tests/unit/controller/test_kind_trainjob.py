"""TrainJob: the gate webhook carries the managed label and the Phalanx annotations to the JobSet Trainer
makes (a runtime patch of Phalanx's own); that JobSet's unit names the TrainJob as its owner, is requeued by
suspending the TrainJob and resumed through it."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import kopf
import pytest
from testkit import (
    NB,
    NOW,
    StaticContext,
    job_body,
    jobset_body,
    jobset_pod,
    lws_body,
    made_groups,
    owner_cluster,
)

from phalanx.api.admission_checks import (
    KUEUE_WRITTEN_TAS,
    TAS_ANNOTATIONS,
    runtime_tas_problems,
    tas_problems,
)
from phalanx.api.trainjob import PATCH_MANAGER
from phalanx.controller.kinds.common import SPLIT_WHILE_DELETING
from phalanx.controller.kinds.jobset import JobSetKind
from phalanx.controller.kinds.lws import LwsKind
from phalanx.controller.kinds.trainjob import TrainJobKind
from phalanx.controller.model.actions import (
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    DeletePod,
    PostEvent,
    ReleasePod,
    ResumeJob,
)
from phalanx.controller.plan import plan
from phalanx.controller.watch.webhooks import Webhooks


def trainjob(
    name: str = "llm", *, suspend: bool = False, requeued: str = "", patches: Any = None
) -> dict[str, Any]:
    annotations = {"phalanx.dev/topology-key": NB}
    if requeued:
        annotations["phalanx.dev/requeued"] = requeued
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}, "suspend": suspend}
    if patches is not None:
        spec["runtimePatches"] = patches
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-tj-{name}",
            "labels": {"phalanx.dev/managed": "true"},
            "annotations": annotations,
        },
        "spec": spec,
    }


def its_jobset(trainjob_name: str = "llm", **kw: Any) -> dict[str, Any]:
    body = jobset_body(trainjob_name, (("node", 1, 4),), annotations={"phalanx.dev/topology-key": NB}, **kw)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": trainjob_name,
            "uid": f"uid-tj-{trainjob_name}",
            "controller": True,
        }
    ]
    return body


def test_the_gate_adds_phalanxs_runtime_patch_keeping_the_others() -> None:
    gate = Webhooks(StaticContext()).gate_owner(TrainJobKind())
    other = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
    patch = kopf.Patch()
    gate(body=kopf.Body(trainjob(patches=[other])), patch=patch)
    patches = patch["spec"]["runtimePatches"]
    assert patches[0] == other
    ours = patches[1]
    assert ours["manager"] == PATCH_MANAGER
    metadata = ours["trainingRuntimeSpec"]["template"]["metadata"]
    assert metadata["labels"] == {"phalanx.dev/managed": "true"}
    assert metadata["annotations"] == {"phalanx.dev/topology-key": NB}
    again = kopf.Patch()
    gate(body=kopf.Body(trainjob(patches=patches)), patch=again)
    assert not again, "already patched: nothing to add"


def test_its_jobset_is_one_gang_that_names_the_trainjob() -> None:
    pods = [jobset_pod("llm", "node", 0, i) for i in range(4)]
    state = owner_cluster([("TrainJob", trainjob()), ("JobSet", its_jobset())], pods)
    (unit,) = [u for u in state.units if u.tree is not None]
    assert unit.owner is not None and unit.owner.kind == "TrainJob" and unit.owner.ref.name == "llm"
    result = plan(state, NOW)
    assert len([a for a in result.actions if isinstance(a, ReleasePod)]) == 4
    events = {(e.involved.kind, e.reason) for e in result.actions if isinstance(e, PostEvent)}
    assert {("TrainJob", "Admitted"), ("TrainJob", "PodGroupCreated")} <= events
    assert not {kind for kind, _ in events} & {"JobSet"}  # said on what the user made
    # kubectl get podgroups' OWNER column: the TrainJob, on every object made for its JobSet.
    made = [a.workload for a in result.actions if isinstance(a, CreateWorkload)]
    made += [a.group for a in result.actions if isinstance(a, CreateCompositePodGroup)]
    made += [a.pod_group for a in result.actions if isinstance(a, CreatePodGroup)]
    assert len(made) == 3
    assert {m.metadata["annotations"]["phalanx.dev/owner"] for m in made} == {"TrainJob/llm"}


def test_the_jobset_of_a_trainjob_being_deleted_makes_nothing_again_and_releases_nothing() -> None:
    """Its TrainJob's deletion (foreground, or held by a finalizer) is seen before its JobSet's, and the
    garbage collector may take the JobSet's groups before the JobSet's own deletion reaches the cache: the
    JobSet then makes none again, nor lets its gated pods go."""
    pods = [jobset_pod("llm", "node", 0, i) for i in range(4)]
    going = trainjob()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for owner, expected in ((trainjob(), 1), (going, 0)):
        state = owner_cluster([("TrainJob", owner), ("JobSet", its_jobset())], pods)
        result = plan(state, NOW)
        made = [a for a in result.actions if isinstance(a, CreateWorkload)]
        released = [a for a in result.actions if isinstance(a, ReleasePod)]
        assert (len(made), len(released)) == (expected, 4 * expected)


@pytest.mark.parametrize(("running", "deleted"), [(4, 0), (3, 3)])
def test_the_gang_of_a_trainjob_being_deleted_that_runs_short_is_taken_down_and_told_on_the_trainjob(
    running: int, deleted: int
) -> None:
    """A finalizer holds the TrainJob being deleted, and with it its JobSet, whose pods run on until the
    garbage collector takes them. Whole, they are left alone; short of one (its node died), the others are
    deleted at once (nothing places pods for an owner being deleted) and the TrainJob says why."""
    gated = [jobset_pod("llm", "node", 0, i) for i in range(4)]
    first = plan(owner_cluster([("TrainJob", trainjob()), ("JobSet", its_jobset())], gated), NOW)
    nodes = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    groups = made_groups(first)
    pods = [
        jobset_pod("llm", "node", 0, i, node=nodes[f"llm-node-0-{i}"], gated=False) for i in range(running)
    ]
    going = trainjob()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    going["metadata"]["finalizers"] = ["example.com/keep"]
    result = plan(owner_cluster([("TrainJob", going), ("JobSet", its_jobset())], pods, groups=groups), NOW)
    assert len([a for a in result.actions if isinstance(a, DeletePod)]) == deleted
    told = [a for a in result.actions if isinstance(a, PostEvent) and a.reason == SPLIT_WHILE_DELETING]
    assert [(e.involved.kind, e.involved.name) for e in told] == ([("TrainJob", "llm")] if deleted else [])
    assert not [a for a in result.actions if isinstance(a, (CreateWorkload, CreatePodGroup, ReleasePod))]


def test_a_requeued_trainjob_is_resumed_through_the_trainjob_once_its_pods_are_gone() -> None:
    state = owner_cluster(
        [
            ("TrainJob", trainjob(suspend=True, requeued="preempted by podgroup x")),
            ("JobSet", its_jobset(suspend=True)),
        ]
    )
    result = plan(state, NOW)
    assert [(a.job.kind, a.job.name) for a in result.actions if isinstance(a, ResumeJob)] == [
        ("TrainJob", "llm")
    ]


def test_bad_jobset_annotations_on_a_trainjob_are_refused_at_its_creation() -> None:
    """They would reach its JobSet, whose creation by Trainer the JobSet webhook would then refuse: the user
    would see it only in Trainer's log. Refused where they were written, naming the field."""
    gate = Webhooks(StaticContext()).gate_owner(TrainJobKind())
    body = trainjob()
    body["metadata"]["annotations"]["phalanx.dev/topology-mode"] = "sometimes"
    try:
        gate(body=kopf.Body(body), patch=kopf.Patch())
    except kopf.AdmissionError as e:
        assert "metadata.annotations[phalanx.dev/topology-mode]: 'sometimes' is not one of" in str(e)
    else:
        raise AssertionError("a bad topology mode on a TrainJob was let through")


def test_its_jobsets_gang_keeps_its_size_when_its_pod_group_was_edited_and_the_trainjob_is_told() -> None:
    """validate-podgroup fails open: a minCount edited with Phalanx away is said on the TrainJob, not used."""
    import dataclasses

    from testkit import made_groups

    from phalanx.api.scheduling import SchedulingPolicy
    from phalanx.controller.model.records import PodGroupRecord

    pods = [jobset_pod("llm", "node", 0, i) for i in range(4)]
    owners = [("TrainJob", trainjob()), ("JobSet", its_jobset())]
    first = plan(owner_cluster(owners, pods, busy=range(1, 9)), NOW)
    edited = SchedulingPolicy.of_gang(1)
    groups = [
        dataclasses.replace(g, spec=g.spec.model_copy(update={"scheduling_policy": edited}))
        if isinstance(g, PodGroupRecord)
        else g
        for g in made_groups(first)
    ]
    result = plan(owner_cluster(owners, pods, groups=groups, busy=range(2, 9)), NOW)
    assert not [a for a in result.actions if isinstance(a, ReleasePod)]  # one free node: not 1 of 4
    (said,) = [e for e in result.actions if isinstance(e, PostEvent) and e.reason == "ImmutableChangeIgnored"]
    assert (said.involved.kind, said.involved.name) == ("TrainJob", "llm")
    assert (
        "spec.schedulingPolicy.gang.minCount 1 differs from 4, which the JobSet's spec gives" in said.message
    )


def _ours() -> dict[str, Any]:
    """Phalanx's runtime patch entry, as the gate writes it for `trainjob()`."""
    patch = kopf.Patch()
    Webhooks(StaticContext()).gate_owner(TrainJobKind())(body=kopf.Body(trainjob()), patch=patch)
    return dict(patch["spec"]["runtimePatches"][-1])


KUEUE = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
ENTRY_KEPT = "spec.runtimePatches: the entry of manager phalanx.dev/manager cannot be removed or changed"


@pytest.mark.parametrize(
    ("before", "after", "label", "refused"),
    [
        (["ours"], [], "true", ENTRY_KEPT),
        (["kueue", "ours"], ["kueue"], "true", ENTRY_KEPT),
        (["ours"], ["ours-changed"], "true", ENTRY_KEPT),
        (["ours"], ["kueue", "ours"], "true", None),  # another manager's entry added: fine
        (["ours"], [], "false", None),  # leaving Phalanx
        ([], [], "true", None),  # never had it (made around the webhook): nothing to keep
    ],
)
def test_phalanxs_runtime_patch_entry_stays_on_a_managed_trainjob(
    before: list[str], after: list[str], label: str, refused: str | None
) -> None:
    ours = _ours()
    changed = {**ours, "trainingRuntimeSpec": {"template": {"metadata": {"labels": {}}}}}
    entries = {"ours": ours, "kueue": KUEUE, "ours-changed": changed}
    old = trainjob(suspend=True, patches=[entries[e] for e in before])
    new = trainjob(suspend=True, patches=[entries[e] for e in after])
    new["metadata"]["labels"]["phalanx.dev/managed"] = label
    validate = Webhooks(StaticContext()).validate_owner(TrainJobKind())
    if refused is None:
        validate(body=kopf.Body(new), old=kopf.Body(old))
        return
    with pytest.raises(kopf.AdmissionError) as error:
        validate(body=kopf.Body(new), old=kopf.Body(old))
    assert str(error.value).startswith(refused), error.value


# ---------------------------------------------------------------------- Kueue's TAS through Trainer
TAS = "kueue.x-k8s.io/podset-required-topology"
BOTH = "Kueue's Topology-Aware Scheduling and Phalanx would both place these pods"
RUNTIME_FIELD = "spec.template.spec.replicatedJobs[0].template.spec.template.metadata.annotations"


def runtime(
    kind: str = "ClusterTrainingRuntime", name: str = "torch-distributed", annotations: Any = None
) -> dict[str, Any]:
    """A Trainer runtime of one replicated Job `node`, its pod template annotated with `annotations`."""
    template: dict[str, Any] = {"spec": {"containers": [{"name": "node", "image": "x"}]}}
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, **({"namespace": "ml"} if kind == "TrainingRuntime" else {})},
        "spec": {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": template}}}]}
            }
        },
    }


def tas_patch(manager: str = "example.com/placement", key: str = TAS) -> dict[str, Any]:
    """A runtime patch entry whose replicated Job `node` puts `key` on its pod template."""
    pod = {"metadata": {"annotations": {key: NB}}}
    rjob = {"name": "node", "template": {"spec": {"template": pod}}}
    return {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [rjob]}}}}


def _create_review(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "object": body, "userInfo": {"username": "alice"}},
    }


CLUSTER_PATH = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed"
NAMESPACED_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainingruntimes/torch-distributed"


@pytest.mark.parametrize(
    ("ref_kind", "served", "patches", "label", "asked", "refused", "warned"),
    [
        # Its ClusterTrainingRuntime (runtimeRef's default kind) puts Kueue's TAS on its pods: refused at the
        # TrainJob's creation, naming the runtime and the runtime's field (before: let through, and Trainer's
        # every JobSet creation refused by the JobSet webhook).
        (
            None,
            (200, {TAS: NB}),
            None,
            "true",
            [CLUSTER_PATH],
            f"spec.runtimeRef: ClusterTrainingRuntime torch-distributed has {RUNTIME_FIELD}[{TAS}], which "
            "Kubeflow Trainer puts on this TrainJob's pods: " + BOTH,
            None,
        ),
        # A TrainingRuntime is read in the TrainJob's namespace.
        (
            "TrainingRuntime",
            (200, {"kueue.x-k8s.io/podset-slice-size": "2"}),
            None,
            "true",
            [NAMESPACED_PATH],
            "spec.runtimeRef: TrainingRuntime torch-distributed has "
            f"{RUNTIME_FIELD}[kueue.x-k8s.io/podset-slice-size]",
            None,
        ),
        # A runtime patch of the TrainJob's own puts it there: refused naming the entry's field and manager.
        (
            None,
            (200, None),
            [tas_patch()],
            "true",
            [CLUSTER_PATH],
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template"
            f".metadata.annotations[{TAS}]: " + BOTH,
            None,
        ),
        # Other annotations on the runtime: gated as before (Phalanx's runtime patch added).
        (None, (200, {"example.com/other": "x"}), None, "true", [CLUSTER_PATH], None, None),
        # No such runtime: Trainer's webhook refuses the TrainJob; Phalanx lets it through.
        (None, (404, None), None, "true", [CLUSTER_PATH], None, None),
        # The API cannot say: let through (its JobSet's webhook still refuses), and said.
        (
            None,
            (500, None),
            None,
            "true",
            [CLUSTER_PATH],
            None,
            "spec.runtimeRef: Phalanx could not read ClusterTrainingRuntime torch-distributed",
        ),
        # Opted out: not Phalanx's, nothing read.
        (None, (200, {TAS: NB}), None, "false", [], None, None),
    ],
)
async def test_kueue_tas_through_a_trainjobs_runtime_is_refused_at_the_trainjobs_creation(
    ref_kind: str | None,
    served: tuple[int, Any],
    patches: Any,
    label: str,
    asked: list[str],
    refused: str | None,
    warned: str | None,
) -> None:
    """The gate-trainjob webhook as registered, over a real API client: the runtime a TrainJob refers to is
    read live (the cache has not seen it), and Kueue's TAS annotations on its pod templates or in the
    TrainJob's runtime patches are refused with the TrainJob: nothing is made, queued or reserved for it."""
    body = trainjob(patches=patches)
    body["metadata"]["labels"]["phalanx.dev/managed"] = label
    if ref_kind:
        body["spec"]["runtimeRef"]["kind"] = ref_kind
    answered, seen = await _review_over_an_api(body, served)
    assert answered is not None
    response = answered["response"]
    assert seen == asked
    if refused is None:
        assert response["allowed"], response
        assert ("patch" in response) is (label == "true")  # Phalanx's runtime patch, when managed
    else:
        assert not response["allowed"]
        message = response["status"]["message"]
        assert message.startswith(refused), message
        assert "phalanx.dev/managed" in message and "phalanx.dev/topology-key" in message
    said = response.get("warnings") or []
    assert [w for w in said if warned and w.startswith(warned)] == ([said[0]] if warned else []), said


async def _review_over_an_api(
    body: dict[str, Any], served: tuple[int, Any], cached: Iterable[tuple[str, dict[str, Any]]] = ()
) -> tuple[dict[str, Any] | None, list[str]]:
    """The gate-trainjob webhook's answer to `body`'s creation, as registered, over a real API client whose
    server answers a runtime's GET with `served` (status, the annotations of its pod template), the cache
    having seen the runtime events `cached` (("ADDED" or "DELETED", the runtime)); and the paths asked."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from phalanx.controller.apply.kube import Kube
    from phalanx.controller.watch.registry import reviewers
    from phalanx.controller.watch.review import answer
    from phalanx.kubeclient import ApiClient, Credentials

    status, annotations = served
    seen: list[str] = []

    async def get_runtime(request: web.Request) -> web.Response:
        seen.append(request.path)
        kind = "TrainingRuntime" if "/namespaces/" in request.path else "ClusterTrainingRuntime"
        if status == 404:
            details = {"name": request.match_info["name"], "kind": kind.lower() + "s"}
            return web.json_response({"kind": "Status", "code": 404, "details": details}, status=404)
        if status != 200:
            return web.json_response({"kind": "Status", "code": status}, status=status)
        return web.json_response(runtime(kind, request.match_info["name"], annotations))

    app = web.Application()
    app.router.add_get("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/{name}", get_runtime)
    app.router.add_get(
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainingruntimes/{name}", get_runtime
    )
    server = TestServer(app)
    await server.start_server()
    context = StaticContext()
    for event, obj in cached:
        (context.cache.delete if event == "DELETED" else context.cache.upsert)(obj["kind"], obj)
    try:
        async with ApiClient(Credentials(server=str(server.make_url("")).rstrip("/"), source="test")) as api:
            context.kube = Kube(api)
            return await answer(_create_review(body), reviewers(context)["gate-trainjob"]), seen
    finally:
        await server.close()


ADDED, DELETED = "ADDED", "DELETED"


@pytest.mark.parametrize(
    ("cached", "served", "asked", "refused"),
    [
        # Seen without Kueue's TAS: let through, nothing read (the API, behind, would refuse it).
        ([(ADDED, runtime())], {TAS: NB}, [], False),
        # Seen with: read live before refusing, refused ...
        ([(ADDED, runtime(annotations={TAS: NB}))], {TAS: NB}, [CLUSTER_PATH], True),
        # ... or let through, the runtime fixed a moment ago (its edit not yet watched).
        ([(ADDED, runtime(annotations={TAS: NB}))], None, [CLUSTER_PATH], False),
        # A TrainingRuntime of that name is not the ClusterTrainingRuntime the TrainJob names: read live.
        ([(ADDED, runtime("TrainingRuntime"))], {TAS: NB}, [CLUSTER_PATH], True),
        # Seen, then deleted: not known any more, read live.
        ([(ADDED, runtime()), (DELETED, runtime())], {TAS: NB}, [CLUSTER_PATH], True),
    ],
)
async def test_a_runtime_the_cache_has_seen_without_kueue_tas_is_not_read_on_the_reviews_path(
    cached: list[tuple[str, dict[str, Any]]], served: Any, asked: list[str], refused: bool
) -> None:
    """The runtimes are watched (cache/digests.py keeps each one's Kueue TAS problems), so a TrainJob whose
    runtime has none is let through with nothing read on its review's path; one the cache has not seen (made
    a moment ago), or saw with problems, is read live, so no TrainJob is refused for an edit not yet seen.
    `served`: the annotations of the runtime the API serves."""
    answered, seen = await _review_over_an_api(trainjob(), (200, served), cached)
    assert answered is not None
    assert answered["response"]["allowed"] is not refused, answered["response"]
    assert seen == asked


@pytest.mark.parametrize("annotation", TAS_ANNOTATIONS)
def test_every_kueue_tas_annotation_in_a_runtime_or_a_runtime_patch_is_found(annotation: str) -> None:
    (in_runtime,) = runtime_tas_problems(runtime(annotations={annotation: "x"}))
    assert in_runtime.startswith(
        f"spec.runtimeRef: ClusterTrainingRuntime torch-distributed has {RUNTIME_FIELD}[{annotation}]"
    )
    assert f"refer to a runtime without {annotation} (or remove it from ClusterTrainingRuntime" in in_runtime
    kueues = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}}
    (in_patch,) = tas_problems("TrainJob", trainjob(patches=[kueues, tas_patch(key=annotation)]))
    assert in_patch.startswith("spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[0]")
    assert f"remove {annotation} from this runtime patch (manager example.com/placement)" in in_patch
    assert not runtime_tas_problems(runtime(annotations={"example.com/other": "x"}))
    assert not tas_problems("TrainJob", trainjob(patches=[kueues, _ours()]))


TRAINER_EVENT = 950  # Trainer's TrainJobResourcesCreationFailed message: its error, cut at 950 characters
TRAINER_PREFIX = (  # what comes before the webhook's answer there
    "TrainJob resources reconciliation failed: "
    'admission webhook "gate-jobset.phalanx.dev" denied the request: '
)


def test_trainers_jobset_refused_for_kueue_tas_says_where_it_came_from_within_trainers_event() -> None:
    """A JobSet Trainer makes (a runtime edited after the TrainJob's creation, say) is still refused, and the
    refusal, which the user reads in the TrainJob's events, names the TrainJob and where to remove the
    annotation, whole within what Trainer's event keeps. A JobSet of the user's is refused as before."""
    from phalanx.controller.kinds.jobset import JobSetKind

    gate = Webhooks(StaticContext()).gate_owner(JobSetKind())
    for body, said in (
        (its_jobset(), "this JobSet is Kubeflow Trainer's for TrainJob llm"),
        (jobset_body("own"), ""),
    ):
        pod_template = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod_template["metadata"] = {"annotations": {TAS: NB}}
        with pytest.raises(kopf.AdmissionError) as error:
            gate(body=kopf.Body(body), patch=kopf.Patch())
        message = str(error.value)
        assert message.startswith(
            f"spec.replicatedJobs[0].template.spec.template.metadata.annotations[{TAS}]: {BOTH}"
        )
        if said:
            assert said in message
            assert "(spec.runtimeRef) and spec.runtimePatches: remove" in message
            shown = f"{TRAINER_PREFIX}{message}"
            assert len(shown) <= TRAINER_EVENT, len(shown)
        else:
            assert message.endswith(f"remove {TAS}, or the label phalanx.dev/managed to let Kueue place it")


# ---------------------------------------------------------------------- Kueue's TAS added by an edit
def _annotated(body: dict[str, Any], template: dict[str, Any], key: str) -> dict[str, Any]:
    template.setdefault("metadata", {}).setdefault("annotations", {})[key] = NB
    return body


def _edits() -> dict[str, tuple[Any, Any, Any]]:
    """kind -> (its validating UPDATE handler, a managed object, the same with a Kueue TAS annotation)."""
    job = job_body("train", 4, annotations={"phalanx.dev/topology-key": NB}, suspend=True)
    tas_job = job_body("train", 4, annotations={"phalanx.dev/topology-key": NB}, suspend=True)
    _annotated(tas_job, tas_job["spec"]["template"], TAS)
    jobset = its_jobset(suspend=True)
    tas_jobset = its_jobset(suspend=True)
    _annotated(tas_jobset, tas_jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"], TAS)
    lws = lws_body()
    tas_lws = lws_body()
    _annotated(tas_lws, tas_lws["spec"]["leaderWorkerTemplate"]["workerTemplate"], TAS)
    hooks = Webhooks(StaticContext())
    return {
        "Job": (hooks.validate_job_update, job, tas_job),
        "JobSet": (hooks.validate_owner(JobSetKind()), jobset, tas_jobset),
        "LeaderWorkerSet": (hooks.validate_owner(LwsKind()), lws, tas_lws),
        "TrainJob": (
            hooks.validate_owner(TrainJobKind()),
            trainjob(suspend=True, patches=[_ours()]),
            trainjob(suspend=True, patches=[_ours(), tas_patch()]),
        ),
    }


@pytest.mark.parametrize("kind", ["Job", "JobSet", "LeaderWorkerSet", "TrainJob"])
@pytest.mark.parametrize("edit", ["adds", "keeps", "none"])
def test_an_edit_adding_kueue_tas_to_a_managed_owner_is_refused_naming_the_field(
    kind: str, edit: str
) -> None:
    """A suspended Job's or JobSet's template may change (Kueue's window; Trainer updates its JobSet from a
    runtime edited since), an LWS's any time, a TrainJob's runtime patches while suspended: an edit that adds
    a Kueue TAS annotation is refused as at creation, naming the field; one that keeps an annotation the
    object had (made around the webhook), or adds none, is not."""
    validate, plain, tas = _edits()[kind]
    old, new = {"adds": (plain, tas), "keeps": (tas, tas), "none": (plain, plain)}[edit]
    if edit != "adds":
        validate(body=kopf.Body(new), old=kopf.Body(old))
        return
    with pytest.raises(kopf.AdmissionError) as error:
        validate(body=kopf.Body(new), old=kopf.Body(old))
    assert BOTH in str(error.value) and f"[{TAS}]" in str(error.value), error.value
    if kind == "JobSet":
        assert "this JobSet is Kubeflow Trainer's for TrainJob llm" in str(error.value), error.value


@pytest.mark.parametrize("kind", ["Job", "JobSet", "LeaderWorkerSet"])
def test_the_tas_annotation_kueue_writes_itself_at_admission_is_not_refused_on_an_edit(kind: str) -> None:
    """Kueue writes podset-unconstrained-topology into the templates of an object it admits with a
    ResourceFlavor that has a topologyName ("implicit TAS"): refusing that edit would block its admission
    (the controller warns of the flavor instead). Refused at creation all the same."""
    validate, plain, _ = _edits()[kind]
    admitted = copy.deepcopy(plain)
    templates = {
        "Job": lambda b: [b["spec"]["template"]],
        "JobSet": lambda b: [r["template"]["spec"]["template"] for r in b["spec"]["replicatedJobs"]],
        "LeaderWorkerSet": lambda b: [b["spec"]["leaderWorkerTemplate"]["workerTemplate"]],
    }[kind]
    for template in templates(admitted):
        _annotated(admitted, template, KUEUE_WRITTEN_TAS)
    validate(body=kopf.Body(admitted), old=kopf.Body(plain))
    assert tas_problems(kind, admitted)  # what creation refuses
