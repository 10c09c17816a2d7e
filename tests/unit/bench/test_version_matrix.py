"""bench/version_matrix.py rewrites docs/versions.md's core-case tables and keeps the kinds' section (the
addon tests on each version) that follows them as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from version_matrix import KEPT_FROM, keep_kinds

KINDS = f"{KEPT_FROM}\n\n| kind | v1.30.14 |\n|---|---|\n| JobSet | not supported by JobSet v0.11.1 |\n"
TABLES = "# Kubernetes versions\n\n| case | v1.30.14 |\n|---|---|\n| gang-4 | 4 bound |\n"


@pytest.mark.parametrize(
    ("old", "new", "written"),
    [
        ("", TABLES, TABLES),  # no file yet
        (TABLES, TABLES.replace("4 bound", "3 bound"), TABLES.replace("4 bound", "3 bound")),  # no kinds
        (
            f"{TABLES}\n{KINDS}",
            TABLES.replace("4 bound", "FAIL"),
            f"{TABLES.replace('4 bound', 'FAIL')}\n{KINDS}",
        ),
        (f"{TABLES}\n\n\n{KINDS}", TABLES, f"{TABLES}\n{KINDS}"),  # blank lines before it: one
        (
            f"{TABLES}\n## v1.38.0-beta.0\n\n- notes\n\n{KINDS}",
            TABLES,
            f"{TABLES}\n{KINDS}",
        ),  # notes: the run's
        (f"{TABLES}\nsee {KEPT_FROM.removeprefix('## ')} below\n", TABLES, TABLES),  # a mention is no heading
    ],
)
def test_a_run_rewrites_the_tables_and_keeps_the_kinds_section(old: str, new: str, written: str) -> None:
    assert keep_kinds(old, new) == written
