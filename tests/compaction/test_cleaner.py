"""The cleaner in process (in-memory segment store, real controller, the clock passed
in), with confluent-kafka producing keyed updates and tombstones and consuming the
result: the latest value of every key at its original offset, tombstones gone after
``delete.retention.ms``, the head never cleaned, the key map's cap honoured."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.gateway.handlers import HandlerContext
from tidegate.gateway.log.compaction.cleaner import LogCleaner

from tests.gateway.conftest import Node

TIMEOUT_S = 20
DAY_MS = 86_400_000
COMPACT = {"cleanup.policy": "compact", "segment.ms": "100",
           "min.cleanable.dirty.ratio": "0.01"}


def ctx_of(node: Node) -> HandlerContext:
    assert node.gateway is not None and node.gateway.ctx is not None
    return node.gateway.ctx


def cleaner(node: Node, clock_ms: Any, **kw: Any) -> LogCleaner:
    ctx = ctx_of(node)
    return LogCleaner(ctx.topics, ctx.logs, ctx.index, ctx.store, backoff_ms=0,
                      clock_ms=clock_ms, **kw)


def create(node: Node, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=configs)]).values():
        f.result(timeout=TIMEOUT_S)


def produce(node: Node, topic: str, items: list[tuple[bytes, bytes | None]],
            codec: str = "none") -> None:
    p = Producer({"bootstrap.servers": f"127.0.0.1:{node.port}", "linger.ms": 0,
                  "compression.type": codec})
    for key, value in items:
        p.produce(topic, key=key, value=value)
        p.flush(TIMEOUT_S)  # one batch per record: the cleaner drops whole batches too
    assert p.flush(TIMEOUT_S) == 0


def consume(node: Node, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{node.port}", "group.id": "g",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append((m.offset(), m.key(), m.value()))
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
            position = c.position([TopicPartition(topic, 0)])[0].offset
            if high >= end and position >= high:
                return out
    finally:
        c.close()
    raise AssertionError(f"consumed {out}")


def updates(rounds: int, keys: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"k%d" % k, b"v%d-%d" % (k, r)) for r in range(rounds) for k in range(keys)]


async def test_latest_value_of_every_key_at_its_offset(node: Node) -> None:
    await asyncio.to_thread(create, node, "cl", COMPACT)
    items = [*updates(3, 4), (b"k1", None), (b"k0", b"last")]
    await asyncio.to_thread(produce, node, "cl", items)
    before = await asyncio.to_thread(consume, node, "cl", len(items))
    assert [o for o, _, _ in before] == list(range(len(items)))
    now = int(time.time() * 1000)
    c = cleaner(node, lambda: now + 1000)
    assert await c.run_once() == 1
    after = await asyncio.to_thread(consume, node, "cl", len(items))
    # Latest per key at its original offset; the last batch is the head, never cleaned
    # and not in the key map (so k0's value before it stays, as in Kafka).
    latest = {k: (o, v) for o, (k, v) in enumerate(items[:-1])}
    assert after == [*sorted((o, k, v) for k, (o, v) in latest.items()), (13, b"k0", b"last")]
    assert (12, b"k1", None) in after  # the tombstone stays for delete.retention.ms
    # A second pass has nothing dirty to do.
    assert await c.run_once() == 0
    # A day later the tombstone goes (once there is something dirty to clean again).
    await asyncio.to_thread(produce, node, "cl", [(b"k2", b"new"), (b"k3", b"new")])
    later = cleaner(node, lambda: now + DAY_MS + 1000)
    assert await later.run_once() == 1
    final = await asyncio.to_thread(consume, node, "cl", len(items) + 2)
    assert all(k != b"k1" for _, k, _ in final)
    assert final == [(11, b"k3", b"v3-2"), (13, b"k0", b"last"), (14, b"k2", b"new"),
                     (15, b"k3", b"new")]
    assert c.checkpoint("cl", 0) is not None


async def test_compressed_batches_and_key_map_cap(node: Node) -> None:
    await asyncio.to_thread(create, node, "cz", COMPACT)
    items = updates(4, 6)
    await asyncio.to_thread(produce, node, "cz", items, "zstd")
    now = int(time.time() * 1000)
    # Room for 4 keys: several passes, each ending where the map filled.
    small = cleaner(node, lambda: now + 1000, dedupe_buffer_bytes=4 * 120)
    passes = 0
    while await small.run_once():
        passes += 1
        assert passes < 50
    assert passes >= 3
    after = await asyncio.to_thread(consume, node, "cz", len(items))
    latest = {k: (o, v) for o, (k, v) in enumerate(items[:-1])}
    assert after == sorted({*((o, k, v) for k, (o, v) in latest.items()),
                            (len(items) - 1, *items[-1])})


async def test_min_compaction_lag_and_dirty_ratio_hold_back(node: Node) -> None:
    await asyncio.to_thread(create, node, "lag", {**COMPACT, "min.compaction.lag.ms": str(DAY_MS)})
    await asyncio.to_thread(create, node, "ratio", {**COMPACT, "min.cleanable.dirty.ratio": "0.9"})
    await asyncio.to_thread(produce, node, "lag", updates(2, 3))
    await asyncio.to_thread(produce, node, "ratio", updates(2, 3))
    now = int(time.time() * 1000)
    c = cleaner(node, lambda: now + 1000)
    assert await c.run_once() == 1  # only "ratio": everything dirty, ratio 1.0
    assert c.checkpoint("lag", 0) is None
    await asyncio.to_thread(produce, node, "ratio", [(b"k0", b"x")])
    assert await c.run_once() == 0  # little dirty against the clean section
    assert await cleaner(node, lambda: now + DAY_MS + 1000).run_once() == 1  # lag passed


async def test_delete_topic_drops_clean_segments(node: Node) -> None:
    from tidegate.core.segmentstore.api import SegmentNotFoundError
    from tidegate.gateway.log.compaction.cleaner import clean_segment_id

    await asyncio.to_thread(create, node, "del", COMPACT)
    await asyncio.to_thread(produce, node, "del", updates(2, 3))
    now = int(time.time() * 1000)
    assert await cleaner(node, lambda: now + 1000).run_once() == 1
    ctx = ctx_of(node)
    name = ctx.topics.segment_name("del", clean_segment_id(0, 1))
    assert (await ctx.store.get_info(name)).length > 0

    def delete() -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        admin.delete_topics(["del"])["del"].result(timeout=TIMEOUT_S)

    await asyncio.to_thread(delete)
    try:
        await ctx.store.get_info(name)
        raise AssertionError("the clean segment outlived its topic")
    except SegmentNotFoundError:
        pass
    # A topic of the same name starts afresh: no checkpoint, its own records only.
    await asyncio.to_thread(create, node, "del", COMPACT)
    assert cleaner(node, lambda: now).checkpoint("del", 0) is None
    await asyncio.to_thread(produce, node, "del", [(b"x", b"1"), (b"y", b"2")])
    assert await asyncio.to_thread(consume, node, "del", 2) == [(0, b"x", b"1"), (1, b"y", b"2")]


async def test_tombstones_go_from_a_quiet_topic(node: Node) -> None:
    """Nothing dirty, but the clean section's oldest tombstone is delete.retention.ms old:
    a pass runs and removes it."""
    await asyncio.to_thread(create, node, "quiet", {**COMPACT, "delete.retention.ms": "60000"})
    items = [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3")]
    await asyncio.to_thread(produce, node, "quiet", items)
    now = int(time.time() * 1000)
    c = cleaner(node, lambda: now + 1000)
    assert await c.run_once() == 1
    assert await asyncio.to_thread(consume, node, "quiet", 4) == [
        (1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")]
    assert await c.run_once() == 0  # nothing dirty, the tombstone is young
    later = cleaner(node, lambda: now + 120_000)
    assert await later.run_once() == 1
    assert await asyncio.to_thread(consume, node, "quiet", 4) == [(1, b"b", b"2"), (3, b"c", b"3")]
    assert await later.run_once() == 0


async def test_retention_reaches_cleaned_data_after_the_policy_changes(node: Node) -> None:
    """compact → delete: what the clean segment holds expires by the topic's retention.ms
    (the stream's truncation does not reach it)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    await asyncio.to_thread(create, node, "chg", COMPACT)
    await asyncio.to_thread(produce, node, "chg", updates(2, 3))
    now = int(time.time() * 1000)
    assert await cleaner(node, lambda: now + 1000).run_once() == 1

    def alter() -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET)
                   for n, v in {"cleanup.policy": "delete", "retention.ms": "60000"}.items()]
        for f in admin.incremental_alter_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, "chg", incremental_configs=entries)]
        ).values():
            f.result(timeout=TIMEOUT_S)

    await asyncio.to_thread(alter)
    plog = ctx_of(node).logs.get("chg", 0)
    assert plog.log_start_offset == 0
    assert await cleaner(node, lambda: now + 120_000).run_once() == 0
    assert plog.log_start_offset == 5  # all but the last batch expired


async def test_a_pass_reads_nothing_per_partition_of_a_topic_never_compacted(
    node: Node, monkeypatch: Any
) -> None:
    """A topic with time retention that was never compacted costs a pass one index seek,
    not a read per partition: with four 10,000-partition topics those reads held the
    event loop in one step every pass (issue 35 item 9)."""
    from tidegate.gateway.log.offset_index import OffsetIndex

    def make() -> None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
        topic = NewTopic("wide", 500, 1, config={"retention.ms": "600000"})
        for f in admin.create_topics([topic]).values():
            f.result(timeout=TIMEOUT_S)

    await asyncio.to_thread(make)
    reads = [0]
    real = OffsetIndex.clean_checkpoint

    def counted(self: OffsetIndex, topic: str, partition: int) -> bytes | None:
        reads[0] += 1
        return real(self, topic, partition)

    monkeypatch.setattr(OffsetIndex, "clean_checkpoint", counted)
    assert await cleaner(node, lambda: int(time.time() * 1000)).run_once() == 0
    assert reads[0] == 0
