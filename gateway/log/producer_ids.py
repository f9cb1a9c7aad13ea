"""Producer ids and epochs for InitProducerId, persisted in a table segment.

- Ids are handed out from blocks of ``block_size`` reserved durably (compare-and-set on
  the ``next`` key), so an id is never given twice, also across restarts.
- A producer without a transactional id gets a fresh id with epoch 0; one that asks to
  bump its own epoch (v3+, ``producer_id``/``producer_epoch`` set) keeps its id with
  epoch + 1, or a fresh id when the epoch would overflow.
- A transactional id keeps its producer id; every InitProducerId raises its epoch
  (persisted), which fences the previous incarnation: its batches carry an older epoch
  and are refused by the partition producer state.
"""

from __future__ import annotations

import asyncio
import json

from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    SegmentExistsError,
    SegmentStore,
    TableUpdate,
)

PRODUCERS_TABLE = "_system/gateway/producers"
EPOCH_MAX = 32767


class ProducerIdAllocator:
    def __init__(self, store: SegmentStore, block_size: int = 1000) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._limit = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            await self._store.create_table(PRODUCERS_TABLE)
        except SegmentExistsError:
            pass

    async def _new_id(self) -> int:
        if self._next >= self._limit:
            (current,) = await self._store.table_get(PRODUCERS_TABLE, [b"next"])
            start = int(current.value) if current is not None else 0
            version = current.version if current is not None else NOT_EXISTS
            limit = start + self._block_size
            await self._store.table_put(
                PRODUCERS_TABLE, [TableUpdate(b"next", str(limit).encode(), version)]
            )
            self._next, self._limit = start, limit
        pid = self._next
        self._next += 1
        return pid

    async def allocate(self) -> int:
        """A producer id never handed out before (the transaction coordinator's)."""
        async with self._lock:
            return await self._new_id()

    async def init(
        self, transactional_id: str | None, producer_id: int = -1, producer_epoch: int = -1
    ) -> tuple[int, int]:
        """``(producer id, epoch)`` for an InitProducerId request."""
        async with self._lock:
            if transactional_id is None:
                if producer_id >= 0 and 0 <= producer_epoch < EPOCH_MAX:
                    return producer_id, producer_epoch + 1
                return await self._new_id(), 0
            key = b"txn/" + transactional_id.encode()
            (current,) = await self._store.table_get(PRODUCERS_TABLE, [key])
            if current is None:
                pid, epoch, version = await self._new_id(), 0, NOT_EXISTS
            else:
                state = json.loads(current.value)
                pid, epoch, version = int(state["pid"]), int(state["epoch"]) + 1, current.version
                if epoch > EPOCH_MAX:
                    pid, epoch = await self._new_id(), 0
            value = json.dumps({"pid": pid, "epoch": epoch}).encode()
            await self._store.table_put(PRODUCERS_TABLE, [TableUpdate(key, value, version)])
            return pid, epoch
