"""How late the event loop runs what is ready: the operator's one queue, timed.

Everything the operator does in the process runs in one asyncio loop: the watches, the scheduling passes,
the applier's writes and every admission review. A review that arrives while the loop works through a
burst's watch events waits behind them, so the apiserver sees the webhook answer in tens or hundreds of
milliseconds though the review itself takes one (`phalanx_webhook_review_duration_seconds`). This task
measures that wait directly: it asks to be woken after `interval` seconds and records how much later than
that it ran (`phalanx_event_loop_lag_seconds`). A lag of 0.1 s means anything that became ready at that
moment (a review's request, a watch event, a pass's wake-up) waited about that long before it started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

INTERVAL_SECONDS = 0.25  # four samples a second: cheap, and a stall of a tenth of a second is still seen


async def watch_lag(
    observe: Callable[[float], None],
    interval: float = INTERVAL_SECONDS,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Until cancelled: sleep `interval`, observe how late the wake-up came (never below 0)."""
    while True:
        asked = clock() + interval
        await sleep(interval)
        observe(max(0.0, clock() - asked))
