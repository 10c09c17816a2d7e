"""bench/kinds_versions.py: each version's addon-test run read from its JUnit report, per test file, and
written as docs/versions.md's kinds section (replacing the one there, or after the core-case tables)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from kinds_versions import KEPT_FROM, Run, cell, read_junit, write_section

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.integration.test_kind_lws" name="test_a" time="1.0"/>
<testcase classname="tests.integration.test_kind_lws" name="test_b" time="1.0">
<failure message="boom"/></testcase>
<testcase classname="tests.integration.test_kind_jobset" name="test_c" time="0">
<skipped type="pytest.skip" message="not on Kubernetes v1.30.14: jobset v0.11.1 needs v1.32"/></testcase>
<testcase classname="tests.integration.test_kind_jobset" name="test_d" time="0">
<skipped type="pytest.skip" message="not on Kubernetes v1.30.14: jobset v0.11.1 needs v1.32"/></testcase>
<testcase classname="tests.integration.test_kueue" name="test_e" time="0"><error message="setup"/></testcase>
</testsuite></testsuites>
"""


def test_a_report_is_read_by_file_with_each_outcome_and_the_skip_reasons_counted(tmp_path: Path) -> None:
    (tmp_path / "r.xml").write_text(JUNIT)
    run = Run("v1.30.14")
    read_junit(tmp_path / "r.xml", run)
    assert run.outcomes == {
        "test_kind_lws.py": {"passed": ["test_a"], "failed": ["test_b"]},
        "test_kind_jobset.py": {"skipped": ["test_c", "test_d"]},
        "test_kueue.py": {"failed": ["test_e"]},  # an error in setup is a failure of the test
    }
    assert run.reasons == {"not on Kubernetes v1.30.14: jobset v0.11.1 needs v1.32": 2}


@pytest.mark.parametrize(
    ("outcomes", "written"),
    [
        ({}, "–"),  # the file did not run
        ({"passed": ["a", "b"]}, "2 passed"),
        ({"skipped": ["a"]}, "1 skipped"),
        ({"passed": ["a"], "skipped": ["b", "c"]}, "1 passed, 2 skipped"),
        ({"passed": ["a"], "failed": ["b"]}, "**1 failed**: `b`, 1 passed"),
    ],
)
def test_a_cell_says_what_passed_was_skipped_and_which_failed(
    outcomes: dict[str, list[str]], written: str
) -> None:
    assert cell(outcomes) == written


SECTION = f"{KEPT_FROM}\n\n| file | v1.30.14 |\n"
TABLES = "# Kubernetes versions\n\n| case | v1.30.14 |\n"


@pytest.mark.parametrize(
    ("doc", "written"),
    [
        ("", SECTION),
        (TABLES, f"{TABLES}\n{SECTION}"),  # appended after the tables
        (f"{TABLES}\n{KEPT_FROM}\n\nold rows\n\n### notes\n", f"{TABLES}\n{SECTION}"),  # replaced to the end
    ],
)
def test_the_section_replaces_the_one_in_the_doc_or_follows_the_tables(doc: str, written: str) -> None:
    assert write_section(doc, SECTION) == written
