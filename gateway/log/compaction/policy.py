"""What of a compacted partition may be cleaned now (``docs/compaction.md`` step 1), as a
pure function of its index entries, the topic's configs and the time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidegate.gateway.log import topic_config
from tidegate.gateway.log.offset_index import IndexEntry


@dataclass(frozen=True, slots=True)
class CleaningConfig:
    """The topic configs the cleaner honours (Kafka's names, in their units)."""

    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    delete_retention_ms: int
    segment_bytes: int
    segment_ms: int
    file_delete_delay_ms: int
    #: ``compact,delete`` with ``retention.ms`` set: the time retention the cleaner
    #: applies to what it keeps (-1: none).
    retention_ms: int
    #: ``compact,delete`` with ``retention.bytes`` set: the partition's size bound (-1: none).
    retention_bytes: int = -1

    @staticmethod
    def of(configs: Mapping[str, str]) -> CleaningConfig:
        c = topic_config.effective(configs)
        delete = "delete" in topic_config.cleanup_policies(c)
        return CleaningConfig(
            int(c["min.compaction.lag.ms"]), int(c["max.compaction.lag.ms"]),
            float(c["min.cleanable.dirty.ratio"]), int(c["delete.retention.ms"]),
            int(c["segment.bytes"]), int(c["segment.ms"]), int(c["file.delete.delay.ms"]),
            int(configs["retention.ms"]) if delete and "retention.ms" in configs else -1,
            int(configs["retention.bytes"]) if delete and "retention.bytes" in configs else -1,
        )


@dataclass(frozen=True, slots=True)
class Cleanable:
    """The dirty range ``[start, end)`` that may be cleaned, its bytes, and the max
    timestamp of its first batch."""

    start: int
    end: int
    dirty_bytes: int
    first_timestamp: int


def cleanable(
    dirty: Iterable[IndexEntry], start: int, last_base_offset: int, cfg: CleaningConfig,
    now_ms: int, in_tier2: Callable[[IndexEntry], bool],
) -> Cleanable:
    """The cleanable prefix of the ``dirty`` entries (offset order, from ``start``): in
    Tier-2, older than ``min.compaction.lag.ms``, and out of the active head. Entries are
    grouped into the segments Kafka would have rolled (at ``segment.bytes``, or when a
    batch is ``segment.ms`` newer than its segment's first); the last group is the head
    unless it is itself older than ``segment.ms``. The partition's last batch (base
    ``last_base_offset``) is always in the head."""
    end = start
    dirty_bytes = walked_bytes = 0
    first_ts: int | None = None
    group_bytes = 0
    group_first_ts = 0
    group_end = start
    for e in dirty:
        if e.base_offset >= last_base_offset or not in_tier2(e):
            break
        if e.max_timestamp > now_ms - cfg.min_compaction_lag_ms:
            break
        if group_bytes and (group_bytes + e.length > cfg.segment_bytes
                            or e.max_timestamp - group_first_ts >= cfg.segment_ms):
            end = e.base_offset  # the group before ``e`` was rolled
            dirty_bytes = walked_bytes
            group_bytes = 0
        if not group_bytes:
            group_first_ts = e.max_timestamp
        group_bytes += e.length
        walked_bytes += e.length
        group_end = e.last_offset + 1
        if first_ts is None:
            first_ts = e.max_timestamp
    if group_bytes and now_ms - group_first_ts >= cfg.segment_ms:
        end, dirty_bytes = group_end, walked_bytes
    return Cleanable(start, end, dirty_bytes, first_ts if first_ts is not None else now_ms)


def should_clean(c: Cleanable, clean_bytes: int, cfg: CleaningConfig, now_ms: int) -> bool:
    """Kafka's trigger: the dirty ratio reaches ``min.cleanable.dirty.ratio``, or the
    oldest dirty batch has waited ``max.compaction.lag.ms``."""
    if c.end <= c.start or c.dirty_bytes <= 0:
        return False
    if now_ms - c.first_timestamp >= cfg.max_compaction_lag_ms:
        return True
    return c.dirty_bytes / (clean_bytes + c.dirty_bytes) >= cfg.min_cleanable_dirty_ratio
