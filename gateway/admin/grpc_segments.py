"""``SegmentService`` (``protocol/controller.proto``): the events of a stream's segments,
for clients outside the Kafka protocol (``tidegate.spark`` reads streams with it).

Reads and appends go through the node's segment store (the routing store in cluster
mode, so any node answers a read). The Kafka scope's streams hold Kafka batches, not
events: they are refused here (read and write topics over Kafka).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import random
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import grpc
from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    SegmentRecord,
    StreamInfo,
    StreamState,
    qualified_segment_name,
)
from tidegate.core.segmentstore.api import (
    BadOffsetError,
    ContainerNotOwnedError,
    SegmentNotFoundError,
    SegmentSealedError,
    SegmentStore,
    SegmentStoreError,
    StoreShutdownError,
    TooLargeError,
)
from tidegate.gateway.admin.grpc_model import Transactions, check_name
from tidegate.gateway.admin.grpc_service import Handler, R, Unimplemented, _rpc
from tidegate.protocol import events, stream_cut
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

#: A read answers at most this much (an event larger than it comes alone).
READ_BYTES_MAX = 2 << 20
WAIT_MS_MAX = 30_000
#: A scale seals segments under an append: it is retried on the new epoch this often.
_APPEND_ATTEMPTS = 8


class Streams(Protocol):
    async def get_stream(self, scope: str, stream: str) -> StreamInfo: ...
    async def get_current_segments(self, scope: str, stream: str) -> list[SegmentRecord]: ...
    async def get_head_segments(self, scope: str, stream: str) -> dict[int, int]: ...


@runtime_checkable
class OwnerAppends(Protocol):
    """The cluster's routing store: appends reach a container owned by another node."""

    async def append_at_owner(self, name: str, data: bytes | memoryview, *, event_count: int = 1) -> int: ...


def key_of(routing_key: str) -> float:
    """A routing key's point in ``[0, 1)``: stable across processes and versions."""
    if not routing_key:
        return random.random()
    digest = hashlib.blake2b(routing_key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


_STORE_CODES: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (SegmentNotFoundError, grpc.StatusCode.NOT_FOUND),
    (BadOffsetError, grpc.StatusCode.OUT_OF_RANGE),  # SegmentTruncatedError included
    (SegmentSealedError, grpc.StatusCode.FAILED_PRECONDITION),
    (TooLargeError, grpc.StatusCode.INVALID_ARGUMENT),
    (ContainerNotOwnedError, grpc.StatusCode.UNAVAILABLE),
    (StoreShutdownError, grpc.StatusCode.UNAVAILABLE),
    (events.EventFormatError, grpc.StatusCode.DATA_LOSS),
)


