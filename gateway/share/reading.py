"""What ShareFetch and ShareAcknowledge share (not handler modules): resolving topic ids
and checking READ, applying acknowledgement batches, and reading records to acquire."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tidegate.core.segmentstore.api import SegmentStoreError, SegmentTruncatedError
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.security.acls import Operation, ResourceType
from tidegate.gateway.security.item_acls import refusal
from tidegate.gateway.share.claims import Fenced
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
    #: The partition's leader and epoch as answered (cluster mode: another node's with
    #: NOT_LEADER_OR_FOLLOWER, so the client goes there).
    leader_id: int = -1
    leader_epoch: int = -1


def group_refusal(ctx: HandlerContext, req: RequestContext, group_id: str) -> str | None:
    return refusal(ctx.security, req.session, Operation.READ, ResourceType.GROUP, group_id)


def resolve(ctx: HandlerContext, req: RequestContext, part: SharePart) -> bool:
    """Whether the partition exists and may be read (``part.topic`` set; its leadership
    is checked by ``lead``); else ``part.error`` is set."""
    name = ctx.topics.name_of(part.topic_id)
    info = ctx.topics.get(name) if name is not None else None
    if info is None:
        part.error, part.message = ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id"
        return False
    part.topic = name
    if refusal(ctx.security, req.session, Operation.READ, ResourceType.TOPIC, info.name):
        part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return False
    if not 0 <= part.partition < info.partitions:
        part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return False
    return True


def endpoints(ctx: HandlerContext, req: RequestContext, parts: Iterable[SharePart],
              endpoint: Any) -> list[Any]:
    """The addresses of the other leaders named (``NodeEndpoints``), on the request's
    listener."""
    nodes = {p.leader_id for p in parts if p.leader_id >= 0 and p.leader_id != ctx.config.node_id}
    out = []
    for node in sorted(nodes):
        address = None
        if ctx.cluster is not None:
            address = ctx.cluster.kafka_address(node, req.session.listener.name if req.session else None)
        if address is not None:
            out.append(endpoint(node_id=node, host=address[0], port=address[1], rack=None))
    return out


#: How long a leader waits for the share coordinator's table when it claims.
CLAIM_TIMEOUT_MS = 10_000


async def lead(ctx: HandlerContext, share: ShareCoordinator, group_id: str,
               part: SharePart, fresh: bool = False) -> PartitionLog | None:
    """The partition's log once this node is known to lead it and holds its
    share-partition (cluster mode: claimed at the current leader epoch; ``fresh`` as a
    share session opens: checked against the table), or None with ``part.error`` set
    (the leader named with NOT_LEADER_OR_FOLLOWER)."""
    cluster, topic = ctx.cluster, part.topic
    assert topic is not None
    if cluster is None:
        part.leader_id = ctx.config.node_id
        if ctx.leader_epochs is not None:
            part.leader_epoch = ctx.leader_epochs.current(topic, part.partition)
        return ctx.logs.get(topic, part.partition)
    part.error = await cluster.partition_error(topic, part.partition)
    if part.error != ErrorCode.NONE:
        leader, epoch = await cluster.leader_and_epoch(topic, part.partition)
        part.leader_id, part.leader_epoch = (leader, epoch) if leader is not None else (-1, -1)
        return None
    epoch = cluster.leader_epoch(topic, part.partition)  # after the check: this map's
    part.leader_id, part.leader_epoch = ctx.config.node_id, epoch
    plog = ctx.logs.get(topic, part.partition)  # opened after the check, as Fetch does
    try:
        async with asyncio.timeout(CLAIM_TIMEOUT_MS / 1000):
            await share.claim(group_id, topic, part.partition, plog.log_start_offset,
                              plog.high_watermark, epoch, fresh)
    except TimeoutError:  # the table's container moving: the client tries again
        part.error, part.message = ErrorCode.KAFKA_STORAGE_ERROR, "share state: timed out"
        return None
    except Fenced as exc:  # another node claimed it later: the client looks the leader up
        part.error, part.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)
        part.leader_id, part.leader_epoch = -1, -1
        return None
    except SegmentStoreError as exc:
        part.error, part.message = ErrorCode.KAFKA_STORAGE_ERROR, f"share state: {exc}"
        return None
    return plog


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
    try:
        sp = share_partition(share, group_id, plog)
    except Fenced as exc:  # dropped by a failed write since ``lead``
        part.ack_error, part.ack_message = ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)
        return False
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
    try:
        sp = share_partition(share, group_id, plog)
    except Fenced as exc:  # dropped by a failed write since ``lead``
        part.error, part.message = ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc)
        return 0
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
