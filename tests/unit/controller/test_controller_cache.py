"""The cache: which pods hold capacity where, and that late watch events never undo our own writes."""

from __future__ import annotations

from typing import Any

import pytest
import testkit
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.builders import build_pod_group
from phalanx.api.job_layout import parse_job_layout
from phalanx.api.job_policy import parse_job_policy
from phalanx.controller.cache.store import ClusterCache, Expectations
from phalanx.controller.kinds.job_record import JobRecord
from phalanx.controller.model.records import PodRecord

GATE = {"name": "phalanx.dev/admission"}


def pod(
    name: str,
    rv: int,
    *,
    node: str = "",
    gated: bool = False,
    selector: str = "",
    group: str = "",
    phase: str = "Pending",
    deleting: bool = False,
    job_uid: str = "job-1",
) -> dict[str, Any]:
    labels = {"batch.kubernetes.io/controller-uid": job_uid}
    if group:
        labels["phalanx.dev/pod-group"] = group
    spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    }
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [GATE]
    if selector:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": str(rv),
        "labels": labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "112", "memory": "2Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_capacity_is_held_by_bound_terminating_and_released_pods_only() -> None:
    records = {
        "bound": PodRecord.from_body(pod("a", 1, node="n1", phase="Running")),
        "terminating": PodRecord.from_body(pod("b", 1, node="n2", phase="Running", deleting=True)),
        "released": PodRecord.from_body(pod("c", 1, selector="n3", group="g")),
        "gated": PodRecord.from_body(pod("d", 1, gated=True, selector="", group="g")),
        "finished": PodRecord.from_body(pod("e", 1, node="n4", phase="Succeeded")),
        "someone's pin": PodRecord.from_body(pod("f", 1, selector="n5")),  # not ours: the scheduler decides
    }
    where = {k: r.usage_node for k, r in records.items()}
    assert where == {
        "bound": "n1",
        "terminating": "n2",
        "released": "n3",
        "gated": "",
        "finished": "",
        "someone's pin": "",
    }
    assert records["gated"].gated and records["released"].released
    assert records["bound"].requests == {"nvidia.com/gpu": 8}


def test_a_late_watch_event_does_not_undo_our_write() -> None:
    cache = ClusterCache()
    cache.upsert("Pod", pod("a", 5, gated=True))
    cache.upsert("Pod", pod("a", 7, selector="n1", group="g"), own_write=True)  # our release, written through
    cache.upsert("Pod", pod("a", 6, gated=True))  # the watch catching up with an older version
    assert cache.pods["ns/a"].released
    cache.upsert("Pod", pod("a", 7, selector="n1", group="g"))  # the watch shows our write: expectation met
    cache.upsert("Pod", pod("a", 8, node="n1", group="g"))  # later changes by others are taken as they come
    assert cache.pods["ns/a"].bound


def test_resource_versions_are_opaque_strings_never_compared_as_numbers() -> None:
    cache = ClusterCache()
    written = pod("a", 1, selector="n1", group="g")
    written["metadata"]["resourceVersion"] = "opaque-b"
    cache.upsert("Pod", written, own_write=True)
    older = pod("a", 1, gated=True)
    older["metadata"]["resourceVersion"] = "opaque-z"  # "greater" as text or number: still older than ours
    cache.upsert("Pod", older)
    assert cache.pods["ns/a"].released


def test_an_expectation_never_met_lapses_and_the_newest_held_back_event_wins() -> None:
    now = [0.0]
    cache = ClusterCache(clock=lambda: now[0])
    cache.upsert("Pod", pod("a", 7, selector="n1", group="g"), own_write=True)
    cache.upsert("Pod", pod("a", 9, node="n2", group="g"))  # a re-list past our write: held back for now
    assert cache.pods["ns/a"].released
    now[0] = 31.0
    cache.settle_expectations()
    assert cache.pods["ns/a"].node_name == "n2"


