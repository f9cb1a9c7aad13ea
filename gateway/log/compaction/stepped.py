"""A pass's rewrite into a new clean segment, switched into the offset index in steps
(``docs/compaction.md`` step 4): whenever ``switch_entries_max`` new entries are held,
and at the end, the bytes are flushed and, once durable, one synced write replaces the
entries of the offsets the step covers. Until the last step the checkpoint keeps its end
offset and names the new generation live too (``last_generation``), so a crash between
steps leaves readers on old and new entries, each pointing at durable bytes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Protocol

from tidegate.gateway.log.compaction.checkpoint import Checkpoint
from tidegate.gateway.log.compaction.retain import Retention
from tidegate.gateway.log.compaction.txns import AbortedTxn, TxnIndex
from tidegate.gateway.log.offset_index import IndexEntry
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.protocol.record_batch import read_header

log = logging.getLogger(__name__)


class PassIO(Protocol):
    """Reads of batches, appends to the clean segment, the pass's read-rate bound."""

    async def read(self, topic: str, entry: IndexEntry) -> bytes: ...
    async def append(self, name: str, buffer: bytearray, expected: int) -> int: ...
    async def throttle(self, size: int) -> None: ...


class Index(Protocol):
    def entries_from(self, topic: str, partition: int, offset: int) -> Iterator[IndexEntry]: ...

    def switch_cleaned(
        self, topic: str, partition: int, end_offset: int, entries: list[IndexEntry],
        checkpoint: bytes, log_start: int, deletes: Iterable[tuple[bytes, bytes]] = (),
        from_offset: int = 0,
    ) -> None: ...


class SteppedRewrite:
    """One pass over ``plog`` from its log start to ``end`` into clean segment ``name``
    (id ``seg_id``) of ``generation``; ``current()`` is false once the topic was deleted or replaced."""

    def __init__(
        self, io: PassIO, index: Index, txns: TxnIndex | None, current: Callable[[], bool],
        plog: PartitionLog, cp: Checkpoint, generation: int, seg_id: int, name: str,
        append_bytes_max: int, switch_entries_max: int,
    ) -> None:
        self.io = io
        self.index = index
        self.txns = txns
        self.current = current
        self.plog = plog
        self.cp = cp
        self.generation = generation
        self.name = name
        self.seg_id = seg_id
        self.append_bytes_max = append_bytes_max
        self.switch_entries_max = switch_entries_max
        #: Whether a step was switched: the clean segment is referenced from then on.
        self.switched = False
        self.written = 0
        self.removed = 0
        self._switched_to = 0  # the offsets below it are switched
        self._buffer = bytearray()
        self._entries: list[IndexEntry] = []

    async def run(self, retention: Retention, end: int, now_ms: int) -> bool:
        """False if the partition went away meanwhile (what was switched stays)."""
        plog = self.plog
        topic, partition = plog.topic, plog.partition
        forgotten = 0
        for e in self.index.entries_from(topic, partition, plog.log_start_offset):
            if e.base_offset >= end:
                break
            data = await self.io.read(topic, e)
            f = retention.batch(data, read_header(data))
            if f.data is not None:
                self._entries.append(IndexEntry(
                    e.base_offset, e.last_offset, self.seg_id,
                    self.written + len(self._buffer), len(f.data), f.max_timestamp))
                self._buffer += f.data
            if len(self._buffer) >= self.append_bytes_max:
                await self._flush()
            if len(self._entries) >= self.switch_entries_max:
                gone = retention.forgotten[forgotten:]
                forgotten = len(retention.forgotten)
                if not await self._switch(e.last_offset + 1, gone, None):
                    return False
            await self.io.throttle(len(data))
        final = Checkpoint(end, self.generation, 0, retention.oldest_due_ms,
                           self.cp.with_span(end, now_ms, plog.log_start_offset))
        if not await self._switch(end, retention.forgotten[forgotten:], final):
            return False
        self.removed = retention.removed
        log.debug("%s/%d: %d records removed, %d bytes kept", topic, partition,
                  retention.removed, self.written)
        return True

    async def _flush(self) -> None:
        if self._buffer:
            self.written += await self.io.append(self.name, self._buffer, self.written)

    async def _switch(self, upto: int, forgotten: list[AbortedTxn],
                      final: Checkpoint | None) -> bool:
        """Switch the entries of offsets ``[switched_to, upto)``; ``final``: the pass's
        checkpoint (else the old one, with the new generation live)."""
        plog = self.plog
        await self._flush()
        # No await from the checks to the synced write.
        if not self.current() or plog.retired or plog.failed is not None:
            return False
        start = plog.log_start_offset
        if final is not None:
            checkpoint = replace(final, clean_bytes=self.written)
        else:
            checkpoint = replace(self.cp, last_generation=self.generation)
        txns = self.txns
        self.index.switch_cleaned(
            plog.topic, plog.partition, upto, [e for e in self._entries if e.last_offset >= start],
            checkpoint.encode(), start,
            [txns.aborted_key(t) for t in forgotten] if txns is not None else [],
            from_offset=self._switched_to,
        )
        if txns is not None and forgotten:
            txns.forget_aborted(plog.topic, plog.partition, forgotten)
        while plog.recent and plog.recent[0].base_offset < upto:
            plog.recent.popleft()
        self.switched, self._switched_to = True, upto
        self._entries = []
        return True
