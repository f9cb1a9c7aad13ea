"""Property test of the append pipeline: random appends to two partitions, interleaved
with scales (segments sealed under in-flight appends) and transient store failures.
Every append is acknowledged, offsets are dense in submission order, reads return
exactly the appended batches, and an index rebuilt from the segments alone equals the
one written while appending."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import StoreShutdownError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.partitions import PartitionLogs
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.gateway.log.topics import TopicRegistry, partition_point
from tidegate.protocol.record_batch import iter_batches

from tests.clients.requests import record_batch

PARTITIONS = 2


class _Flaky(InMemorySegmentStore):
    def __init__(self, failures: set[int]) -> None:
        super().__init__()
        self.failures = failures
        self.calls = 0

    async def append(self, name: str, data: bytes | memoryview, **kw: Any) -> int:
        if name.startswith("kafka/"):
            self.calls += 1
            if self.calls in self.failures:
                raise StoreShutdownError(name, "injected")
        return await super().append(name, data, **kw)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, PARTITIONS - 1), st.integers(1, 4)),
        st.tuples(st.just("scale"), st.integers(0, PARTITIONS - 1), st.just(0)),
        st.tuples(st.just("yield"), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=40,
)


def _dump(index: OffsetIndex) -> list[tuple[int, int, int, int]]:
    out = []
    for p in range(PARTITIONS):
        for e in index.entries_from("t", p, 0):
            out.append((p, e.base_offset, e.last_offset, e.length))
    return out


async def _run(steps: list[tuple[str, int, int]], failures: set[int], tmp: Path) -> None:
    store = _Flaky(failures)
    controller = StreamController(store)
    await store.start()
    await controller.start()
    topics = TopicRegistry(controller, store, "kafka")
    await topics.start()
    await topics.create("t", PARTITIONS)
    index = OffsetIndex(tmp / "index")
    logs = PartitionLogs(topics, store, index, ProducerStates(index), append_retry_delay_ms=1)
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    pendings: list[tuple[int, int, Any]] = []
    scales: list[asyncio.Future[Any]] = []
    n = 0
    for kind, p, count in steps:
        if kind == "append":
            plog = logs.get("t", p)
            await plog.ensure_segment()
            values = [b"%d-%d" % (n, i) for i in range(count)]
            n += 1
            raw = record_batch(values)
            if n % 2:  # as from a writable request frame: room for the envelope, or not
                head = memoryview(bytearray(b"\xee" * (20 + n % 10)) + raw)
                payload = head[len(head) - len(raw) :]
                pending = plog.append(payload, list(iter_batches(payload)), head)
            else:
                pending = plog.append(raw, list(iter_batches(raw)))
            sent[p].append(raw)
            pendings.append((p, pending.base_offset, pending.durable))
        elif kind == "scale":
            seg = await controller.get_segment_for_key("kafka", "t", partition_point(p))
            scales.append(asyncio.ensure_future(
                controller.scale("kafka", "t", [seg.id], [seg.key_range])))
        else:
            await asyncio.sleep(0)
    await asyncio.gather(*scales, return_exceptions=True)
    await asyncio.wait_for(asyncio.gather(*(f for _, _, f in pendings)), 30)
    for p in range(PARTITIONS):
        bases = [b for q, b, _ in pendings if q == p]
        counts = [next(iter_batches(r)).record_count for r in sent[p]]
        expected = [sum(counts[:i]) for i in range(len(counts))]
        assert bases == expected, (p, bases, expected)
        plog = logs.get("t", p)
        assert plog.high_watermark == sum(counts)
        chunks = await logs.read_batches(plog, 0, 1 << 30, True)
        got = b"".join(bytes(c) for c in chunks)
        want = bytearray()
        for raw, base in zip(sent[p], expected, strict=True):
            b = bytearray(raw)
            b[0:8] = base.to_bytes(8, "big")
            want += b
        assert got == bytes(want)
    tail_reads = {}
    for p in range(PARTITIONS):
        live = logs.get("t", p)
        for offset in {0, live.high_watermark // 2, max(live.high_watermark - 1, 0)}:
            chunks = await logs.read_batches(live, offset, 1 << 30, True)
            tail_reads[p, offset] = b"".join(bytes(c) for c in chunks)
    written = _dump(index)
    index.close()
    shutil.rmtree(tmp / "index")
    index = OffsetIndex(tmp / "index")
    rebuilt_logs = PartitionLogs(topics, store, index, ProducerStates(index))
    await rebuilt_logs.rebuild()
    assert _dump(index) == written
    for (p, offset), a in tail_reads.items():  # reads from memory == reads from RocksDB
        rebuilt = rebuilt_logs.get("t", p)
        assert not rebuilt.recent
        b = await rebuilt_logs.read_batches(rebuilt, offset, 1 << 30, True)
        assert a == b"".join(bytes(c) for c in b), (p, offset)
    index.close()
    await controller.close()
    await store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=ops, failures=st.sets(st.integers(1, 30), max_size=4))
def test_append_pipeline_properties(steps: list[tuple[str, int, int]], failures: set[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(steps, failures, Path(tmp)))


class _Stalling(InMemorySegmentStore):
    """The chosen append never completes and is never applied: a crash before it was
    durable."""

    def __init__(self, stall_call: int) -> None:
        super().__init__()
        self.stall_call = stall_call
        self.calls = 0

    async def append(self, name: str, data: bytes | memoryview, **kw: Any) -> int:
        if name.startswith("kafka/"):
            self.calls += 1
            if self.calls >= self.stall_call:  # and everything after it: prefix durability
                await asyncio.Event().wait()
        return await super().append(name, data, **kw)


async def test_producer_state_remembers_only_durable_batches(tmp_path: Path) -> None:
    from tidegate.gateway.log.producer_state import Duplicate

    store = _Stalling(stall_call=2)
    controller = StreamController(store)
    await controller.start()
    topics = TopicRegistry(controller, store, "kafka")
    await topics.start()
    await topics.create("t", 1)
    index = OffsetIndex(tmp_path / "index")
    logs = PartitionLogs(topics, store, index, ProducerStates(index))
    plog = logs.get("t", 0)
    await plog.ensure_segment()
    a, b, c = (record_batch([v], 9, 0, seq) for v, seq in ((b"a", 0), (b"b", 1), (b"c", 2)))
    pendings = []
    for raw in (a, b, c):
        (header,) = iter_batches(raw)
        pending = plog.append(raw, [header])
        logs.producers.record("t", 0, pending.batches[0], pending.base_offset, pending.durable)
        pendings.append(pending)
    await asyncio.wait_for(pendings[0].durable, 5)
    await asyncio.sleep(0.05)
    assert not pendings[1].durable.done() and not pendings[2].durable.done()
    logs.close()  # the process dies here
    index.close()

    index = OffsetIndex(tmp_path / "index")
    producers = ProducerStates(index)
    restarted = PartitionLogs(topics, store, index, producers)
    await restarted.rebuild()
    (hb,) = iter_batches(b)
    # b never became durable: its retry must be appended, not answered as a duplicate.
    assert producers.check("t", 0, hb) is None
    (ha,) = iter_batches(a)
    assert isinstance(producers.check("t", 0, ha), Duplicate)
    index.close()
    await controller.close()
