"""Offsets gaps after cleaning, read with raw Fetch and ListOffsets and kafka-python's
seek; a pass that fails half way (the clean segment's append) leaves the index and the
readers on the old version, and the next pass completes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from tidegate.core.segmentstore.api import SegmentStore

from tests.compaction.batches import keyed_batch
from tests.compaction.test_cleaner import COMPACT, cleaner, create, ctx_of
from tests.gateway.conftest import Node
from tests.gateway.test_produce_fetch import fetch_records, produce

_LO = ListOffsetsRequest.ListOffsetsTopic


async def _fill(node: Node, topic: str) -> int:
    """Offsets 0-10: one batch of 5 records (k0..k4), k0..k4 again in 5 batches of one,
    then the head (kz); after cleaning 5-10 stay: 0-4 was one batch, removed whole."""
    await asyncio.to_thread(create, node, topic, COMPACT)
    c = await node.client()
    now = int(time.time() * 1000)
    assert await produce(c, topic, 0, keyed_batch([(b"k%d" % i, b"a%d" % i) for i in range(5)],
                                                   timestamp_ms=now)) == (0, 0)
    for i in range(5):
        assert await produce(c, topic, 0, keyed_batch([(b"k%d" % i, b"b%d" % i)],
                                                       timestamp_ms=now)) == (0, 5 + i)
    assert await produce(c, topic, 0, keyed_batch([(b"kz", b"z")], timestamp_ms=now)) == (0, 10)
    await c.close()
    return now


async def test_fetch_list_offsets_and_seek_over_gaps(node: Node) -> None:
    produced_ms = await _fill(node, "gap")
    now = int(time.time() * 1000)
    assert await cleaner(node, lambda: now + 1000).run_once() == 1
    c = await node.client()
    part, records = await fetch_records(c, "gap", 0, 0)
    assert part.error_code == 0 and part.log_start_offset == 0  # type: ignore[attr-defined]
    assert [o for o, _ in records] == [5, 6, 7, 8, 9, 10]
    _, records = await fetch_records(c, "gap", 0, 3)  # inside the removed batch
    assert [o for o, _ in records] == [5, 6, 7, 8, 9, 10]
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[_LO(
        name="gap", partitions=[_LO.ListOffsetsPartition(partition_index=0, timestamp=t,
                                                        current_leader_epoch=-1)
                                for t in (-2, -1, produced_ms)])])
    resp = await c.call(req, 5, ListOffsetsResponse)
    # By timestamp: the time index names batch 0, removed; the first record after is 5.
    assert [p.offset for p in resp.topics[0].partitions] == [0, 11, 5]
    await c.close()

    def seek() -> list[tuple[int, bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{node.port}",
                                 enable_auto_commit=False, consumer_timeout_ms=2000)
        tp = TopicPartition("gap", 0)
        consumer.assign([tp])
        consumer.seek(tp, 2)
        try:
            return [(m.offset, m.value) for m in consumer]
        finally:
            consumer.close()

    got = await asyncio.to_thread(seek)
    assert got == [(5, b"b0"), (6, b"b1"), (7, b"b2"), (8, b"b3"), (9, b"b4"), (10, b"z")]


class _FailingAppends:
    """The store, with appends to clean segments failing after ``ok`` of them."""

    def __init__(self, store: SegmentStore, ok: int) -> None:
        self._store = store
        self.ok = ok

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append(self, name: str, data: bytes, **kw: Any) -> int:
        if ".#epoch.1073741824" in name:
            if self.ok <= 0:
                raise OSError("injected")
            self.ok -= 1
        return await self._store.append(name, data, **kw)


async def test_a_failed_pass_leaves_the_old_version(node: Node) -> None:
    await _fill(node, "flt")
    now = int(time.time() * 1000)
    ctx = ctx_of(node)
    good = cleaner(node, lambda: now + 1000)
    bad = cleaner(node, lambda: now + 1000, append_bytes_max=1)
    bad.store = _FailingAppends(ctx.store, ok=1)  # type: ignore[assignment]
    with pytest.raises(OSError):
        await bad.clean_partition(ctx.topics.get("flt"), 0)  # type: ignore[arg-type]
    assert bad.checkpoint("flt", 0) is None
    c = await node.client()
    _, records = await fetch_records(c, "flt", 0, 0)
    assert [o for o, _ in records] == list(range(11))  # the old version, whole
    assert await good.run_once() == 1
    _, records = await fetch_records(c, "flt", 0, 0)
    assert [o for o, _ in records] == [5, 6, 7, 8, 9, 10]
    await c.close()


async def test_stream_truncated_behind_cleaned_data(node: Node) -> None:
    """After a pass (and ``file.delete.delay.ms``) the stream's segment is truncated as
    far as the data still referring to it allows; everything stays readable."""
    await asyncio.to_thread(create, node, "rcl", {**COMPACT, "file.delete.delay.ms": "0"})
    c = await node.client()
    now = int(time.time() * 1000)
    for r in range(3):
        for k in range(4):
            batch = keyed_batch([(b"k%d" % k, b"v%d" % r * 50)], timestamp_ms=now)
            assert (await produce(c, "rcl", 0, batch))[0] == 0
    ctx = ctx_of(node)
    reclaimed: list[str] = []

    async def reclaim(topic: str) -> None:
        reclaimed.append(topic)
        from tidegate.gateway.log.log_start import truncate_to_log_starts
        await truncate_to_log_starts(ctx, topic)

    pass_ = cleaner(node, lambda: now + 1000, reclaim=reclaim)
    assert await pass_.run_once() == 1
    for _ in range(50):
        if reclaimed:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    seg = (await ctx.topics.all_segments("rcl"))[0]
    props = await ctx.store.get_info(ctx.topics.segment_name("rcl", seg.id))
    assert props.start_offset > 0
    _, records = await fetch_records(c, "rcl", 0, 0)
    assert [o for o, _ in records] == [7, 8, 9, 10, 11]  # k3 at 7: the head (11) is not mapped
    await c.close()
    await pass_.close()


async def test_compact_delete_moves_log_start_before_the_stream_is_cut(node: Node) -> None:
    """compact,delete with retention.ms and retention.bytes: the stream has no retention
    of its own (it could cut bytes a valid offset still points at); the cleaner moves the
    log start, then the stream is truncated behind it. At every step each offset from the
    log start on reads, and only offsets below it are OFFSET_OUT_OF_RANGE."""
    from tidegate.gateway.log.log_start import truncate_to_log_starts

    topic = "cd"
    await asyncio.to_thread(create, node, topic, {
        **COMPACT, "cleanup.policy": "compact,delete", "retention.ms": "60000",
        "retention.bytes": "100000", "file.delete.delay.ms": "0"})
    assert (await node.controller.get_stream("kafka", topic)).config.retention is None
    c = await node.client()
    now = int(time.time() * 1000)
    for i in range(12):  # 0-5 two minutes old, 6-11 new; distinct keys: nothing compacts
        ts = now - 120_000 if i < 6 else now
        assert await produce(c, topic, 0, keyed_batch([(b"k%d" % i, b"v" * 200)],
                                                      timestamp_ms=ts)) == (0, i)
    ctx = ctx_of(node)
    plog = ctx.logs.get(topic, 0)

    async def check_reads() -> None:
        start = plog.log_start_offset
        for offset in range(start, 12):
            part, records = await fetch_records(c, topic, 0, offset)
            assert part.error_code == 0, (offset, part)  # type: ignore[attr-defined]
            assert records[0][0] == offset
        if start:
            part, _ = await fetch_records(c, topic, 0, start - 1)
            assert part.error_code == 1  # type: ignore[attr-defined]  # OFFSET_OUT_OF_RANGE

    reclaims: list[str] = []

    async def reclaim(t: str) -> None:
        await check_reads()  # the log start moved, the stream is not cut yet
        await truncate_to_log_starts(ctx, t)
        reclaims.append(t)

    pass_ = cleaner(node, lambda: now + 1000, reclaim=reclaim)
    await pass_.run_once()
    for _ in range(100):
        if reclaims:
            break
        await asyncio.sleep(0.02)
    assert plog.log_start_offset == 6  # the old batches passed by time
    await check_reads()
    seg = (await ctx.topics.all_segments(topic))[0]
    assert (await ctx.store.get_info(ctx.topics.segment_name(topic, seg.id))).start_offset > 0
    # Size: the partition is kept within retention.bytes, oldest batches first.
    await asyncio.to_thread(_alter, node, topic, {"retention.bytes": "1000"})
    reclaims.clear()
    await pass_.run_once()
    for _ in range(100):
        if reclaims:
            break
        await asyncio.sleep(0.02)
    sizes = [e.length for e in ctx.index.entries_from(topic, 0, plog.log_start_offset)]
    assert plog.log_start_offset > 6 and sum(sizes) <= 1000 < sum(sizes) + 300
    await check_reads()
    await pass_.close()
    await c.close()


def _alter(node: Node, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}"})
    entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET)
               for n, v in configs.items()]
    for f in admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)]
    ).values():
        f.result(timeout=20)


async def _many_batches(node: Node, topic: str, batches: int, keys: int) -> int:
    await asyncio.to_thread(create, node, topic, {**COMPACT, "file.delete.delay.ms": "0"})
    c = await node.client()
    now = int(time.time() * 1000)
    for i in range(batches):
        batch = keyed_batch([(b"k%d" % (i % keys), b"v%d" % i)], timestamp_ms=now)
        assert await produce(c, topic, 0, batch) == (0, i)
    await c.close()
    return now


def _latest(batches: int, keys: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the latest record of each key, and the head (never cleaned)."""
    latest = {i % keys: i for i in range(batches - 1)}
    return sorted({*((o, b"v%d" % o) for o in latest.values()),
                   (batches - 1, b"v%d" % (batches - 1))})


