"""The controller's gRPC service (``protocol/controller.proto``) over a ``Controller``.

Each RPC is a thin adapter: message -> model -> one ``Controller`` call -> message.
Failures become status codes in ``_CODE_OF`` only; the trailing metadata key
``tidegate-error`` carries the controller error's class name.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from core.controller.api import (
    ConflictError,
    Controller,
    ControllerError,
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    SegmentRecord,
    StreamConfig,
    StreamExistsError,
    StreamInfo,
    StreamNotFoundError,
    TransactionNotFoundError,
)
from gateway.rest.models import NAME_PATTERN
from protocol.controller_grpc import pb2, pb2_grpc

log = logging.getLogger(__name__)

#: Largest message accepted, either way.
MESSAGE_BYTES_MAX = 4 << 20
ERROR_METADATA_KEY = "tidegate-error"

_CODE_OF: dict[type[ControllerError], grpc.StatusCode] = {
    InvalidArgumentError: grpc.StatusCode.INVALID_ARGUMENT,
    ScopeNotFoundError: grpc.StatusCode.NOT_FOUND,
    StreamNotFoundError: grpc.StatusCode.NOT_FOUND,
    TransactionNotFoundError: grpc.StatusCode.NOT_FOUND,
    ScopeExistsError: grpc.StatusCode.ALREADY_EXISTS,
    StreamExistsError: grpc.StatusCode.ALREADY_EXISTS,
    ScopeNotEmptyError: grpc.StatusCode.FAILED_PRECONDITION,
    ConflictError: grpc.StatusCode.FAILED_PRECONDITION,
}

_NAME = re.compile(NAME_PATTERN)
_NAME_LENGTH_MAX = 255


def code_of(error: ControllerError) -> grpc.StatusCode:
    for cls in type(error).__mro__:
        if cls in _CODE_OF:
            return _CODE_OF[cls]
    return grpc.StatusCode.INTERNAL


R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def _rpc(method: Handler[R]) -> Handler[R]:
    """Turns ``ControllerError`` into its status code; anything unexpected is INTERNAL."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except ControllerError as e:
            code = code_of(e)
            if code is grpc.StatusCode.INTERNAL:
                log.error("controller fault in %s", method.__name__, exc_info=e)
            await context.abort(
                code,
                str(e) or type(e).__name__,
                trailing_metadata=((ERROR_METADATA_KEY, type(e).__name__),),
            )
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            log.error("internal error in %s", method.__name__, exc_info=e)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: context.abort raises")

    return wrapper


# -- conversions ---------------------------------------------------------------------------


def _name(value: str, what: str) -> str:
    if not (0 < len(value) <= _NAME_LENGTH_MAX and _NAME.match(value)):
        raise InvalidArgumentError(f"{what} {value!r} is not 1-255 of [A-Za-z0-9._-]")
    return value


def _key(value: float) -> float:
    if not math.isfinite(value):
        raise InvalidArgumentError(f"key {value} is not a finite number")
    return value


def config_from_pb(c: Any) -> StreamConfig:
    scaling = ScalingPolicy()
    if c.HasField("scaling"):
        s = c.scaling
        scaling = ScalingPolicy(
            ScalingType[pb2.ScalingType.Name(s.type)], s.target_rate, s.scale_factor, s.min_segments
        )
    retention = None
    if c.HasField("retention"):
        r = c.retention
        retention = RetentionPolicy(RetentionType[pb2.RetentionType.Name(r.type)], r.value)
    return StreamConfig(scaling=scaling, retention=retention, tags=tuple(dict.fromkeys(c.tags)))


def config_to_pb(c: StreamConfig) -> Any:
    out = pb2.StreamConfig(
        scaling=pb2.ScalingPolicy(
            type=pb2.ScalingType.Value(c.scaling.type.name),
            target_rate=c.scaling.target_rate,
            scale_factor=c.scaling.scale_factor,
            min_segments=c.scaling.min_segments,
        ),
        tags=list(c.tags),
    )
    if c.retention is not None:
        out.retention.CopyFrom(
            pb2.RetentionPolicy(
                type=pb2.RetentionType.Value(c.retention.type.name), value=c.retention.value
            )
        )
    return out


def stream_to_pb(i: StreamInfo) -> Any:
    return pb2.StreamInfo(
        scope=i.scope,
        stream=i.stream,
        config=config_to_pb(i.config),
        state=pb2.StreamState.Value(i.state.name),
        current_epoch=i.current_epoch,
        creation_time_ms=i.creation_time_ms,
    )


