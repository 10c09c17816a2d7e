"""Unit tests need no cluster: each gets 120 s (pytest-timeout), not the suite's 1,200 s meant for
integration tests, so a unit test that hangs fails at once with its name and stack instead of holding a
CI worker for twenty minutes."""

from __future__ import annotations

import pytest

UNIT_TIMEOUT_SECONDS = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/unit/" in item.nodeid.replace("\\", "/") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_SECONDS))
