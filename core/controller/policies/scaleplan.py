"""Where the auto-scaler cuts a hot segment and which cold neighbours it merges.

Pure functions over key ranges and rates, so the choices can be tested without a store.

- ``split_by_rate``: a hot segment is cut only between the routing keys it holds, into
  contiguous groups whose busiest group is as light as ``parts`` groups allow, using as
  few groups as reach that (a key carrying most of the traffic ends up alone, the cold
  keys beside it stay together). A segment holding fewer than two keys is never cut.
- ``split_between_keys``: the same without rates, groups of about equally many keys.
- ``plan_merges``: pairs of neighbouring cold segments, the pairs covering the fewest
  keys first, so repeated rounds merge like a balanced tree (8 one-key segments become
  4 of 2, then 2 of 4) instead of growing one segment key by key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidegate.core.controller.api import KeyRange

#: Rounds of the bisection on the busiest group's rate (relative precision 2**-ROUNDS).
_BISECT_ROUNDS = 48
#: An idle key weighs this fraction of the segment's mean key rate when cutting.
_IDLE_KEY_WEIGHT = 1e-3


@dataclass(frozen=True, slots=True)
class KeyRate:
    """A routing key and its rate in the scaling policy's unit."""

    key: float
    rate: float


def _cut_ranges(start: float, end: float, keys: Sequence[float], groups: Sequence[int]) -> list[KeyRange]:
    """``[start, end)`` cut halfway between the last key of each group and the next key;
    ``groups`` are the group sizes (in keys, in key order)."""
    bounds = [start]
    i = 0
    for size in groups[:-1]:
        i += size
        b = keys[i - 1] + (keys[i] - keys[i - 1]) / 2
        if bounds[-1] < b < end:
            bounds.append(b)
    bounds.append(end)
    return [KeyRange(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def keys_inside(start: float, end: float, keys: Sequence[float]) -> list[float]:
    return sorted({k for k in keys if start <= k < end})


def split_between_keys(
    start: float, end: float, keys: Sequence[float], parts: int
) -> list[KeyRange]:
    """``[start, end)`` cut between its ``keys`` into at most ``parts`` ranges holding about
    equally many keys each; a single range when it holds fewer than two keys."""
    inside = keys_inside(start, end, keys)
    n = min(parts, len(inside))
    if n < 2:
        return [KeyRange(start, end)]
    cuts = [round(i * len(inside) / n) for i in range(n + 1)]
    return _cut_ranges(start, end, inside, [b - a for a, b in zip(cuts, cuts[1:], strict=False)])


def _greedy_groups(rates: Sequence[float], cap: float) -> list[int]:
    """Group sizes packing ``rates`` left to right, each group's sum at most ``cap``
    (a single rate above ``cap`` is a group of its own)."""
    groups: list[int] = []
    size, total = 0, 0.0
    for r in rates:
        if size and total + r > cap:
            groups.append(size)
            size, total = 0, 0.0
        size += 1
        total += r
    groups.append(size)
    return groups


def split_by_rate(
    start: float, end: float, keys: Sequence[KeyRate], parts: int
) -> list[KeyRange]:
    """``[start, end)`` cut between its keys into at most ``parts`` contiguous groups whose
    largest summed rate is as small as possible, with as few groups as reach it; a single
    range when it holds fewer than two keys or no traffic (see the module doc)."""
    by_key = {k.key: max(k.rate, 0.0) for k in keys if start <= k.key < end}
    inside = sorted(by_key)
    total = sum(by_key.values())
    if min(parts, len(inside)) < 2 or total <= 0:
        return [KeyRange(start, end)]
    # Every key weighs at least a little, so idle keys are parted from a busy one too.
    floor = total * _IDLE_KEY_WEIGHT / len(inside)
    rates = [by_key[k] + floor for k in inside]
    total = sum(rates)
    # Bisect on the busiest group's rate: greedy packing under a cap needs the fewest
    # groups for that cap, so the least cap that packs into ``parts`` groups is optimal.
    lo, hi = max(rates), total
    for _ in range(_BISECT_ROUNDS):
        mid = (lo + hi) / 2
        if len(_greedy_groups(rates, mid)) <= parts:
            hi = mid
        else:
            lo = mid
    return _cut_ranges(start, end, inside, _greedy_groups(rates, hi))


@dataclass(frozen=True, slots=True)
class MergeCandidate:
    """A current segment as the merge planner sees it."""

    id: int
    key_start: float
    key_end: float
    #: Keys it holds (or, when the stream's keys are unknown, its key-range width).
    size: float
    rate: float
    #: The rate over a shorter window (the same as ``rate`` when unknown).
    recent: float
    cold: bool


def plan_merges(
    segments: Sequence[MergeCandidate], count_min: int, rate_max: float
) -> list[tuple[MergeCandidate, MergeCandidate]]:
    """Disjoint pairs of neighbouring cold segments to merge this round: smallest merged
    size first (ties in key order), the lesser of the merged rates over the long and the
    short window at most ``rate_max`` (so the result is not hot at once: hot takes both
    windows above the target), while more than ``count_min`` segments remain."""
    ordered = sorted(segments, key=lambda s: s.key_start)
    candidates = [
        (a.size + b.size, i, a, b)
        for i, (a, b) in enumerate(zip(ordered, ordered[1:], strict=False))
        if a.cold and b.cold and a.key_end == b.key_start
        and min(a.rate + b.rate, a.recent + b.recent) <= rate_max
    ]
    candidates.sort(key=lambda c: (c[0], c[1]))
    count = len(ordered)
    taken: set[int] = set()
    pairs: list[tuple[MergeCandidate, MergeCandidate]] = []
    for _, _, a, b in candidates:
        if count <= count_min:
            break
        if a.id in taken or b.id in taken:
            continue
        taken |= {a.id, b.id}
        pairs.append((a, b))
        count -= 1
    return sorted(pairs, key=lambda p: p[0].key_start)
