"""What ShareFetch and ShareAcknowledge share (not handler modules): resolving topic ids
and checking READ, applying acknowledgement batches, and reading records to acquire."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

from tidegate.core.segmentstore.api import SegmentStoreError, SegmentTruncatedError
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.gateway.share.coordinator import ShareCoordinator
from tidegate.gateway.share.partition import Acquired, InvalidRecordState, SharePartition
from tidegate.protocol.errors import ErrorCode

#: The offset of ``lastOffsetDelta`` in a record batch (after base offset, length,
#: leader epoch, magic, CRC and attributes).
_LAST_OFFSET_DELTA_AT = 23
_BATCH_HEADER = struct.Struct(">qi")
_DELTA = struct.Struct(">i")


@dataclass(slots=True)
class SharePart:
    """One partition of a share request and what the answer says about it."""

    topic_id: uuid.UUID
    partition: int
    topic: str | None = None
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    ack_error: ErrorCode | None = None
    ack_message: str | None = None
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


def group_refusal(ctx: HandlerContext, req: RequestContext, group_id: str) -> str | None:
    return refusal(ctx.security, req.session, Operation.READ, ResourceType.GROUP, group_id)


def resolve(ctx: HandlerContext, req: RequestContext, part: SharePart) -> PartitionLog | None:
    """The partition's log, or None with ``part.error`` set."""
    name = ctx.topics.name_of(part.topic_id)
    info = ctx.topics.get(name) if name is not None else None
    if info is None:
        part.error, part.message = ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id"
        return None
    part.topic = name
    if refusal(ctx.security, req.session, Operation.READ, ResourceType.TOPIC, info.name):
        part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return None
    if not 0 <= part.partition < info.partitions:
        part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None
    return ctx.logs.get(info.name, part.partition)


def share_partition(share: ShareCoordinator, group_id: str, plog: PartitionLog) -> SharePartition:
    return share.share_partition(group_id, plog.topic, plog.partition, plog.log_start_offset,
                                 plog.high_watermark)


def acknowledge(share: ShareCoordinator, group_id: str, member_id: str, part: SharePart,
                plog: PartitionLog | None, batches: Any) -> bool:
    """Apply a partition's acknowledgement batches; sets ``part.ack_error``. True when
    the share-partition changed (to be persisted)."""
    part.ack_error = ErrorCode.NONE
    if plog is None:
        part.ack_error = part.error
        return False
    sp = share_partition(share, group_id, plog)
    changed = False
    for b in batches:
        try:
            sp.acknowledge(member_id, b.first_offset, b.last_offset, list(b.acknowledge_types))
            changed = True
        except InvalidRecordState as exc:
            part.ack_error, part.ack_message = ErrorCode.INVALID_RECORD_STATE, str(exc)
        except ValueError as exc:
            part.ack_error, part.ack_message = ErrorCode.INVALID_REQUEST, str(exc)
    if changed:
        share.wake()  # released records may be acquired by a waiting fetch
    return changed


def covered_last(chunks: list[memoryview]) -> int:
    """The last offset of the batches read (stored batches, whole and in order)."""
    data = b"".join(chunks)
    pos, last = 0, -1
    while pos + _LAST_OFFSET_DELTA_AT + 4 <= len(data):
        base, length = _BATCH_HEADER.unpack_from(data, pos)
        (delta,) = _DELTA.unpack_from(data, pos + _LAST_OFFSET_DELTA_AT)
        last = base + delta
        pos += 12 + length
    return last


async def acquire(ctx: HandlerContext, share: ShareCoordinator, group_id: str, member_id: str,
                  part: SharePart, plog: PartitionLog, max_bytes: int, max_records: int,
                  first: bool) -> int:
    """Read from the first offset this member may acquire and lock what the read covers;
    the number of records acquired (``part.records``/``part.acquired`` set)."""
    sp = share_partition(share, group_id, plog)
    hw = plog.high_watermark
    start = sp.next_candidate(ctx.clock_ms(), hw)
    if start is None or max_records <= 0:
        return 0
    try:
        chunks = await ctx.logs.read_batches(plog, start, max(max_bytes, 0), first, hw)
    except SegmentTruncatedError:
        sp.reset_start(plog.log_start_offset)
        return 0
    except SegmentStoreError:
        part.error = ErrorCode.KAFKA_STORAGE_ERROR
        return 0
    if not chunks:
        return 0
    acquired = sp.acquire(member_id, start, min(covered_last(chunks), hw - 1), max_records,
                          ctx.clock_ms())
    if not acquired:
        return 0
    part.records = b"".join(chunks)
    part.acquired = acquired
    return sum(a.last_offset - a.first_offset + 1 for a in acquired)
