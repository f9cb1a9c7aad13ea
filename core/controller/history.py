"""Queries over a stream's epoch history: successors, predecessors, epochs in time, and
StreamCut arithmetic.

Facts these rest on (each epoch covers ``[0, 1)`` exactly and disjointly, and each new
epoch replaces some segments by new ones covering exactly their key space):

* Two distinct segments whose key ranges overlap never live in the same epoch, so one was
  sealed before the other was created, and the older one has the lower creation epoch.
* A segment's successors are the segments created in its sealing epoch (the first epoch
  after its creation that does not hold it) whose ranges overlap it.
* A StreamCut is valid when its segments cover ``[0, 1)`` exactly and disjointly and every
  other segment of the history lies wholly before or wholly after it (it is not older
  than one overlapping cut segment and newer than another).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping

from tidegate.core.controller.api import (
    ConflictError,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    SegmentRecord,
    StreamCut,
)
from tidegate.core.controller.keyspace import check_cover


def _overlap(a: SegmentRecord, b: SegmentRecord) -> bool:
    return a.key_start < b.key_end and b.key_start < a.key_end


class _Cover:
    """Disjoint segments (a StreamCut's, or an epoch's) ordered by key, so the ones
    overlapping a key range are found by bisection: cut arithmetic stays near-linear for
    streams of tens of thousands of segments (retention runs it every round)."""

    def __init__(self, segments: Iterable[SegmentRecord]) -> None:
        self.ordered = sorted(segments, key=lambda x: x.key_start)
        self.starts = [x.key_start for x in self.ordered]

    def overlapping(self, s: SegmentRecord) -> Iterator[SegmentRecord]:
        ordered = self.ordered
        for i in range(max(bisect.bisect_right(self.starts, s.key_start) - 1, 0), len(ordered)):
            c = ordered[i]
            if c.key_start >= s.key_end:
                return
            if _overlap(s, c):
                yield c


class History:
    """An immutable view of epochs ``0..n`` of one stream."""

    def __init__(self, epochs: list[EpochRecord]) -> None:
        if not epochs:
            raise ValueError("a stream has at least one epoch")
        self.epochs = epochs
        self.segments: dict[int, SegmentRecord] = {}
        #: segment id -> the first epoch that no longer holds it.
        self.sealed_epoch: dict[int, int] = {}
        prev: set[int] = set()
        for e in epochs:
            ids = {s.id for s in e.segments}
            for s in e.segments:
                self.segments.setdefault(s.id, s)
            for gone in prev - ids:
                self.sealed_epoch[gone] = e.epoch
            prev = ids
        #: The current epoch's segments by key start, built at the first lookup.
        self._by_start: tuple[list[float], list[SegmentRecord]] | None = None

    @property
    def current(self) -> EpochRecord:
        return self.epochs[-1]

    def segment(self, seg_id: int) -> SegmentRecord:
        s = self.segments.get(seg_id)
        if s is None:
            raise InvalidArgumentError(f"segment {seg_id} is not part of the stream")
        return s

    def is_active(self, seg_id: int) -> bool:
        return seg_id in self.segments and seg_id not in self.sealed_epoch

    def successors(self, seg_id: int) -> dict[SegmentRecord, list[int]]:
        """Each successor of ``seg_id`` with the ids of all its predecessors."""
        s = self.segment(seg_id)
        e = self.sealed_epoch.get(seg_id)
        if e is None:
            return {}
        epoch, before = self.epochs[e], self.epochs[e - 1]
        now = {x.id for x in epoch.segments}
        out: dict[SegmentRecord, list[int]] = {}
        for succ in epoch.segments:
            if succ.epoch == e and _overlap(succ, s):
                out[succ] = sorted(
                    p.id for p in before.segments if p.id not in now and _overlap(p, succ)
                )
        return out

    def predecessors(self, seg_id: int) -> dict[SegmentRecord, list[int]]:
        """Each predecessor of ``seg_id`` with the ids of all its successors."""
        s = self.segment(seg_id)
        c = s.epoch
        if c == 0:
            return {}
        epoch, before = self.epochs[c], self.epochs[c - 1]
        now = {x.id for x in epoch.segments}
        out: dict[SegmentRecord, list[int]] = {}
        for pred in before.segments:
            if pred.id not in now and _overlap(pred, s):
                out[pred] = sorted(
                    x.id for x in epoch.segments if x.epoch == c and _overlap(x, pred)
                )
        return out

    def epoch_at(self, time_ms: int) -> EpochRecord:
        """The epoch in force at ``time_ms`` (the first epoch for earlier times)."""
        found = self.epochs[0]
        for e in self.epochs:
            if e.creation_time_ms <= time_ms:
                found = e
            else:
                break
        return found

    def segment_for_key(self, key: float) -> SegmentRecord:
        if not 0.0 <= key < 1.0:
            raise InvalidArgumentError(f"routing key {key!r} outside [0, 1)")
        if self._by_start is None:  # a bisection: a Produce to 10,000 partitions asks 10,000 times
            ordered = sorted(self.current.segments, key=lambda x: x.key_start)
            self._by_start = ([x.key_start for x in ordered], ordered)
        starts, ordered = self._by_start
        i = bisect.bisect_right(starts, key) - 1
        if i >= 0 and ordered[i].key_start <= key < ordered[i].key_end:
            return ordered[i]
        raise AssertionError(f"epoch {self.current.epoch} does not cover key {key!r}")

    # -- StreamCuts --------------------------------------------------------------------------

    def check_cut(self, cut: StreamCut) -> None:
        """Raise ``InvalidArgumentError`` unless ``cut`` is a valid StreamCut."""
        if not cut:
            raise InvalidArgumentError("empty StreamCut")
        segs = []
        for seg_id, offset in cut.items():
            if not isinstance(offset, int) or offset < 0:
                raise InvalidArgumentError(f"StreamCut offset {offset!r} of {seg_id} is not >= 0")
            segs.append(self.segment(seg_id))
        check_cover([KeyRange(s.key_start, s.key_end) for s in segs], "StreamCut segments")
        cover = _Cover(segs)
        for other in self.segments.values():
            if other.id in cut:
                continue
            older = {other.epoch < c.epoch for c in cover.overlapping(other)}
            if len(older) != 1:
                raise InvalidArgumentError(
                    f"StreamCut is inconsistent: segment {other.id} lies both before and after it"
                )

    def before(self, cut: StreamCut) -> set[int]:
        """Ids of the segments wholly before a valid ``cut``."""
        cover = _Cover(self.segments[i] for i in cut)
        out = set()
        for s in self.segments.values():
            if s.id not in cut and any(s.epoch < c.epoch for c in cover.overlapping(s)):
                out.add(s.id)
        return out

    def cut_ge(self, a: StreamCut, b: StreamCut) -> bool:
        """Whether valid cut ``a`` is at or after valid cut ``b`` everywhere."""
        bcover = _Cover(self.segments[i] for i in b)
        for ai, aoff in a.items():
            sa = self.segments[ai]
            for sb in bcover.overlapping(sa):
                if sa.id == sb.id:
                    if aoff < b[sb.id]:
                        return False
                elif sa.epoch < sb.epoch:
                    return False
        return True

    def position(self, cut: StreamCut, seg_id: int, size: Callable[[int], int]) -> int:
        """Bytes of ``seg_id`` that lie before ``cut``."""
        return self._position(cut, _Cover(self.segments[c] for c in cut), seg_id, size)

    def _position(
        self, cut: StreamCut, cover: _Cover, seg_id: int, size: Callable[[int], int]
    ) -> int:
        if seg_id in cut:
            return cut[seg_id]
        s = self.segments[seg_id]
        for sc in cover.overlapping(s):
            return size(seg_id) if s.epoch < sc.epoch else 0
        raise AssertionError("a valid cut overlaps every segment")

    def bytes_before(self, cut: StreamCut, size: Callable[[int], int]) -> int:
        """Bytes from the very beginning of the stream up to ``cut``; ``size`` gives the
        final length of a sealed segment."""
        cover = _Cover(self.segments[c] for c in cut)
        return sum(self._position(cut, cover, s, size) for s in self.segments)

    def bytes_between(self, a: StreamCut, b: StreamCut, size: Callable[[int], int]) -> int:
        """Bytes from ``b`` up to ``a`` (``a >= b``, else ``ConflictError``)."""
        if not self.cut_ge(a, b):
            raise ConflictError("the first StreamCut is not at or after the second")
        return self.bytes_before(a, size) - self.bytes_before(b, size)


def head_cut(history: History, truncation: Mapping[int, int] | None) -> dict[int, int]:
    if truncation:
        return dict(truncation)
    return {s.id: 0 for s in history.epochs[0].segments}
