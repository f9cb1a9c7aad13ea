"""Keyed record batches built with kafka-python's builder, and their records read back."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

BASE_TIMESTAMP_MS = 1_700_000_000_000


def keyed_batch(items: list[tuple[bytes | None, bytes | None]], compression: int = 0,
                timestamp_ms: int = BASE_TIMESTAMP_MS) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 24,
    )
    for i, (key, value) in enumerate(items):
        builder.append(i, timestamp=timestamp_ms + i, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_records(batches: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a blob of batches."""
    out = []
    pos = 0
    while pos < len(batches):
        size = 12 + int.from_bytes(batches[pos + 8 : pos + 12], "big")
        for r in DefaultRecordBatch(bytes(batches[pos : pos + size])):
            out.append((r.offset, r.key, r.value))
        pos += size
    return out
