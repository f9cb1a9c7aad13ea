"""The envelope written in front of every Kafka append in a stream segment.

A segment may hold batches of several partitions, so each append describes itself and
every index can be rebuilt by walking the segment. Format (big-endian, 25 bytes)::

    offset  size  field
         0     1  version (1)
         1     4  partition
         5     8  base offset of the first batch in the payload
        13     4  offset count (last offset + 1 - base offset)
        17     4  payload length in bytes
        21     4  CRC-32C of bytes 0..21 (a torn or foreign header is detected)
        25     .  payload: one or more record batches (v2), base offsets already assigned
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

ENVELOPE_VERSION = 1
_HEAD = struct.Struct(">BiqiI")
_CRC = struct.Struct(">I")
ENVELOPE_BYTES = _HEAD.size + _CRC.size


class InvalidEnvelopeError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Envelope:
    partition: int
    base_offset: int
    offset_count: int
    payload_length: int

    @property
    def size(self) -> int:
        return ENVELOPE_BYTES + self.payload_length


def encode_envelope_into(buf: bytearray | memoryview, env: Envelope) -> None:
    """Write the envelope into the first ``ENVELOPE_BYTES`` of ``buf``."""
    _HEAD.pack_into(
        buf, 0, ENVELOPE_VERSION, env.partition, env.base_offset, env.offset_count,
        env.payload_length,
    )
    _CRC.pack_into(buf, _HEAD.size, crc32c.crc32c(memoryview(buf)[: _HEAD.size]))


def decode_envelope(buf: bytes | bytearray | memoryview, position: int = 0) -> Envelope:
    if len(buf) - position < ENVELOPE_BYTES:
        raise InvalidEnvelopeError("short envelope")
    head = memoryview(buf)[position : position + _HEAD.size]
    version, partition, base, count, length = _HEAD.unpack(head)
    (crc,) = _CRC.unpack_from(buf, position + _HEAD.size)
    if version != ENVELOPE_VERSION or crc != crc32c.crc32c(head):
        raise InvalidEnvelopeError(f"bad envelope at {position}")
    return Envelope(partition, base, count, length)
