"""`phalanx demo`'s pure parts: the Jobs it submits, its checks on API dicts, step selection, the runner's
control flow (a recording context, no cluster) and the summary. The walk-through against a real cluster is
tests/integration/test_walkthrough.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tools_testkit import LB, NB, fillers, job_pod, seed_nodes

from phalanx.api.job_policy import parse_job_policy
from phalanx.devcluster.http import ApiError
from phalanx.tools.walkthrough.demo import Demo, StepError
from phalanx.tools.walkthrough.facts import brief, domains, job_manifest, partial_gangs, requests_gpus
from phalanx.tools.walkthrough.runner import Result, Step, play, select, summary
from phalanx.tools.walkthrough.steps import STEPS


def labels() -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in seed_nodes()}


def group(job: str, min_count: int | None) -> dict[str, Any]:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "metadata": {"name": f"{job}-pg", "labels": {"phalanx.dev/job-name": job}},
        "spec": {"schedulingPolicy": policy},
    }


def labelled(pod: dict[str, Any], job: str) -> dict[str, Any]:
    pod["metadata"].setdefault("labels", {})["job-name"] = job
    return pod


# ---------------------------------------------------------------------- the Jobs


@pytest.mark.parametrize(
    ("kwargs", "policy", "key", "mode"),
    [
        ({}, "gang", None, "single"),
        ({"policy": "basic"}, "basic", None, "single"),
        ({"key": NB, "disruption_mode": "all"}, "gang", NB, "all"),
        ({"key": LB, "priority_class": "high"}, "gang", LB, "single"),
    ],
)
def test_the_jobs_it_submits_parse_as_the_policy_they_stand_for(
    kwargs: dict[str, Any], policy: str, key: str | None, mode: str
) -> None:
    job = job_manifest("j", 3, **kwargs)
    parsed = parse_job_policy(job)
    assert (parsed.policy, parsed.topology_key, parsed.disruption_mode) == (policy, key, mode)
    assert parsed.parallelism == 3
    assert job["metadata"]["labels"] == {"phalanx.dev/managed": "true"}
    assert requests_gpus(job["spec"]["template"])


def test_requests_gpus_reads_limits_and_requests_of_every_container() -> None:
    assert requests_gpus(fillers("was-worker")[0])
    plain = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    assert not requests_gpus(plain)
    init = {
        "spec": {"containers": [], "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": 1}}}]}
    }
    assert requests_gpus(init)


# ---------------------------------------------------------------------- checks on API dicts


def test_domains_are_the_label_values_of_the_bound_pods_nodes() -> None:
    pods = [
        job_pod("b", 0, gated=False, node="was-worker", phase="Running"),
        job_pod("b", 1, gated=False, node="was-worker3", phase="Running"),
        job_pod("b", 2),  # not bound: no domain
    ]
    assert domains(pods, labels(), NB) == {"nb-a"}
    assert domains(pods, labels(), LB) == {"lb-a1", "lb-a2"}


def test_a_gang_bound_below_its_min_count_is_reported_and_whole_or_none_is_not() -> None:
    def pods(job: str, bound: int, waiting: int) -> list[dict[str, Any]]:
        made = [
            job_pod(job, i, gated=False, node=f"was-worker{i + 2}", phase="Running") for i in range(bound)
        ]
        made += [job_pod(job, bound + i) for i in range(waiting)]
        return [labelled(p, job) for p in made]

    everything = pods("whole", 4, 0) + pods("none", 0, 4) + pods("half", 2, 2) + pods("basic", 1, 3)
    groups = [group("whole", 4), group("none", 4), group("half", 4), group("basic", None)]
    assert partial_gangs(groups, everything) == ["half: 2 of 4 pods bound"]


def test_a_hand_made_group_counts_the_pods_labelled_with_its_name() -> None:
    def member(group_name: str, node: str) -> dict[str, Any]:
        pod = job_pod("x", 0, gated=False, node=node, phase="Running")
        pod["metadata"]["labels"] = {"phalanx.dev/pod-group": group_name}
        return pod

    hand_made = {"metadata": {"name": "slices-0"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    assert partial_gangs([hand_made], [member("slices-0", "was-worker")]) == ["slices-0: 1 of 2 pods bound"]
    whole = [
        member("slices-0", "was-worker"),
        member("slices-0", "was-worker2"),
        member("other", "was-worker3"),
    ]
    assert partial_gangs([hand_made], whole) == []


@given(st.integers(0, 8), st.integers(1, 8))
def test_partial_means_strictly_between_none_and_min_count(bound: int, min_count: int) -> None:
    pods = [
        labelled(job_pod("g", i, gated=False, node="was-worker", phase="Running"), "g") for i in range(bound)
    ]
    found = partial_gangs([group("g", min_count)], pods)
    assert bool(found) == (0 < bound < min_count)


# ---------------------------------------------------------------------- steps


def test_the_steps_follow_the_article() -> None:
    ids = [s.id for s in STEPS]
    assert len(ids) == len(set(ids))
    assert (
        ids.index("plain-4")
        < ids.index("gang-4")
        < ids.index("best-fit")
        < ids.index("slices")
        < ids.index("preemption")
        < ids.index("node-failure")
    )
    assert all(s.run is not None for s in STEPS)


def test_select_short_drops_full_only_steps_and_only_keeps_the_article_order() -> None:
    short = select(STEPS, short=True)
    assert [s.id for s in short] == [s.id for s in STEPS if not s.full_only]
    assert len(short) < len(STEPS)
    assert [s.id for s in select(STEPS, short=False, only=["preemption", "gang-4"])] == [
        "gang-4",
        "preemption",
    ]
    with pytest.raises(ValueError, match="unknown step"):
        select(STEPS, short=False, only=["nope"])


# ---------------------------------------------------------------------- the runner


class Recorder:
    """A context that records what the runner asks of it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.resets = 0
        self.shows = 0

    def say(self, text: str = "") -> None:
        self.lines.append(text)

    def reset(self) -> None:
        self.resets += 1

    def show(self, label: str = "") -> None:
        self.shows += 1


