"""The controller's gRPC service (``protocol/controller.proto``) over a ``Controller``.

Each RPC is a thin adapter: message -> model -> one ``Controller`` call -> message.
Failures become status codes in ``_CODE_OF`` only; the trailing metadata key
``tidegate-error`` carries the controller error's class name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from tidegate.core.controller.api import (
    ConflictError,
    Controller,
    ControllerError,
    InvalidArgumentError,
    ScopeExistsError,
    ScopeNotEmptyError,
    ScopeNotFoundError,
    StreamExistsError,
    StreamNotFoundError,
    TransactionNotFoundError,
)
from tidegate.gateway.admin.grpc_model import (
    HistoryQueries,
    Transactions,
    check_key,
    check_name,
    config_from_pb,
    epoch_to_pb,
    lease_of,
    ranges_of,
    segment_to_pb,
    stream_to_pb,
    txn_to_pb,
)
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

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



#: Set ("1") on the calls a cluster node's gateway forwards to the controller leader.
FORWARDED_METADATA_KEY = "tidegate-forwarded"


class Unimplemented(Exception):
    """The controller behind the service lacks an optional capability."""


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
        except Unimplemented as e:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, str(e))
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            log.error("internal error in %s", method.__name__, exc_info=e)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
        raise AssertionError("unreachable: context.abort raises")

    return wrapper


# -- the service ---------------------------------------------------------------------------


_ServicerBase: Any = pb2_grpc.ControllerServiceServicer


class ControllerServicer(_ServicerBase):  # type: ignore[misc]  # the generated base is untyped
    def __init__(self, controller: Controller, forwarded: Controller | None = None) -> None:
        self._c = controller
        #: What a cluster node's gateway forwards (``FORWARDED_METADATA_KEY``) runs on,
        #: unguarded: those writes are the Kafka gateway's own (DeleteTopics, ...).
        self._forwarded = forwarded

    def _for(self, context: grpc.aio.ServicerContext) -> Controller:
        if self._forwarded is not None:
            for key, value in context.invocation_metadata() or ():
                if key == FORWARDED_METADATA_KEY and value == "1":
                    return self._forwarded
        return self._c

    def _stream(self, request: Any) -> tuple[str, str]:
        return check_name(request.scope, "scope"), check_name(request.stream, "stream")

    def _history(self) -> HistoryQueries:
        if not isinstance(self._c, HistoryQueries):
            raise Unimplemented("this controller answers no history queries beyond epochs")
        return self._c

    def _txns(self) -> Transactions:
        if not isinstance(self._c, Transactions):
            raise Unimplemented("this controller has no stream transactions")
        return self._c

    # scopes
    @_rpc
    async def CreateScope(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._c.create_scope(check_name(request.scope, "scope"))
        return pb2.ScopeResponse(scope=request.scope)

    @_rpc
    async def DeleteScope(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._for(context).delete_scope(check_name(request.scope, "scope"))
        return pb2.ScopeResponse(scope=request.scope)

    @_rpc
    async def ListScopes(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb2.ListScopesResponse(scopes=sorted(await self._c.list_scopes()))

    # streams
    @_rpc
    async def CreateStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        ranges = ranges_of(request.key_ranges) or None
        info = await self._c.create_stream(scope, stream, config_from_pb(request.config), ranges)
        return stream_to_pb(info)

    @_rpc
    async def GetStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return stream_to_pb(await self._c.get_stream(*self._stream(request)))

    @_rpc
    async def ListStreams(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        tag = request.tag if request.HasField("tag") else None
        names = await self._c.list_streams(check_name(request.scope, "scope"), tag)
        return pb2.ListStreamsResponse(streams=sorted(names))

    @_rpc
    async def UpdateStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        info = await self._c.update_stream(scope, stream, config_from_pb(request.config))
        return stream_to_pb(info)

    @_rpc
    async def SealStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        await self._for(context).seal_stream(scope, stream)
        return stream_to_pb(await self._c.get_stream(scope, stream))

    @_rpc
    async def DeleteStream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._for(context).delete_stream(*self._stream(request))
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
        segment = await self._c.get_segment_for_key(scope, stream, check_key(request.key))
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

    @_rpc
    async def GetPredecessors(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        found = await self._history().get_predecessors(scope, stream, request.segment_id)
        entries = [
            pb2.PredecessorsResponse.Entry(segment=segment_to_pb(s), successors=sorted(n))
            for s, n in sorted(found.items(), key=lambda kv: kv[0].key_start)
        ]
        return pb2.PredecessorsResponse(predecessors=entries)

    @_rpc
    async def GetSegmentsAt(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        return epoch_to_pb(await self._history().get_segments_at(scope, stream, request.time_ms))

    @_rpc
    async def IsStreamCutAtOrAfter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        a, b = dict(request.a.cut), dict(request.b.cut)
        ge = await self._history().is_cut_ge(scope, stream, a, b)
        return pb2.StreamCutComparison(a_at_or_after_b=ge)

    @_rpc
    async def BytesBetween(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        a, b = dict(request.a.cut), dict(request.b.cut)
        return pb2.BytesBetweenResponse(bytes=await self._history().bytes_between(scope, stream, a, b))

    # workflows
    @_rpc
    async def Scale(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        epoch = await self._c.scale(
            scope, stream, list(request.sealed_segments), ranges_of(request.new_ranges)
        )
        return epoch_to_pb(epoch)

    @_rpc
    async def Truncate(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        await self._for(context).truncate(scope, stream, dict(request.cut.cut))
        return pb2.StreamCut(cut=await self._c.get_head_segments(scope, stream))


    # transactions
    @_rpc
    async def CreateTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        return txn_to_pb(await txns.create_transaction(scope, stream, lease_of(request)), txns)

    @_rpc
    async def PingTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        info = await txns.ping_transaction(scope, stream, request.id, lease_of(request))
        return txn_to_pb(info, txns)

    @_rpc
    async def CommitTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        await txns.commit_transaction(scope, stream, request.id)
        return txn_to_pb(await txns.get_transaction(scope, stream, request.id), txns)

    @_rpc
    async def AbortTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        await txns.abort_transaction(scope, stream, request.id)
        return txn_to_pb(await txns.get_transaction(scope, stream, request.id), txns)

    @_rpc
    async def GetTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        return txn_to_pb(await txns.get_transaction(scope, stream, request.id), txns)

    @_rpc
    async def ListTransactions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        scope, stream = self._stream(request)
        txns = self._txns()
        found = await txns.list_transactions(scope, stream)
        return pb2.TransactionList(transactions=[txn_to_pb(t, txns) for t in found])


async def start_grpc_server(
    controller: Controller, host: str, port: int, *, forwarded: Controller | None = None,
    interceptors: Sequence[Any] = (), tls: tuple[bytes, bytes] | None = None,
    services: Sequence[Callable[[grpc.aio.Server], None]] = (),
) -> grpc.aio.Server:
    """Serve ``ControllerService`` on ``host:port`` (plaintext); started on return.
    Calls marked as forwarded by a cluster node's gateway run on ``forwarded``.

    ``interceptors`` authenticate (``gateway.admin.grpc_auth``); ``tls`` is a PEM key and
    certificate chain to serve TLS with. ``services`` add more services to the server
    (``gateway.admin.grpc_segments``).

    Raises ``OSError`` when the address cannot be bound. Stop with
    ``await server.stop(grace_s)``."""
    options = [
        ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.aio.server(options=options, interceptors=list(interceptors))
    pb2_grpc.add_ControllerServiceServicer_to_server(ControllerServicer(controller, forwarded), server)
    for add in services:
        add(server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is not None:
            bound = server.add_secure_port(address, grpc.ssl_server_credentials([tls]))
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot bind the gRPC controller API to {address}: {e}") from e
    if bound == 0:
        raise OSError(f"cannot bind the gRPC controller API to {address}")
    await server.start()
    return server
