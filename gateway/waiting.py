"""A start-up that waits for what it needs (docs/operations.md, "Start-up"): a cluster
node started before its peers, or before ZooKeeper, retries each step that needs them
for as long as it takes. Each attempt is bounded (``attempt_timeout_s``), the pause
between attempts grows to ``retry_max_s``, and one log line every ``log_every_s`` says
what the node waits for; ``/health`` answers the same (``StartupState.waiting_for``).

Only errors of what may come later are waited out (a container, ZooKeeper, a peer, the
controller leader); a mistake (a bad setting: ``ValueError``) still stops the start."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tidegate.core.controller.api import ControllerError
from tidegate.core.segmentstore.api import SegmentStoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a later attempt may get past: something another process provides is not there
#: yet (cluster mode reports ZooKeeper and its peers as ``OSError``, ``gateway/cluster``).
WAITED_OUT: tuple[type[BaseException], ...] = (
    SegmentStoreError, ControllerError, OSError, TimeoutError,
)


class StartupState:
    """Whether the node serves everything yet, and if not what it waits for."""

    def __init__(self) -> None:
        self.ready = False
        #: The step waited on and its last error; empty while nothing is waited on.
        self.step = ""
        self.error = ""
        #: More of what is missing, asked when it is told (the containers not started).
        self.details: list[Callable[[], str | None]] = []

    def waiting_for(self) -> str:
        if self.ready:
            return ""
        # What is missing first (the containers), then the step that needs it.
        parts = [d for describe in self.details if (d := describe())]
        if self.step:
            parts.append(f"{self.step} ({self.error})" if self.error else self.step)
        return "; ".join(parts) or "its stored state to load"


class Waiter:
    """Runs start-up steps, waiting out what ``WAITED_OUT`` names when ``patient``
    (cluster mode); a single node's steps run once, their errors stop the start."""

    def __init__(
        self, state: StartupState, *, patient: bool, attempt_timeout_s: float = 60.0,
        retry_s: float = 0.5, retry_max_s: float = 5.0, log_every_s: float = 15.0,
    ) -> None:
        self.state = state
        self.patient = patient
        self.attempt_timeout_s = attempt_timeout_s
        self.retry_s = retry_s
        self.retry_max_s = retry_max_s
        self.log_every_s = log_every_s
        self._logged_at = -float("inf")

    async def until_done(self, step: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until it succeeds; ``step`` names it in the waiting line."""
        if not self.patient:
            return await attempt()
        delay_s = self.retry_s
        started = time.monotonic()
        while True:
            try:
                async with asyncio.timeout(self.attempt_timeout_s):
                    result = await attempt()
            except WAITED_OUT as exc:
                self.state.step, self.state.error = step, _reason(exc, self.attempt_timeout_s)
                self._tell(started)
                await asyncio.sleep(delay_s)
                delay_s = min(2 * delay_s, self.retry_max_s)
                continue
            self.state.step = self.state.error = ""
            if time.monotonic() - started > self.retry_s:
                log.info("start-up: %s done after %.0f s of waiting", step, time.monotonic() - started)
            return result

    def _tell(self, started: float) -> None:
        now = time.monotonic()
        if now - self._logged_at < self.log_every_s:
            return
        self._logged_at = now
        log.warning("waiting for %s (for %.0f s so far)", self.state.waiting_for(), now - started)


def _reason(exc: BaseException, attempt_timeout_s: float) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"no answer within {attempt_timeout_s:.0f} s"
    if isinstance(exc, OSError):  # cluster mode's own sentences (gateway/cluster/wiring.py)
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"
