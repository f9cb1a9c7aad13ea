"""Rewriting one record batch with some of its records dropped, as Kafka's cleaner does
(``MemoryRecords.filterTo``): the batch keeps its base offset, last offset delta,
producer id/epoch/base sequence, attributes and codec, so offsets and sequences stay
what the producer saw; record count, length, max timestamp and CRC-32C are recomputed.
Kept records are copied byte for byte (their deltas are relative to the unchanged base
offset and base timestamp)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
from tidegate.gateway.log.compaction.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    Record,
    iter_records,
    records_area,
)
from tidegate.protocol.record_batch import ATTR_TIMESTAMP_TYPE, HEADER_BYTES, BatchHeader

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START = 21


@dataclass(frozen=True, slots=True)
class Filtered:
    """The batch after filtering: ``data`` None when no record is left."""

    data: bytes | None
    kept: int
    max_timestamp: int


def compress(codec: int, area: bytes) -> bytes:
    from kafka import codec as kc

    if codec == CODEC_NONE:
        return area
    if codec == CODEC_GZIP:
        return bytes(kc.gzip_encode(area))
    if codec == CODEC_SNAPPY:
        return bytes(kc.snappy_encode(area))
    if codec == CODEC_LZ4:
        return bytes(kc.lz4_encode(area))
    if codec == CODEC_ZSTD:
        return bytes(kc.zstd_encode(area))
    raise ValueError(f"unknown compression codec {codec}")


def record_timestamp(header: BatchHeader, record: Record) -> int:
    if header.attributes & ATTR_TIMESTAMP_TYPE:  # LogAppendTime: the batch's max
        return header.max_timestamp
    return header.base_timestamp + record.timestamp_delta


def filter_batch(
    batch: bytes, header: BatchHeader, keep: Callable[[Record, int, int], bool]
) -> Filtered:
    """``batch`` (one whole batch) with only the records for which
    ``keep(record, offset, timestamp)`` is true."""
    area = records_area(batch, header)
    records = list(iter_records(area, header.record_count))
    kept = [r for r in records
            if keep(r, header.base_offset + r.offset_delta, record_timestamp(header, r))]
    if len(kept) == len(records):
        return Filtered(batch, len(kept), header.max_timestamp)
    if not kept:
        return Filtered(None, 0, header.max_timestamp)
    body = compress(header.compression, b"".join(area[r.start : r.end] for r in kept))
    max_ts = max(record_timestamp(header, r) for r in kept)
    out = bytearray(HEADER_BYTES + len(body))
    _HEADER.pack_into(
        out, 0, header.base_offset, len(out) - 12, header.partition_leader_epoch, 2, 0,
        header.attributes, header.last_offset_delta, header.base_timestamp, max_ts,
        header.producer_id, header.producer_epoch, header.base_sequence, len(kept),
    )
    out[HEADER_BYTES:] = body
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return Filtered(bytes(out), len(kept), max_ts)
