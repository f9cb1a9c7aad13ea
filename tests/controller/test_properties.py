"""Property tests: random valid scales keep every epoch a cover of [0, 1) and the
successor/predecessor queries agree with the epoch history; random requests are
accepted exactly when an independent oracle (exact rational arithmetic) says they are
valid, and rejected with the error it predicts, leaving the stream unchanged."""

from __future__ import annotations

import asyncio
import collections
import math
from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tidegate.core.controller.api import (
    ConflictError,
    ControllerError,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    ScalingPolicy,
    StreamConfig,
    StreamState,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.keyspace import is_cover
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore

from tests.controller.conftest import QUIET, Clock

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def overlap(a: KeyRange, b: KeyRange) -> bool:
    return a.start < b.end and b.start < a.end


def check_history(
    epochs: list[EpochRecord],
    succ: dict[int, dict[int, list[int]]],
    pred: dict[int, dict[int, list[int]]],
) -> None:
    """Every epoch is a cover; successors/predecessors match the epoch transitions."""
    for e in epochs:
        assert is_cover([s.key_range for s in e.segments]), e
        assert [s.key_start for s in e.segments] == sorted(s.key_start for s in e.segments)
    expected_succ: dict[int, set[int]] = {}
    expected_pred: dict[int, set[int]] = {}
    for before, after in zip(epochs, epochs[1:], strict=False):
        b_ids = {s.id for s in before.segments}
        a_ids = {s.id for s in after.segments}
        sealed = [s for s in before.segments if s.id not in a_ids]
        created = [s for s in after.segments if s.id not in b_ids]
        assert all(s.epoch == after.epoch for s in created)
        for s in sealed:
            expected_succ[s.id] = {c.id for c in created if overlap(c.key_range, s.key_range)}
        for c in created:
            expected_pred[c.id] = {s.id for s in sealed if overlap(c.key_range, s.key_range)}
    for seg, succs in succ.items():
        assert set(succs) == expected_succ.get(seg, set()), seg
        for x, preds in succs.items():
            assert set(preds) == expected_pred[x]
    for seg, preds in pred.items():
        assert set(preds) == expected_pred.get(seg, set()), seg
        for p, succs in preds.items():
            assert set(succs) == expected_succ[p]


@st.composite
def scale_plan(draw: st.DrawFn) -> list[tuple[int, int, list[int], bool]]:
    """Steps of (run start index, run length, cut points in 1..999, roll a txn first)."""
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        steps.append(
            (
                draw(st.integers(0, 50)),
                draw(st.integers(1, 3)),
                sorted(set(draw(st.lists(st.integers(1, 999), max_size=3)))),
                draw(st.booleans()),
            )
        )
    return steps


async def _random_scales(plan: list[tuple[int, int, list[int], bool]], initial: int) -> None:
    store = InMemorySegmentStore()
    ctl = StreamController(store, QUIET, clock=Clock())
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=initial)))
    for start, length, cuts, roll in plan:
        txn = await ctl.create_transaction("s", "t") if roll else None
        segs = await ctl.get_current_segments("s", "t")
        i = start % len(segs)
        run = segs[i : i + length]
        lo, hi = run[0].key_start, run[-1].key_end
        points = [lo] + [p for p in (lo + (hi - lo) * c / 1000 for c in cuts) if lo < p < hi]
        points = sorted(set(points)) + [hi]
        ranges = [KeyRange(a, b) for a, b in zip(points, points[1:], strict=False)]
        await ctl.scale("s", "t", [s.id for s in run], ranges)
        if txn is not None:
            await ctl.commit_transaction("s", "t", txn.id)
    epochs = await ctl.get_epochs("s", "t")
    succ, pred = {}, {}
    for e in epochs:
        for s in e.segments:
            succ[s.id] = {x.id: p for x, p in (await ctl.get_successors("s", "t", s.id)).items()}
            pred[s.id] = {x.id: p for x, p in (await ctl.get_predecessors("s", "t", s.id)).items()}
    check_history(epochs, succ, pred)
    # the current segments answer every routing key, and the head is epoch 0
    for k in (0.0, 0.1, 0.5, 0.999999):
        seg = await ctl.get_segment_for_key("s", "t", k)
        assert seg.key_start <= k < seg.key_end
    assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE
    await ctl.close()


@SETTINGS
@given(plan=scale_plan(), initial=st.integers(1, 5))
def test_random_valid_scales_keep_covers(
    plan: list[tuple[int, int, list[int], bool]], initial: int
) -> None:
    asyncio.run(_random_scales(plan, initial))


# -- random requests against an oracle ------------------------------------------------------

bounds = st.one_of(
    st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.3333333333333333, 0.1]),
    st.floats(min_value=-0.5, max_value=1.5, allow_nan=False),
)


def oracle(
    live: dict[int, KeyRange], known: set[int], sealed: list[int], ranges: list[tuple[float, float]]
) -> type[ControllerError] | None:
    if not sealed or not ranges or len(set(sealed)) != len(sealed):
        return InvalidArgumentError
    for s in sealed:
        if s not in live:
            return ConflictError if s in known else InvalidArgumentError
    for a, b in ranges:
        if not (0 <= a < b <= 1):
            return InvalidArgumentError

    def union(rs: list[tuple[Fraction, Fraction]]) -> list[tuple[Fraction, Fraction]] | None:
        out: list[tuple[Fraction, Fraction]] = []
        for a, b in sorted(rs):
            if out and a < out[-1][1]:
                return None
            if out and a == out[-1][1]:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
        return out

    new = union([(Fraction(a), Fraction(b)) for a, b in ranges])
    old = union([(Fraction(live[s].start), Fraction(live[s].end)) for s in sealed])
    if new is None or new != old:
        return InvalidArgumentError
    return None


