"""A view of Kafka record batch (magic 2) headers; records are never decoded.

Wire format of one batch (big-endian)::

    offset  size  field
         0     8  baseOffset            rewritten by the broker; not covered by the CRC
         8     4  batchLength           bytes after this field (total = 12 + batchLength)
        12     4  partitionLeaderEpoch  not covered by the CRC
        16     1  magic                 must be 2
        17     4  crc                   CRC-32C (Castagnoli) of bytes 21..end
        21     2  attributes            bits 0-2 codec, 3 timestamp type, 4 transactional,
                                        5 control, 6 delete horizon
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61     .  records (possibly compressed)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

HEADER_BYTES = 61
LOG_OVERHEAD_BYTES = 12  # baseOffset + batchLength
_CRC_START = 21
_MAGIC_AT = 16

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")


class InvalidBatchError(ValueError):
    """The bytes are not a well-formed, CRC-valid v2 record batch sequence."""


class UnsupportedMagicError(InvalidBatchError):
    """A message set of format v0 or v1 (magic 0 or 1), not a v2 record batch."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header fields of one batch and where it lies in its records blob."""

    position: int
    size: int
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; sequences wrap at 2**31 as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def rebased(self, base_offset: int, leader_epoch: int = -1) -> BatchHeader:
        """This header with another base offset, and leader epoch unless -1 (built
        directly: ``dataclasses.replace`` took several times longer, once per produced
        batch)."""
        epoch = self.partition_leader_epoch if leader_epoch < 0 else leader_epoch
        return BatchHeader(
            self.position, self.size, base_offset, epoch, self.magic,
            self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
            self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
            self.record_count,
        )


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header of the batch at ``position`` without checking the CRC."""
    left = len(buf) - position
    if left > _MAGIC_AT and buf[position + _MAGIC_AT] in (0, 1):
        # Message sets v0/v1 have their magic byte where batches v2 have theirs.
        magic = buf[position + _MAGIC_AT]
        raise UnsupportedMagicError(
            f"message format v{magic} (magic {magic}) is not supported: record batches "
            "v2 only (Kafka 0.11+ clients)"
        )
    if left < HEADER_BYTES:
        raise InvalidBatchError(f"{left} bytes left, a batch header is 61")
    fields = _HEADER.unpack_from(buf, position)
    batch_length = fields[1]
    size = LOG_OVERHEAD_BYTES + batch_length
    if fields[3] != 2:
        raise InvalidBatchError(f"magic {fields[3]}, only record batch v2 is supported")
    if size < HEADER_BYTES:
        raise InvalidBatchError(f"batch length {batch_length} is shorter than its header")
    if position + size > len(buf):
        raise InvalidBatchError(f"batch of {size} bytes runs past the end of the records")
    return BatchHeader(position, size, *fields[0:1], *fields[2:])


def iter_batches(
    buf: bytes | bytearray | memoryview, *, check_crc: bool = True
) -> Iterator[BatchHeader]:
    """Every batch in a records blob, in order. Raises ``InvalidBatchError`` for a bad
    magic, a length that does not fit, a CRC mismatch or trailing bytes."""
    view = memoryview(buf)
    position = 0
    while position < len(view):
        header = read_header(view, position)
        if check_crc:
            end = position + header.size
            # The GIL stays held (mode 0): a released GIL is taken back only once a busy
            # thread gives it up, up to the 5 ms switch interval later, for a check
            # that takes microseconds.
            actual = crc32c.crc32c(view[position + _CRC_START : end], 0, 0)
            if actual != header.crc:
                raise InvalidBatchError(
                    f"CRC-32C mismatch at {position}: stored {header.crc:#010x}, "
                    f"computed {actual:#010x}"
                )
        if header.record_count < 0 or header.last_offset_delta < 0:
            raise InvalidBatchError("negative record count or last offset delta")
        yield header
        position += header.size


def set_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Stamp the partition leader epoch of the batch at ``position`` in place (the CRC
    does not cover it either), as Kafka's leader does on append."""
    _LEADER_EPOCH.pack_into(buf, position + 12, epoch)


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at ``position`` in place (the CRC does not
    cover it, so the batch stays valid)."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)