def segment_to_pb(s: SegmentRecord) -> Any:
    return pb2.Segment(
        id=s.id,
        creation_time_ms=s.creation_time_ms,
        key_start=s.key_start,
        key_end=s.key_end,
        epoch=s.epoch,
        number=s.number,
    )


def epoch_to_pb(e: EpochRecord) -> Any:
    return pb2.Epoch(
        epoch=e.epoch,
        creation_time_ms=e.creation_time_ms,
        segments=[segment_to_pb(s) for s in e.segments],
    )


def _ranges(ranges: Any) -> list[KeyRange]:
    return [KeyRange(_key(r.start), _key(r.end)) for r in ranges]


# -- the service ---------------------------------------------------------------------------


_ServicerBase: Any = pb2_grpc.ControllerServiceServicer


class ControllerServicer(_ServicerBase):  # type: ignore[misc]
    def __init__(self, controller: Controller) -> None:
        self._c = controller

    def _stream(self, request: Any) -> tuple[str, str]:
        return _name(request.scope, "scope"), _name(request.stream, "stream")

    # scopes
    @_rpc
    async def CreateScope(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._c.create_scope(_name(request.scope, "scope"))
        return pb2.ScopeResponse(scope=request.scope)

    @_rpc
    async def DeleteScope(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._c.delete_scope(_name(request.scope, "scope"))
        return pb2.ScopeResponse(scope=request.scope)

    @_rpc
    async def ListScopes(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb2.ListScopesResponse(scopes=sorted(await self._c.list_scopes()))

    # streams
    @_rpc
    async def CreateStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        ranges = _ranges(request.key_ranges) or None
        info = await self._c.create_stream(scope, stream, config_from_pb(request.config), ranges)
        return stream_to_pb(info)

    @_rpc
    async def GetStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return stream_to_pb(await self._c.get_stream(*self._stream(request)))

    @_rpc
    async def ListStreams(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        tag = request.tag if request.HasField("tag") else None
        names = await self._c.list_streams(_name(request.scope, "scope"), tag)
        return pb2.ListStreamsResponse(streams=sorted(names))

    @_rpc
    async def UpdateStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        info = await self._c.update_stream(scope, stream, config_from_pb(request.config))
        return stream_to_pb(info)

    @_rpc
    async def SealStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        await self._c.seal_stream(scope, stream)
        return stream_to_pb(await self._c.get_stream(scope, stream))

    @_rpc
    async def DeleteStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._c.delete_stream(*self._stream(request))
        return pb2.DeleteStreamResponse()

    # segments and epochs
    @_rpc
    async def GetCurrentSegments(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        segments = await self._c.get_current_segments(*self._stream(request))
        return pb2.SegmentList(segments=[segment_to_pb(s) for s in segments])

    @_rpc
    async def GetHeadSegments(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb2.StreamCut(cut=await self._c.get_head_segments(*self._stream(request)))

    @_rpc
    async def GetSegmentForKey(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        segment = await self._c.get_segment_for_key(scope, stream, _key(request.key))
        return segment_to_pb(segment)

    @_rpc
    async def GetSuccessors(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        found = await self._c.get_successors(scope, stream, request.segment_id)
        entries = [
            pb2.SuccessorsResponse.Entry(segment=segment_to_pb(s), predecessors=sorted(p))
            for s, p in sorted(found.items(), key=lambda kv: kv[0].key_start)
        ]
        return pb2.SuccessorsResponse(successors=entries)

    @_rpc
    async def GetEpochs(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        epochs = await self._c.get_epochs(*self._stream(request))
        return pb2.EpochList(epochs=[epoch_to_pb(e) for e in epochs])

    # workflows
    @_rpc
    async def Scale(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        epoch = await self._c.scale(
            scope, stream, list(request.sealed_segments), _ranges(request.new_ranges)
        )
        return epoch_to_pb(epoch)

    @_rpc
    async def Truncate(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        await self._c.truncate(scope, stream, dict(request.cut.cut))
        return pb2.StreamCut(cut=await self._c.get_head_segments(scope, stream))


async def start_grpc_server(controller: Controller, host: str, port: int) -> grpc.aio.Server:
    """Serve ``ControllerService`` on ``host:port`` (plaintext); started on return.

    Raises ``OSError`` when the address cannot be bound. Stop with
    ``await server.stop(grace_s)``."""
    options = [
        ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(options=options)
    pb2_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(controller), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot bind the gRPC controller API to {address}: {e}") from e
    if bound == 0:
        raise OSError(f"cannot bind the gRPC controller API to {address}")
    await server.start()
    return server
