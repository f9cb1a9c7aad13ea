"""Data frames: how the operation stream is cut into Tier-1 entries and read back.

Operations are serialized (``operations.serialize``) one after another into one
continuous byte stream per container session; the stream is cut into frames of at most
``frame_bytes_max`` bytes, so an operation may span frames. Each frame is one Tier-1
entry (the log adds its own length + CRC)::

    u8 version (1) | u8 flags | u32 first_op_pos | payload

``first_op_pos`` is where in the payload the first operation that *starts* in this frame
begins (``0xFFFFFFFF``: none starts here, the frame only continues one). Flag
``SESSION_START`` marks the first frame a container writes after recovery: a reader
drops any unfinished operation carried over from before it (that operation was never
acknowledged: its last frame never became durable).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from tidegate.core.segmentstore.operations import (
    APPEND_PLAIN,
    Operation,
    PlainAppend,
    parse,
    parse_at,
    record_length,
)
from tidegate.core.segmentstore.tier1.api import DurableDataLog, EntryData, LogAddress

_U32 = struct.Struct("<I")  # a record's length prefix (operations.py)
FRAME_HEAD = struct.Struct("<BBI")
FRAME_VERSION = 1
SESSION_START = 1
NO_OP_START = 0xFFFFFFFF


class FrameCorruptError(Exception):
    """The frame stream does not decode: Tier-1 cannot be trusted past this point."""


async def read_operations(
    log: DurableDataLog, start: LogAddress | None = None, start_pos: int | None = None
) -> AsyncGenerator[Operation, None]:
    """Every whole operation from ``start`` (the frame there must begin one, or
    ``start_pos`` says where in its payload one begins), in log order, each with
    ``address``/``frame_pos`` of its first byte. An unfinished last operation is
    dropped."""
    async with aclosing(read_operation_batches(log, start, start_pos)) as batches:
        async for batch in batches:
            for op in batch:
                assert isinstance(op, Operation)  # (no ``plain_appends`` here)
                yield op


async def read_operation_batches(
    log: DurableDataLog,
    start: LogAddress | None = None,
    start_pos: int | None = None,
    *,
    prefetch_entries: int = 0,
    plain_appends: bool = False,
) -> AsyncGenerator[list[Operation | PlainAppend], None]:
    """As ``read_operations``, a list per frame (recovery: one suspension per frame,
    not per operation). With ``prefetch_entries``, Tier-1 is read ahead by up to that
    many entries while operations are decoded and applied. With ``plain_appends``, an
    append without attributes that lies whole in its frame comes as a ``PlainAppend``
    tuple instead of an ``AppendOp`` (recovery: cheaper to decode than an operation
    object)."""
    entries = log.read(start)
    if prefetch_entries > 0:
        entries = _prefetch(entries, prefetch_entries)
    try:
        async with aclosing(_decode(entries, start_pos, plain_appends)) as batches:
            async for batch in batches:
                yield batch
    finally:
        aclose = getattr(entries, "aclose", None)
        if aclose is not None:
            await aclose()


async def _prefetch(
    entries: AsyncIterator[tuple[LogAddress, EntryData]], depth: int
) -> AsyncGenerator[tuple[LogAddress, EntryData], None]:
    """``entries``, read by a task of its own up to ``depth`` entries ahead."""
    queue: asyncio.Queue[tuple[LogAddress, EntryData] | BaseException | None] = asyncio.Queue(depth)

    async def pump() -> None:
        try:
            async for item in entries:
                await queue.put(item)
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            await queue.put(exc)

    task = asyncio.get_running_loop().create_task(pump())
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        aclose = getattr(entries, "aclose", None)
        if aclose is not None:
            await aclose()


async def _decode(
    entries: AsyncIterator[tuple[LogAddress, EntryData]], start_pos: int | None, plain_appends: bool = False
) -> AsyncGenerator[list[Operation | PlainAppend], None]:
    """The operations completed in each frame, one list per frame."""
    plain = APPEND_PLAIN
    plain_size = plain.size
    carry: bytearray | None = None
    carry_need = 0
    carry_at: tuple[LogAddress, int] = (LogAddress(0, 0), 0)
    synced = False
    first_frame = True
    async for addr, entry in entries:
        mv = memoryview(entry)
        if len(mv) < FRAME_HEAD.size:
            raise FrameCorruptError(f"frame at {addr} too short")
        version, flags, first = FRAME_HEAD.unpack_from(mv, 0)
        if version != FRAME_VERSION:
            raise FrameCorruptError(f"frame at {addr} has version {version}")
        payload = mv[FRAME_HEAD.size :]
        pos = 0
        batch: list[Operation | PlainAppend] = []
        if first_frame and start_pos is not None:
            first, flags = start_pos, SESSION_START
        first_frame = False
        if flags & SESSION_START or not synced:
            carry = None
            if first == NO_OP_START:
                continue
            pos = first
            synced = True
        elif carry is not None:
            if len(carry) < 4:
                take = min(4 - len(carry), len(payload))
                carry += payload[:take]
                pos = take
                if len(carry) == 4:
                    carry_need = record_length(carry, 0)
            if len(carry) >= 4:
                take = min(carry_need - len(carry), len(payload) - pos)
                carry += payload[pos : pos + take]
                pos += take
            if len(carry) >= 4 and len(carry) == carry_need:
                if first != NO_OP_START and first != pos:
                    raise FrameCorruptError(f"frame at {addr}: op boundary {pos} != {first}")
                op = parse(memoryview(bytes(carry)))
                op.address, op.frame_pos = carry_at
                carry = None
                batch.append(op)
            else:
                continue
        n = len(payload)
        while pos < n:
            if n - pos < 4:
                carry = bytearray(payload[pos:])
                carry_at = (addr, pos)
                break
            if plain_appends and n - pos >= plain_size:
                size, kind, seq, sid, offset, nattrs, length = plain.unpack_from(payload, pos)
                size += 4
                if kind == 2 and nattrs == 0 and pos + size <= n:
                    start = pos + plain_size
                    batch.append((seq, sid, offset, payload[start : start + length], addr, pos))
                    pos += size
                    continue
            else:
                size = _U32.unpack_from(payload, pos)[0] + 4
            if pos + size <= n:
                op = parse_at(payload, pos, size)
                op.address = addr
                op.frame_pos = pos
                pos += size
                batch.append(op)
            else:
                carry = bytearray(payload[pos:])
                carry_need = size
                carry_at = (addr, pos)
                break
        if batch:
            yield batch


async def read_operation_at(log: DurableDataLog, address: LogAddress, pos: int) -> Operation:
    """The one operation whose first byte is at ``pos`` in the frame at ``address``."""
    async with aclosing(read_operations(log, address, pos)) as ops:
        async for op in ops:
            return op
    raise FrameCorruptError(f"no operation at {address}+{pos}")
