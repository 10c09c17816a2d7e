"""Unit tests need no cluster: each gets 120 s (pytest-timeout), not the suite's 1,200 s meant for
integration tests, so a unit test that hangs fails at once with its name and stack instead of holding a
CI worker for twenty minutes.

Hypothesis runs without its per-example deadline (200 ms by default): that is a wall-clock limit, which a
busy machine (CI's two workers on two cores) breaks with no defect in the code; a property fails on what
it asserts, and a hang still meets the timeout above."""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("phalanx", deadline=None)
settings.load_profile("phalanx")

UNIT_TIMEOUT_SECONDS = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/unit/" in item.nodeid.replace("\\", "/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_SECONDS))