def _store_rpc(method: Handler[R]) -> Handler[R]:
    """Segment store errors as status codes; the rest as ``_rpc`` maps them."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except (SegmentStoreError, events.EventFormatError) as e:
            for cls, code in _STORE_CODES:
                if isinstance(e, cls):
                    await context.abort(code, f"{type(e).__name__}: {e}")
            raise

    return _rpc(wrapper)


_ServicerBase: Any = pb2_grpc.SegmentServiceServicer


class SegmentServicer(_ServicerBase):  # type: ignore[misc]  # the generated base is untyped
    def __init__(self, streams: Streams, store: SegmentStore, kafka_scope: str) -> None:
        self._streams = streams
        self._store = store
        self._kafka_scope = kafka_scope

    def _stream(self, request: Any) -> tuple[str, str]:
        scope = check_name(request.scope, "scope")
        if scope == self._kafka_scope:
            raise InvalidArgumentError(
                f"the streams of scope {scope!r} are Kafka topics: read and write them over Kafka")
        return scope, check_name(request.stream, "stream")

    @_store_rpc
    async def ReadSegment(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        name = qualified_segment_name(scope, stream, request.segment_id)
        if request.offset < 0 or request.max_bytes <= 0:
            raise InvalidArgumentError("offset must be >= 0 and max_bytes > 0")
        limit = min(request.max_bytes, READ_BYTES_MAX)
        wait_ms = min(max(request.wait_ms, 0), WAIT_MS_MAX)
        data, end = await self._read_events(name, request.offset, limit, wait_ms)
        next_offset = request.offset + len(data)
        return pb2.ReadSegmentResponse(
            offset=request.offset, data=data, next_offset=next_offset, end_of_segment=end)

    async def _read_events(self, name: str, offset: int, limit: int, wait_ms: int) -> tuple[bytes, bool]:
        """Whole frames from ``offset``: up to ``limit`` bytes, or the first frame alone;
        and whether they end a sealed segment."""
        buf = bytearray()
        want = limit
        while True:
            got = await self._store.read(name, offset + len(buf), want - len(buf), wait_ms)
            wait_ms = 0  # only the first read waits for the tail
            for chunk in got.chunks:
                buf += chunk
            whole, needed = events.whole_length(buf, want)
            if got.length and not got.end_of_segment and len(buf) < want:
                continue  # a read may answer less than there is
            if whole == 0 and needed > want and got.length and not got.end_of_segment:
                want = needed  # the first event is larger than the limit: read it all
                continue
            if got.end_of_segment and whole < len(buf) and len(buf) < want:
                raise events.EventFormatError(f"{name} ends inside an event at {offset + whole}")
            return bytes(buf[:whole]), got.end_of_segment and whole == len(buf)

    @_store_rpc
    async def GetSegmentInfo(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        info = await self._store.get_info(qualified_segment_name(scope, stream, request.segment_id))
        return pb2.SegmentInfo(segment_id=request.segment_id, start_offset=info.start_offset,
                               length=info.length, sealed=info.sealed)

    @_store_rpc
    async def GetStreamCut(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        if request.position == pb2.HEAD:
            cut = await self._streams.get_head_segments(scope, stream)
        else:
            cut = {}
            for s in await self._streams.get_current_segments(scope, stream):
                info = await self._store.get_info(qualified_segment_name(scope, stream, s.id))
                cut[s.id] = info.length
        return pb2.SerializedStreamCut(cut=pb2.StreamCut(cut=cut), text=stream_cut.to_text(scope, stream, cut))

    @_store_rpc
    async def AppendEvents(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        try:
            framed = [
                (key_of(e.routing_key), events.frame(e.data, e.routing_key or None))
                for e in request.events
            ]
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None
        positions: list[Any] = [None] * len(framed)
        left = list(range(len(framed)))
        delay_s = 0.01
        for _attempt in range(_APPEND_ATTEMPTS):
            if request.txn_id:
                targets = await self._txn_segments(scope, stream, request.txn_id)
            else:
                targets = [(s, qualified_segment_name(scope, stream, s.id))
                           for s in await self._streams.get_current_segments(scope, stream)]
            left = await self._append(framed, left, targets, positions)
            if not left:
                return pb2.AppendEventsResponse(positions=positions)
            state = (await self._streams.get_stream(scope, stream)).state
            if state in (StreamState.SEALING, StreamState.SEALED) or request.txn_id:
                raise ConflictError(f"{scope}/{stream} is sealed" if not request.txn_id
                                    else f"transaction {request.txn_id}'s segments are sealed")
            await asyncio.sleep(delay_s)  # a scale between sealing and its new epoch
            delay_s = min(delay_s * 2, 0.5)
        raise ConflictError(f"{scope}/{stream} kept scaling under the append: try again")

    async def _txn_segments(self, scope: str, stream: str, txn_id: str) -> list[tuple[SegmentRecord, str]]:
        t = self._streams
        if not isinstance(t, Transactions):
            raise Unimplemented("this controller has no stream transactions")
        info = await t.get_transaction(scope, stream, txn_id)
        if str(getattr(info.state, "value", info.state)) != "OPEN":
            raise InvalidArgumentError(f"transaction {txn_id} is {info.state}, not open")
        return [(s, t.transaction_segment_name(scope, stream, s.id, txn_id)) for s in info.segments]

    async def _append_one(self, name: str, data: bytes, count: int) -> int:
        if isinstance(self._store, OwnerAppends):
            return await self._store.append_at_owner(name, data, event_count=count)
        return await self._store.append(name, data, event_count=count)

    async def _append(
        self, framed: Sequence[tuple[float, bytes]], left: list[int],
        targets: Sequence[tuple[SegmentRecord, str]], positions: list[Any],
    ) -> list[int]:
        """One atomic append per segment of the events in ``left``; those whose segment
        was sealed meanwhile (a scale) are returned, to go to the new epoch's segments."""
        groups: dict[int, list[int]] = {}
        by_id = {s.id: (s, name) for s, name in targets}
        for i in left:
            key = framed[i][0]
            seg = next((s for s, _n in targets if s.key_start <= key < s.key_end), None)
            if seg is None:
                raise InvalidArgumentError(f"no segment holds key {key}")
            groups.setdefault(seg.id, []).append(i)
        sealed: list[int] = []
        for seg_id, members in groups.items():
            data = b"".join(framed[i][1] for i in members)
            try:
                offset = await self._append_one(by_id[seg_id][1], data, len(members))
            except SegmentSealedError:
                sealed += members
                continue
            for i in members:
                positions[i] = pb2.EventPosition(segment_id=seg_id, offset=offset)
                offset += len(framed[i][1])
        return sorted(sealed)


def segment_service(streams: Streams, store: SegmentStore, kafka_scope: str) -> Any:
    """What ``start_grpc_server(services=...)`` takes to serve ``SegmentService``."""

    def add(server: grpc.aio.Server) -> None:
        pb2_grpc.add_SegmentServiceServicer_to_server(SegmentServicer(streams, store, kafka_scope), server)

    return add
