"""The data path in process: produce errors, idempotence, fetch limits and long polls,
pipelining, segment seals under load, index rebuild."""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
from pathlib import Path
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatch
from tidegate.core.controller.api import KeyRange
from tidegate.core.controller.controller import StreamController
from tidegate.core.segmentstore.api import StoreShutdownError
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.protocol.errors import ErrorCode

from tests.clients.requests import fetch, record_batch
from tests.gateway.conftest import Node, RawClient

P = ProduceRequest.TopicProduceData


async def create(client: RawClient, name: str, partitions: int, validate_only: bool = False) -> int:
    req = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[])],
        timeout_ms=1000, validate_only=validate_only,
    )
    resp = await client.call(req, 5, CreateTopicsResponse)
    return int(resp.topics[0].error_code)


async def produce(client: RawClient, topic: str, partition: int, records: bytes,
                  acks: int = -1) -> tuple[int, int]:
    req = ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=5000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])],
    )
    resp = await client.call(req, 9, ProduceResponse)
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


async def fetch_records(client: RawClient, topic: str, partition: int, offset: int,
                        **kw: int) -> tuple[object, list[tuple[int, bytes | None]]]:
    client.writer.write(fetch(topic, partition, offset, **kw))
    resp = await client.recv(FetchResponse, 11)
    part = resp.responses[0].partitions[0]
    out: list[tuple[int, bytes | None]] = []
    raw = part.records or b""
    pos = 0
    while pos < len(raw):
        (length,) = struct.unpack_from(">i", raw, pos + 8)
        batch = DefaultRecordBatch(raw[pos : pos + 12 + length])
        out += [(r.offset, r.value) for r in batch]
        pos += 12 + length
    return part, out


async def test_api_versions_advertise_registry_and_answer_unknown_version(node: Node) -> None:
    c = await node.client()
    resp = await c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                        3, ApiVersionsResponse)
    assert resp.error_code == 0
    assert node.gateway is not None and node.gateway.ctx is not None
    advertised = {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys}
    assert advertised == {
        (a.spec.api_key, a.spec.min_version, a.spec.max_version)
        for a in node.gateway.ctx.registry.apis()
    }
    # A version above ours: v0 answer with UNSUPPORTED_VERSION (header v0, body v0).
    c.correlation_id += 1
    header = struct.pack(">hhih", 18, 99, c.correlation_id, 1) + b"x" + b"\x00"
    c.writer.write(struct.pack(">i", len(header)) + header)
    answer = await c.recv(ApiVersionsResponse, 0)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == 18 and k.max_version == 4 for k in answer.api_keys)
    await c.close()


async def test_metadata_auto_creates_with_num_partitions(node: Node) -> None:
    c = await node.client()
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")],
                          allow_auto_topic_creation=True)
    resp = await c.call(req, 12, MetadataResponse)
    (topic,) = resp.topics
    assert topic.error_code == 0 and len(topic.partitions) == 1
    assert all(p.leader_epoch == 0 and p.leader_id == 0 for p in topic.partitions)
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="nope")],
                          allow_auto_topic_creation=False)
    resp = await c.call(req, 12, MetadataResponse)
    assert resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="bad name!")],
                          allow_auto_topic_creation=True)
    resp = await c.call(req, 12, MetadataResponse)
    assert resp.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    await c.close()


async def test_create_topics_validate_only_and_exists(node: Node) -> None:
    c = await node.client()
    assert await create(c, "t", 4, validate_only=True) == 0
    assert node.gateway and node.gateway.ctx and node.gateway.ctx.topics.get("t") is None
    assert await create(c, "t", 4) == 0
    assert await create(c, "t", 4) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert await create(c, "bad/name", 1) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert await create(c, "zero", 0) == ErrorCode.INVALID_PARTITIONS
    segments = await node.controller.get_current_segments("kafka", "t")
    assert len(segments) == 4
    await c.close()


