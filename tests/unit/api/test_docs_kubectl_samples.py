"""The `kubectl get podgroups` (and compositepodgroups) samples of README.md and docs/ show the columns the
CRDs print: a sample written before a column was added says what kubectl no longer shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^\$ kubectl get (?P<resource>[a-z]+)(?:\.scheduling\.phalanx\.dev)?(?P<rest>\s.*)?$")


def _crd(plural: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(
        (ROOT / "crds" / f"scheduling.phalanx.dev_{plural}.yaml").read_text()
    )
    return crd


RESOURCES = {
    name: plural
    for plural in ("podgroups", "compositepodgroups")
    for name in (
        plural,
        _crd(plural)["spec"]["names"]["singular"],
        *_crd(plural)["spec"]["names"]["shortNames"],
    )
}


def columns(plural: str, wide: bool) -> list[str]:
    """The header kubectl prints: NAME, then the printer columns (those of priority > 0 with -o wide only)."""
    (version,) = (v for v in _crd(plural)["spec"]["versions"] if v.get("served", True))
    printed = [c for c in version["additionalPrinterColumns"] if wide or not c.get("priority")]
    return ["NAME", *(c["name"].upper() for c in printed)]


def samples() -> list[tuple[str, str, list[str]]]:
    """(where, command, its output) of every `$ kubectl get <podgroups|compositepodgroups>` with a table."""
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            match = COMMAND.match(line)
            if not match or match["resource"] not in RESOURCES:
                continue
            table = []
            for row in lines[i + 1 :]:
                if not row.strip() or row.startswith(("$ ", "```")):
                    break
                table.append(row)
            if table and table[0].startswith("NAME"):
                found.append((f"{path.relative_to(ROOT)}:{i + 1}", line, table))
    return found


SAMPLES = samples()


def test_the_samples_are_found() -> None:
    where = {w.split(":")[0] for w, _, _ in SAMPLES}
    assert {"README.md", "docs/demo.md", "docs/cli.md", "docs/api.md"} <= where
    assert any("compositepodgroups" in command for _, command, _ in SAMPLES)


@pytest.mark.parametrize(("where", "command", "table"), SAMPLES, ids=[w for w, _, _ in SAMPLES])
def test_a_sample_shows_the_crds_columns_aligned_as_kubectl_prints_them(
    where: str, command: str, table: list[str]
) -> None:
    match = COMMAND.match(command)
    assert match is not None
    wide = bool(re.search(r"-o\s*wide", match["rest"] or ""))
    header, *rows = table
    assert header.split() == columns(RESOURCES[match["resource"]], wide), where
    # kubectl's tabwriter: each column starts where its header does, 3 spaces at least after the one before.
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    assert rows, where
    for row in rows:
        for start in starts[1:]:
            assert len(row) <= start - 3 or row[start - 3 : start] == "   ", f"{where}: {row!r}"
