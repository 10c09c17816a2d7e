"""Which event loop the operator runs on: uvloop where it is installed, else asyncio's own.

Everything of the process runs in one loop (process/looplag.py), the admission webhooks included, and
the apiserver opens a connection per review in flight (HTTP/1.1: aiohttp serves no HTTP/2), each one a
TLS handshake in the loop. In interleaved 1,000-node bursts of 100 gang Jobs the apiserver timed the
webhook's p99 at 100 ms in three of five runs on uvloop, at 366-485 ms in all four on asyncio's loop, and
the process's peak RSS was 16-27 MiB lower (docs/performance.md). uvloop is a dependency on Linux and
macOS; `--event-loop asyncio` keeps asyncio's loop (a fault suspected in uvloop, a platform without it),
`uvloop` insists on it.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from types import ModuleType

EVENT_LOOPS = ("auto", "uvloop", "asyncio")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class EventLoopUnavailableError(RuntimeError):
    """`--event-loop uvloop` where uvloop cannot be imported."""


def loop_factory(
    choice: str, importer: Callable[[str], ModuleType] = importlib.import_module
) -> tuple[LoopFactory | None, str]:
    """(the factory for asyncio.Runner, None for asyncio's own; the loop's name) for `choice`."""
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop {choice!r}: choose from {', '.join(EVENT_LOOPS)}")
    if choice == "asyncio":
        return None, "asyncio"
    try:
        uvloop = importer("uvloop")
    except ImportError as e:
        if choice == "uvloop":
            raise EventLoopUnavailableError(
                f"--event-loop uvloop: uvloop cannot be imported ({e}); install it (pip install uvloop) "
                "or choose --event-loop auto or asyncio"
            ) from e
        return None, "asyncio"
    factory: LoopFactory = uvloop.new_event_loop
    return factory, "uvloop"
