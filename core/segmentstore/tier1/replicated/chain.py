"""``Chain``: a replicated log's record (``meta.py``) as its owner last wrote it, and
the owner's writes to it (the seed's metadata manager). Every write is a
compare-and-set on the version read; losing one means another owner took the log
(``DataLogFencedError``). Writers hold ``lock``: one write at a time, each on the
result of the last.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from tidegate.core.segmentstore.tier1.api import DataLogError, DataLogFencedError
from tidegate.core.segmentstore.tier1.replicated.conn import ServerUnavailableError
from tidegate.core.segmentstore.tier1.replicated.meta import (
    LogMeta,
    MetadataConflictError,
    MetadataExistsError,
    PlogCoordinator,
    PlogRecord,
    Spare,
)
from tidegate.core.segmentstore.tier1.replicated.replicas import Replicas

log = logging.getLogger(__name__)

#: How long a record write whose outcome is unknown is resolved (read back, written
#: again) before the log stops: a ZooKeeper outage of up to this long is ridden out.
RESOLVE_S = 60.0


class Chain:
    def __init__(self, name: str, coordinator: PlogCoordinator) -> None:
        self.name = name
        self._coordinator = coordinator
        self.meta = LogMeta()
        self._version = -1
        self.lock = asyncio.Lock()

    @property
    def epoch(self) -> int:
        return self.meta.epoch

    async def claim(self) -> None:
        """Read the record (made if absent) and bump its epoch: earlier owners' writes
        fail from now on."""
        while True:
            try:
                got = await self._coordinator.read_log(self.name)
                if got is None:
                    try:
                        await self._coordinator.create_log(self.name, LogMeta().to_bytes())
                    except MetadataExistsError:
                        pass
                    continue
                meta = LogMeta.from_bytes(got[0])
                meta.epoch += 1
                self._version = await self._coordinator.write_log(self.name, meta.to_bytes(), got[1])
            except MetadataConflictError:
                continue  # another owner moved first: try again on its record
            except DataLogError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise DataLogError(f"log {self.name}: cannot read its record: {exc!r}") from exc
            self.meta = meta
            return

    async def update(self, change: Callable[[LogMeta], None]) -> None:
        """Apply ``change`` to the record, conditionally. Hold ``lock``."""
        meta = LogMeta.from_bytes(self.meta.to_bytes())
        change(meta)
        data = meta.to_bytes()
        try:
            self._version = await self._coordinator.write_log(self.name, data, self._version)
        except MetadataConflictError:
            raise self._fenced() from None
        except Exception as exc:  # noqa: BLE001 - the outcome is unknown (ZooKeeper went away)
            self._version = await self._resolve(data, exc)
        self.meta = meta

    def _fenced(self) -> DataLogFencedError:
        return DataLogFencedError(f"log {self.name}: epoch {self.epoch} fenced (record changed)")

    async def _resolve(self, data: bytes, exc: Exception) -> int:
        """The new version of a write whose outcome is unknown: once the record can be
        read again, it is ours (written), still the one before (written again now), or
        another owner's (fenced). ``DataLogError`` after ``RESOLVE_S``."""
        log.warning("log %s: recording %r; resolving it", self.name, exc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESOLVE_S
        cause: Exception = exc
        while loop.time() < deadline:
            await asyncio.sleep(0.2)
            try:
                got = await self._coordinator.read_log(self.name)
                if got is None or (got[1] != self._version and not (
                        got[1] == self._version + 1 and got[0] == data)):
                    raise self._fenced()
                if got[1] == self._version + 1:
                    version = got[1]
                else:
                    version = await self._coordinator.write_log(self.name, data, self._version)
            except MetadataConflictError:
                raise self._fenced() from None
            except DataLogFencedError:
                raise
            except Exception as again:  # noqa: BLE001 - still away: read it back again
                cause = again
                continue
            log.info("log %s: recording resolved", self.name)
            return version
        raise DataLogError(f"log {self.name}: recording failed: {cause!r}") from cause

    async def new_plog(self, replicas: Replicas, count: int, least: int, capacity: int) -> Spare:
        """A new empty plog on ``count`` healthy servers (as few as ``least`` while
        fewer are healthy), recorded as a spare before it is made (a crash leaves no
        plog unrecorded). Hold ``lock``. ``TooFewServersError`` if there is no group."""
        while True:
            servers = await replicas.choose_group(count, least)
            spare = Spare(f"{self.name}-{self.epoch}-{uuid.uuid4().hex[:16]}", servers)

            def add(m: LogMeta, spare: Spare = spare) -> None:
                m.spares.append(spare)

            await self.update(add)
            try:
                await replicas.create(spare.id, servers, capacity)
                return spare
            except ServerUnavailableError as exc:
                log.warning("log %s: %s; trying another group", self.name, exc)

                def drop(m: LogMeta, spare: Spare = spare) -> None:
                    m.spares = [s for s in m.spares if s.id != spare.id]

                await self.update(drop)

    async def take_over(self, replicas: Replicas, count: int, least: int, capacity: int) -> PlogRecord:
        """Become the log's owner (fencing, then the start of recovery): claim the record,
        seal the previous owner's active plog at the smallest end its servers hold and
        record that end, drop its spares, and record a new active plog (returned). The
        previous owner's next append meets a sealed plog, its next write a newer record."""
        await self.claim()
        await replicas.refresh()
        async with self.lock:
            last = self.meta.plogs[-1] if self.meta.plogs else None
            if last is not None and last.end is None:
                end = await replicas.seal_min(last.id, last.servers, self.epoch)

                def sealed(m: LogMeta) -> None:
                    m.plogs[-1].end = end

                await self.update(sealed)
            old_spares = list(self.meta.spares)
            if old_spares:

                def no_spares(m: LogMeta) -> None:
                    m.spares = []

                await self.update(no_spares)
            for s in old_spares:
                await replicas.delete(s.id, s.servers)
            first = await self.new_plog(replicas, count, least, capacity)
            active = PlogRecord(self.meta.next_index(), first.id, first.servers, None)

            def promote(m: LogMeta) -> None:
                m.spares = [s for s in m.spares if s.id != first.id]
                m.plogs.append(active)

            await self.update(promote)
        return active
