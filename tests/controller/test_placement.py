"""The numbers a scale gives its successors in cluster mode (``placement.spreading``):
distinct nodes, least loaded first, increasing and recorded, and the plain sequence
without a placement."""

from __future__ import annotations

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
from tidegate.core.segmentstore.service import container_of

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
