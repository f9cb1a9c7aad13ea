"""``SIGUSR1``: write every thread's and every asyncio task's stack to stderr, so a node
that hangs (a container stuck starting) can be looked into without stopping it."""

from __future__ import annotations

import asyncio
import faulthandler
import io
import signal
import sys
from types import FrameType


def dump_stacks() -> None:
    """Every thread's Python stack, then every pending task's (on the event loop)."""
    faulthandler.dump_traceback(all_threads=True)
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"--- {len(tasks)} asyncio tasks ---\n")
    for task in tasks:
        out.write(f"{task!r}\n")
        for frame in _awaiting(task.get_coro()):  # print_stack trips on frames without a line
            out.write(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n")
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()


def _awaiting(coro: object, depth_max: int = 30) -> list[FrameType]:
    """The frames of ``coro`` and of what it awaits, outermost first (a suspended task's
    ``get_stack`` gives its outermost frame only, not where it waits)."""
    frames: list[FrameType] = []
    while coro is not None and len(frames) < depth_max:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def install(loop: asyncio.AbstractEventLoop) -> None:
    loop.add_signal_handler(signal.SIGUSR1, dump_stacks)
