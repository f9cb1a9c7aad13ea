"""The server-side assignors of KIP-848 consumer groups (``group.remote.assignor``):
``uniform`` (Kafka's default) and ``range``. Pure functions: members with their
subscriptions and the previous target in, the new target assignment out.

- ``uniform`` spreads every subscribed partition so that the counts of any two members
  that could take the same partition differ by at most one, keeping each partition
  where the previous target had it whenever that does not break the balance (sticky:
  few partitions move when members come and go). Members with one subscription (the
  usual case) are assigned by quotas in linear time; mixed subscriptions by a greedy
  pass and moves, asking one heap per distinct subscription for the least loaded.
- ``range`` gives, topic by topic, contiguous ranges of partitions to the members
  subscribed to it (the first ``partitions % members`` get one more), static members
  first in instance id order, then the others in member id order: members with the
  same subscription get the same partition numbers of co-partitioned topics. As Kafka's
  (since KAFKA-16944) it is recomputed from the membership alone, not sticky: a static
  member that rejoins under a new member id gets back what it had, but a join or a
  leave shifts the ranges after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

#: topic -> partitions
Assignment = dict[str, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """One member as the assignor sees it."""

    member_id: str
    subscribed: frozenset[str]
    #: ``group.instance.id`` of a static member: orders it in ``range``
    instance_id: str | None = None


def uniform(
    members: list[AssignmentSpec],
    partitions: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    if len({m.subscribed for m in members}) == 1:
        return _uniform_homogeneous(members, partitions, previous)
    return _uniform_general(members, partitions, previous)


def _uniform_homogeneous(
    members: list[AssignmentSpec],
    partitions: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Every member subscribes to the same topics: quotas of ``n // m`` or one more,
    the larger ones to the members keeping most of their previous partitions; in
    O(partitions + members log members)."""
    topics = sorted(t for t in members[0].subscribed if partitions.get(t, 0) > 0)
    everything = [(t, p) for t in topics for p in range(partitions[t])]
    valid = set(everything)
    kept: dict[str, list[tuple[str, int]]] = {}
    taken: set[tuple[str, int]] = set()
    for m in sorted(members, key=lambda m: m.member_id):
        mine = sorted(
            tp for t, ps in previous.get(m.member_id, {}).items() for p in ps
            if (tp := (t, p)) in valid and tp not in taken
        )
        taken.update(mine)
        kept[m.member_id] = mine
    base, extra = divmod(len(everything), len(members))
    order = sorted(members, key=lambda m: (-len(kept[m.member_id]), m.member_id))
    quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: dict[str, list[tuple[str, int]]] = {}
    for mid, mine in kept.items():
        out[mid] = mine[: quota[mid]]
    placed = {tp for mine in out.values() for tp in mine}
    free = iter(tp for tp in everything if tp not in placed)
    for m in order:
        mine = out[m.member_id]
        while len(mine) < quota[m.member_id]:
            mine.append(next(free))
    return {mid: _as_assignment(set(tps)) for mid, tps in out.items()}


