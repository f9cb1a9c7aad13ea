"""Produce request bodies (v3-v12) decoded without copying their records.

kafka-python's generated decoder copies every partition's records into a new ``bytes``
(a copy of all produced data on the event loop). This decoder walks the same layout and
hands each partition's records out as a ``memoryview`` slice of the request frame: when
the frame is writable (the wire gives each large frame its own ``bytearray``) the
gateway rewrites base offsets in place and stores the slice as it is.

Layout (Kafka's ``ProduceRequest.json``): ``transactional_id`` nullable string, ``acks``
int16, ``timeout_ms`` int32, then topics, each a name and partitions, each an int32
index and nullable records. Versions 9+ are flexible: compact strings, arrays and bytes
(unsigned varint length + 1, 0 for null) and a tagged-field section after each struct
and after the body. Versions 13+ (topic ids) are not decoded here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.reader import Reader

MAX_VERSION = 12
FIRST_FLEXIBLE = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None
    #: For the first partition of the request: the frame up to the end of its records.
    #: Every byte before the records (header included) is parsed already, so the
    #: gateway may overwrite the ones right before them (with its envelope) instead of
    #: copying the records.
    head: memoryview | None = None


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(slots=True)
class ProduceRequestBody:
    """The fields the gateway reads, named as kafka-python names them."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def decode_produce_request(frame: memoryview, body_offset: int, version: int) -> ProduceRequestBody:
    """Decode the Produce request body of ``version`` (3-12) that starts at
    ``body_offset`` in ``frame``; records are slices of ``frame``. Raises
    ``KafkaProtocolError`` if it does not parse (bytes after it are ignored, as
    kafka-python's decoder ignores them)."""
    if not 3 <= version <= MAX_VERSION:
        raise KafkaProtocolError(f"produce request v{version} not decoded here")
    flexible = version >= FIRST_FLEXIBLE
    r = Reader(frame, "produce request", body_offset)
    transactional_id = r.string(flexible)
    acks, timeout_ms = r.unpack(_ACKS_TIMEOUT)
    topics: list[TopicProduceData] = []
    for _ in range(r.count(flexible)):
        name = r.string(flexible)
        if name is None:
            raise KafkaProtocolError("produce request: null topic name")
        partitions: list[PartitionProduceData] = []
        for _ in range(r.count(flexible)):
            (index,) = r.unpack(_I32)
            n = r.length(flexible, wide=True)
            if n < -1:
                raise KafkaProtocolError(f"produce request: records length {n}")
            records = r.take(n) if n >= 0 else None
            head = frame[: r.pos] if records is not None and not topics and not partitions else None
            if flexible:
                r.skip_tags()
            partitions.append(PartitionProduceData(index, records, head))
        if flexible:
            r.skip_tags()
        topics.append(TopicProduceData(name, partitions))
    if flexible:
        r.skip_tags()
    return ProduceRequestBody(transactional_id, acks, timeout_ms, topics)


_PARTITION_V3 = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class PartitionProduceResult:
    index: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None = None
    log_append_time_ms: int = -1
    #: ``(leader id, leader epoch)`` told with NOT_LEADER_OR_FOLLOWER (v10+, KIP-951).
    current_leader: tuple[int, int] | None = None
    #: ``(batch index, message)`` of the records refused (v8+, KIP-467).
    record_errors: tuple[tuple[int, str | None], ...] = ()


#: Tagged fields of Produce v10+ (KIP-951): the partition's current leader, the answer's
#: node endpoints (``(node id, host, port)`` of the leaders named).
CURRENT_LEADER_VERSION = 10
_LEADER_AND_EPOCH = struct.Struct(">iiB")  # leader id, epoch, no tagged fields


def encode_produce_response(
    version: int, topics: list[tuple[str, list[PartitionProduceResult]]], throttle_time_ms: int = 0,
    node_endpoints: list[tuple[int, str, int]] | None = None,
) -> bytes:
    """A Produce response body of ``version`` (3-12), as kafka-python encodes it; the
    record errors (v8+) and the tagged fields (current leader, node endpoints) only
    when given and the version has them."""
    if not 3 <= version <= MAX_VERSION:
        raise ValueError(f"produce response v{version} not encoded here")
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray()
    _count(out, len(topics), flexible)
    for name, partitions in topics:
        _string(out, name, flexible)
        _count(out, len(partitions), flexible)
        for p in partitions:
            out += _PARTITION_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                _count(out, len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    _string(out, message, flexible)
                    if flexible:
                        out.append(0)  # no tagged fields
                _string(out, p.error_message, flexible)
            if version >= CURRENT_LEADER_VERSION and p.current_leader is not None:
                # One tagged field: tag 0, size, the LeaderIdAndEpoch struct.
                out += b"\x01\x00" + bytes([_LEADER_AND_EPOCH.size])
                out += _LEADER_AND_EPOCH.pack(p.current_leader[0], p.current_leader[1], 0)
            elif flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if version >= CURRENT_LEADER_VERSION and node_endpoints:
        field = bytearray()
        _count(field, len(node_endpoints), True)
        for node_id, host, port in node_endpoints:
            field += _I32.pack(node_id)
            _string(field, host, True)
            field += _I32.pack(port)
            field += b"\x00\x00"  # rack null, no tagged fields
        out += b"\x01\x00"  # one tagged field, tag 0
        _uvarint_into(out, len(field))
        out += field
    elif flexible:
        out.append(0)
    return bytes(out)


def _uvarint_into(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _count(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        _uvarint_into(out, n + 1)
    else:
        out += _I32.pack(n)


def _string(out: bytearray, s: str | None, flexible: bool) -> None:
    raw = None if s is None else s.encode()
    if flexible:
        _uvarint_into(out, 0 if raw is None else len(raw) + 1)
    else:
        out += _I16.pack(-1 if raw is None else len(raw))
    if raw is not None:
        out += raw
