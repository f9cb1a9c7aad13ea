"""Issue 36, item 2: an idempotent batch is stored once even when an append landed in
Tier-1 but was reported failed (a Tier-1 failover: the outcome of the write was lost),
so that the producer retried it and got new offsets. The leader serves the log without
the failed append; the index rebuild (a restart walks again from the segment's marker,
which stays before the failed append; a node taking the partition over walks the whole
segment) must not bring the copy back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import TooLargeError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.partition_log import StorageFailure
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_state import BatchRecord, Duplicate, ProducerStates
from tidegate.gateway.log.topics import TopicRegistry
from tidegate.protocol.record_batch import iter_batches

from tests.clients.requests import record_batch

PID = 7000


class _LosingStore(InMemorySegmentStore):
    """While ``lose`` is set, an append lands but its caller is told it failed."""

    lose = False

    async def append(self, name: str, data: Any, *args: Any, **kwargs: Any) -> int:
        landed = await super().append(name, data, *args, **kwargs)
        if self.lose and not name.startswith("_system"):
            raise TooLargeError(f"injected: the answer to the append at {landed} was lost")
        return landed


def _produce(logs: PartitionLogs, seq: int) -> Any:
    """What the Produce handler does with one idempotent batch (gateway/handlers/produce.py)."""
    raw = record_batch([b"s%d" % seq], producer_id=PID, epoch=0, base_sequence=seq)
    header = next(iter_batches(raw))
    verdict = logs.producers.check("t", 0, header)
    if isinstance(verdict, Duplicate):
        return verdict.batch
    assert verdict is None, verdict
    pending = logs.get("t", 0).append(raw, [header])
    logs.producers.record("t", 0, pending.batches[0], pending.base_offset, pending.durable)
    return pending


async def _read(logs: PartitionLogs) -> list[tuple[int, bytes]]:
    """(offset, value) of every record served from the partition."""
    plog = logs.get("t", 0)
    chunks = await logs.read_batches(plog, 0, 1 << 20, True)
    records = MemoryRecords(b"".join(bytes(c) for c in chunks))
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.value) for r in batch]
    return out


def _logs(store: Any, topics: TopicRegistry, path: Path) -> tuple[PartitionLogs, OffsetIndex]:
    index = OffsetIndex(path)
    return PartitionLogs(topics, store, index, ProducerStates(index)), index


async def test_a_landed_append_reported_failed_is_not_stored_twice(tmp_path: Path) -> None:
    store = _LosingStore()
    controller = StreamController(store)
    await store.start()
    await controller.start()
    topics = TopicRegistry(controller, store, "kafka")
    await topics.start()
    await topics.create("t", 1)
    logs, index = _logs(store, topics, tmp_path / "index")
    await logs.get("t", 0).ensure_segment()

    await asyncio.wait_for(_produce(logs, 0).durable, 10)
    store.lose = True  # sequence 1 lands at offset 1, its producer is told it failed
    lost = _produce(logs, 1)
    with pytest.raises(StorageFailure):
        await asyncio.wait_for(lost.durable, 10)
    store.lose = False
    retried = _produce(logs, 1)  # the producer's retry of the same batch
    await asyncio.wait_for(retried.durable, 10)
    assert retried.base_offset == 2
    await asyncio.wait_for(_produce(logs, 2).durable, 10)
    served = [(0, b"s0"), (2, b"s1"), (3, b"s2")]
    assert await _read(logs) == served
    logs.close()
    index.close()

    # A restart: the segment's marker stays before the failed append, which is walked again.
    logs, index = _logs(store, topics, tmp_path / "index")
    await logs.rebuild()
    assert await _read(logs) == served
    assert logs.get("t", 0).next_offset == 4
    logs.close()
    index.close()

    # Another node taking the partition over walks the whole segment: one copy is kept.
    logs, index = _logs(store, topics, tmp_path / "other")
    await logs.rebuild()
    got = await _read(logs)
    assert sorted(v for _, v in got) == [b"s0", b"s1", b"s2"], got
    plog = logs.get("t", 0)
    assert plog.next_offset == 4  # the copy's offsets are not handed out again
    duplicate = _produce(logs, 2)  # a retry of the last batch is still recognised
    assert isinstance(duplicate, BatchRecord) and duplicate.base_offset == 3
    logs.close()
    index.close()
    await controller.close()
    await store.close()


async def test_a_batch_another_leader_stored_is_no_copy_of_one_that_failed_here(tmp_path: Path) -> None:
    """A node accepted a batch (in its producer state with its offsets), the append failed
    (its container was taken over), and the producer's retry was stored by the new
    leader at later offsets. Given the container back, the node's index rebuild must index
    that batch: the failed one here was never stored, so the stored one is no copy of it
    (a CI chaos run lost six acknowledged records this way, "left out")."""
    index = OffsetIndex(tmp_path / "index")
    states = ProducerStates(index)
    raw = bytearray(record_batch([b"a", b"b"], producer_id=PID, epoch=0, base_sequence=10))
    here = next(iter_batches(bytes(raw)))
    failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    states.record("t", 0, here, 100, failed)
    failed.set_exception(StorageFailure("fenced: the container moved"))
    raw[0:8] = (200).to_bytes(8, "big")  # the same batch as the other leader stored it
    stored = next(iter_batches(bytes(raw)))
    assert stored.base_offset == 200
    assert not states.is_copy("t", 0, stored)
    durable: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    states.record("t", 0, here, 100, durable)
    durable.set_result(None)
    assert states.is_copy("t", 0, stored)  # a true copy of one stored here is still one
    index.close()
