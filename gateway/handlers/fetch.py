"""Fetch (key 1), v4+: long-poll on the tail, byte limits, at least one whole batch.

- Fetch sessions are not kept: every answer carries session id 0, which tells clients
  to send full fetch requests; a request naming a session gets
  FETCH_SESSION_ID_NOT_FOUND.
- Every partition answer carries the log start offset, the high watermark and the last
  stable offset (``gateway.txn.partition_txns``). ``read_committed`` (isolation level 1)
  answers stop at the LSO and carry the aborted transactions that overlap the answer,
  which the client uses to drop aborted records; control batches are served as stored
  (clients skip them).
- Limits: the request's ``max_bytes`` (capped by ``fetch.max.bytes``) for the whole
  answer and ``partition_max_bytes`` per partition, except that the first batch of the
  first partition with data is returned whole even when it is larger (Kafka's rule).
- Waiting: if fewer than ``min_bytes`` are available the handler waits, woken by any
  append to one of the fetched partitions, until enough arrived or ``max_wait_ms``.
- The stored batches are spliced into the encoded answer (see ``_splice``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.schemas.fields.codecs.types import Int32, UnsignedVarInt32
from tidegate.core.segmentstore.api import SegmentStoreError, SegmentTruncatedError
from tidegate.gateway.handlers import EncodedBody, HandlerContext, RequestContext
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.txn.partition_txns import PartitionTxns
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(FetchRequest, FetchResponse, 4, 12)

log = logging.getLogger(__name__)

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction

# Placeholders for the records of each partition in an encoded answer (``_splice``):
# this prefix, drawn once, then the partition's index (one getrandom call per
# partition per fetch was a visible cost of small fetches).
_TOKEN_PREFIX = os.urandom(12)
_TOKEN_INDEX = struct.Struct(">I")


class _Part:
    __slots__ = ("topic", "partition", "offset", "max_bytes", "plog", "error", "chunks", "size",
                 "end")

    def __init__(self, topic: str, partition: int, offset: int, max_bytes: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.plog: PartitionLog | None = None
        self.error = ErrorCode.NONE
        self.chunks: list[memoryview] = []
        self.size = 0
        #: Where this fetch may read up to: the high watermark, or the LSO (read_committed).
        self.end = 0


def _resolve(ctx: HandlerContext, part: _Part) -> None:
    info = ctx.topics.get(part.topic)
    if info is None or not 0 <= part.partition < info.partitions:
        part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    part.plog = ctx.logs.get(part.topic, part.partition)


def _set_ends(parts: list[_Part], txns: PartitionTxns | None, read_committed: bool) -> None:
    for part in parts:
        plog = part.plog
        if plog is not None:
            part.end = plog.high_watermark
            if read_committed and txns is not None:
                part.end = txns.last_stable_offset(plog.topic, plog.partition, part.end)


def _check_ranges(parts: list[_Part]) -> None:
    for part in parts:
        plog = part.plog
        if plog is not None and part.error == ErrorCode.NONE and not (
            plog.log_start_offset <= part.offset <= plog.high_watermark
        ):
            part.error = ErrorCode.OFFSET_OUT_OF_RANGE


def _available(part: _Part) -> bool:
    return part.plog is not None and part.error == ErrorCode.NONE and part.end > part.offset


async def _read(ctx: HandlerContext, parts: list[_Part], response_max_bytes: int) -> int:
    total = 0
    for part in parts:
        part.chunks, part.size = [], 0
        plog = part.plog
        if plog is None or part.error != ErrorCode.NONE:
            continue
        budget = min(part.max_bytes, response_max_bytes - total)
        if part.offset >= part.end or (budget <= 0 and total > 0):
            continue
        try:
            chunks = await ctx.logs.read_batches(
                plog, part.offset, max(budget, 0), total == 0, part.end
            )
        except SegmentTruncatedError:
            # Truncated behind the log start we know (retention): the offset is gone.
            part.error = ErrorCode.OFFSET_OUT_OF_RANGE
            continue
        except SegmentStoreError as exc:
            log.error("fetch %s/%d@%d: %r", part.topic, part.partition, part.offset, exc)
            part.error = ErrorCode.KAFKA_STORAGE_ERROR
            continue
        part.chunks = chunks
        part.size = sum(len(c) for c in chunks)
        total += part.size
    return total


async def _wait_for_growth(ctx: HandlerContext, parts: list[_Part], timeout_s: float) -> None:
    """Until a partition of the fetch grows, the gateway stops, or ``timeout_s``: one
    future woken by callbacks (no task, one event-loop hop after the append)."""
    if ctx.stopping.is_set():
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    logs = {id(p.plog): p.plog for p in parts if p.plog is not None}
    for plog in logs.values():
        plog.on_grow.append(wake)
    ctx.on_stop.append(wake)
    timer = loop.call_later(timeout_s, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        for plog in logs.values():
            plog.on_grow.remove(wake)
        if wake in ctx.on_stop:
            ctx.on_stop.remove(wake)


def _splice(response: Any, version: int, parts: list[_Part], tokens: list[bytes]) -> EncodedBody:
    """Protocol quirk: the records of each partition are stored batches, so instead of
    copying them into the encoder's buffer the answer is encoded with a unique 16-byte
    placeholder as records, then cut at each placeholder and the stored slices put in
    its place with their own length prefix (int32, or unsigned varint of length + 1 in
    flexible versions). The encoded metadata around them is small; the token starts
    with 12 random bytes that never leave the process, so it cannot occur there by
    chance or by a client's choice of names."""
    encoded = bytes(response.encode(version=version))
    flexible = bool(FetchResponse.flexible_version_q(version))
    old_prefix = len(UnsignedVarInt32.encode(17)) if flexible else 4
    buffers: list[bytes | memoryview] = []
    start = 0
    for part, token in zip(parts, tokens, strict=True):
        at = encoded.find(token, start)
        if at < 0:
            raise AssertionError("fetch placeholder lost in encoding")
        buffers.append(encoded[start : at - old_prefix])
        if flexible:
            buffers.append(bytes(UnsignedVarInt32.encode(part.size + 1)))
        else:
            buffers.append(bytes(Int32.encode(part.size)))
        buffers.extend(part.chunks)
        start = at + len(token)
    buffers.append(encoded[start:])
    return EncodedBody(buffers)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    req.release()  # fetches only read: later requests need not wait for the long poll
    version = req.api_version
    if request.session_id != 0:
        return FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0, responses=[],
        )
    parts = [
        _Part(t.topic, p.partition, p.fetch_offset, max(p.partition_max_bytes, 0))
        for t in request.topics
        for p in t.partitions
    ]
    cluster = ctx.cluster
    for part in parts:
        _resolve(ctx, part)
        if cluster is not None and part.error == ErrorCode.NONE:
            part.error = await cluster.partition_error(part.topic, part.partition)
            # The log opened before the check may predate this node's takeover.
            part.plog = ctx.logs.get(part.topic, part.partition) if part.error == ErrorCode.NONE else None
    response_max_bytes = min(max(request.max_bytes, 0), ctx.config.fetch_max_bytes)
    max_wait_s = min(max(request.max_wait_ms, 0), ctx.config.fetch_max_wait_ms_max) / 1000
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    min_bytes = max(request.min_bytes, 0)
    txns = ctx.partition_txns
    read_committed = request.isolation_level == 1
    while True:
        total = 0
        _set_ends(parts, txns, read_committed)
        _check_ranges(parts)
        if any(_available(p) for p in parts):
            total = await _read(ctx, parts, response_max_bytes)
        remaining = deadline - loop.time()
        if total >= min_bytes or remaining <= 0 or any(p.error for p in parts):
            break
        if ctx.stopping.is_set():
            break
        await _wait_for_growth(ctx, parts, remaining)
    by_topic: dict[str, list[Any]] = {}
    grouped: dict[str, list[_Part]] = {}
    for part in parts:
        grouped.setdefault(part.topic, []).append(part)
    ordered = [p for group in grouped.values() for p in group]
    tokens = [_TOKEN_PREFIX + _TOKEN_INDEX.pack(i) for i in range(len(ordered))]
    for part, token in zip(ordered, tokens, strict=True):
        plog = part.plog
        hw = plog.high_watermark if plog is not None else -1
        start = plog.log_start_offset if plog is not None else -1
        lso = hw
        aborted: list[Any] | None = None
        if plog is not None and txns is not None:
            lso = txns.last_stable_offset(part.topic, part.partition, hw)
        if read_committed:
            aborted = []
            if txns is not None and part.size:
                aborted = [
                    _Aborted(producer_id=t.producer_id, first_offset=t.first_offset)
                    for t in txns.aborted(part.topic, part.partition, part.offset, part.end)
                ]
        by_topic.setdefault(part.topic, []).append(
            _Partition(
                partition_index=part.partition, error_code=part.error, high_watermark=hw,
                last_stable_offset=lso, log_start_offset=start,
                aborted_transactions=aborted,
                preferred_read_replica=-1, records=token,
            )
        )
    response = FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[_Topic(topic=t, partitions=ps) for t, ps in by_topic.items()],
    )
    return _splice(response, version, ordered, tokens)