async def test_a_pass_holds_at_most_switch_entries_max_entries(node: Node) -> None:
    """A pass over many surviving batches switches the index in steps: it never holds
    more than ``switch_entries_max`` entries, and readers get the same result."""
    batches, keys = 1200, 1000
    now = await _many_batches(node, "many", batches, keys)
    ctx = ctx_of(node)
    steps: list[int] = []
    real = ctx.index.switch_cleaned

    def counted(*args: Any, **kw: Any) -> None:
        steps.append(len(args[3]))
        real(*args, **kw)

    ctx.index.switch_cleaned = counted  # type: ignore[method-assign]
    try:
        assert await cleaner(node, lambda: now + 1000, switch_entries_max=50).run_once() == 1
    finally:
        ctx.index.switch_cleaned = real  # type: ignore[method-assign]
    assert max(steps) <= 50 and len(steps) >= (keys - 1) // 50
    assert sum(steps) == keys  # the latest of each key below the head, each switched once
    c = await node.client()
    _, records = await fetch_records(c, "many", 0, 0)
    assert records == _latest(batches, keys)
    await c.close()


async def test_a_pass_failing_between_steps_leaves_both_generations_readable(
    node: Node,
) -> None:
    """The clean segment's appends fail after a few steps were switched: readers see the
    new entries below the last step and the old ones after, the checkpoint says both
    generations are live; a later pass (a restarted process) completes and deletes
    them both."""
    from tidegate.core.segmentstore.api import SegmentNotFoundError
    from tidegate.gateway.log.compaction.cleaner import clean_segment_id

    batches, keys = 300, 40
    now = await _fill_twice(node, "steps", batches, keys)
    ctx = ctx_of(node)
    bad = cleaner(node, lambda: now + 1000, append_bytes_max=1, switch_entries_max=4)
    bad.store = _FailingAppends(ctx.store, ok=10)  # type: ignore[assignment]
    with pytest.raises(OSError):
        await bad.clean_partition(ctx.topics.get("steps"), 0)  # type: ignore[arg-type]
    cp = bad.checkpoint("steps", 0)
    assert cp is not None and list(cp.generations) == [1, 2]
    c = await node.client()
    _, records = await fetch_records(c, "steps", 0, 0)
    expect = _latest(2 * batches, keys)
    assert set(expect) <= set(records)  # nothing lost: superseded records may remain
    assert [o for o, _ in records] == sorted(o for o, _ in records)
    fresh = cleaner(node, lambda: now + 2000)
    assert await fresh.run_once() == 1
    cp = fresh.checkpoint("steps", 0)
    assert cp is not None and list(cp.generations) == [3]
    _, records = await fetch_records(c, "steps", 0, 0)
    assert records == expect
    async def exists(g: int) -> bool:
        try:
            await ctx.store.get_info(ctx.topics.segment_name("steps", clean_segment_id(0, g)))
            return True
        except SegmentNotFoundError:
            return False

    for _ in range(100):
        if not await exists(1) and not await exists(2):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the generations of the failed pass outlived the next one")
    assert await exists(3)
    await c.close()
    await fresh.close()


async def _fill_twice(node: Node, topic: str, batches: int, keys: int) -> int:
    """A first clean (generation 1) of ``batches`` records, then as many again."""
    now = await _many_batches(node, topic, batches, keys)
    assert await cleaner(node, lambda: now + 500).run_once() == 1
    c = await node.client()
    for i in range(batches, 2 * batches):
        batch = keyed_batch([(b"k%d" % (i % keys), b"v%d" % i)], timestamp_ms=now)
        assert await produce(c, topic, 0, batch) == (0, i)
    await c.close()
    return now
