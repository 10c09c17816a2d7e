"""The README's first command plays the article's experiments (`phalanx demo`, issue 8): its short form,
run as the user runs it, against a dev cluster with Phalanx, and its printed output checked.

It uses its own dev cluster in a tmp folder rather than the session `stock_cluster`: the walk-through
fails and heals nodes, fills all eight, and needs them to itself (its preflight refuses GPU pods of other
namespaces), and it needs an operator with a short --node-failure-grace so its node-failure step does not
wait the default 30 s. A warm dev cluster is ready in about 5 s, so the isolation is cheap.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from phalanx.devcluster.cluster import ClusterState, DevCluster
from phalanx.devcluster.operator_process import OperatorProcess
from phalanx.tools.walkthrough.runner import select
from phalanx.tools.walkthrough.steps import STEPS

pytestmark = pytest.mark.integration

PHASES = {"Pending", "WaitingForPods", "Unschedulable", "Admitted", "Running", "Suspended", "Finished"}
GRACE = "5"  # --node-failure-grace: the requeue of the node-failure step comes 5 s after room ran out


@dataclass
class Table:
    label: str
    """What the walk-through says the table shows (after `#` on the command line)."""
    header: list[str]
    rows: list[dict[str, str]]

    def pods(self, prefix: str) -> list[dict[str, str]]:
        return [r for r in self.rows if r["POD"].startswith(prefix)]

    def column(self, name: str, prefix: str) -> set[str]:
        return {r[name] for r in self.pods(prefix)}


@dataclass
class Section:
    step: str
    text: str
    where: list[Table]
    podgroups: list[Table]
    composites: list[Table]


def parse_table(lines: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """A kubectl-style table: columns start where the header's words start."""
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return names, rows


def parse(output: str) -> dict[str, Section]:
    """The walk-through's output cut into steps, each with its where and podgroups tables."""
    sections: dict[str, Section] = {}
    for chunk in re.split(r"^=== \[\d+/\d+\] ", output, flags=re.M)[1:]:
        step = chunk.split(":", 1)[0]
        lines = chunk.splitlines()
        where: list[Table] = []
        groups: list[Table] = []
        composites: list[Table] = []
        for i, line in enumerate(lines):
            kind = (
                where
                if line.startswith("$ phalanx where")
                else groups
                if "kubectl get podgroups" in line
                else composites
                if "kubectl get compositepodgroups" in line
                else None
            )
            if kind is None or not line.startswith("$ "):
                continue
            end = next((j for j in range(i + 1, len(lines)) if not lines[j].strip()), len(lines))
            body = lines[i + 1 : end]
            label = line.split("#", 1)[1].strip() if "#" in line else ""
            if body and not body[0].startswith("No resources"):
                header, rows = parse_table(body)
                kind.append(Table(label, header, rows))
            else:
                kind.append(Table(label, [], []))
        sections[step] = Section(step, chunk, where, groups, composites)
    return sections


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    dev = DevCluster(Path(tmp_path_factory.mktemp("walkthrough-cluster")))
    state = dev.up(log=lambda m: print(f"[walkthrough cluster] {m}"))
    try:
        yield state
    finally:
        dev.down(log=lambda m: print(f"[walkthrough cluster] {m}"))


