"""What the admin APIs do underneath, in process (in-memory segment store, real
controller): topic configs as stream policies, partitions added as points with shared
segments split, DeleteRecords' log starts and how far the stream is truncated when
partitions share segments, retention followed by the log starts, topic deletion.
Admin calls go through kafka-python's ``KafkaAdminClient`` in a worker thread; produce
and fetch through raw requests (exact offsets and errors)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic, OffsetSpec
from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
from kafka.protocol.producer import ProduceRequest
from kafka.structs import OffsetAndMetadata
from tidegate.core.controller.api import (
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
)
from tidegate.gateway.handlers import HandlerContext
from tidegate.gateway.log.envelope import ENVELOPE_BYTES
from tidegate.gateway.log.topics import partition_point
from tidegate.protocol.errors import ErrorCode

from tests.clients.requests import record_batch
from tests.gateway.conftest import Node
from tests.gateway.test_produce_fetch import P, create, fetch_records, produce

T = TypeVar("T")


async def admin(node: Node, call: Callable[[KafkaAdminClient], T]) -> T:
    def run() -> T:
        client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{node.port}",
                                  request_timeout_ms=20_000)
        try:
            return call(client)
        finally:
            client.close()
    return await asyncio.to_thread(run)


def ctx_of(node: Node) -> HandlerContext:
    assert node.gateway is not None and node.gateway.ctx is not None
    return node.gateway.ctx


async def retention(node: Node, topic: str) -> RetentionPolicy | None:
    return (await node.controller.get_stream("kafka", topic)).config.retention


def _alter(topic: str, configs: dict[str, Any], **kw: Any) -> Callable[[KafkaAdminClient], Any]:
    return lambda a: a.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], **kw)


async def test_topic_configs_map_onto_stream_policies(node: Node) -> None:
    await admin(node, lambda a: a.create_topics([
        NewTopic("r", 3, 1, topic_configs={"retention.ms": "60000"}),
        NewTopic("plain", 1, 1),
    ]))
    assert await retention(node, "r") == RetentionPolicy(RetentionType.TIME, 60000)
    # Kafka's default retention.ms applies to topics that do not set it.
    assert await retention(node, "plain") == RetentionPolicy(RetentionType.TIME, 604_800_000)
    # Size retention: per partition in Kafka, so times the partition count for the stream.
    await admin(node, _alter("r", {"retention.ms": "-1", "retention.bytes": "1000"}))
    assert await retention(node, "r") == RetentionPolicy(RetentionType.SIZE, 3000)
    await admin(node, lambda a: a.create_partitions({"r": 4}))
    assert await retention(node, "r") == RetentionPolicy(RetentionType.SIZE, 4000)
    await admin(node, _alter("r", {"retention.bytes": ("DELETE", None)}))
    assert await retention(node, "r") is None  # retention.ms is still -1: keep forever
    # Both set: both apply, as in Kafka (a time policy with a size bound).
    await admin(node, _alter("r", {"retention.ms": "5000", "retention.bytes": "10"}))
    assert await retention(node, "r") == RetentionPolicy(RetentionType.TIME, 5000, 40)
    await admin(node, _alter("r", {"retention.ms": "-1", "retention.bytes": ("DELETE", None)}))
    assert await retention(node, "r") is None
    # Scaling configs become the scaling policy.
    await admin(node, _alter("plain", {
        "tidegate.scaling.type": "BY_RATE_IN_EVENTS_PER_SEC",
        "tidegate.scaling.target.rate": "100", "tidegate.scaling.min.segments": "1",
    }, raise_on_unknown=False))
    config = (await node.controller.get_stream("kafka", "plain")).config
    assert config.scaling == ScalingPolicy(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 1)
    answer = await admin(node, _alter("plain", {"tidegate.scaling.target.rate": "0"},
                                      raise_on_unknown=False))
    assert "InvalidConfigurationError" in answer["topic"]["plain"]
    await admin(node, lambda a: a.create_topics([NewTopic(
        "x", 1, 1, topic_configs={"retention.ms": "1", "retention.bytes": "1"})]))
    assert await retention(node, "x") == RetentionPolicy(RetentionType.TIME, 1, 1)
    # The stored configs survive a gateway restart (topics table).
    await node.restart_gateway()
    assert ctx_of(node).topics.get("r") is not None
    assert ctx_of(node).topics.get("r").configs == {"retention.ms": "-1"}  # type: ignore[union-attr]


async def test_create_partitions_splits_shared_segments(node: Node) -> None:
    await admin(node, lambda a: a.create_topics([NewTopic("t", 2, 1)]))
    c = await node.client()
    for p in range(2):
        assert await produce(c, "t", p, record_batch([b"a", b"b"])) == (0, 0)
    await admin(node, lambda a: a.create_partitions({"t": 5}))
    segments = await node.controller.get_current_segments("kafka", "t")
    assert len(segments) == 5
    for p in range(5):
        holders = [s for s in segments if s.key_range.contains(partition_point(p))]
        assert len(holders) == 1
        assert [q for q in range(5) if holders[0].key_range.contains(partition_point(q))] == [p]
    # A segment holding old points (merged by autoscaling, here by hand) is split when a
    # new point lands in it; one holding only old points is left alone.
    cover = [s.id for s in segments]
    await node.controller.scale("kafka", "t", cover, [KeyRange(0.0, 1.0)])
    await admin(node, lambda a: a.create_partitions({"t": 6}))  # point 5 -> 0.625
    segments = await node.controller.get_current_segments("kafka", "t")
    assert len(segments) == 6
    for p in range(6):
        assert await produce(c, "t", p, record_batch([b"c"])) == (0, 2 if p < 2 else 0)
        _, recs = await fetch_records(c, "t", p, 0)
        assert [v for _, v in recs] == ([b"a", b"b", b"c"] if p < 2 else [b"c"])
    await c.close()


async def test_delete_records_truncates_only_as_far_as_shared_segments_allow(node: Node) -> None:
    await admin(node, lambda a: a.create_topics([NewTopic("d", 2, 1)]))
    c = await node.client()
    for p in range(2):  # one batch each in the partitions' own segments
        assert await produce(c, "d", p, record_batch([b"old"])) == (0, 0)
    first = await node.controller.get_current_segments("kafka", "d")
    shared = (await node.controller.scale("kafka", "d", [s.id for s in first],
                                          [KeyRange(0.0, 1.0)])).segments[0]
    for i in range(1, 4):  # interleaved in the shared segment: p0, p1, p0, p1, ...
        for p in range(2):
            assert await produce(c, "d", p, record_batch([b"%d-%d" % (p, i)])) == (0, i)
    ctx = ctx_of(node)
    name = ctx.topics.segment_name("d", shared.id)

    def envelope(p: int, offset: int) -> int:
        entry = ctx.index.floor("d", p, offset)
        assert entry is not None and entry.segment_id == shared.id
        return entry.position - ENVELOPE_BYTES

    # p0 entirely: p1 still holds its offset 0 in its first segment, so only p0's first
    # segment is cut (to its end) and the shared segment is untouched.
    tp0, tp1 = TopicPartition("d", 0), TopicPartition("d", 1)
    answer = await admin(node, lambda a: a.delete_records({tp0: -1}))
    assert answer[tp0]["low_watermark"] == 4
    p0_first, p1_first = sorted(first, key=lambda s: s.key_start)
    p0_len = (await node.store.get_info(ctx.topics.segment_name("d", p0_first.id))).length
    assert await node.controller.get_head_segments("kafka", "d") == {
        p0_first.id: p0_len, p1_first.id: 0}
    assert (await node.store.get_info(name)).start_offset == 0
    # p1 up to 1: both first segments are cut at their ends, so the cut moves on to the
    # shared segment, up to p1's batch 1 (p0 has nothing left there).
    await admin(node, lambda a: a.delete_records({tp1: 1}))
    assert await node.controller.get_head_segments("kafka", "d") == {shared.id: envelope(1, 1)}
    assert (await node.store.get_info(name)).start_offset == envelope(1, 1)
    # p1 up to 3: the cut moves to p1's batch 3 (p0 allows anything).
    await admin(node, lambda a: a.delete_records({tp1: 3}))
    assert (await node.store.get_info(name)).start_offset == envelope(1, 3)
    part, recs = await fetch_records(c, "d", 1, 3)
    assert recs == [(3, b"1-3")] and part.log_start_offset == 3  # type: ignore[attr-defined]
    part, recs = await fetch_records(c, "d", 1, 1)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
    await c.close()
    # Log starts are durable; the index rebuilt from the truncated segment agrees.
    await node.restart_gateway()
    c = await node.client()
    assert await produce(c, "d", 1, record_batch([b"new"])) == (0, 4)
    part, recs = await fetch_records(c, "d", 1, 3)
    assert recs == [(3, b"1-3"), (4, b"new")]
    part, recs = await fetch_records(c, "d", 0, 4)
    assert recs == [] and part.log_start_offset == 4  # type: ignore[attr-defined]
    await c.close()


async def test_log_starts_follow_a_retention_truncation(node: Node) -> None:
    await admin(node, lambda a: a.create_topics([NewTopic("ret", 1, 1)]))
    c = await node.client()
    for i in range(3):
        assert await produce(c, "ret", 0, record_batch([b"v%d" % i])) == (0, i)
    ctx = ctx_of(node)
    entry = ctx.index.floor("ret", 0, 2)
    assert entry is not None
    # What the controller's retention policy does: truncate at a recorded StreamCut.
    await node.controller.truncate("kafka", "ret", {entry.segment_id: entry.position - ENVELOPE_BYTES})
    part, _ = await fetch_records(c, "ret", 0, 0)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[attr-defined]
    follower = ctx.retention_follower
    assert follower is not None
    await follower.run_once()
    assert ctx.logs.get("ret", 0).log_start_offset == 2
    part, recs = await fetch_records(c, "ret", 0, 2)
    assert recs == [(2, b"v2")] and part.log_start_offset == 2  # type: ignore[attr-defined]
    await c.close()
    offsets = await admin(node, lambda a: a.list_partition_offsets(
        {TopicPartition("ret", 0): OffsetSpec.EARLIEST}))
    assert offsets[TopicPartition("ret", 0)].offset == 2


async def test_delete_topic_drops_stream_index_and_group_offsets(node: Node) -> None:
    await admin(node, lambda a: a.create_topics([NewTopic("gone", 2, 1), NewTopic("kept", 1, 1)]))
    c = await node.client()
    assert await produce(c, "gone", 1, record_batch([b"x"])) == (0, 0)
    await c.close()
    await admin(node, lambda a: a.alter_group_offsets("g", {
        TopicPartition("gone", 1): OffsetAndMetadata(1, "", -1),
        TopicPartition("kept", 0): OffsetAndMetadata(0, "", -1),
    }))
    ctx = ctx_of(node)
    await admin(node, lambda a: a.delete_topics(["gone"]))
    assert "gone" not in await node.controller.list_streams("kafka")
    assert ctx.topics.get("gone") is None
    assert ctx.index.first("gone", 1) is None
    _, committed = ctx.groups.fetch_offsets("g", None)
    assert {tp[0] for tp in committed} == {"kept"}  # (topic, partition)
    await node.restart_gateway()
    assert ctx_of(node).topics.get("gone") is None
    assert "gone" not in await admin(node, lambda a: a.list_topics())


async def test_delete_topic_under_produce_then_recreate_fresh(node: Node) -> None:
    c, admin_client = await node.client(), await node.client()
    assert await create(c, "race", 1) == 0
    stop = asyncio.Event()

    async def flood() -> None:  # acks=0: appends are in flight when the stream is sealed
        while not stop.is_set() and not c.writer.is_closing():
            await c.send(ProduceRequest(
                transactional_id=None, acks=0, timeout_ms=5000,
                topic_data=[P(name="race", partition_data=[
                    P.PartitionProduceData(index=0, records=record_batch([b"x" * 1000]))])],
            ), 9)
            await asyncio.sleep(0)

    task = asyncio.ensure_future(flood())
    await asyncio.sleep(0.2)
    answer = await admin_client.call(
        DeleteTopicsRequest(topic_names=["race"], timeout_ms=30_000), 5, DeleteTopicsResponse)
    stop.set()
    with contextlib.suppress(ConnectionError):  # acks=0 errors close the connection
        await task
    assert answer.responses[0].error_code == 0
    ctx = ctx_of(node)
    assert ctx.topics.get("race") is None
    await asyncio.sleep(0.5)  # nothing indexes itself late for the deleted topic
    assert ctx.index.first("race", 0) is None
    assert await create(admin_client, "race", 1) == 0
    assert await produce(admin_client, "race", 0, record_batch([b"new"])) == (0, 0)
    _, recs = await fetch_records(admin_client, "race", 0, 0)
    assert recs == [(0, b"new")]
    await c.close()
    await admin_client.close()
