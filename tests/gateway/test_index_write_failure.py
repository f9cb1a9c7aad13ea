"""A failed offset-index write takes the partition offline instead of wedging it.

Before: the append whose index write raised was popped from the pipeline and never
answered (the producer waited out its timeout), and the appends after it were indexed
and acknowledged around the hole. Now that append and every later one fail, new appends
are refused, reads below the high watermark go on, and a restart (a rebuild from the
segments) indexes everything the store holds, densely."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.log.offset_index import IndexWrite, OffsetIndex
from tidegate.gateway.log.partition_log import StorageFailure
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.protocol.record_batch import iter_batches

from tests.clients.requests import record_batch


class _FailingIndex(OffsetIndex):
    """Commits number ``fail_from`` and later raise, as RocksDB does after an I/O error."""

    def __init__(self, path: Path, fail_from: int) -> None:
        super().__init__(path)
        self.fail_from = fail_from
        self.commits = 0

    def batch(self) -> IndexWrite:
        write = super().batch()
        real_commit = write.commit

        def commit() -> None:
            self.commits += 1
            if self.commits >= self.fail_from:
                raise OSError(5, "injected I/O error")
            real_commit()

        write.commit = commit  # type: ignore[method-assign]
        return write


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


async def test_failed_index_write_fails_appends_and_a_restart_indexes_them(tmp_path: Path) -> None:
    store, controller, topics = await _stack(tmp_path)
    index = _FailingIndex(tmp_path / "index", fail_from=4)
    logs = PartitionLogs(topics, store, index, ProducerStates(index))
    plog = logs.get("t", 0)
    await plog.ensure_segment()
    pendings = [_append(logs, n) for n in range(6)]
    done = await asyncio.wait_for(
        asyncio.gather(*(p.durable for p in pendings), return_exceptions=True), 10
    )
    assert done[:3] == [None, None, None]
    assert all(isinstance(r, StorageFailure) for r in done[3:]), done
    assert plog.failed is not None and plog.high_watermark == 3
    with pytest.raises(StorageFailure):
        _append(logs, 6)
    chunks = await logs.read_batches(plog, 0, 1 << 20, True)  # below the watermark: served
    assert [b.base_offset for b in iter_batches(b"".join(bytes(c) for c in chunks))] == [0, 1, 2]
    index.close()

    # The restart: a healthy index over the same files, rebuilt from the segments.
    healthy = OffsetIndex(tmp_path / "index")
    logs2 = PartitionLogs(topics, store, healthy, ProducerStates(healthy))
    assert await logs2.rebuild() == 3  # the three appends that failed were durable
    plog2 = logs2.get("t", 0)
    assert plog2.high_watermark == plog2.next_offset == 6
    chunks = await logs2.read_batches(plog2, 0, 1 << 20, True)
    assert [b.base_offset for b in iter_batches(b"".join(bytes(c) for c in chunks))] == list(range(6))
    await plog2.ensure_segment()
    appended = _append(logs2, 6)
    await asyncio.wait_for(appended.durable, 10)
    assert appended.base_offset == 6
    healthy.close()
    await controller.close()
    await store.close()