@pytest.fixture(scope="module")
def operator(cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        cluster, Path(tmp_path_factory.mktemp("walkthrough-operator")), ["--node-failure-grace", GRACE]
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()
        print(f"operator log: {process.log_path}")


def demo(cluster: ClusterState, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "phalanx.cli", "demo", "--dir", cluster.dir, *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def short_run(
    cluster: ClusterState, operator: OperatorProcess
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = demo(cluster, "--short")
    took = time.monotonic() - started
    print(result.stdout)
    print(result.stderr, file=sys.stderr)
    print(f"phalanx demo --short: {took:.1f} s")
    return result, took


@pytest.fixture(scope="module")
def sections(short_run: tuple[subprocess.CompletedProcess[str], float]) -> dict[str, Section]:
    return parse(short_run[0].stdout)


def test_every_step_of_the_short_run_is_ok(
    short_run: tuple[subprocess.CompletedProcess[str], float],
) -> None:
    result, _ = short_run
    steps = select(STEPS, short=True)
    # The kind steps (JobSet, TrainJob, LWS) need addons this stock cluster does not run: skipped, saying so.
    playable = [s.id for s in steps if s.run is not None and not s.addon]
    for step in (s for s in steps if s.addon):
        assert re.search(
            rf"^SKIP {step.id}: .* is not served by this cluster .*--addons {step.addon}$",
            result.stdout,
            re.M,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    for step in playable:
        assert re.search(rf"^OK {re.escape(step)} \(", result.stdout, re.M), f"no OK line for {step}"
    assert "FAILED" not in result.stdout
    assert re.search(
        rf"^walk-through: {len(playable)} OK, {len(steps) - len(playable)} skipped, 0 failed in ",
        result.stdout,
        re.M,
    ), result.stdout[-500:]
    # Each step said what to notice.
    assert result.stdout.count("\nnotice: ") == len(playable)


def test_every_podgroups_table_shows_known_phases_and_every_step_printed_both_tables(
    sections: dict[str, Section],
) -> None:
    for step in (s.id for s in select(STEPS, short=True) if s.run is not None and not s.addon):
        section = sections[step]
        assert section.where and section.podgroups, f"{step}: no where or podgroups table"
        assert len(section.where) == len(section.podgroups)
        for table in section.podgroups:
            columns = ["NAME", "OWNER", "POLICY", "MIN", "SCHEDULED", "SUCCEEDED", "WAITING"]
            assert table.header[:7] == columns, table.header
            assert {r["STATUS"] for r in table.rows} <= PHASES, (step, table.rows)
        for table in section.where:
            assert table.header == ["POD", "PHASE", "NODE", "NB", "LB"]


def test_plain_4_runs_three_and_the_gang_binds_none_then_all_four_in_one_block(
    sections: dict[str, Section],
) -> None:
    (plain,) = sections["plain-4"].where
    assert sorted(r["PHASE"] for r in plain.pods("plain-4-")) == ["Pending", "Running", "Running", "Running"]
    assert [r["POLICY"] for r in sections["plain-4"].podgroups[0].rows] == ["Basic"]

    waiting, running = sections["gang-4"].where
    assert len(waiting.pods("gang-4-")) == 4
    assert waiting.column("NODE", "gang-4-") == {"-"} and waiting.column("PHASE", "gang-4-") == {"Pending"}
    assert [r["STATUS"] for r in sections["gang-4"].podgroups[0].rows] == ["Unschedulable"]
    assert running.column("PHASE", "gang-4-") == {"Running"} and len(running.column("NODE", "gang-4-")) == 4
    assert [r["STATUS"] for r in sections["gang-4"].podgroups[1].rows] == ["Running"]
    assert "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining" in sections["gang-4"].text


def test_topology_keeps_each_gang_in_one_domain_and_the_podgroup_names_it(
    sections: dict[str, Section],
) -> None:
    (local,) = sections["local-2"].where
    (lb,) = local.column("LB", "local-2-")
    assert len(local.pods("local-2-")) == 2 and lb != "-"
    assert [r["DOMAIN"] for r in sections["local-2"].podgroups[0].rows] == [lb]

    (never,) = sections["local-4"].where
    assert never.column("NODE", "local-4-") == {"-"} and len(never.pods("local-4-")) == 4
    assert [r["STATUS"] for r in sections["local-4"].podgroups[0].rows] == ["Unschedulable"]
    assert "it can never fit in this cluster" in sections["local-4"].text

    (block,) = sections["block-4"].where
    (nb,) = block.column("NB", "block-4-")
    assert len(block.column("NODE", "block-4-")) == 4 and nb != "-"
    assert [r["DOMAIN"] for r in sections["block-4"].podgroups[0].rows] == [nb]


def test_best_fit_takes_the_tighter_block_in_both_cases(sections: dict[str, Section]) -> None:
    first, second = sections["best-fit"].where
    assert first.column("NB", "block-3-") == {"nb-a"} and first.column("NODE", "filler-") == {"was-worker"}
    assert second.column("NB", "block-3-") == {"nb-b"} and second.column("NODE", "filler-") == {"was-worker5"}


def test_slices_each_in_a_local_block_both_in_one_network_block_and_the_busy_case_waits_whole(
    sections: dict[str, Section],
) -> None:
    section = sections["slices"]
    empty, busy, freed = section.where
    lbs = [empty.column("LB", f"slices-{i}-") for i in (0, 1)]
    assert all(len(lb) == 1 for lb in lbs) and lbs[0] != lbs[1], lbs
    assert len(empty.column("NB", "slices-")) == 1 and empty.column("PHASE", "slices-") == {"Running"}
    assert busy.column("NODE", "slices-") == {"-"} and len(busy.pods("slices-")) == 4
    assert freed.column("NB", "slices-") == {"nb-b"} and freed.column("PHASE", "slices-") == {"Running"}
    assert [[r["STATUS"] for r in t.rows] for t in section.composites] == [
        ["Running"],
        ["Unschedulable"],
        ["Running"],
    ]
    assert [sorted(r["STATUS"] for r in t.rows) for t in section.podgroups] == [
        ["Running", "Running"],
        ["Unschedulable", "Unschedulable"],
        ["Running", "Running"],
    ]
    assert "composite group is unschedulable" in section.text


def test_preemption_runs_high_2_and_requeues_one_low_gang_whole(sections: dict[str, Section]) -> None:
    section = sections["preemption"]
    before, after = section.where
    assert before.column("NB", "low-a-") | before.column("NB", "low-b-") == {"nb-a", "nb-b"}
    assert len(after.column("LB", "high-2-")) == 1 and after.column("PHASE", "high-2-") == {"Running"}
    fates = {job: after.column("PHASE", f"{job}-") for job in ("low-a", "low-b")}
    # One gang whole and running, the other whole and waiting: never a partial gang.
    assert sorted(map(sorted, fates.values())) == [["Pending"], ["Running"]], fates
    assert all(len(after.pods(f"{job}-")) == 4 for job in fates)
    rows = section.podgroups[1].rows
    statuses = {
        job: [r["STATUS"] for r in rows if r["NAME"].startswith(f"{job}-")] for job in ("high-2", *fates)
    }
    assert all(len(v) == 1 for v in statuses.values()), statuses
    assert statuses["high-2"] == ["Running"]
    assert sorted(statuses[job][0] for job in fates) == ["Running", "Unschedulable"], statuses
    assert "status.failed 0" in section.text


def test_node_failure_replaces_in_the_block_then_requeues_whole_into_the_other(
    sections: dict[str, Section],
) -> None:
    start, replaced, moved = sections["node-failure"].where
    assert start.column("NB", "train-3-") == {"nb-a"}
    assert replaced.column("NB", "train-3-") == {"nb-a"} and len(replaced.pods("train-3-")) == 3
    assert moved.column("NB", "train-3-") == {"nb-b"} and moved.column("PHASE", "train-3-") == {"Running"}
    assert [(r["STATUS"], r["DOMAIN"]) for r in sections["node-failure"].podgroups[2].rows] == [
        ("Running", "nb-b")
    ]


def test_suspend_resume_says_suspended_then_why_the_resumed_gang_waits(sections: dict[str, Section]) -> None:
    section = sections["suspend-resume"]
    suspended, resumed = section.where
    assert not suspended.pods("gang-4-")
    assert [r["STATUS"] for r in section.podgroups[0].rows] == ["Suspended"]
    assert resumed.column("PHASE", "gang-4-") == {"Pending"} and len(resumed.pods("gang-4-")) == 4
    assert [r["STATUS"] for r in section.podgroups[1].rows] == ["Unschedulable"]
    assert (
        "PodGroupInitiallyScheduled=True" in section.text and "Admitted=False Unschedulable" in section.text
    )


def test_without_phalanx_the_walk_through_fails_loudly_before_its_first_step(
    cluster: ClusterState, operator: OperatorProcess, short_run: object
) -> None:
    operator.stop()  # its webhook configuration stays (failurePolicy Fail): managed Jobs are refused
    try:
        result = demo(cluster, "--short", "--ready-timeout", "2")
        assert result.returncode == 1
        assert "FAILED before the first step" in result.stdout
        assert "Phalanx's webhook gates a managed Job" in result.stdout
        assert "=== [1/" not in result.stdout
    finally:
        operator.start()
