"""The segment ranges between two stream cuts, as Pravega's batch client lists them:
from each segment of the start cut up to its offset in the end cut, or to its end and on
into its successors when the end cut is past it. Each range is one Spark task; a routing
key's events in a predecessor come before those in its successors (order by epoch, then
offset)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition
from tidegate.spark.stream_client import SegmentMeta, SegmentState, StreamSourceError


@dataclass
class SegmentRange(InputPartition):
    """One Spark task: the events of a segment with ``start <= offset < end``."""

    segment_id: int
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.segment_id, self.start, self.end))


def _before(seg: SegmentMeta, end: Mapping[int, int], meta: Mapping[int, SegmentMeta]) -> bool:
    """Whether ``seg`` (not in the end cut) was sealed before the end cut: a later segment
    of the end cut took over part of its key range."""
    return any(
        meta[e].epoch > seg.epoch and meta[e].key_start < seg.key_end and seg.key_start < meta[e].key_end
        for e in end
    )


def plan(
    start: Mapping[int, int], end: Mapping[int, int], meta: Mapping[int, SegmentMeta],
    state: Callable[[int], SegmentState | None], successors: Callable[[int], list[int]],
    fail_on_data_loss: bool,
) -> list[SegmentRange]:
    out: list[SegmentRange] = []
    queue = sorted(start.items())
    seen = set(start)
    while queue:
        seg_id, offset = queue.pop(0)
        if seg_id not in meta:
            raise StreamSourceError(f"segment {seg_id} is not a segment of the stream")
        if seg_id in end:
            if end[seg_id] < offset:
                raise StreamSourceError(f"segment {seg_id}: the end cut ({end[seg_id]}) is before the start ({offset})")
            stop = end[seg_id]
        elif _before(meta[seg_id], end, meta):
            info = state(seg_id)
            if info is None and fail_on_data_loss:
                raise StreamSourceError(f"segment {seg_id} was deleted (retention) before it was read "
                                        "(set failOnDataLoss=false to skip lost events)")
            stop = info.length if info is not None else offset
            for succ in successors(seg_id):
                if succ not in seen:
                    seen.add(succ)
                    queue.append((succ, 0))
        else:
            continue  # after the end cut
        if stop > offset:
            out.append(SegmentRange(seg_id, offset, stop))
    return _check_loss(out, state, fail_on_data_loss)


def _check_loss(
    ranges: list[SegmentRange], state: Callable[[int], SegmentState | None], fail_on_data_loss: bool
) -> list[SegmentRange]:
    """Ranges whose start was truncated away fail (or start at what is left)."""
    kept = []
    for r in ranges:
        info = state(r.segment_id)
        first = r.end if info is None else info.start_offset
        if first > r.start:
            if fail_on_data_loss:
                raise StreamSourceError(
                    f"segment {r.segment_id}: offsets {r.start} to {min(first, r.end)} were truncated before "
                    "they were read (set failOnDataLoss=false to skip lost events)")
            r = SegmentRange(r.segment_id, first, r.end)
        if r.end > r.start:
            kept.append(r)
    return kept
