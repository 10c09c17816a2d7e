"""The one way a fixture runs a Phalanx operator for its tests, and gives each test a fresh namespace.

conftest.py's `phalanx` and `ns` (the stock cluster) and kinds_fixtures.py's `phalanx_addons` and
`kinds_ns` (the cluster with the real JobSet, LWS, Trainer and Kueue controllers) differ only in the
cluster, the operator's flags and name, and how long a namespace may take to go: what they share is here,
so that a change to how an operator is started, stopped or restarted holds for both.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.operator_process import OperatorProcess

from .kube import Namespace, delete_namespace, new_namespace


def running_operator(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """Start `operator`, yield it, and stop it afterwards (also when it failed to start); the log's path
    is printed, for the failure report."""
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        print(f"operator log: {operator.log_path}")


def instead_of(session: OperatorProcess, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """Run `operator` (a test's own: its flags, its kill switches armed) in place of the session's, which is
    stopped meanwhile and started again afterwards; the test fails if its log says a pass or a unit's
    planning raised."""
    session.stop()
    since = log_size(operator)
    try:
        yield from running_operator(operator)
        assert_no_planning_errors(operator, since)
    finally:
        session.start()


def namespace_with(
    cluster: ClusterState,
    operator: OperatorProcess,
    request: pytest.FixtureRequest,
    *,
    delete_timeout: float = 90.0,
) -> Iterator[Namespace]:
    """A fresh namespace on `cluster` named after the test, with `operator` running (restarted if a test
    stopped it); deleted after the test — and the test fails if the operator's log says, meanwhile, that
    a scheduling pass or a unit's planning raised (a bug; the passes go on, so nothing else would show it)."""
    if operator.proc is None or operator.proc.poll() is not None:
        operator.start()
    since = log_size(operator)
    namespace = new_namespace(cluster, request.node.name)
    yield namespace
    try:
        assert_no_planning_errors(operator, since)
    finally:
        delete_namespace(namespace, timeout=delete_timeout)


# What the loop logs when a pass or one unit's planning raised (controller/loop/scheduler.py).
PLANNING_ERRORS = ("scheduling pass failed", "failed; it plans nothing until this is mended")


def log_size(operator: OperatorProcess) -> int:
    """Where the operator's log (all its runs, one file) ends now."""
    return operator.log_path.stat().st_size if operator.log_path.exists() else 0


def assert_no_planning_errors(operator: OperatorProcess, since: int) -> None:
    """No pass and no unit's planning raised since the log's byte `since` (the lines and what follows)."""
    if not operator.log_path.exists():
        return
    with open(operator.log_path, "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    hits = [i for i, line in enumerate(lines) if any(e in line for e in PLANNING_ERRORS)]
    assert not hits, "the operator's planning raised:\n" + "\n".join(lines[hits[0] : hits[0] + 25])