def _uniform_general(
    members: list[AssignmentSpec],
    partitions: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Members subscribe to different topics: greedy to the least loaded eligible
    member, then moves between eligible members until no two differ by two or more.
    Members with the same subscription are interchangeable, so "least loaded" is asked
    of one heap per distinct subscription."""
    owner: dict[tuple[str, int], str] = {}
    owned: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    subscribed = {m.member_id: m.subscribed for m in members}
    for mid, assignment in sorted(previous.items()):
        if mid not in owned:
            continue
        for topic, parts in assignment.items():
            if topic not in subscribed[mid]:
                continue
            for p in parts:
                tp = (topic, p)
                if p < partitions.get(topic, 0) and tp not in owner:
                    owner[tp] = mid
                    owned[mid].add(tp)
    loads = _Loads(members, owned)
    topics = sorted({t for m in members for t in m.subscribed if partitions.get(t, 0) > 0})
    for topic in topics:
        for p in range(partitions[topic]):
            tp = (topic, p)
            if tp not in owner:
                mid = loads.least(topic)
                owner[tp] = mid
                owned[mid].add(tp)
                loads.changed(mid)
    moved = True
    while moved:  # each move lowers the sum of squared counts, so this ends
        moved = False
        for tp in sorted(owner):
            src, dst = owner[tp], loads.least(tp[0])
            if len(owned[dst]) + 1 < len(owned[src]):
                owned[src].discard(tp)
                owned[dst].add(tp)
                owner[tp] = dst
                loads.changed(src)
                loads.changed(dst)
                moved = True
    return {mid: _as_assignment(tps) for mid, tps in owned.items()}


class _Loads:
    """The least loaded member subscribed to a topic, by ``(count, member id)``: one
    heap per distinct subscription, entries made stale by a count change skipped."""

    def __init__(self, members: list[AssignmentSpec], owned: dict[str, set[tuple[str, int]]]) -> None:
        self._owned = owned
        self._class_of = {m.member_id: m.subscribed for m in members}
        self._heaps: dict[frozenset[str], list[tuple[int, str]]] = {}
        for m in members:
            self._heaps.setdefault(m.subscribed, []).append((len(owned[m.member_id]), m.member_id))
        for h in self._heaps.values():
            heapq.heapify(h)
        self._classes_of_topic: dict[str, list[frozenset[str]]] = {}
        for c in self._heaps:
            for topic in c:
                self._classes_of_topic.setdefault(topic, []).append(c)

    def changed(self, member_id: str) -> None:
        heapq.heappush(self._heaps[self._class_of[member_id]], (len(self._owned[member_id]), member_id))

    def least(self, topic: str) -> str:
        best: tuple[int, str] | None = None
        for c in self._classes_of_topic[topic]:
            h = self._heaps[c]
            while h[0][0] != len(self._owned[h[0][1]]):
                heapq.heappop(h)
            if best is None or h[0] < best:
                best = h[0]
        assert best is not None
        return best[1]


def range_(
    members: list[AssignmentSpec],
    partitions: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Kafka's server-side range, topic by topic over the subscribers in range order;
    members with the same subscription share one ordered list, so this is
    O(partitions + topics + members x distinct subscriber sets)."""
    del previous  # a function of the membership alone, as Kafka's since KAFKA-16944
    ordered = sorted(members, key=_range_order)
    classes_of_topic: dict[str, set[frozenset[str]]] = {}
    for subscription in {m.subscribed for m in members}:
        for topic in subscription:
            classes_of_topic.setdefault(topic, set()).add(subscription)
    subscribers_of: dict[frozenset[frozenset[str]], list[str]] = {}
    out: dict[str, dict[str, frozenset[int]]] = {m.member_id: {} for m in members}
    for topic, classes in classes_of_topic.items():
        n = partitions.get(topic, 0)
        if n <= 0:
            continue
        key = frozenset(classes)
        subscribers = subscribers_of.get(key)
        if subscribers is None:
            subscribers = [m.member_id for m in ordered if m.subscribed in key]
            subscribers_of[key] = subscribers
        quota, extra = divmod(n, len(subscribers))
        start = 0
        # with fewer partitions than members only the first ``extra`` get one
        for i, mid in enumerate(subscribers if quota else subscribers[:extra]):
            count = quota + (1 if i < extra else 0)
            out[mid][topic] = frozenset(range(start, start + count))
            start += count
    return out


def _range_order(m: AssignmentSpec) -> tuple[int, bytes, bytes]:
    """Static members first by instance id, then dynamic ones by member id (Kafka's
    order, so a static member that rejoins under a new member id keeps its ranges).
    UTF-16 code units compare as Java's ``String.compareTo`` does."""
    if m.instance_id is not None:
        return (0, m.instance_id.encode("utf-16-be"), m.member_id.encode("utf-16-be"))
    return (1, m.member_id.encode("utf-16-be"), b"")


def _as_assignment(tps: set[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for topic, p in tps:
        out.setdefault(topic, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


#: Assignor names as clients send them in ``ServerAssignor``; the first is the default
#: (Kafka's ``group.consumer.assignors`` default order).
ASSIGNORS = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