async def test_produce_errors(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 2)
    good = record_batch([b"v"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert (await produce(c, "t", 0, bytes(corrupt)))[0] == ErrorCode.CORRUPT_MESSAGE
    assert (await produce(c, "t", 5, good))[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce(c, "missing", 0, good))[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce(c, "bad topic", 0, good))[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    big = record_batch([b"x" * 1_100_000])
    assert (await produce(c, "t", 0, big))[0] == ErrorCode.MESSAGE_TOO_LARGE
    assert (await produce(c, "t", 0, good + good))[0] == ErrorCode.INVALID_RECORD
    assert await produce(c, "t", 0, good) == (0, 0)
    _, recs = await fetch_records(c, "t", 0, 0)
    assert recs == [(0, b"v")]
    await c.close()


async def test_dense_offsets_and_acks_zero(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    assert await produce(c, "t", 0, record_batch([b"a", b"b", b"c"])) == (0, 0)
    # acks=0: no answer at all; the next answer belongs to the next request.
    req = ProduceRequest(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[
        P(name="t", partition_data=[P.PartitionProduceData(index=0, records=record_batch([b"d"]))])])
    await c.send(req, 9)
    assert await produce(c, "t", 0, record_batch([b"e", b"f"])) == (0, 4)
    _, recs = await fetch_records(c, "t", 0, 0)
    assert recs == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    await c.close()


async def test_idempotent_dedupe_gaps_and_fencing(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    pid = await c.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000),
                       4, InitProducerIdResponse)
    assert pid.error_code == 0 and pid.producer_epoch == 0
    p, e = pid.producer_id, pid.producer_epoch
    b0 = record_batch([b"a", b"b"], p, e, 0)
    assert await produce(c, "t", 0, b0) == (0, 0)
    assert await produce(c, "t", 0, record_batch([b"c"], p, e, 2)) == (0, 2)
    assert await produce(c, "t", 0, b0) == (0, 0)  # retried: original offset
    assert (await produce(c, "t", 0, record_batch([b"x"], p, e, 9)))[0] == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    # A bumped epoch starts again at 0 and fences the old epoch.
    assert await produce(c, "t", 0, record_batch([b"d"], p, e + 1, 0)) == (0, 3)
    assert (await produce(c, "t", 0, record_batch([b"y"], p, e, 3)))[0] == (
        ErrorCode.INVALID_PRODUCER_EPOCH)
    _, recs = await fetch_records(c, "t", 0, 0)
    assert [v for _, v in recs] == [b"a", b"b", b"c", b"d"]
    other = await c.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000),
                         4, InitProducerIdResponse)
    assert other.producer_id != p
    await c.close()


async def test_dedupe_survives_restart_and_index_loss(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    batches = [record_batch([b"r%d" % i], 42, 0, i) for i in range(5)]
    for i, b in enumerate(batches):
        assert await produce(c, "t", 0, b) == (0, i)
    await c.close()
    await node.restart_gateway()
    c = await node.client()
    assert await produce(c, "t", 0, batches[3]) == (0, 3)
    await c.close()
    assert node.gateway is not None
    await node.gateway.close()
    shutil.rmtree(node.data_dir / "gateway" / "index")  # rebuilt from the segments
    await node.start_gateway()
    c = await node.client()
    assert await produce(c, "t", 0, batches[4]) == (0, 4)
    assert await produce(c, "t", 0, record_batch([b"r5"], 42, 0, 5)) == (0, 5)
    _, recs = await fetch_records(c, "t", 0, 0)
    assert [o for o, _ in recs] == list(range(6))
    lo = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    resp = await c.call(lo, 5, ListOffsetsResponse)
    assert resp.topics[0].partitions[0].offset == 6
    await c.close()


async def test_fetch_long_poll_wakes_on_append(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    p = await node.client()
    start = time.monotonic()
    waiting = asyncio.ensure_future(fetch_records(c, "t", 0, 0, max_wait_ms=30_000))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await produce(p, "t", 0, record_batch([b"late"]))
    part, recs = await waiting
    assert recs == [(0, b"late")] and time.monotonic() - start < 15  # woken, not timed out
    assert (part.high_watermark, part.log_start_offset) == (1, 0)  # type: ignore[attr-defined]
    start = time.monotonic()
    _, recs = await fetch_records(c, "t", 0, 1, max_wait_ms=300)
    assert recs == [] and 0.25 < time.monotonic() - start < 15
    part, _ = await fetch_records(c, "t", 0, 7, max_wait_ms=0)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
    await c.close()
    await p.close()


async def test_fetch_returns_one_whole_batch_over_the_limit(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    await produce(c, "t", 0, record_batch([b"x" * 5000, b"y" * 5000]))
    await produce(c, "t", 0, record_batch([b"z"]))
    _, recs = await fetch_records(c, "t", 0, 0, partition_max_bytes=100)
    assert [o for o, _ in recs] == [0, 1]
    _, recs = await fetch_records(c, "t", 0, 1, partition_max_bytes=1 << 20)
    assert [o for o, _ in recs] == [0, 1, 2]  # the whole batch that holds offset 1
    await c.close()


async def test_pipelined_requests_answered_in_order(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    ids = []
    for i in range(20):
        req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            P(name="t", partition_data=[P.PartitionProduceData(index=0, records=record_batch([b"%d" % i]))])])
        ids.append(await c.send(req, 9))
    offsets = []
    for cid in ids:
        resp = await c.recv(ProduceResponse, 9)
        assert resp.header.correlation_id == cid
        offsets.append(resp.responses[0].partition_responses[0].base_offset)
    assert offsets == list(range(20))
    await c.close()


async def test_oversized_frame_closes_before_body(node: Node) -> None:
    assert node.gateway is not None
    node.gateway.config.socket_request_max_bytes = 1000
    c = await node.client()
    c.writer.write(struct.pack(">i", 1001))
    await c.writer.drain()
    assert await asyncio.wait_for(c.reader.read(), 5) == b""
    await c.close()
    other = await node.client()  # other connections are unaffected
    resp = await other.call(ApiVersionsRequest(), 0, ApiVersionsResponse)
    assert resp.error_code == 0
    await other.close()


async def test_scale_during_produce_keeps_offsets_dense(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    sent = 0
    results: list[tuple[int, int]] = []

    async def producer() -> None:
        nonlocal sent
        while sent < 300:
            req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                P(name="t", partition_data=[P.PartitionProduceData(
                    index=0, records=record_batch([b"%d" % sent]))])])
            await c.send(req, 9)
            sent += 1
            if sent % 10 == 0:
                await asyncio.sleep(0)

    async def reader() -> None:
        for _ in range(300):
            resp = await c.recv(ProduceResponse, 9)
            part = resp.responses[0].partition_responses[0]
            results.append((part.error_code, part.base_offset))

    task_p, task_r = asyncio.ensure_future(producer()), asyncio.ensure_future(reader())
    for _ in range(3):
        await asyncio.sleep(0.02)
        (seg,) = await node.controller.get_current_segments("kafka", "t")
        await node.controller.scale("kafka", "t", [seg.id], [KeyRange(seg.key_start, seg.key_end)])
    await asyncio.gather(task_p, task_r)
    assert [e for e, _ in results] == [0] * 300
    assert [o for _, o in results] == list(range(300))
    epochs = await node.controller.get_epochs("kafka", "t")
    assert len(epochs) == 4
    f = await node.client()
    got: list[tuple[int, bytes | None]] = []
    while len(got) < 300:
        _, recs = await fetch_records(f, "t", 0, len(got))
        got += [r for r in recs if r[0] >= len(got)]
    assert got == [(i, b"%d" % i) for i in range(300)]
    await c.close()
    await f.close()


async def test_topic_deleted_and_recreated_starts_fresh(node: Node) -> None:
    c = await node.client()
    await create(c, "t", 1)
    for i in range(3):
        assert await produce(c, "t", 0, record_batch([b"old%d" % i])) == (0, i)
    assert node.gateway is not None and node.gateway.ctx is not None
    ctx = node.gateway.ctx
    await node.controller.seal_stream("kafka", "t")
    await node.controller.delete_stream("kafka", "t")
    await ctx.topics.forget("t")
    ctx.logs.delete_topic("t")
    await create(c, "t", 1)
    assert await produce(c, "t", 0, record_batch([b"new"])) == (0, 0)
    await c.close()
    await node.restart_gateway()
    c = await node.client()
    _, recs = await fetch_records(c, "t", 0, 0)
    assert recs == [(0, b"new")]
    await c.close()


async def test_list_offsets_by_time_and_max_timestamp(node: Node) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    c = await node.client()
    await create(c, "t", 1)

    def batch(stamps: list[int], compression: int = 0) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                      producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                      batch_size=1 << 20)
        for i, ts in enumerate(stamps):
            b.append(i, timestamp=ts, key=None, value=b"v", headers=[])
        return bytes(b.build())

    await produce(c, "t", 0, batch([100, 300, 200]))            # offsets 0-2
    await produce(c, "t", 0, batch([250, 900, 400], compression=1))  # 3-5, gzip
    await produce(c, "t", 0, batch([500]))                      # 6

    async def lookup(ts: int) -> tuple[int, int]:
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, timestamp=ts)])])
        part = (await c.call(req, 7, ListOffsetsResponse)).topics[0].partitions[0]
        return part.offset, part.timestamp

    assert await lookup(-2) == (0, -1)
    assert (await lookup(-1))[0] == 7
    assert await lookup(-3) == (4, 900)
    assert await lookup(0) == (0, 100)
    assert await lookup(150) == (1, 300)
    assert await lookup(301) == (4, 900)
    assert await lookup(901) == (-1, -1)
    await c.close()


