"""``OrphanSweep``: deletes a plog server's plogs that no log records any more.

A log deletes plogs it drops (truncation, abandoned switches, spares of an earlier
owner) on their servers at once, best effort: a server that is down then keeps them.
The sweep finds them when the server is back (at its start, then every
``interval_ms``): for each of its plogs it reads the record of the log named in the
plog's id (``<log>-<epoch>-<16 hex>``, ``tier1/replicated/chain.py``) and deletes the
plog if the record names it neither in its chain nor among its spares. A log records a
plog before it creates one, so a plog that exists and is not recorded was dropped.
Plogs whose id names no log, or whose log has no record, are left alone.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Protocol

from tidegate.core.cluster.zookeeper import NoNodeError, ZooKeeperError
from tidegate.core.segmentstore.tier1.api import DataLogCorruptError
from tidegate.core.segmentstore.tier1.replicated.meta import LogMeta

log = logging.getLogger(__name__)

PLOG_OF_LOG = re.compile(r"(?P<log>[A-Za-z0-9_-]{1,64})-[0-9]+-[0-9a-f]{16}")


class Plogs(Protocol):
    """The server's store, as the sweep uses it."""

    def ids(self) -> list[str]: ...

    async def delete(self, plog_id: str) -> tuple[int, bytes]: ...


class Records(Protocol):
    """The coordination service holding the logs' records."""

    async def sync(self, path: str) -> None: ...

    async def get(self, path: str) -> tuple[bytes, int]: ...


class OrphanSweep:
    def __init__(self, plogs: Plogs, records: Records, root: str, *, interval_ms: int) -> None:
        self._plogs = plogs
        self._records = records
        self._logs = root.rstrip("/") + "/logs"
        self.interval_s = interval_ms / 1000
        #: Plogs deleted so far (tests, logs).
        self.deleted: list[str] = []

    async def run(self) -> None:
        """Sweep now, then every ``interval_ms`` (errors are logged, the next round retries)."""
        while True:
            try:
                await self.sweep()
            except (ZooKeeperError, OSError) as exc:
                log.warning("orphan sweep failed: %r", exc)
            if self.interval_s <= 0:
                return
            await asyncio.sleep(self.interval_s)

    async def sweep(self) -> list[str]:
        """One round: the orphans deleted."""
        by_log: dict[str, list[str]] = {}
        for pid in self._plogs.ids():  # listed before the records are read (see above)
            m = PLOG_OF_LOG.fullmatch(pid)
            if m is not None:
                by_log.setdefault(m["log"], []).append(pid)
        if not by_log:
            return []
        await self._records.sync(self._logs)
        gone: list[str] = []
        for name, pids in sorted(by_log.items()):
            try:
                raw, _ = await self._records.get(f"{self._logs}/{name}")
                meta = LogMeta.from_bytes(raw)
            except (NoNodeError, DataLogCorruptError):
                continue
            named = {p.id for p in meta.plogs} | {s.id for s in meta.spares}
            for pid in pids:
                if pid not in named:
                    await self._plogs.delete(pid)
                    gone.append(pid)
        if gone:
            log.info("orphan sweep deleted %d plogs no log records: %s", len(gone), gone[:20])
            self.deleted.extend(gone)
        return gone
