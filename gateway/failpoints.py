"""A test hook, off by default: ``TIDEGATE_FAILPOINTS=name,name`` in the environment of
``tidegate serve`` makes the process kill itself (SIGKILL, as ``kill -9``) when it
reaches one of the named points, so crash tests can stop an admin operation between two
of its steps (``tests/clients/test_admin_crash_steps.py``). Never set it in production.

Points: ``create_topics.entry_stored`` (the topic's record is written, its stream not
yet), ``delete_records.log_start_stored`` (the new log starts are durable, the stream
not yet truncated, no answer sent), ``alter_configs.configs_stored`` (the new configs
are stored, the stream's policies not yet updated).
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

_ARMED = frozenset(p for p in os.environ.get("TIDEGATE_FAILPOINTS", "").split(",") if p)


def hit(name: str) -> None:
    """Kill this process at once if the point ``name`` is armed."""
    if name in _ARMED:
        log.warning("failpoint %s: kill -9", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
