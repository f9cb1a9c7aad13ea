"""How a Fetch is read and answered, whatever its session (``handlers/fetch.py``):

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
- The stored batches are spliced into the encoded answer (see ``splice``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from typing import Any

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.schemas.fields.codecs.types import Int32, UnsignedVarInt32
from tidegate.core.segmentstore.api import SegmentStoreError, SegmentTruncatedError
from tidegate.gateway.fetch.sessions import FetchPart
from tidegate.gateway.handlers import EncodedBody, HandlerContext
from tidegate.gateway.log.partition_log import PartitionLog
from tidegate.gateway.txn.partition_txns import PartitionTxns
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# Placeholders for the records of each partition in an encoded answer (``_splice``):
# this prefix, drawn once, then the partition's index (one getrandom call per
# partition per fetch was a visible cost of small fetches).
_TOKEN_PREFIX = os.urandom(12)
_TOKEN_INDEX = struct.Struct(">I")


def token(index: int) -> bytes:
    """The placeholder of the ``index``-th partition's records in an answer."""
    return _TOKEN_PREFIX + _TOKEN_INDEX.pack(index)


def set_ends(parts: list[FetchPart], txns: PartitionTxns | None, read_committed: bool) -> None:
    for part in parts:
        plog = part.plog
        if plog is not None:
            part.end = plog.high_watermark
            if read_committed and txns is not None:
                part.end = txns.last_stable_offset(plog.topic, plog.partition, part.end)


def check_ranges(parts: list[FetchPart]) -> None:
    for part in parts:
        plog = part.plog
        if plog is not None and part.error == ErrorCode.NONE and not (
            plog.log_start_offset <= part.offset <= plog.high_watermark
        ):
            part.error = ErrorCode.OFFSET_OUT_OF_RANGE


def available(part: FetchPart) -> bool:
    return part.plog is not None and part.error == ErrorCode.NONE and part.end > part.offset


async def read(ctx: HandlerContext, parts: list[FetchPart], response_max_bytes: int) -> int:
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


async def wait_for_growth(ctx: HandlerContext, parts: list[FetchPart], timeout_s: float) -> None:
    """Until a partition of the fetch grows, the gateway stops, or ``timeout_s``: one
    future woken by callbacks (no task, one event-loop hop after the append)."""
    if ctx.stopping.is_set():
        return
    await wait_on_logs(ctx, [p.plog for p in parts if p.plog is not None], timeout_s)


async def wait_on_logs(ctx: HandlerContext, plogs: list[PartitionLog], timeout_s: float,
                       waiter: asyncio.Future[None] | None = None) -> None:
    """Until one of ``plogs`` grows, the gateway stops, ``timeout_s`` passes, or
    ``waiter`` (a future others may also complete) is done."""
    loop = asyncio.get_running_loop()
    if waiter is None:
        waiter = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    logs = {id(plog): plog for plog in plogs}
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


def splice(response: Any, version: int, parts: list[FetchPart], tokens: list[bytes]) -> EncodedBody:
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
