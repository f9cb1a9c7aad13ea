"""Reading the replicated log back: one plog's entries up to a known end, from one
server of its group, falling back to the next on an error, a short answer or an entry
that fails its CRC; and a whole chain of them.

Entry format inside a plog (the plog is a byte stream to its servers)::

    [u32 length][u32 crc][payload]     (big-endian)

``crc = crc32c(length field + payload)`` started from the crc32c of the plog id, so an
entry is valid in its own plog only. An entry that runs past the plog's end is a torn
tail (its append was never acknowledged) and ends the plog.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator

import crc32c
from tidegate.core.segmentstore.tier1.api import DataLogCorruptError, LogAddress
from tidegate.core.segmentstore.tier1.replicated.conn import ServerUnavailableError
from tidegate.core.segmentstore.tier1.replicated.meta import LogMeta
from tidegate.core.segmentstore.tier1.replicated.replicas import NoReplicaError, Replicas

ENTRY_HEADER = struct.Struct(">II")
ENTRY_HEADER_BYTES = ENTRY_HEADER.size
_LENGTH = struct.Struct(">I")
READ_CHUNK_BYTES = 1024 * 1024


def plog_seed(plog_id: str) -> int:
    return int(crc32c.crc32c(plog_id.encode()))


def entry_header(parts: list[memoryview], size: int, seed: int) -> bytes:
    length_field = _LENGTH.pack(size)
    crc = crc32c.crc32c(length_field, seed)
    for v in parts:
        crc = crc32c.crc32c(v, crc)
    return length_field + _LENGTH.pack(crc)


async def read_plog(
    replicas: Replicas, plog_id: str, servers: list[str], end: int, skip_below: int = 0
) -> AsyncIterator[tuple[int, bytes]]:
    """``(position, payload)`` of every whole entry in ``[0, end)`` at or after
    ``skip_below``."""
    seed = plog_seed(plog_id)
    order = sorted(servers, key=replicas.is_suspect)  # healthy servers first
    tried: list[str] = []
    buf = bytearray()
    base = 0  # plog offset of buf[0]
    while True:
        # Parse whole entries out of buf.
        i = 0
        bad = False
        while len(buf) - i >= ENTRY_HEADER_BYTES:
            length, crc = ENTRY_HEADER.unpack_from(buf, i)
            stop = i + ENTRY_HEADER_BYTES + length
            if base + stop > end:
                return  # torn tail
            if len(buf) < stop:
                break
            payload = bytes(buf[i + ENTRY_HEADER_BYTES : stop])
            if crc32c.crc32c(payload, crc32c.crc32c(buf[i : i + 4], seed)) != crc:
                bad = True
                break
            if base + i >= skip_below:
                yield base + i, payload
            i = stop
        del buf[:i]
        base += i
        fetched = base + len(buf)
        if not bad and fetched >= end:
            return  # whatever is left is a torn header
        if bad:
            # This server's copy is damaged from here: drop it, read the rest elsewhere.
            tried.append(order[0])
            order = order[1:]
            buf.clear()
            fetched = base
        if not order:
            if bad:
                raise DataLogCorruptError(f"plog {plog_id}: entry at {base} fails its CRC on {tried}")
            raise NoReplicaError(f"plog {plog_id}: no server of {servers} could serve [{fetched}, {end})")
        try:
            data = await replicas.read(order[0], plog_id, fetched, min(READ_CHUNK_BYTES, end - fetched))
        except (ServerUnavailableError, NoReplicaError):
            data = memoryview(b"")
        if not data:
            tried.append(order[0])
            order = order[1:]
            continue
        buf += data


async def read_chain(
    replicas: Replicas, meta: LogMeta, acked: LogAddress, start: LogAddress | None
) -> AsyncIterator[tuple[LogAddress, bytes]]:
    """Every entry of the chain ``meta`` records from ``start`` (or its truncation
    point), the unsealed plog up to ``acked`` (what its owner acknowledged)."""
    lower = max(a for a in (start, meta.start, LogAddress(0, 0)) if a is not None)
    chain = [(p.index, p.id, p.servers, p.end) for p in meta.plogs]
    for index, plog_id, servers, end in chain:
        if end is None:
            end = acked.position if index == acked.file_id else 0
        if index < lower.file_id or end == 0:
            continue
        skip = lower.position if index == lower.file_id else 0
        async for pos, payload in read_plog(replicas, plog_id, servers, end, skip):
            yield LogAddress(index, pos), payload