def test_expectations_alone() -> None:
    now = [0.0]
    expectations = Expectations(clock=lambda: now[0], ttl=5)
    expectations.wrote("Pod", "ns/a", "10")
    assert not expectations.admit("Pod", "ns/a", {"metadata": {"resourceVersion": "9"}})
    assert expectations.admit("Pod", "ns/a", {"metadata": {"resourceVersion": "10"}})
    assert expectations.admit("Pod", "ns/a", {"metadata": {"resourceVersion": "8"}})  # nothing pending
    assert expectations.expired() == []


def test_a_status_change_that_cannot_change_a_decision_does_not_wake_the_loop() -> None:
    cache = ClusterCache()
    cache.upsert("Node", node("n1"))
    cache.upsert("Pod", pod("a", 1, node="n1", phase="Pending"))
    cache.changed.clear()
    generation = cache.generation
    running = pod("a", 2, node="n1", phase="Running")
    running["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cache.upsert("Pod", running)  # new resourceVersion, phase and conditions: nothing placement reads
    assert not cache.changed.is_set() and cache.generation == generation
    cache.upsert("Pod", pod("a", 3, node="n1", phase="Succeeded"))  # frees its GPUs: that counts
    assert cache.changed.is_set()


def test_pods_are_indexed_by_job_and_forgotten_on_delete() -> None:
    cache = ClusterCache()
    cache.upsert("Pod", pod("a", 1, gated=True))
    cache.upsert("Pod", pod("b", 1, gated=True, job_uid="job-2"))
    assert [p.name for p in cache.pods_of("Job", "job-1")] == ["a"]
    cache.delete("Pod", {"metadata": {"namespace": "ns", "name": "a", "uid": "uid-a"}})
    assert list(cache.pods_of("Job", "job-1")) == []
    assert cache.changed.is_set()


def test_snapshot_counts_what_holds_capacity_and_follows_changes() -> None:
    cache = ClusterCache()
    for name in ("n1", "n2"):
        cache.upsert("Node", node(name))
    cache.upsert("Pod", pod("a", 1, node="n1", phase="Running"))
    cache.upsert("Pod", pod("b", 1, selector="n2", group="g"))
    cache.upsert("Pod", pod("c", 1, gated=True))
    snapshot = cache.snapshot()
    assert snapshot.free("n1")["nvidia.com/gpu"] == 0
    assert snapshot.free("n2")["nvidia.com/gpu"] == 0
    cache.upsert("Pod", pod("a", 2, node="n1", phase="Succeeded"))
    cache.delete("Pod", {"metadata": {"namespace": "ns", "name": "b", "uid": "uid-b"}})
    assert cache.snapshot().free("n1")["nvidia.com/gpu"] == 8
    assert cache.snapshot().free("n2")["nvidia.com/gpu"] == 8
    assert snapshot.free("n1")["nvidia.com/gpu"] == 0  # a snapshot handed out never changes


def job_body(completions: int | None, succeeded: int, parallelism: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism, "template": {"spec": {}}}
    if completions is not None:
        spec["completions"] = completions
    return {
        "metadata": {
            "name": "train",
            "namespace": "ns",
            "uid": "job-1",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": spec,
        "status": {"succeeded": succeeded},
    }


def test_a_job_record_knows_what_is_left_of_the_job() -> None:
    assert JobRecord.from_body(job_body(8, 0)).remaining == 8
    assert JobRecord.from_body(job_body(8, 6)).remaining == 2
    assert JobRecord.from_body(job_body(8, 9)).remaining == 0
    assert JobRecord.from_body(job_body(None, 0)).remaining is None


def test_a_job_record_carries_its_parsed_policy_or_why_it_is_invalid() -> None:
    body = job_body(4, 0)
    body["metadata"]["annotations"] = {"phalanx.dev/min-count": "zero"}
    record = JobRecord.from_body(body)
    assert record.policy is None and "phalanx.dev/min-count" in record.policy_error
    body["metadata"]["annotations"] = {"phalanx.dev/min-count": "2"}
    record = JobRecord.from_body(body)
    assert record.policy is not None and record.policy.min_count == 2 and record.policy_error == ""


def test_a_watch_that_skips_our_version_is_taken_once_it_shows_our_write() -> None:
    """Kopf hands handlers the newest state of an object: the event with our exact version may never come."""
    cache = ClusterCache()
    cache.upsert("Pod", pod("a", 5, gated=True))
    cache.upsert("Pod", pod("a", 7, selector="n1", group="g"), own_write=True)  # our release
    cache.upsert("Pod", pod("a", 6, gated=True))  # older: still gated, held back
    assert cache.pods["ns/a"].released
    bound_later = pod("a", 9, node="n1", selector="n1", group="g")  # kube-scheduler bound it; 7 never seen
    cache.upsert("Pod", bound_later)
    assert cache.pods["ns/a"].bound
    assert not cache.expectations.pending


@pytest.mark.parametrize("answer_at", [0, 1, 2, 3])
def test_the_answer_to_a_release_at_any_point_of_the_watch_leaves_the_pod_bound(answer_at: int) -> None:
    """The watch shows the gated pod, our release and kube-scheduler's binding, in order; the API's answer to
    our release (the released version) is applied at any point among them. However late it comes, the cache
    ends with the pod bound and expects nothing: an answer the watch had already shown must not put the pod
    back to released and then wait for an event gone by (a JobSet's workers looked released, never bound)."""
    watch = [
        pod("a", 5, gated=True),
        pod("a", 7, selector="n1", group="g"),
        pod("a", 8, node="n1", selector="n1", group="g"),
    ]
    cache = ClusterCache()
    cache.upsert("Pod", pod("a", 5, gated=True))  # what the pass that released it saw
    events: list[tuple[dict[str, Any], bool]] = [(body, False) for body in watch]
    events.insert(answer_at, (pod("a", 7, selector="n1", group="g"), True))
    for body, own in events:
        cache.upsert("Pod", body, own_write=own)
    assert cache.pods["ns/a"].bound and cache.pods["ns/a"].node_name == "n1"
    assert not cache.expectations.pending


def test_a_second_answer_while_the_first_is_not_shown_yet_is_still_expected() -> None:
    """Two writes of ours the watch has not shown (the cache holds the first answer): the second answer
    replaces it as the version to wait for, so the older watch events stay held back."""
    cache = ClusterCache()
    cache.upsert("Pod", pod("a", 5, gated=True))
    cache.upsert("Pod", pod("a", 6, gated=True, group="g"), own_write=True)  # labelled
    cache.upsert("Pod", pod("a", 7, gated=True, group="g"), own_write=True)  # the same marks, written again
    cache.upsert("Pod", pod("a", 5, gated=True))  # the watch, behind both
    assert cache.pods["ns/a"].pod_group == "g"
    assert cache.expectations.waits("Pod", "ns/a")


def _uid(body: dict[str, Any], uid: str) -> dict[str, Any]:
    body["metadata"]["uid"] = uid
    return body


def test_the_answer_to_our_write_of_a_pod_deleted_meanwhile_does_not_mask_its_successor() -> None:
    """A StatefulSet's pod (an LWS worker) is deleted while our release of it is in flight and made anew under
    its name: the late answer neither puts the old pod back nor holds back the new one's events."""
    cache = ClusterCache()
    cache.upsert("Pod", _uid(pod("w", 5, gated=True), "old"))
    cache.delete("Pod", _uid(pod("w", 6, gated=True), "old"))  # its DELETED event comes first
    cache.upsert("Pod", _uid(pod("w", 7, selector="n1", group="g"), "old"), own_write=True)  # then the answer
    assert "ns/w" not in cache.pods
    cache.upsert("Pod", _uid(pod("w", 8, gated=True), "new"))  # its successor, at once
    assert cache.pods["ns/w"].uid == "new" and cache.pods["ns/w"].gated
    cache.upsert(
        "Pod", _uid(pod("w", 9, selector="n2", group="g"), "old"), own_write=True
    )  # another late one
    assert cache.pods["ns/w"].uid == "new"
    cache.upsert("Pod", _uid(pod("w", 10, node="n3", group="g"), "new"))
    assert cache.pods["ns/w"].bound and cache.pods["ns/w"].node_name == "n3"


def test_a_late_event_of_the_pod_a_name_had_before_does_not_replace_its_successor() -> None:
    """The watch orders events per object: the old pod's last MODIFIED (deleting) and DELETED may come after
    its successor's ADDED. The successor stays (a gated pod that changes no more would never be seen
    again)."""
    cache = ClusterCache()
    old = _uid(pod("w", 5, node="n1", group="g"), "old")
    old["metadata"]["creationTimestamp"] = "2026-11-29T10:00:00Z"
    cache.upsert("Pod", old)
    new = _uid(pod("w", 9, gated=True), "new")
    new["metadata"]["creationTimestamp"] = "2026-11-29T10:05:00Z"
    cache.upsert("Pod", new)  # the successor's ADDED first
    going = _uid(pod("w", 7, node="n1", group="g", deleting=True), "old")
    going["metadata"]["creationTimestamp"] = "2026-11-29T10:00:00Z"
    cache.upsert("Pod", going)  # then the old pod's late MODIFIED
    assert cache.pods["ns/w"].uid == "new"
    cache.delete("Pod", going)  # and its DELETED
    assert cache.pods["ns/w"].uid == "new" and cache.pods["ns/w"].gated
    cache.upsert("Pod", going)  # an event of a pod already deleted is never taken back
    assert cache.pods["ns/w"].uid == "new"


def group_body(rv: int, generation: int, min_count: int, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pg",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": str(rv),
            "generation": generation,
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        "status": status,
    }


def test_the_answer_to_our_status_write_after_the_watch_showed_a_later_spec_keeps_the_later_spec() -> None:
    """Our status write's answer comes after the watch showed it and a user's edit after it: the cache keeps
    the edit and expects nothing (the answer's version went by)."""
    cache = ClusterCache()
    cache.upsert("PodGroup", group_body(5, 1, 4, {}))
    ours = {"phase": "Pending", "waiting": 4}
    cache.upsert("PodGroup", group_body(7, 1, 4, ours))  # the watch shows our write
    cache.upsert("PodGroup", group_body(8, 2, 2, ours))  # then a user lowers minCount
    cache.upsert("PodGroup", group_body(7, 1, 4, ours), own_write=True)  # the answer, late
    held = cache.pod_groups.get("ns/pg")
    assert held is not None and held.generation == 2 and held.resource_version == "8"
    assert not cache.expectations.pending


def test_an_answer_the_watch_has_not_shown_yet_is_still_taken_and_expected() -> None:
    cache = ClusterCache()
    cache.upsert("PodGroup", group_body(5, 1, 4, {}))
    ours = {"phase": "Pending", "waiting": 4}
    cache.upsert("PodGroup", group_body(7, 1, 4, ours), own_write=True)
    cache.upsert("PodGroup", group_body(5, 1, 4, {}))  # the watch, behind: held back
    held = cache.pod_groups.get("ns/pg")
    assert held is not None and held.resource_version == "7"
    assert cache.expectations.waits("PodGroup", "ns/pg")


def managed_job(rv: int, *, suspend: bool, succeeded: int) -> dict[str, Any]:
    body = job_body(8, succeeded)
    body["metadata"]["resourceVersion"] = str(rv)
    body["metadata"]["labels"] = {"phalanx.dev/managed": "true"}
    body["spec"]["suspend"] = suspend
    return body


def test_the_answer_to_our_resume_after_the_watch_showed_the_job_progress_keeps_the_progress() -> None:
    cache = ClusterCache()
    cache.upsert("Job", managed_job(1, suspend=True, succeeded=0))
    cache.upsert("Job", managed_job(2, suspend=False, succeeded=0))  # the watch shows our resume
    cache.upsert("Job", managed_job(3, suspend=False, succeeded=6))  # and the Job's progress after it
    cache.upsert("Job", managed_job(2, suspend=False, succeeded=0), own_write=True)  # the answer, late
    (job,) = cache.owners["Job"].values()
    assert job.remaining == 2 and not job.suspended
    assert not cache.expectations.pending


node_events = st.lists(
    st.tuples(
        st.sampled_from(["n1", "n2", "n3"]),
        st.one_of(
            st.none(),  # deleted
            st.dictionaries(
                st.sampled_from(["cpu", "nvidia.com/gpu", "example.com/fpga", "pods"]), st.just("4")
            ),
        ),
    ),
    max_size=25,
)


@given(node_events)
def test_the_listed_resources_are_those_some_node_lists_now(
    events: list[tuple[str, dict[str, str] | None]],
) -> None:
    """What the webhooks ask of every review (ClusterCache.listed_resources), kept as nodes come, change and
    go: always the union of the nodes' allocatable names."""
    cache = ClusterCache()
    for name, allocatable in events:
        body = {"metadata": {"name": name}, "spec": {}, "status": {"allocatable": allocatable or {}}}
        if allocatable is None:
            cache.delete("Node", body)
        else:
            cache.upsert("Node", body)
        expected = {r for node in cache.nodes.values() for r in node.allocatable}
        assert set(cache.listed_resources) == expected


def _job(version: str) -> dict[str, Any]:
    body = testkit.job_body("train")
    body["metadata"]["resourceVersion"] = version
    return body


def _pod_group(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "g",
            "namespace": "ml",
            "uid": "uid-g",
            "resourceVersion": version,
            "generation": 1,
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
    }


@pytest.mark.parametrize(
    ("kind", "body", "held"),
    [
        ("Job", _job, lambda c: c.owners["Job"]),
        ("PodGroup", _pod_group, lambda c: c.pod_groups.items),
        ("Pod", lambda v: pod("a", int(v), selector="n1", group="g"), lambda c: c.pods),
    ],
)
def test_the_answer_to_our_write_after_the_objects_deletion_does_not_bring_it_back(
    kind: str, body: Any, held: Any
) -> None:
    """The user deletes an object while Phalanx's write of it is in flight; the DELETED event is handled
    before the write's answer: the answer must not put the object back (a deleted Job back in the cache
    had its Workload and PodGroup made again, pass after pass, until a relist)."""
    cache = ClusterCache()
    cache.upsert(kind, body("5"))
    assert held(cache)
    cache.delete(kind, body("5"))
    cache.upsert(kind, body("6"), own_write=True)
    assert not held(cache)


def _pod_group_of(job: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup Phalanx makes for a plain Job (owned by it: build_pod_group)."""
    policy = parse_job_policy(job, running=True)
    body = build_pod_group(
        job, "a-wl", policy, None, workload_uid="wl-uid", layout=parse_job_layout(job, policy)
    )
    body["metadata"].update(uid="pg-a", generation=1, creationTimestamp=job["metadata"]["creationTimestamp"])
    return body


@pytest.mark.parametrize(
    ("owner_seen", "bereft"),
    [("alive", True), ("being deleted", False), ("deleted", False), ("deleted after", False)],
)
def test_an_owner_whose_object_goes_while_it_seems_alive_is_asked_about_before_one_is_made_again(
    owner_seen: str, bereft: bool
) -> None:
    """The garbage collector deletes an owner's objects once the owner is deleted, and the two watches keep
    no order: an object of ours deleted while the cache still holds its owner alive marks the owner (the
    applier asks the API before making one again); one deleted after the owner's deletion was seen does
    not, and an owner deleted from the cache is forgotten there too."""
    job = testkit.job_body("a")
    if owner_seen == "being deleted":
        job["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    cache = ClusterCache()
    cache.upsert("Job", job)
    group = _pod_group_of(job)
    cache.upsert("PodGroup", group)
    if owner_seen == "deleted":
        cache.delete("Job", job)
    cache.delete("PodGroup", group)
    if owner_seen == "deleted after":
        cache.delete("Job", job)
    assert (job["metadata"]["uid"] in cache.bereft) is bereft
    cache.bereft.discard(job["metadata"]["uid"])  # the API showed it alive (apply/owners.py)
    assert not cache.bereft


def test_the_answer_to_our_write_of_an_owner_replaced_under_its_name_does_not_bring_the_old_one_back() -> (
    None
):
    """A Job deleted and made again under its name while Phalanx's write of the old one is in flight; the
    watch shows the new Job before the old one's DELETED event: the old one's answer must not come back
    beside it (two Jobs of one name, the old one's units made again)."""
    old, new = _job("5"), _job("7")
    new["metadata"]["uid"] = "uid-new"
    cache = ClusterCache()
    cache.upsert("Job", old)
    cache.upsert("Job", new)
    answer = _job("6")
    cache.upsert("Job", answer, own_write=True)
    assert list(cache.owners["Job"]) == ["uid-new"]


# A child Job event: (name, its uid's generation, its controller: a JobSet of ours or another kind's, being
# deleted) or, with None, the name deleted (by uid, or by name only as a relist does).
child_events = st.lists(
    st.tuples(
        st.sampled_from(["a-w-0", "a-w-1", "b-w-0"]),
        st.one_of(
            st.tuples(
                st.integers(0, 1),
                st.sampled_from(
                    [("JobSet", "uid-js-a"), ("JobSet", "uid-js-b"), ("CronJob", "uid-cron"), None]
                ),
                st.booleans(),
            ),
            st.none(),
            st.just("by name"),
        ),
    ),
    max_size=25,
)


@given(child_events)
def test_the_children_of_an_owner_are_its_live_child_jobs_by_name(events: list[tuple[str, Any]]) -> None:
    """cache/children.py against the API's own state: a JobSet's children are the Jobs it controls that exist
    and are not being deleted, by name; a Job of another controller is no one's; a Job deleted (by its uid, or
    by name, as a relist drops it) or made again under its name by another controller moves. The set is the
    same object while it is unchanged (the loop compares by identity), and a relist sees every child."""
    cache = ClusterCache()
    api: dict[str, tuple[str, tuple[str, str] | None, bool]] = {}  # name -> (uid, controller, deleting)
    before = {u: cache.children.of(u) for u in ("uid-js-a", "uid-js-b")}
    for name, event in events:
        meta: dict[str, Any] = {"name": name, "namespace": "ml"}
        if event is None or event == "by name":
            if name in api and event is None:
                meta["uid"] = api[name][0]
            api.pop(name, None)
            cache.delete("Job", {"metadata": meta})
        else:
            generation, controller, deleting = event
            meta["uid"] = f"uid-{name}-{generation}"
            if controller is not None:
                kind, uid = controller
                meta["ownerReferences"] = [{"kind": kind, "name": "x", "uid": uid, "controller": True}]
            if deleting:
                meta["deletionTimestamp"] = "2026-11-30T11:00:00Z"
            api[name] = (meta["uid"], controller, deleting)
            cache.upsert("Job", {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}})
        for owner in ("uid-js-a", "uid-js-b"):
            expected = {n for n, (_, c, d) in api.items() if c == ("JobSet", owner) and not d}
            assert cache.children.of(owner) == expected
            if expected == before[owner]:
                assert cache.children.of(owner) is before[owner] or not expected
            before[owner] = cache.children.of(owner)
        live = {
            (f"ml/{n}", u) for n, (u, c, d) in api.items() if c is not None and c[0] == "JobSet" and not d
        }
        assert cache.children.records("Job") == live
        assert live <= cache.records("Job")
