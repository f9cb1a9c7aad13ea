"""A test hook, off by default: ``TIDEGATE_FAILPOINTS=name,name`` in the environment of
``tidegate serve`` makes the process kill itself (SIGKILL, as ``kill -9``) when it
reaches one of the named points, so crash tests can stop an admin operation between two
of its steps (``tests/clients/test_admin_crash_steps.py``); ``name=MS`` arms a stall
point: once the process got SIGUSR2, the point waits the first time it is reached, until
the next SIGUSR2 or for ``MS`` milliseconds (a test picks both moments). Never set it in
production.

Points: ``create_topics.entry_stored`` (the topic's record is written, its stream not
yet), ``delete_records.log_start_stored`` (the new log starts are durable, the stream
not yet truncated, no answer sent), ``alter_configs.configs_stored`` (the new configs
are stored, the stream's policies not yet updated). Stall points:
``cluster.on_owned`` (a change of this node's containers, before the gateway catches up
with it: a slow index catch-up, as a node's loss can cause;
``tests/cluster/test_idempotence_failover.py``), ``groups.write`` (a group coordinator's
write, offsets or a group, before it reaches the table: ``tests/cluster/test_coordinator_moves.py``).
``loop.hold=MS``: the first SIGUSR2 holds the event loop's thread busy for ``MS``
milliseconds, as one long CPU-bound step would (``tests/cluster/test_busy_node.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

log = logging.getLogger(__name__)

_POINTS = [p.partition("=") for p in os.environ.get("TIDEGATE_FAILPOINTS", "").split(",") if p]
_ARMED = frozenset(name for name, _, _ in _POINTS)
#: Stall points not reached yet, with their waits in milliseconds.
_STALLS = {name: int(ms) for name, sep, ms in _POINTS if sep and ms.isdigit()}
#: SIGUSR2 received: the first arms the stall points, the next ends a stall.
_signals = 0


def _arm(signum: int, frame: object) -> None:
    global _signals
    _signals += 1
    hold_ms = _STALLS.pop("loop.hold", None)
    if hold_ms is not None:  # signal handlers run on the main thread: the loop's
        log.warning("failpoint loop.hold: the event loop held for %d ms", hold_ms)
        end = time.monotonic() + hold_ms / 1000
        while time.monotonic() < end:
            pass
        log.warning("failpoint loop.hold: released")


if _STALLS:
    signal.signal(signal.SIGUSR2, _arm)


def hit(name: str) -> None:
    """Kill this process at once if the point ``name`` is armed."""
    if name in _ARMED:
        log.warning("failpoint %s: kill -9", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


async def stall(name: str) -> None:
    """The first time the point ``name`` is reached after a SIGUSR2, wait for the next
    SIGUSR2, at most as long as the point is armed with."""
    if not _signals:
        return
    ms = _STALLS.pop(name, None)
    if ms is None:
        return
    log.warning("failpoint %s: waiting up to %d ms", name, ms)
    armed_by = _signals
    deadline = asyncio.get_running_loop().time() + ms / 1000
    while _signals == armed_by and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    log.warning("failpoint %s: going on", name)
