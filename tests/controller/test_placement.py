"""The numbers a create gives a stream's first segments and a scale its successors in
cluster mode (``placement.spreading``): distinct nodes, least loaded first, ties to the
hash, increasing and recorded (a half-done create resumes with them), and the plain
sequence without a placement."""

from __future__ import annotations

from collections import Counter

import pytest
from tidegate.core.controller.api import (
    EpochRecord,
    KeyRange,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
    StreamNotFoundError,
    segment_id,
)
from tidegate.core.controller.controller import StreamController
from tidegate.core.controller.history import History
from tidegate.core.controller.placement import sequential, spreading
from tidegate.core.controller.workflows.scale import plan
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.core.segmentstore.service import container_of

from tests.controller.conftest import QUIET, Clock
from tests.controller.test_crash_steps import Crash, CrashingStore

CONTAINERS = 6


class Map:
    """A container map of owners (``SegmentPlacement``), as the leader's controller reads it."""

    def __init__(self, owners: dict[int, int]) -> None:
        self.owners = owners

    def owner(self, name: str) -> int | None:
        return self.owners.get(container_of(name, CONTAINERS))

    def nodes(self) -> set[int]:
        return set(self.owners.values())


THREE = Map({0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3})


def _node(placement: Map, number: int, epoch: int = 1) -> int | None:
    return placement.owner(f"s/t/{number}.#epoch.{epoch}")


def _one_segment() -> History:
    return History([EpochRecord(0, 0, (SegmentRecord(segment_id(0, 0), 0, 0.0, 1.0),))])


def test_successors_of_a_split_land_on_distinct_nodes() -> None:
    ranges = [KeyRange(0.0, 1 / 3), KeyRange(1 / 3, 2 / 3), KeyRange(2 / 3, 1.0)]
    epoch = plan(_one_segment(), [0], ranges, 5, spreading(THREE, "s", "t"))
    numbers = [s.number for s in epoch.segments]
    assert numbers == sorted(numbers) and numbers[0] >= 1 and len(set(numbers)) == 3
    assert {_node(THREE, n) for n in numbers} == {1, 2, 3}
    # The node that held the hot segment comes last.
    hot = THREE.owner("s/t/0.#epoch.0")
    assert _node(THREE, numbers[-1]) == hot


def test_more_successors_than_nodes_spread_evenly() -> None:
    ranges = [KeyRange(i / 6, (i + 1) / 6) for i in range(6)]
    epoch = plan(_one_segment(), [0], ranges, 5, spreading(THREE, "s", "t"))
    nodes = [_node(THREE, s.number) for s in epoch.segments]
    assert sorted(nodes.count(n) for n in (1, 2, 3)) == [2, 2, 2]


def test_the_least_loaded_node_is_chosen_first() -> None:
    # Three segments live on nodes a, a, b: a split of b's segment goes to c, then b.
    choose = spreading(THREE, "s", "t")
    kept = [n for n in range(1, 40) if _node(THREE, n, 0) == 1][:2]
    hot = next(n for n in range(1, 40) if _node(THREE, n, 0) == 2)
    numbers = choose(1, 50, [segment_id(0, n) for n in kept], [segment_id(0, hot)], 2)
    assert [_node(THREE, n) for n in numbers] == [3, 2]


def test_one_node_or_none_keeps_numbers_in_sequence() -> None:
    one = Map(dict.fromkeys(range(CONTAINERS), 7))
    assert spreading(one, "s", "t")(1, 4, [], [3], 3) == [4, 5, 6]
    assert sequential(1, 4, [], [3], 3) == [4, 5, 6]
    ranges = [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)]
    assert [s.number for s in plan(_one_segment(), [0], ranges, 5).segments] == [1, 2]


def test_a_node_without_containers_is_never_waited_for() -> None:
    # A node left out of the map is not a candidate: every successor still gets a number.
    two = Map({c: 1 + c % 2 for c in range(CONTAINERS)})
    numbers = spreading(two, "s", "t")(1, 1, [], [0], 4)
    assert len(numbers) == 4 and numbers == sorted(set(numbers))
    assert sorted(_node(two, n) for n in numbers) == [1, 1, 2, 2]


