"""Auto-scaling and retention policies."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from tidegate.core.controller.api import (
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfig,
    qualified_segment_name,
    segment_id,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.controller.policies.retention import thin
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentTraffic
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import Clock

POLICY = ControllerConfig(
    autoscale_period_ms=0,
    autoscale_cooldown_ms=0,
    retention_period_ms=0,
    txn_timeout_check_period_ms=0,
    watermark_period_ms=0,
)


class Rates:
    """A traffic source the test sets by hand: segment name -> events/s."""

    def __init__(self) -> None:
        self.events: dict[str, float] = {}

    def __call__(self, name: str) -> SegmentTraffic:
        e = self.events.get(name, 0.0)
        return SegmentTraffic(bytes_per_second=e * 1024, events_per_second=e)


def rate_config(
    min_segments: int = 1,
    factor: int = 2,
    kind: ScalingType = ScalingType.BY_RATE_IN_EVENTS_PER_SEC,
) -> StreamConfig:
    return StreamConfig(
        scaling=ScalingPolicy(kind, target_rate=100, scale_factor=factor, min_segments=min_segments)
    )


@pytest.fixture
async def scaler(store: InMemorySegmentStore, clock: Clock) -> tuple[StreamController, Rates]:
    rates = Rates()
    ctl = StreamController(store, POLICY, clock=clock, traffic=rates)
    await ctl.start()
    await ctl.create_scope("s")
    return ctl, rates


def name(seg: int) -> str:
    return qualified_segment_name("s", "t", seg)


async def test_hot_split_then_cold_merge(scaler: tuple[StreamController, Rates]) -> None:
    ctl, rates = scaler
    await ctl.create_stream("s", "t", rate_config(factor=3))
    rates.events[name(segment_id(0, 0))] = 500
    await ctl.autoscaler.run_once()
    segs = await ctl.get_current_segments("s", "t")
    assert len(segs) == 3
    assert is_cover([s.key_range for s in segs])
    # one of three cold: marked, not merged (needs a cold neighbour)
    rates.events = {name(segs[0].id): 10, name(segs[1].id): 80, name(segs[2].id): 80}
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 3
    # two cold neighbours: merged
    rates.events = {name(segs[0].id): 10, name(segs[1].id): 10, name(segs[2].id): 80}
    await ctl.autoscaler.run_once()
    after = await ctl.get_current_segments("s", "t")
    assert [(s.key_start, s.key_end) for s in after] == [
        (0.0, segs[1].key_end),
        (segs[2].key_start, 1.0),
    ]
    rates.events = {}
    await ctl.autoscaler.run_once()
    assert [(s.key_start, s.key_end) for s in await ctl.get_current_segments("s", "t")] == [
        (0.0, 1.0)
    ]
    await ctl.close()


async def test_min_segments_honoured(scaler: tuple[StreamController, Rates]) -> None:
    ctl, rates = scaler
    await ctl.create_stream("s", "t", rate_config(min_segments=2))
    for _ in range(3):
        await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 2
    await ctl.close()


async def test_fixed_policy_never_scales(scaler: tuple[StreamController, Rates]) -> None:
    ctl, rates = scaler
    await ctl.create_stream("s", "t", StreamConfig())
    rates.events[name(segment_id(0, 0))] = 10_000
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 1
    await ctl.close()


async def test_kbytes_policy_and_cooldown(store: InMemorySegmentStore, clock: Clock) -> None:
    rates = Rates()
    config = ControllerConfig(
        autoscale_period_ms=0,
        autoscale_cooldown_ms=5_000,
        retention_period_ms=0,
        txn_timeout_check_period_ms=0,
        watermark_period_ms=0,
    )
    ctl = StreamController(store, config, clock=clock, traffic=rates)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", rate_config(kind=ScalingType.BY_RATE_IN_KBYTES_PER_SEC))
    rates.events[name(segment_id(0, 0))] = 200  # 200 KB/s
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 1  # too young
    clock.advance(6)
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 2
    await ctl.close()


async def test_background_autoscale_loop(store: InMemorySegmentStore, clock: Clock) -> None:
    rates = Rates()
    config = ControllerConfig(
        autoscale_period_ms=20,
        autoscale_cooldown_ms=0,
        retention_period_ms=0,
        txn_timeout_check_period_ms=0,
        watermark_period_ms=0,
    )
    ctl = StreamController(store, config, clock=clock, traffic=rates)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", rate_config())
    rates.events[name(segment_id(0, 0))] = 1000
    for _ in range(1000):  # up to ~10 s on a loaded machine
        if len(await ctl.get_epochs("s", "t")) > 1:
            break
        await asyncio.sleep(0.01)
    rates.events.clear()
    for _ in range(1000):  # up to ~10 s on a loaded machine
        segs = await ctl.get_current_segments("s", "t")
        if len(segs) == 1 and len(await ctl.get_epochs("s", "t")) >= 3:
            break
        await asyncio.sleep(0.01)
    epochs = await ctl.get_epochs("s", "t")
    assert [len(e.segments) for e in epochs[:3]] == [1, 2, 1]
    await ctl.close()


async def test_time_retention(store: InMemorySegmentStore, clock: Clock) -> None:
    ctl = StreamController(store, POLICY, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    cfg = StreamConfig(retention=RetentionPolicy(RetentionType.TIME, 10_000))
    await ctl.create_stream("s", "t", cfg)
    s0 = name(segment_id(0, 0))
    await store.append(s0, b"a" * 100)
    await ctl.retention.run_once()  # cut at 100, t=0
    clock.advance(5)
    await store.append(s0, b"b" * 100)
    await ctl.retention.run_once()  # cut at 200, t=5
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 0}
    clock.advance(6)  # the first cut is now 11 s old
    await ctl.retention.run_once()
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 100}
    assert (await store.get_info(s0)).start_offset == 100
    clock.advance(5)
    await ctl.retention.run_once()
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 200}
    await ctl.close()


async def test_time_retention_longer_than_the_bounded_set(
    store: InMemorySegmentStore, clock: Clock
) -> None:
    """A time policy spanning more rounds than ``retention_set_max`` still truncates: the
    set is thinned evenly and keeps its oldest cut."""
    config = dataclasses.replace(POLICY, retention_set_max=4)
    ctl = StreamController(store, config, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream(
        "s", "t", StreamConfig(retention=RetentionPolicy(RetentionType.TIME, 20_000))
    )
    s0 = name(segment_id(0, 0))
    for _ in range(12):  # 12 rounds 1 s apart: three times the set's bound
        await store.append(s0, b"x" * 10)
        await ctl.retention.run_once()
        clock.advance(1)
    meta = await ctl.stream_meta("s", "t")
    assert len(await ctl.retention.retention_set(meta)) <= 4
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 0}
    clock.advance(10)  # the oldest kept cut (10 bytes, t=0) is now 22 s old
    await ctl.retention.run_once()
    assert (await ctl.get_head_segments("s", "t"))[segment_id(0, 0)] >= 10
    await ctl.close()


def test_thin_keeps_the_oldest_and_spreads_the_rest() -> None:
    cuts = [(f"k{t:02d}", t) for t in range(10)]
    dropped = thin(cuts, 4)
    kept = [k for k, _ in cuts if k not in dropped]
    assert len(kept) == 4 and kept[0] == "k00" and kept[-1] == "k09"
    assert thin(cuts, 20) == []


async def test_size_retention_across_scale(store: InMemorySegmentStore, clock: Clock) -> None:
    ctl = StreamController(store, POLICY, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream(
        "s", "t", StreamConfig(retention=RetentionPolicy(RetentionType.SIZE, 150))
    )
    s0 = segment_id(0, 0)
    await store.append(name(s0), b"a" * 100)
    await ctl.retention.run_once()  # size 100
    await ctl.scale("s", "t", [s0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
    a, b = segment_id(1, 1), segment_id(1, 2)
    await store.append(name(a), b"b" * 100)
    clock.advance(1)
    await ctl.retention.run_once()  # size 200: keeps >= 150 -> nothing eligible (200-100 < 150)
    assert await ctl.get_head_segments("s", "t") == {s0: 0}
    await store.append(name(b), b"c" * 200)
    clock.advance(1)
    await ctl.retention.run_once()  # size 400: cut at 100 leaves 300, cut at 200 leaves 200
    assert await ctl.get_head_segments("s", "t") == {a: 100, b: 0}
    with pytest.raises(SegmentNotFoundError):
        await store.get_info(name(s0))
    await ctl.close()


async def test_split_between_routing_keys(store: InMemorySegmentStore, clock: Clock) -> None:
    rates = Rates()
    points = [0.0, 0.5, 0.25, 0.75]  # partitions 0..3, bit-reversed
    ctl = StreamController(
        store, POLICY, clock=clock, traffic=rates, key_points=lambda sc, st: points
    )
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", rate_config(factor=4))
    rates.events[name(segment_id(0, 0))] = 500
    await ctl.autoscaler.run_once()
    segs = await ctl.get_current_segments("s", "t")
    # four keys, factor 4: one segment per key, cut halfway between neighbours
    assert [(s.key_start, s.key_end) for s in segs] == [
        (0.0, 0.125),
        (0.125, 0.375),
        (0.375, 0.625),
        (0.625, 1.0),
    ]
    # a segment holding a single key is never split however hot
    rates.events = {
        name(segs[0].id): 10_000,
        name(segs[1].id): 80,
        name(segs[2].id): 80,
        name(segs[3].id): 80,
    }
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_current_segments("s", "t")) == 4
    await ctl.close()


def test_split_between_keys_groups() -> None:
    from tidegate.core.controller.policies.autoscale import split_between_keys

    keys = [i / 8 for i in range(8)]
    assert [(r.start, r.end) for r in split_between_keys(0.0, 1.0, keys, 2)] == [
        (0.0, 0.4375),
        (0.4375, 1.0),
    ]
    assert len(split_between_keys(0.0, 1.0, keys, 3)) == 3
    assert split_between_keys(0.2, 0.3, keys, 4) == [KeyRange(0.2, 0.3)]  # holds key 0.25 only
    assert split_between_keys(0.0, 1.0, [], 4) == [KeyRange(0.0, 1.0)]


async def test_time_retention_with_a_size_bound(store: InMemorySegmentStore, clock: Clock) -> None:
    """Kafka's retention.ms with retention.bytes: whichever limit allows more wins."""
    ctl = StreamController(store, POLICY, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    cfg = StreamConfig(retention=RetentionPolicy(RetentionType.TIME, 10_000, bytes_max=150))
    await ctl.create_stream("s", "t", cfg)
    s0 = name(segment_id(0, 0))
    for _ in range(2):
        await store.append(s0, b"a" * 100)
        await ctl.retention.run_once()
        clock.advance(1)
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 0}
    await store.append(s0, b"a" * 100)  # 300 bytes: the cut at 100 leaves 200 >= 150
    await ctl.retention.run_once()
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 100}
    assert ctl.stats.truncations[("s", "t", "retention")] == 1
    clock.advance(20)  # time: every cut older than 10 s goes
    await ctl.retention.run_once()
    assert await ctl.get_head_segments("s", "t") == {segment_id(0, 0): 300}
    await ctl.close()


