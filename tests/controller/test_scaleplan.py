"""Where the auto-scaler cuts and merges (``policies/scaleplan.py``), and an hour of
steady Kafka-like load on a fast clock: bounded epochs, hot keys alone, balanced merges,
no split on a rate that is falling fast."""

from __future__ import annotations

from collections.abc import Sequence

from tidegate.core.controller.api import (
    KeyRange,
    ScalingPolicy,
    ScalingType,
    StreamConfig,
)
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.controller.policies.autoscale import KeyTraffic
from tidegate.core.controller.policies.scaleplan import (
    KeyRate,
    MergeCandidate,
    plan_merges,
    split_by_rate,
)
from tidegate.core.segmentstore.api import SegmentStore

from tests.controller.conftest import Clock

#: Partition points of 8 partitions (bit-reversal), in partition order.
POINTS = [0.0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]


def cuts(ranges: list[KeyRange]) -> list[float]:
    return [r.end for r in ranges[:-1]]


def test_split_by_rate_parts_a_hot_key_from_cold_ones() -> None:
    keys = [KeyRate(0.0, 100), KeyRate(0.25, 1), KeyRate(0.5, 1), KeyRate(0.75, 1)]
    assert cuts(split_by_rate(0.0, 1.0, keys, 2)) == [0.125]
    # the hot key in the middle: the lighter side first, then the hot key alone
    keys = [KeyRate(0.0, 1), KeyRate(0.25, 1), KeyRate(0.5, 100), KeyRate(0.75, 1)]
    assert cuts(split_by_rate(0.0, 1.0, keys, 2)) == [0.375]
    assert cuts(split_by_rate(0.375, 1.0, keys, 2)) == [0.625]
    # as few parts as give the lightest busiest part: a factor of 3 still makes two here
    keys = [KeyRate(0.0, 100), KeyRate(0.25, 1), KeyRate(0.5, 1), KeyRate(0.75, 1)]
    assert cuts(split_by_rate(0.0, 1.0, keys, 3)) == [0.125]
    # idle keys beside a busy one are parted from it too
    keys = [KeyRate(0.0, 100), KeyRate(0.25, 0), KeyRate(0.5, 0)]
    assert cuts(split_by_rate(0.0, 1.0, keys, 2)) == [0.125]
    # even traffic: even halves
    keys = [KeyRate(p, 10) for p in (0.0, 0.25, 0.5, 0.75)]
    assert cuts(split_by_rate(0.0, 1.0, keys, 2)) == [0.375]


def test_split_by_rate_never_cuts_a_single_key() -> None:
    assert split_by_rate(0.2, 0.3, [KeyRate(0.25, 1e9)], 4) == [KeyRange(0.2, 0.3)]
    assert split_by_rate(0.0, 1.0, [], 4) == [KeyRange(0.0, 1.0)]
    assert split_by_rate(0.0, 1.0, [KeyRate(0.0, 0), KeyRate(0.5, 0)], 2) == [KeyRange(0.0, 1.0)]


def _seg(i: int, start: float, end: float, size: int, rate: float = 0.0) -> MergeCandidate:
    return MergeCandidate(i, start, end, size, rate, rate, True)


def test_merges_pair_the_smallest_first() -> None:
    eight = [_seg(i, i / 8, (i + 1) / 8, 1) for i in range(8)]
    pairs = plan_merges(eight, 2, 10.0)
    assert [(a.id, b.id) for a, b in pairs] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    four = [_seg(i, i / 4, (i + 1) / 4, 2) for i in range(4)]
    assert [(a.id, b.id) for a, b in plan_merges(four, 2, 10.0)] == [(0, 1), (2, 3)]
    # 3 + 1 + 1 + 3: the two single ones pair, not a single one with a 3
    uneven = [_seg(0, 0, 0.25, 3), _seg(1, 0.25, 0.5, 1), _seg(2, 0.5, 0.75, 1), _seg(3, 0.75, 1, 3)]
    assert [(a.id, b.id) for a, b in plan_merges(uneven, 1, 10.0)] == [(1, 2)]
    # min_segments bounds the merges; the rate cap keeps a merge from turning hot
    assert len(plan_merges(eight, 7, 10.0)) == 1
    busy = [_seg(0, 0, 0.5, 1, rate=6.0), _seg(1, 0.5, 1.0, 1, rate=6.0)]
    assert plan_merges(busy, 1, 10.0) == []


