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
        try:
            self._version = await self._coordinator.write_log(self.name, meta.to_bytes(), self._version)
        except MetadataConflictError:
            raise DataLogFencedError(f"log {self.name}: epoch {self.epoch} fenced (record changed)") from None
        except Exception as exc:  # noqa: BLE001 - the outcome is unknown: stop writing
            raise DataLogError(f"log {self.name}: recording failed: {exc!r}") from exc
        self.meta = meta

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
