"""Completion callbacks called by the code that completes a future.

``fut.add_done_callback`` schedules its callback: one event-loop hop, which under load
waits for the rest of a busy loop iteration. An acknowledged produce went through eight
such hops between its frame arriving and its answer leaving; two of them only passed
the completion from one layer to the next (Tier-1 log → durable log → the gateway's
partition). Where a component completes a future and is handed the waiter's callback
with it, it calls the callback at once with ``call_now``: the next layer runs in the
same loop turn.

A callback's exception is reported to the loop's exception handler, as a scheduled
callback's would be, and never stops the completing code (which usually has further
futures of the same batch to complete).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

#: Called with the future once it is done (result, exception or cancelled).
DoneCallback = Callable[["asyncio.Future[Any]"], None]


def call_now(on_done: DoneCallback, fut: asyncio.Future[Any]) -> None:
    """Run ``on_done(fut)`` now; ``fut`` must be done."""
    try:
        on_done(fut)
    except Exception as exc:  # noqa: BLE001 - isolated as the event loop would
        fut.get_loop().call_exception_handler(
            {"message": f"completion callback {on_done!r} failed", "exception": exc, "future": fut}
        )


def when_done(fut: asyncio.Future[Any], on_done: DoneCallback | None) -> None:
    """``on_done`` as an ordinary (scheduled) done callback, if given: for the paths
    that do not complete ``fut`` themselves."""
    if on_done is not None:
        fut.add_done_callback(on_done)
