"""The walk-through's Kueue step: skipped with a clear line when Kueue is not installed (the runner's
NotPlayableError), and what it queues when it is (tools/walkthrough/kueue_step.py). Played for real in
tests/integration/test_kueue.py."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from test_tools_walkthrough import Recorder

from phalanx.devcluster.http import ApiError
from phalanx.tools.walkthrough.demo import Demo, NotPlayableError
from phalanx.tools.walkthrough.kueue_step import kueue, queued, queues
from phalanx.tools.walkthrough.runner import Step, play, select, summary
from phalanx.tools.walkthrough.steps import STEPS


class NoKueue:
    """An API without Kueue's group: every GET of it is a 404; nothing else may be asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get(self, path: str) -> Any:
        self.asked.append(path)
        raise ApiError(404, "the server could not find the requested resource")

    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the step wrote to a cluster without Kueue: {args}")


def test_without_kueue_the_step_is_skipped_with_how_to_get_it() -> None:
    api = NoKueue()
    demo = Demo(api=api, kubectl=Path("kubectl"), kubeconfig=Path("kc"), out=io.StringIO())  # type: ignore[arg-type]
    ctx = Recorder()
    step = next(s for s in STEPS if s.id == "kueue")
    results = play([step], ctx, lambda s: kueue(demo))
    assert [(r.step.id, r.status) for r in results] == [("kueue", "SKIP")]
    assert api.asked == ["/apis/kueue.x-k8s.io/v1beta2"]
    (line,) = [x for x in ctx.lines if x.startswith("SKIP kueue: ")]
    assert "Kueue is not installed" in line and "phalanx dev-cluster up --addons kueue" in line
    assert ctx.resets == 1
    assert "skipped kueue: Kueue is not installed" in summary(results, 1.0)


def test_a_step_that_is_not_playable_is_a_skip_not_a_failure_and_the_next_step_plays() -> None:
    def not_here(_: object) -> None:
        raise NotPlayableError("needs the kueue addon")

    played: list[str] = []
    steps = [Step("a", "a", not_here), Step("b", "b", lambda _: played.append("b"))]
    results = play(steps, Recorder(), lambda s: s.run(None) if s.run else None)
    assert [r.status for r in results] == ["SKIP", "OK"] and played == ["b"]


def test_the_step_is_in_the_full_walk_through_only_and_queues_one_gang_of_quota() -> None:
    assert "kueue" in [s.id for s in select(STEPS, short=False)]
    assert "kueue" not in [s.id for s in select(STEPS, short=True)]  # CI's short run has no Kueue
    made = queues("abc", "phalanx-demo", gpus=32)
    assert [obj["kind"] for _, obj in made] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    quota = made[1][1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert quota == {"name": "nvidia.com/gpu", "nominalQuota": "32"}  # one gang of four 8-GPU pods
    job = queued("queue-a", 4)
    assert job["metadata"]["labels"] == {"phalanx.dev/managed": "true", "kueue.x-k8s.io/queue-name": "lq"}