def fails(_: object) -> None:
    raise StepError("expected 4 pods bound")


def passes(_: object) -> None:
    pass


def test_play_reports_ok_and_skip_cleans_after_each_step_and_stops_at_the_first_failure() -> None:
    steps = [
        Step("one", "first", passes),
        Step("later", "not built", None, skip="comes with issue 11"),
        Step("two", "second", fails),
        Step("three", "never played", passes),
    ]
    ctx = Recorder()
    played: list[str] = []

    def run(step: Step) -> None:
        played.append(step.id)
        assert step.run is not None
        step.run(ctx)

    results = play(steps, ctx, run)
    assert [(r.step.id, r.status) for r in results] == [("one", "OK"), ("later", "SKIP"), ("two", "FAILED")]
    assert played == ["one", "two"]
    assert ctx.resets == 2  # after the passing and after the failing step
    assert ctx.shows == 1  # the cluster is shown at the failure
    assert "FAILED two: expected 4 pods bound" in ctx.lines
    assert "SKIP later: comes with issue 11" in ctx.lines
    line = summary(results, 12.5)
    assert line.startswith("walk-through: 1 OK, 1 skipped, 1 failed in 12.5 s")
    assert "later: comes with issue 11" in line and "FAILED two: expected 4 pods bound" in line


class FailingCleanup(Recorder):
    def reset(self) -> None:
        super().reset()
        raise StepError("timed out waiting for the namespace's pods gone")


def test_a_failing_cleanup_fails_the_step_but_never_hides_the_steps_own_failure() -> None:
    ctx = FailingCleanup()
    results = play([Step("ok", "passes", passes)], ctx, lambda s: passes(s))
    assert [(r.status, r.why) for r in results] == [
        ("FAILED", "timed out waiting for the namespace's pods gone")
    ]
    ctx = FailingCleanup()
    results = play([Step("bad", "fails", fails)], ctx, lambda s: fails(s))
    assert [(r.status, r.why) for r in results] == [("FAILED", "expected 4 pods bound")]
    assert "(the cleanup failed too: timed out waiting for the namespace's pods gone)" in ctx.lines


def test_play_cleans_up_when_interrupted() -> None:
    def interrupted(_: object) -> None:
        raise KeyboardInterrupt

    ctx = Recorder()
    with pytest.raises(KeyboardInterrupt):
        play([Step("x", "x", interrupted)], ctx, lambda s: interrupted(s))
    assert ctx.resets == 1


def test_brief_cuts_long_values() -> None:
    assert brief("short") == "'short'"
    long = brief("x" * 1000, limit=50)
    assert len(long) == 50 and long.endswith("...")


def test_a_step_whose_kind_is_not_served_is_skipped_saying_what_to_start_and_the_walk_goes_on() -> None:
    """Demo.require raises NotPlayableError on a cluster without the addon's CRDs (the stock dev cluster)."""

    class NoJobSets:
        def get(self, path: str) -> dict[str, object]:
            raise ApiError(404, "the server could not find the requested resource")

    api: Any = NoJobSets()
    demo = Demo(api=api, kubectl=Path("kubectl"), kubeconfig=Path("kc"), out=io.StringIO())

    def needs_jobsets(_: object) -> None:
        demo.require("jobset.x-k8s.io/v1alpha2", "JobSet", "jobset")

    ctx = Recorder()
    steps = [Step("jobset", "a JobSet", needs_jobsets, addon="jobset"), Step("after", "next", passes)]
    results = play(steps, ctx, lambda s: s.run(ctx) if s.run else None)
    assert [(r.step.id, r.status) for r in results] == [("jobset", "SKIP"), ("after", "OK")]
    assert ctx.resets == 2  # the cleanup runs after a skipped step too (it found nothing to delete)
    assert (
        "SKIP jobset: JobSet is not served by this cluster (jobset.x-k8s.io/v1alpha2): its controller is not "
        "running; phalanx dev-cluster up --addons jobset" in ctx.lines
    )
    assert [s.addon for s in STEPS if s.addon] == ["jobset", "trainer", "lws"]


def test_the_summary_names_the_steps_skipped_for_an_addon_once_with_what_to_start() -> None:
    steps = [Step(i, i, passes, addon=a) for i, a in (("jobset", "jobset"), ("trainjob", "trainer"))]
    results = [Result(s, "SKIP", why=f"{s.id} is not served ... --addons {s.addon}") for s in steps]
    later = Step("later", "later", None, skip="comes with issue 11")
    results.append(Result(later, "SKIP", why="comes with it"))
    line = summary(results, 3.0)
    assert line == (
        "walk-through: 0 OK, 3 skipped, 0 failed in 3.0 s (skipped later: comes with it; jobset, trainjob: "
        "their kinds are not served by this cluster (phalanx dev-cluster up --addons jobset,trainer))"
    )
