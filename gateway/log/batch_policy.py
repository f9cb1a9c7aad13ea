"""The topic configs a produced batch must satisfy beyond its header checks, in one call
from the produce handler. Records are decoded only where a topic's configs need them:

- ``cleanup.policy`` with ``compact``: every record has a key (INVALID_RECORD with
  Kafka's messages and the keyless records' indexes as record errors);
- ``message.timestamp.type=LogAppendTime``: the batch is stamped as Kafka's broker does
  (timestamp-type attribute bit set, maxTimestamp = now, CRC-32C recomputed; records are
  not touched: readers take every record's timestamp from maxTimestamp);
- CreateTime with ``message.timestamp.before.max.ms`` / ``after.max.ms`` set: every
  record's timestamp lies within [now - before, now + after] (INVALID_TIMESTAMP). The
  older ``message.timestamp.difference.max.ms`` is gone, as in Kafka 4.x (KIP-937).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace

import crc32c
from tidegate.gateway.log.compaction.records import (
    InvalidRecordsError,
    compacted_produce_error,
    iter_records,
    records_area,
)
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import ATTR_TIMESTAMP_TYPE, BatchHeader

_LONG_MAX = (1 << 63) - 1
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_CRC_AT, _ATTRIBUTES_AT, _MAX_TIMESTAMP_AT = 17, 21, 35


@dataclass(frozen=True, slots=True)
class Verdict:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    #: The batch's header after stamping, and its bytes when they had to be copied.
    header: BatchHeader | None = None
    records: memoryview | None = None
    log_append_time_ms: int = -1
    #: ``(index in the batch, message)`` of the records at fault (ProduceResponse v8+).
    record_errors: tuple[tuple[int, str], ...] = ()


_OK = Verdict()


def check_batch(
    configs: Mapping[str, str], records: memoryview, header: BatchHeader, topic: str,
    partition: int, now_ms: int, area: bytes | None = None,
) -> Verdict:
    """What the topic's configs make of the one batch in ``records``; ``area`` is its
    decompressed records area when the validation decompressed it already."""
    keyless = compacted_produce_error(configs, records, header, topic, partition, area)
    if keyless is not None:
        return Verdict(ErrorCode.INVALID_RECORD, keyless.message, record_errors=keyless.record_errors)
    if configs.get("message.timestamp.type") == "LogAppendTime":
        return _stamp(records, header, now_ms)
    before = int(configs.get("message.timestamp.before.max.ms", _LONG_MAX))
    after = int(configs.get("message.timestamp.after.max.ms", _LONG_MAX))
    if before == _LONG_MAX and after == _LONG_MAX:
        return _OK
    low, high = now_ms - before, now_ms + after
    try:
        plain = area if area is not None else records_area(records, header)
        for r in iter_records(plain, header.record_count):
            ts = header.base_timestamp + r.timestamp_delta
            if not low <= ts <= high:
                return Verdict(ErrorCode.INVALID_TIMESTAMP,
                               f"Timestamp {ts} of message with offset {r.offset_delta} is out "
                               f"of range. The timestamp should be within [{low}, {high}]")
    except InvalidRecordsError as exc:
        return Verdict(ErrorCode.CORRUPT_MESSAGE, str(exc))
    return _OK


def _stamp(records: memoryview, header: BatchHeader, now_ms: int) -> Verdict:
    copied = None
    if records.readonly:
        copied = records = memoryview(bytearray(records))
    at = header.position
    attributes = header.attributes | ATTR_TIMESTAMP_TYPE
    _ATTRIBUTES.pack_into(records, at + _ATTRIBUTES_AT, attributes)
    _TIMESTAMP.pack_into(records, at + _MAX_TIMESTAMP_AT, now_ms)
    crc = crc32c.crc32c(records[at + _ATTRIBUTES_AT : at + header.size])
    _CRC.pack_into(records, at + _CRC_AT, crc)
    stamped = replace(header, attributes=attributes, max_timestamp=now_ms, crc=crc)
    return Verdict(header=stamped, records=copied, log_append_time_ms=now_ms)