class SteadyKeys:
    """A ``RoutingKeyTraffic`` with fixed per-partition rates (events/s)."""

    def __init__(self, rates: dict[int, float]) -> None:
        self.rates = rates
        self.recent: dict[int, float] | None = None

    def key_traffic(self, scope: str, stream: str) -> Sequence[KeyTraffic]:
        recent = self.recent if self.recent is not None else self.rates
        return [
            KeyTraffic(POINTS[p], r * 1024, r, recent.get(p, 0.0) * 1024, recent.get(p, 0.0))
            for p, r in ((p, self.rates.get(p, 0.0)) for p in range(8))
        ]


def held(ranges: Sequence[tuple[float, float]]) -> list[list[int]]:
    return [sorted(p for p in range(8) if a <= POINTS[p] < b) for a, b in ranges]


async def test_an_hour_of_steady_load_on_a_fast_clock(store: SegmentStore, clock: Clock) -> None:
    """8 partitions in 2 segments, partitions 2 and 6 hot: a few splits put each alone,
    then 360 more rounds (an hour at the default 10 s period) change nothing; when the
    load stops the segments merge back to 4 + 4."""
    config = ControllerConfig(
        autoscale_period_ms=0, autoscale_cooldown_ms=60_000, retention_period_ms=0,
        txn_timeout_check_period_ms=0, watermark_period_ms=0,
    )
    keys = SteadyKeys({p: 3.0 for p in range(8)} | {2: 150.0, 6: 150.0})
    ctl = StreamController(store, config, clock=clock, key_traffic=keys)
    await ctl.start()
    await ctl.create_scope("s")
    policy = ScalingPolicy(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 40, 2, 2)
    await ctl.create_stream(
        "s", "t", StreamConfig(scaling=policy),
        [KeyRange(0.0, 0.4375), KeyRange(0.4375, 1.0)],
    )
    for _ in range(360):
        clock.advance(10)
        await ctl.autoscaler.run_once()
    epochs = await ctl.get_epochs("s", "t")
    assert len(epochs) <= 4, [held([(s.key_start, s.key_end) for s in e.segments]) for e in epochs]
    current = held([(s.key_start, s.key_end) for s in epochs[-1].segments])
    assert [2] in current and [6] in current
    assert all(current)
    assert ctl.stats.scales[("s", "t", "split")] == len(epochs) - 1

    # the load stops: the short window sees it first, and nothing is split on the way
    keys.recent = {}
    clock.advance(10)
    await ctl.autoscaler.run_once()
    keys.rates = {}
    for _ in range(30):
        clock.advance(10)
        await ctl.autoscaler.run_once()
    final = await ctl.get_current_segments("s", "t")
    assert held([(s.key_start, s.key_end) for s in final]) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    for e in await ctl.get_epochs("s", "t"):
        assert is_cover([s.key_range for s in e.segments])
        assert all(held([(s.key_start, s.key_end) for s in e.segments]))
    await ctl.close()


async def test_a_rate_falling_fast_splits_nothing(store: SegmentStore, clock: Clock) -> None:
    config = ControllerConfig(
        autoscale_period_ms=0, autoscale_cooldown_ms=0, retention_period_ms=0,
        txn_timeout_check_period_ms=0, watermark_period_ms=0,
    )
    keys = SteadyKeys({0: 500.0, 1: 500.0})
    keys.recent = {0: 5.0, 1: 5.0}  # the long window still high, the short one low
    ctl = StreamController(store, config, clock=clock, key_traffic=keys)
    await ctl.start()
    await ctl.create_scope("s")
    policy = ScalingPolicy(ScalingType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 1)
    await ctl.create_stream("s", "t", StreamConfig(scaling=policy))
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_epochs("s", "t")) == 1
    keys.recent = None  # steady: split
    await ctl.autoscaler.run_once()
    assert len(await ctl.get_epochs("s", "t")) == 2
    await ctl.close()
