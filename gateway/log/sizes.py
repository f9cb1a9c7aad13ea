"""How many bytes each partition of a topic holds in the segment store, in Tier-1 (not yet
moved) and in Tier-2 (for DescribeLogDirs and the admin UIs that show topic sizes).

A partition's batches live in the segments whose key ranges hold its point
(``topics.partition_point``), across the stream's scaling history. A segment's live
bytes are those above its truncation offset; the part below its ``storage_length`` has
reached Tier-2, the rest is still only in Tier-1. A segment holding one partition (every
topic starts with one per partition) gives it all its bytes; a segment holding several
is split between them evenly, so the sizes of a topic's partitions always add up to what
its stream stores, and each is exact unless segments are shared. A compacted partition
adds its clean segment (``gateway/log/compaction``), which it holds alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.controller.api import SegmentRecord
from tidegate.core.segmentstore.api import SegmentNotFoundError, SegmentProperties
from tidegate.gateway.log.topics import partition_point


class SegmentInfo(Protocol):
    async def get_info(self, name: str) -> SegmentProperties: ...


class TopicSegments(Protocol):
    async def all_segments(self, topic: str) -> list[SegmentRecord]: ...

    def segment_name(self, topic: str, segment_id: int) -> str: ...


@dataclass(frozen=True, slots=True)
class PartitionSize:
    tier1_bytes: int
    tier2_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.tier1_bytes + self.tier2_bytes


def segment_bytes(props: SegmentProperties) -> tuple[int, int]:
    """``(Tier-1-only bytes, Tier-2 bytes)`` of one segment above its truncation."""
    start = props.start_offset
    tier2 = max(0, props.storage_length - start)
    tier1 = max(0, props.length - max(props.storage_length, start))
    return tier1, tier2


async def partition_sizes(
    topics: TopicSegments, store: SegmentInfo, topic: str, partitions: int,
    own_segments: Mapping[int, str] | None = None,
) -> list[PartitionSize]:
    """Each partition's size, indexed by partition; ``own_segments`` names a segment each
    partition holds alone besides its stream's (a compacted partition's clean segment)."""
    points = [partition_point(p) for p in range(partitions)]
    tier1 = [0.0] * partitions
    tier2 = [0.0] * partitions
    segments: Sequence[SegmentRecord] = await topics.all_segments(topic)
    for seg in segments:
        holders = [p for p, x in enumerate(points) if seg.key_start <= x < seg.key_end]
        if not holders:
            continue
        try:
            props = await store.get_info(topics.segment_name(topic, seg.id))
        except SegmentNotFoundError:
            continue  # truncated away and deleted
        t1, t2 = segment_bytes(props)
        for p in holders:
            tier1[p] += t1 / len(holders)
            tier2[p] += t2 / len(holders)
    for p, name in (own_segments or {}).items():
        try:
            t1, t2 = segment_bytes(await store.get_info(name))
        except SegmentNotFoundError:
            continue
        tier1[p] += t1
        tier2[p] += t2
    return [PartitionSize(round(a), round(b)) for a, b in zip(tier1, tier2, strict=True)]
