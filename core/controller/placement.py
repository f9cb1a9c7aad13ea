"""Where new segments land, a stream's first ones and a scale's successors: on
containers of different nodes.

A segment's container stays a hash of its name (``scope/stream/number``), which every
node computes alone, as in Pravega. In cluster mode the controller steers the hash
instead: it gives new segments *numbers*, skipping some, whose containers belong to
distinct nodes, the nodes holding fewest of the stream's other current segments first
(then nodes that did not hold the sealed ones). Among nodes wanted equally the hash
decides (the first number landing on any of them), so a one-segment stream keeps number
0 and small streams do not all start on the node of lowest id. A new topic's partitions,
and a hot segment's successors, so land on different nodes; clients see only leaders.

Numbers stay unique and increasing per stream (each is above every number used before),
and the create and scale workflows record the chosen segments before acting, so a
controller that finishes a half-done one uses the same ones. Without a placement (one
node), or when no number within ``SEARCH_MAX`` lands on a node wanted, numbers follow
one another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from tidegate.core.controller.api import qualified_segment_name, segment_id

#: Numbers tried per successor: with N nodes about one in N lands where wanted, so this
#: bounds a search that fails only when a node owns no container.
SEARCH_MAX = 4096


class SegmentPlacement(Protocol):
    """The cluster's container map as the controller reads it at scale time."""

    def owner(self, name: str) -> int | None:
        """The node owning the container of segment ``name`` (None while it has none)."""
        ...

    def nodes(self) -> Collection[int]:
        """The nodes that own containers now."""
        ...


#: ``(epoch, first free number, kept ids, sealed ids, count) -> numbers``.
NumberChooser = Callable[[int, int, Sequence[int], Sequence[int], int], list[int]]


def sequential(epoch: int, first: int, kept: Sequence[int], sealed: Sequence[int],
               count: int) -> list[int]:
    return list(range(first, first + count))


def spreading(placement: SegmentPlacement, scope: str, stream: str) -> NumberChooser:
    """A ``NumberChooser`` that puts the new segments of one create or scale on distinct
    nodes (a create passes epoch 0, first number 0, nothing kept or sealed)."""

    def choose(epoch: int, first: int, kept: Sequence[int], sealed: Sequence[int],
               count: int) -> list[int]:
        def node(number: int) -> int | None:
            return placement.owner(qualified_segment_name(scope, stream, segment_id(epoch, number)))

        live = set(placement.nodes())
        if len(live) < 2:
            return sequential(epoch, first, kept, sealed, count)
        load = Counter({n: 0 for n in live})
        for seg in kept:
            holder = placement.owner(qualified_segment_name(scope, stream, seg))
            if holder is not None and holder in load:
                load[holder] += 1
        hot = {placement.owner(qualified_segment_name(scope, stream, seg)) for seg in sealed}
        numbers: list[int] = []
        number = first
        for _ in range(count):
            best = min((load[n], n in hot) for n in live)
            wanted = {n for n in live if (load[n], n in hot) == best}
            for candidate in range(number, min(number + SEARCH_MAX, 1 << 32)):
                if node(candidate) in wanted:
                    break
            else:
                candidate = number  # no number lands there: take the next one
            got = node(candidate)
            if got is not None and got in load:
                load[got] += 1
            numbers.append(candidate)
            number = candidate + 1
        return numbers

    return choose
