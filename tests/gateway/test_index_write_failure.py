"""A failed offset-index write (a full disk) makes the partition wait, not wedge.

Before: the partition went offline until a restart. Now the append whose index write
failed and every later one wait, durable and unanswered; new appends are refused, reads
below the high watermark go on, and once the index takes writes again the waiting
appends are indexed and answered at dense offsets, without a restart. A stop while it
waits leaves them to the next start's rebuild from the segments."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.log.offset_index import IndexWrite, OffsetIndex
from tidegate.gateway.log.partition_log import StorageFailure
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.gateway.txn.partition_txns import PartitionTxns
from tidegate.protocol.record_batch import iter_batches

from tests.clients.requests import record_batch


class _FailingIndex(OffsetIndex):
    """Commits raise while ``failing``, as RocksDB does after an I/O error until it is
    re-opened (``recover`` succeeds once ``failing`` is cleared)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.failing = False

    def batch(self) -> IndexWrite:
        write = super().batch()
        real_commit = write.commit

        def commit() -> None:
            if self.failing:
                self.broken = OSError(28, "injected: no space left on device")
                raise self.broken
            real_commit()

        write.commit = commit  # type: ignore[method-assign]
        return write

    def recover(self) -> None:
        if self.failing:
            raise OSError(28, "still full")
        self.broken = None

async def _stack(tmp: Path) -> tuple[InMemorySegmentStore, StreamController, TopicRegistry]:
    store = InMemorySegmentStore()
    controller = StreamController(store)
    await store.start()
    await controller.start()
    topics = TopicRegistry(controller, store, "kafka")
    await topics.start()
    await topics.create("t", 1)
    return store, controller, topics


def _append(logs: PartitionLogs, n: int) -> Any:
    raw = record_batch([b"v%d" % n])
    return logs.get("t", 0).append(raw, list(iter_batches(raw)))


async def _read_offsets(logs: PartitionLogs, plog: Any) -> list[int]:
    chunks = await logs.read_batches(plog, 0, 1 << 20, True)
    return [b.base_offset for b in iter_batches(b"".join(bytes(c) for c in chunks))]


async def test_failed_index_write_waits_and_resumes_when_writable(tmp_path: Path) -> None:
    store, controller, topics = await _stack(tmp_path)
    index = _FailingIndex(tmp_path / "index")
    logs = PartitionLogs(topics, store, index, ProducerStates(index))
    plog = logs.get("t", 0)
    await plog.ensure_segment()
    first = [_append(logs, n) for n in range(3)]
    await asyncio.wait_for(asyncio.gather(*(p.durable for p in first)), 10)
    index.failing = True
    waiting = [_append(logs, n) for n in range(3, 6)]
    await asyncio.sleep(1.0)
    assert not any(p.durable.done() for p in waiting), "answered before being indexed"
    assert plog.failed is not None and plog.high_watermark == 3
    with pytest.raises(StorageFailure, match="offset index unavailable"):
        _append(logs, 6)
    assert await _read_offsets(logs, plog) == [0, 1, 2]  # below the watermark: served
    index.failing = False  # space is back
    await asyncio.wait_for(asyncio.gather(*(p.durable for p in waiting)), 10)
    assert [p.base_offset for p in waiting] == [3, 4, 5]
    assert plog.failed is None and plog.high_watermark == plog.next_offset == 6
    appended = _append(logs, 6)
    await asyncio.wait_for(appended.durable, 10)
    assert appended.base_offset == 6
    assert await _read_offsets(logs, plog) == list(range(7))
    logs.close()
    index.close()
    await controller.close()
    await store.close()


async def test_stop_while_waiting_leaves_the_appends_to_the_rebuild(tmp_path: Path) -> None:
    store, controller, topics = await _stack(tmp_path)
    index = _FailingIndex(tmp_path / "index")
    logs = PartitionLogs(topics, store, index, ProducerStates(index))
    plog = logs.get("t", 0)
    await plog.ensure_segment()
    await asyncio.wait_for(_append(logs, 0).durable, 10)
    index.failing = True
    waiting = [_append(logs, n) for n in range(1, 4)]
    await asyncio.sleep(0.5)
    await asyncio.wait_for(logs.drain(10), 2)  # does not wait for the index
    logs.close()
    index.close()
    assert not any(p.durable.done() for p in waiting)

    healthy = OffsetIndex(tmp_path / "index")  # the restart: rebuilt from the segments
    logs2 = PartitionLogs(topics, store, healthy, ProducerStates(healthy))
    assert await logs2.rebuild() == 3
    plog2 = logs2.get("t", 0)
    assert plog2.high_watermark == plog2.next_offset == 4
    assert await _read_offsets(logs2, plog2) == list(range(4))
    healthy.close()
    await controller.close()
    await store.close()


async def test_transaction_index_is_written_when_the_index_comes_back(tmp_path: Path) -> None:
    """The transaction index applied the failed write in memory: the retry writes it
    again, so a transaction opened meanwhile is in RocksDB (a restart would see it)."""
    store, controller, topics = await _stack(tmp_path)
    index = _FailingIndex(tmp_path / "index")
    logs = PartitionLogs(topics, store, index, ProducerStates(index))
    logs.index_hook = PartitionTxns(index)
    plog = logs.get("t", 0)
    await plog.ensure_segment()
    await asyncio.wait_for(_append(logs, 0).durable, 10)
    index.failing = True
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=7, producer_epoch=0,
        base_sequence=0, batch_size=1 << 20,
    )
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"in a transaction", headers=[])
    raw = bytes(builder.build())
    waiting = plog.append(raw, list(iter_batches(raw)))
    await asyncio.sleep(0.3)
    index.failing = False
    await asyncio.wait_for(waiting.durable, 10)
    assert PartitionTxns(index).open_transactions("t", 0) == {7: 1}
    logs.close()
    index.close()
    await controller.close()
    await store.close()