async def test_current_segments_follow_a_scale_in_one_read(ctl: StreamController) -> None:
    await ctl.create_scope("own")
    await ctl.create_stream("own", "t", StreamConfig(ScalingPolicy(min_segments=2)))
    assert await ctl.current_segments("own", "t") == await ctl.get_current_segments("own", "t")
    first = (await ctl.current_segments("own", "t"))[0]
    await ctl.scale("own", "t", [first.id], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    now = await ctl.current_segments("own", "t")
    assert now == await ctl.get_current_segments("own", "t") and len(now) == 3
    with pytest.raises(StreamNotFoundError):
        await ctl.current_segments("own", "missing")



def _created_nodes(placement: Map, stream: str, numbers: list[int]) -> list[int | None]:
    return [placement.owner(f"s/{stream}/{n}.#epoch.0") for n in numbers]


async def _controller(store: object, placement: Map | None, clock: Clock) -> StreamController:
    ctl = StreamController(store, QUIET, clock=clock, placement=placement)  # type: ignore[arg-type]
    await ctl.start()
    return ctl


@pytest.mark.parametrize("count", [3, 6, 7, 12])
async def test_a_new_streams_segments_spread_over_the_nodes(count: int) -> None:
    ctl = await _controller(InMemorySegmentStore(), THREE, Clock())
    await ctl.create_scope("s")
    for i in range(10):
        await ctl.create_stream("s", f"t{i}", StreamConfig(ScalingPolicy(min_segments=count)))
        segs = await ctl.get_current_segments("s", f"t{i}")
        numbers = [s.number for s in segs]
        assert numbers == sorted(set(numbers)) and {s.epoch for s in segs} == {0}
        per_node = Counter(_created_nodes(THREE, f"t{i}", numbers))
        assert set(per_node) == {1, 2, 3}, per_node
        assert max(per_node.values()) - min(per_node.values()) <= 1, per_node
    await ctl.close()


async def test_one_segment_streams_keep_number_0_and_the_hashs_node() -> None:
    # Ties go to the hash: a stream of one segment is where it always was, and many
    # small streams spread over every node instead of starting on the lowest id.
    ctl = await _controller(InMemorySegmentStore(), THREE, Clock())
    await ctl.create_scope("s")
    firsts: Counter[int | None] = Counter()
    for i in range(30):
        await ctl.create_stream("s", f"one{i}", StreamConfig(ScalingPolicy(min_segments=1)))
        assert [s.id for s in await ctl.get_current_segments("s", f"one{i}")] == [0]
        await ctl.create_stream("s", f"two{i}", StreamConfig(ScalingPolicy(min_segments=2)))
        two = [s.number for s in await ctl.get_current_segments("s", f"two{i}")]
        nodes = _created_nodes(THREE, f"two{i}", two)
        assert len(set(nodes)) == 2, nodes
        firsts.update(nodes)
    assert set(firsts) == {1, 2, 3} and min(firsts.values()) >= 10, firsts


async def test_one_node_creates_numbers_in_sequence() -> None:
    ctl = await _controller(InMemorySegmentStore(), None, Clock())
    await ctl.create_scope("s")
    await ctl.create_stream("s", "t", StreamConfig(ScalingPolicy(min_segments=5)))
    assert [s.id for s in await ctl.get_current_segments("s", "t")] == list(range(5))
    await ctl.close()


async def test_a_half_done_create_resumes_with_its_recorded_numbers() -> None:
    # The controller that resumes sees one node (numbers in sequence there): it must
    # still make the segments the first one chose, not choose again.
    one = Map(dict.fromkeys(range(CONTAINERS), 7))
    chosen = spreading(THREE, "s", "t")(0, 0, [], [], 6)
    assert chosen != list(range(6))
    config = StreamConfig(ScalingPolicy(min_segments=6))
    n = 0
    while True:
        store, clock = InMemorySegmentStore(), Clock()
        boot = await _controller(store, THREE, clock)
        await boot.create_scope("s")
        await boot.close()
        crashing_store = CrashingStore(store, 10**9)
        crashing = await _controller(crashing_store, THREE, clock)
        crashing_store.left = n
        try:
            await crashing.create_stream("s", "t", config)
            crashed = False
        except Crash:
            crashed = True
        ctl = await _controller(store, one, clock)
        try:
            segs = await ctl.get_current_segments("s", "t")
        except StreamNotFoundError:
            assert crashed
        else:
            assert [s.id for s in segs] == chosen
            for seg in segs:  # made, not only recorded
                assert not (await store.get_info(f"s/t/{seg.number}.#epoch.0")).sealed
        await ctl.close()
        if not crashed:
            break
        n += 1
    assert n >= 4
