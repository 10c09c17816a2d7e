"""Which event loop `phalanx run` runs on (process/eventloop.py), one row per choice and installation, and
the flag that chooses."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from phalanx.cli import build_parser
from phalanx.controller.process.eventloop import EventLoopUnavailableError, loop_factory
from phalanx.controller.process.settings import Settings


def importer(installed: bool):  # type: ignore[no-untyped-def]
    def load(name: str) -> ModuleType:
        if not installed:
            raise ImportError(f"No module named {name!r}")
        return importlib.import_module(name)

    return load


@pytest.mark.parametrize(
    ("choice", "installed", "name"),
    [
        ("auto", True, "uvloop"),
        ("auto", False, "asyncio"),  # a platform without uvloop still runs
        ("uvloop", True, "uvloop"),
        ("asyncio", True, "asyncio"),
        ("asyncio", False, "asyncio"),
    ],
)
def test_the_choice_and_what_is_installed_give_the_loop(choice: str, installed: bool, name: str) -> None:
    factory, chosen = loop_factory(choice, importer(installed))
    assert chosen == name
    assert (factory is None) == (name == "asyncio")
    if factory is not None:
        loop = factory()
        try:
            assert type(loop).__module__.startswith("uvloop")
        finally:
            loop.close()


def test_insisting_on_uvloop_where_it_is_missing_is_an_error_naming_the_flag() -> None:
    with pytest.raises(EventLoopUnavailableError, match="--event-loop uvloop"):
        loop_factory("uvloop", importer(False))
    with pytest.raises(ValueError, match="choose from auto, uvloop, asyncio"):
        loop_factory("trio")


def settings(argv: list[str], env: dict[str, str]) -> Settings:
    parser = build_parser()
    args = parser.parse_args(["run", *argv])
    return Settings.from_args_and_env(args, env=env, parser=args.run_parser)


def test_the_flag_and_its_environment_variable() -> None:
    assert settings([], {}).event_loop == "auto"
    assert settings(["--event-loop", "asyncio"], {}).event_loop == "asyncio"
    assert settings([], {"PHALANX_EVENT_LOOP": "uvloop"}).event_loop == "uvloop"
    assert settings(["--event-loop", "asyncio"], {"PHALANX_EVENT_LOOP": "uvloop"}).event_loop == "asyncio"
    with pytest.raises(SystemExit):
        settings(["--event-loop", "trio"], {})
