"""Offset arithmetic of a micro-batch, as Spark's Kafka source does it: the read limit
prorated over partitions by their backlog, and ranges split to reach ``minPartitions``."""

from __future__ import annotations

import math

from tidegate.spark.kafka_read import OffsetRange

Key = tuple[str, int]


def rate_limit(start: dict[Key, int], latest: dict[Key, int], limit: int) -> dict[Key, int]:
    """End offsets holding at most ``limit`` records in all (Spark's proration: each
    partition's share of the limit is its share of the backlog)."""
    sizes = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + step)
    return out


def ranges(start: dict[Key, int], end: dict[Key, int], min_partitions: int | None) -> list[OffsetRange]:
    """Non-empty ranges per partition; split evenly by size when there are fewer than
    ``min_partitions`` of them."""
    plain = [OffsetRange(t, p, start[(t, p)], e) for (t, p), e in sorted(end.items()) if e > start[(t, p)]]
    if not min_partitions or len(plain) >= min_partitions:
        return plain
    total = sum(r.end - r.start for r in plain)
    out = []
    for r in plain:
        parts = max(1, round(min_partitions * (r.end - r.start) / total))
        step = math.ceil((r.end - r.start) / parts)
        out += [OffsetRange(r.topic, r.partition, s, min(r.end, s + step)) for s in range(r.start, r.end, step)]
    return out