async def test_unknown_api_or_version_closes_only_that_connection(node: Node) -> None:
    for header in (struct.pack(">hhih", 999, 0, 1, -1), struct.pack(">hhih", 0, 2, 1, -1)):
        bad = await node.client()
        good = await node.client()
        bad.writer.write(struct.pack(">i", len(header)) + header)
        assert await asyncio.wait_for(bad.reader.read(), 5) == b""
        resp = await good.call(ApiVersionsRequest(), 0, ApiVersionsResponse)
        assert resp.error_code == 0
        await bad.close()
        await good.close()


class _FlakyStore(InMemorySegmentStore):
    """Fails chosen appends to stream segments (before applying them), as a store whose
    Tier-1 write failed would."""

    def __init__(self, fail_calls: set[int]) -> None:
        super().__init__()
        self.fail_calls = fail_calls
        self.calls = 0

    async def append(self, name: str, data: bytes | memoryview, **kw: Any) -> int:
        if name.startswith("kafka/"):
            self.calls += 1
            if self.calls in self.fail_calls:
                raise StoreShutdownError(name, "injected failure")
        return await super().append(name, data, **kw)


async def test_transient_append_failures_are_resent_without_gaps(tmp_path: Path) -> None:
    node = Node(tmp_path / "data")
    flaky = _FlakyStore({3, 4, 9})
    node.store = flaky
    node.controller = StreamController(flaky)
    await node.start()
    try:
        c = await node.client()
        await create(c, "t", 1)
        ids = []
        for i in range(12):
            req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
                P(name="t", partition_data=[P.PartitionProduceData(
                    index=0, records=record_batch([b"%d" % i], 5, 0, i))])])
            ids.append(await c.send(req, 9))
        results = []
        for _ in ids:
            part = (await c.recv(ProduceResponse, 9)).responses[0].partition_responses[0]
            results.append((part.error_code, part.base_offset))
        assert results == [(0, i) for i in range(12)]
        _, recs = await fetch_records(c, "t", 0, 0)
        assert recs == [(i, b"%d" % i) for i in range(12)]
        # Re-sent appends landed after later ones; the marker still covers everything.
        assert node.gateway is not None and node.gateway.ctx is not None
        (seg,) = await node.controller.get_current_segments("kafka", "t")
        name = node.gateway.ctx.topics.segment_name("t", seg.id)
        assert node.gateway.ctx.index.marker(name) == (await flaky.get_info(name)).length
        await c.close()
        await node.restart_gateway()  # and the rebuilt index agrees
        assert node.gateway is not None
        await node.gateway.close()
        shutil.rmtree(node.data_dir / "gateway" / "index")
        await node.start_gateway()
        c = await node.client()
        _, recs = await fetch_records(c, "t", 0, 0)
        assert recs == [(i, b"%d" % i) for i in range(12)]
        await c.close()
    finally:
        await node.close()
