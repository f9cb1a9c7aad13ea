"""The gRPC side of ``gateway.security.admin_auth``: an interceptor that refuses calls
without valid Basic credentials in the ``authorization`` metadata (UNAUTHENTICATED)
or that the ACLs deny (PERMISSION_DENIED), judged on the request's ``scope``/``stream``.

A call marked as forwarded by a cluster node (``tidegate-forwarded``) skips the Kafka
scope's guard, so the mark counts only from a super user: cluster nodes forward with
their own credentials (``admin.forward.user``), never the caller's anonymity.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc
from tidegate.gateway.admin.grpc_service import FORWARDED_METADATA_KEY
from tidegate.gateway.security.acls import Operation


class Auth(Protocol):
    async def principal(self, authorization: str | None) -> str | None: ...
    def is_super(self, principal: str) -> bool: ...
    def allowed(self, principal: str, host: str, operation: Operation, scope: str | None,
                stream: str | None) -> bool: ...


def _operation(method: str) -> Operation:
    name = method.rsplit("/", 1)[-1]
    if name.startswith(("Get", "List", "Is", "Bytes")):
        return Operation.DESCRIBE
    if name.startswith("Read"):
        return Operation.READ
    if name.startswith("Append"):
        return Operation.WRITE
    if name.startswith("Create"):
        return Operation.CREATE
    if name.startswith("Delete"):
        return Operation.DELETE
    return Operation.ALTER


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # untyped base
    def __init__(self, auth: Auth) -> None:
        self._auth = auth

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        if handler.unary_unary is None:
            return _refused(handler)
        inner = handler.unary_unary
        auth = self._auth
        metadata = dict(details.invocation_metadata or ())
        operation = _operation(details.method)

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal = await auth.principal(metadata.get("authorization"))
            if principal is None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                    "authentication required (Basic credentials of a SASL user)")
            assert principal is not None
            if metadata.get(FORWARDED_METADATA_KEY) == "1" and not auth.is_super(principal):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    "only a super user may forward calls")
            scope = getattr(request, "scope", "") or None
            stream = getattr(request, "stream", "") or None
            peer = context.peer() or ""
            host = peer.split(":")[1] if peer.startswith("ipv4:") else peer
            if not auth.allowed(principal, host, operation, scope, stream):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"{principal} may not {operation.name} "
                                    f"{scope or 'the cluster'}{'/' + stream if stream else ''}")
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _refused(handler: Any) -> Any:
    """Fail closed: only unary calls are guarded, so a streaming method (none exists yet)
    is refused rather than served unauthenticated."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                            "streaming calls are not served under admin authentication")

    make = (grpc.unary_stream_rpc_method_handler if handler.unary_stream is not None
            else grpc.stream_unary_rpc_method_handler if handler.stream_unary is not None
            else grpc.stream_stream_rpc_method_handler)
    return make(refuse, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