async def test_retention_round_over_a_wide_stream_takes_bounded_loop_steps(
    store: InMemorySegmentStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream of thousands of segments has retention cuts as large, and the set keeps
    one per round: comparing each with the head is a loop step of its own, not one step
    for the whole set (issue 35 item 9)."""
    from tidegate.core.controller import history
    from tidegate.core.controller.policies import retention

    monkeypatch.setattr(retention, "CUT_SEGMENTS_PER_STEP", 32, raising=False)
    ctl = StreamController(store, POLICY, clock=clock)
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(
        scaling=ScalingPolicy(ScalingType.FIXED_NUM_SEGMENTS, min_segments=32),
        retention=RetentionPolicy(RetentionType.TIME, 3_600_000)))
    segments = await ctl.get_head_segments("s", "t")
    for _ in range(6):  # each round's cut past the last: none is stale
        for seg in segments:
            await store.append(name(seg), b"x" * 10)
        await ctl.retention.run_once()
        clock.advance(1)
    loop = asyncio.get_running_loop()
    turn, ticking = [0], [True]

    def tick() -> None:  # once per loop iteration
        turn[0] += 1
        if ticking[0]:
            loop.call_soon(tick)

    compared: dict[int, int] = {}
    cut_ge = history.History.cut_ge

    def counted(self: history.History, a: dict[int, int], b: dict[int, int]) -> bool:
        compared[turn[0]] = compared.get(turn[0], 0) + 1
        return cut_ge(self, a, b)

    monkeypatch.setattr(history.History, "cut_ge", counted)
    loop.call_soon(tick)
    await ctl.retention.run_once()
    ticking[0] = False
    assert sum(compared.values()) >= 7  # each of the seven cuts against the head
    assert max(compared.values()) <= 2
    meta = await ctl.stream_meta("s", "t")
    assert len(await ctl.retention.retention_set(meta)) == 7
    await ctl.close()