Request = tuple[bool, list[int], list[tuple[float, float]], list[int], int]


def derived(
    live: list[KeyRange], ids: list[int], picks: list[int], cuts: list[int], nudge: int
) -> tuple[list[int], list[tuple[float, float]]]:
    """A request built from a run of live segments, valid unless ``nudge`` moves one bound
    by one float step."""
    i = (picks[0] if picks else 0) % len(live)
    n = 1 + (picks[1] if len(picks) > 1 else 0) % 3
    run = live[i : i + n]
    lo, hi = run[0].start, run[-1].end
    points = sorted({lo, *(lo + (hi - lo) * c / 1000 for c in cuts if 0 < c < 1000), hi})
    ranges = list(zip(points, points[1:], strict=False))
    if nudge and ranges:
        j = nudge % len(ranges)
        a, b = ranges[j]
        ranges[j] = (a, math.nextafter(b, 2.0 if nudge > 0 else -1.0))
    return ids[i : i + n], ranges


async def _random_requests(requests: list[Request]) -> None:
    store = InMemorySegmentStore()
    ctl = StreamController(store, QUIET, clock=Clock())
    await ctl.start()
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(scaling=ScalingPolicy(min_segments=4)))
    # one real scale so there is a sealed segment to name
    first = (await ctl.get_current_segments("s", "t"))[0]
    await ctl.scale("s", "t", [first.id], [KeyRange(0.0, 0.125), KeyRange(0.125, 0.25)])
    for from_live, picks, ranges, cuts, nudge in requests:
        epochs = await ctl.get_epochs("s", "t")
        known = {s.id for e in epochs for s in e.segments}
        live = {s.id: s.key_range for s in epochs[-1].segments}
        if from_live:
            sealed, ranges = derived(list(live.values()), list(live), picks, cuts, nudge)
        else:
            ordered = sorted(known)
            sealed = [ordered[p % len(ordered)] if p >= 0 else (99 << 32) | 99 for p in picks]
        outcomes[
            expected.__name__ if (expected := oracle(live, known, sealed, ranges)) else "ok"
        ] += 1
        before = len(epochs)
        try:
            await ctl.scale("s", "t", sealed, [KeyRange(a, b) for a, b in ranges])
        except ControllerError as e:
            assert expected is not None, (sealed, ranges, e)
            assert type(e) is expected, (sealed, ranges, e)
            assert len(await ctl.get_epochs("s", "t")) == before
        else:
            assert expected is None, (sealed, ranges)
            assert len(await ctl.get_epochs("s", "t")) == before + 1
        assert (await ctl.get_stream("s", "t")).state == StreamState.ACTIVE
    for e in await ctl.get_epochs("s", "t"):
        assert is_cover([s.key_range for s in e.segments])
    await ctl.close()


@SETTINGS
@given(
    requests=st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.integers(-1, 20), max_size=3),
            st.lists(st.tuples(bounds, bounds), max_size=3),
            st.lists(st.integers(0, 1000), max_size=3),
            st.sampled_from([0, 0, 0, 1, -1, 2, -2]),
        ),
        min_size=1,
        max_size=6,
    )
)
# Explicit cases every run: a request naming the segment sealed in setup (conflict), and
# a valid split of a live segment.
@example(requests=[(False, [0], [(0.0, 0.125)], [], 0)])
@example(requests=[(True, [1], [], [500], 0)])
def random_requests_match_oracle(requests: list[Request]) -> None:
    asyncio.run(_random_requests(requests))


#: outcomes the oracle predicted over one run of the property
outcomes: collections.Counter[str] = collections.Counter()


def test_random_requests_match_oracle() -> None:
    """The property holds, and the run exercised accepted requests and both errors."""
    outcomes.clear()
    random_requests_match_oracle()
    assert outcomes["ok"] and outcomes["InvalidArgumentError"] and outcomes["ConflictError"], (
        outcomes
    )


@st.composite
def cover(draw: st.DrawFn) -> list[KeyRange]:
    cuts = sorted(
        set(draw(st.lists(st.floats(0.0, 1.0, exclude_min=True, exclude_max=True), max_size=6)))
    )
    points = [0.0, *cuts, 1.0]
    return [KeyRange(a, b) for a, b in zip(points, points[1:], strict=False)]


@SETTINGS
@given(ranges=cover(), data=st.data())
def test_random_initial_ranges(ranges: list[KeyRange], data: st.DataObject) -> None:
    async def run() -> None:
        ctl = StreamController(InMemorySegmentStore(), QUIET, clock=Clock())
        await ctl.start()
        await ctl.create_scope("s")
        shuffled = data.draw(st.permutations(ranges))
        await ctl.create_stream("s", "t", StreamConfig(), shuffled)
        segs = await ctl.get_current_segments("s", "t")
        assert [s.key_range for s in segs] == ranges
        # drop or perturb one bound: rejected
        if len(ranges) > 1:
            broken = list(ranges)
            broken.pop(data.draw(st.integers(0, len(ranges) - 1)))
            try:
                await ctl.create_stream("s", "u", StreamConfig(), broken)
            except InvalidArgumentError:
                pass
            else:
                raise AssertionError("a non-cover was accepted")
        await ctl.close()

    asyncio.run(run())
