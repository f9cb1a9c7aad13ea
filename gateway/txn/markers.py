"""Transaction markers: the control batches that end a transaction in a partition.

A marker is a record batch (magic 2) with the transactional (0x10) and control (0x20)
attribute bits, the producer's id and epoch, base sequence -1 and exactly one record:

    key   = version:int16 (0), type:int16 (0 abort, 1 commit)
    value = version:int16 (0), coordinator epoch:int32

It is appended through the partition's ordinary append path, so it takes one offset
like any record; consumers skip it (they never hand control records to the user).
"""

from __future__ import annotations

import struct

import crc32c
from tidegate.protocol.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_BYTES,
    NO_SEQUENCE,
    BatchHeader,
    read_header,
)

ABORT = 0
COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CRC_START = 21

#: The client id of a cluster node's transaction coordinator sending markers to the
#: partitions' leaders (``gateway/cluster/txn_markers.py``): their commit markers count.
COORDINATOR_CLIENT_ID = "tidegate-txn-coordinator"


def _varint(n: int) -> bytes:
    """Zig-zag varint, as record fields are encoded."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def build_marker(
    producer_id: int, producer_epoch: int, commit: bool, timestamp_ms: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """One control batch with base offset 0 (the append path assigns the real one)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + _varint(0)  # timestamp delta
        + _varint(0)  # offset delta
        + _varint(len(key)) + key
        + _varint(len(value)) + value
        + _varint(0)  # header count
    )
    record = _varint(len(body)) + body
    size = HEADER_BYTES + len(record)
    header = bytearray(
        _HEADER.pack(
            0, size - 12, -1, 2, 0, ATTR_TRANSACTIONAL | ATTR_CONTROL, 0, timestamp_ms,
            timestamp_ms, producer_id, producer_epoch, NO_SEQUENCE, 1,
        )
    )
    batch = header + record
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[_CRC_START:])))
    return bytes(batch)


def marker_header(batch: bytes) -> BatchHeader:
    return read_header(batch, 0)


def marker_type(batch: bytes | memoryview, header: BatchHeader) -> int | None:
    """COMMIT or ABORT for a control batch at ``header.position`` in ``batch``; None if
    its first record is not a transaction marker (an unknown control type)."""
    if header.compression != 0 or header.record_count < 1:
        return None
    try:
        pos = header.position + HEADER_BYTES
        _, pos = _read_varint(batch, pos)  # record length
        pos += 1  # attributes
        _, pos = _read_varint(batch, pos)  # timestamp delta
        _, pos = _read_varint(batch, pos)  # offset delta
        key_len, pos = _read_varint(batch, pos)
        if key_len < _KEY.size:
            return None
        _, kind = _KEY.unpack_from(batch, pos)
    except (IndexError, ValueError, struct.error):
        return None
    return kind if kind in (ABORT, COMMIT) else None
