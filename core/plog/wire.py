"""The plog protocol: length-prefixed binary frames over TCP (bytes in, bytes out).

Request::   [u32 length][u8 op][u32 request id][body]
Response::  [u32 length][u8 status][u32 request id][body]

``length`` counts what follows it. Strings are ``[u8 length][ascii]``, integers are
big-endian. Bodies by op (response bodies are for status OK unless said otherwise):

- CREATE   id, u64 capacity                       -> (empty); EXISTS if present,
                                                     NO_SPACE if the disk cannot hold it
- APPEND   id, u64 offset, data (rest of frame)   -> u64 durable end
- READ     id, u64 offset, u32 max bytes          -> u64 durable end, u8 sealed, data
- SEAL     id, u64 epoch, u64 offset              -> u64 sealed end
- DELETE   id                                     -> (empty), also when absent
- INFO     id                                     -> u64 end, u8 sealed, u64 seal epoch,
                                                     u64 capacity

Error bodies: BAD_OFFSET carries u64 the plog's current end; SEALED and FENCED carry
u64 sealed end, u64 seal epoch; every other error carries a UTF-8 message.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

FRAME_HEADER = struct.Struct(">IBI")  # length, op/status, request id
FRAME_HEADER_BYTES = FRAME_HEADER.size
LENGTH_BYTES = 4
U64 = struct.Struct(">Q")
U64U8 = struct.Struct(">QB")
U64U64 = struct.Struct(">QQ")
U64U32 = struct.Struct(">QI")
INFO = struct.Struct(">QBQQ")

#: The seed's upper limit of one append's I/O size.
APPEND_BYTES_MAX = 2 * 1024 * 1024
READ_BYTES_MAX = 2 * 1024 * 1024
#: No frame is larger: an append of the most bytes, its id and header.
FRAME_BYTES_MAX = APPEND_BYTES_MAX + 512
OFFSET_MAX = 2**64 - 1

PLOG_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class Op:
    CREATE = 1
    APPEND = 2
    READ = 3
    SEAL = 4
    DELETE = 5
    INFO = 6


class Status:
    OK = 0
    NOT_FOUND = 1
    EXISTS = 2
    BAD_OFFSET = 3
    FULL = 4
    SEALED = 5
    FENCED = 6
    TOO_LARGE = 7
    BUSY = 8
    INVALID = 9
    IO_ERROR = 10
    NO_SPACE = 11


STATUS_NAMES = {v: k for k, v in vars(Status).items() if not k.startswith("_")}


class WireError(Exception):
    """A malformed frame: the connection that sent it is closed."""


def frame(code: int, request_id: int, *parts: bytes | memoryview) -> list[bytes | memoryview]:
    """A whole frame as buffers to write back to back (the data is not copied)."""
    body = sum(len(p) for p in parts)
    return [FRAME_HEADER.pack(body + FRAME_HEADER_BYTES - LENGTH_BYTES, code, request_id), *parts]


def pack_id(plog_id: str) -> bytes:
    raw = plog_id.encode("ascii")
    return bytes([len(raw)]) + raw


def unpack_id(body: memoryview) -> tuple[str, memoryview]:
    """The plog id at the start of ``body`` and the rest."""
    if len(body) < 1 or len(body) < 1 + body[0]:
        raise WireError("truncated plog id")
    n = body[0]
    try:
        plog_id = bytes(body[1 : 1 + n]).decode("ascii")
    except UnicodeDecodeError:
        raise WireError("plog id is not ascii") from None
    if not PLOG_ID.fullmatch(plog_id):
        raise WireError(f"bad plog id {plog_id!r}")
    return plog_id, body[1 + n :]


def unpack(st: struct.Struct, body: memoryview) -> tuple[tuple[int, ...], memoryview]:
    if len(body) < st.size:
        raise WireError(f"body too short: {len(body)} < {st.size}")
    return st.unpack_from(body), body[st.size :]


@dataclass(frozen=True, slots=True)
class PlogInfo:
    end: int
    sealed: bool
    seal_epoch: int
    capacity: int
