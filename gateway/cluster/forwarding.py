"""``LeaderForwarding``: the controller as a follower's gateway and REST API see it.

Reads are answered by this node's own controller (the metadata lives in table segments
every node reaches). Writes (scopes, stream create/update/seal/delete, scale, truncate)
go to the controller leader's gRPC API, so that one process runs every workflow and its
per-stream lock means what it says; on the leader they run here. Errors come back as the
same ``ControllerError`` classes (the ``tidegate-error`` trailer names the class). While
no leader is known or it cannot be reached, a write is retried for ``retry_ms``, then
fails with ``ConflictError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from tidegate.core.controller import api
from tidegate.core.controller.api import (
    ConflictError,
    ControllerError,
    EpochRecord,
    KeyRange,
    StreamConfig,
    StreamCut,
    StreamInfo,
)
from tidegate.gateway.admin.grpc_model import config_to_pb
from tidegate.gateway.admin.grpc_service import ERROR_METADATA_KEY, FORWARDED_METADATA_KEY
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Where writes go: None to run them here (this node leads, or no leader has gRPC).
LeaderTarget = Callable[[], str | None]


class LeaderForwarding:
    def __init__(self, local: api.Controller, leader_target: LeaderTarget, *, retry_ms: int = 20_000,
                 call_timeout_ms: int = 60_000, authorization: str | None = None) -> None:
        self._local = local
        #: The node's own credentials (a super user) when the admin APIs authenticate.
        self._metadata: tuple[tuple[str, str], ...] = ((FORWARDED_METADATA_KEY, "1"),) + (
            (("authorization", authorization),) if authorization else ()
        )
        self._leader_target = leader_target
        self.retry_ms = retry_ms
        self.call_timeout_ms = call_timeout_ms
        self._channels: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._local, name)  # the read side and everything else

    async def close_channels(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def _write(self, method: str, request: Any, here: Callable[[], Awaitable[T]]) -> T | None:
        """Run ``here`` on the leader, or send ``request`` to the leader's ``method``;
        None when it was sent (the caller reads the outcome back)."""
        deadline = time.monotonic() + self.retry_ms / 1000
        while True:
            target = self._leader_target()
            if target is None:
                return await here()
            channel = self._channels.get(target)
            if channel is None:
                channel = self._channels[target] = grpc.aio.insecure_channel(target)
            stub = pb2_grpc.ControllerServiceStub(channel)
            try:
                await getattr(stub, method)(
                    request, timeout=self.call_timeout_ms / 1000,
                    metadata=self._metadata,
                )  # fmt: skip
                return None
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise _controller_error(exc) from None
                if time.monotonic() > deadline:
                    raise ConflictError(f"the controller leader at {target} is unreachable") from None
                log.info("controller leader at %s unreachable (%s); retrying", target, exc.code())
                self._channels.pop(target, None)
                await channel.close()
                await asyncio.sleep(0.2)

    async def create_scope(self, scope: str) -> None:
        await self._write("CreateScope", pb2.ScopeRequest(scope=scope),
                          lambda: self._local.create_scope(scope))

    async def delete_scope(self, scope: str) -> None:
        await self._write("DeleteScope", pb2.ScopeRequest(scope=scope),
                          lambda: self._local.delete_scope(scope))

    async def create_stream(
        self, scope: str, stream: str, config: StreamConfig,
        key_ranges: Sequence[KeyRange] | None = None,
    ) -> StreamInfo:
        request = pb2.CreateStreamRequest(
            scope=scope, stream=stream, config=config_to_pb(config),
            key_ranges=[pb2.KeyRange(start=r.start, end=r.end) for r in key_ranges or ()],
        )
        done = await self._write(
            "CreateStream", request,
            lambda: self._local.create_stream(scope, stream, config, key_ranges),
        )
        return done if done is not None else await self._local.get_stream(scope, stream)

    async def update_stream(self, scope: str, stream: str, config: StreamConfig) -> StreamInfo:
        request = pb2.UpdateStreamRequest(scope=scope, stream=stream, config=config_to_pb(config))
        done = await self._write("UpdateStream", request,
                                 lambda: self._local.update_stream(scope, stream, config))
        return done if done is not None else await self._local.get_stream(scope, stream)

    async def seal_stream(self, scope: str, stream: str) -> None:
        await self._write("SealStream", pb2.StreamRequest(scope=scope, stream=stream),
                          lambda: self._local.seal_stream(scope, stream))

    async def delete_stream(self, scope: str, stream: str) -> None:
        await self._write("DeleteStream", pb2.StreamRequest(scope=scope, stream=stream),
                          lambda: self._local.delete_stream(scope, stream))

    async def scale(
        self, scope: str, stream: str, sealed_segments: Sequence[int], new_ranges: Sequence[KeyRange],
    ) -> EpochRecord:
        request = pb2.ScaleRequest(
            scope=scope, stream=stream, sealed_segments=list(sealed_segments),
            new_ranges=[pb2.KeyRange(start=r.start, end=r.end) for r in new_ranges],
        )
        done = await self._write(
            "Scale", request,
            lambda: self._local.scale(scope, stream, sealed_segments, new_ranges),
        )
        if done is not None:
            return done
        epochs: list[EpochRecord] = await self._local.get_epochs(scope, stream)
        return epochs[-1]

    async def truncate(self, scope: str, stream: str, cut: StreamCut) -> None:
        request = pb2.TruncateRequest(scope=scope, stream=stream, cut=pb2.StreamCut(cut=dict(cut)))
        await self._write("Truncate", request, lambda: self._local.truncate(scope, stream, cut))


def _controller_error(exc: grpc.aio.AioRpcError) -> ControllerError:
    """The leader's error as the class it raised (``ControllerError`` if unknown)."""
    name = ""
    for key, value in exc.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY:
            name = str(value)
    cls = getattr(api, name, None)
    if not (isinstance(cls, type) and issubclass(cls, ControllerError)):
        invalid = exc.code() == grpc.StatusCode.INVALID_ARGUMENT
        cls = api.InvalidArgumentError if invalid else ControllerError
    error: ControllerError = cls(exc.details() or name)
    return error

