"""The gRPC calls ``format("tidegate")`` makes for streams (driver and executors): the
controller's history and the segment service's cuts and reads. Calls that meet a moving
container (UNAVAILABLE) are sent again for a while."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from tidegate.protocol.controller_grpc import pb2, pb2_grpc
from tidegate.spark.stream_options import StreamReadOptions

T = TypeVar("T")
_RETRY_S = 30.0
_CALL_TIMEOUT_S = 60.0


class StreamSourceError(RuntimeError):
    """What a stream read cannot get past (the message says why)."""


@dataclass(frozen=True)
class SegmentMeta:
    id: int
    key_start: float
    key_end: float

    @property
    def epoch(self) -> int:
        return self.id >> 32


@dataclass(frozen=True)
class SegmentState:
    start_offset: int
    length: int
    sealed: bool


class StreamClient:
    def __init__(self, opts: StreamReadOptions) -> None:
        self.opts = opts
        if opts.tls_ca:
            with open(opts.tls_ca, "rb") as f:
                creds = grpc.ssl_channel_credentials(f.read())
            self._channel = grpc.secure_channel(opts.controller, creds)
        else:
            self._channel = grpc.insecure_channel(opts.controller)
        self._ctl = pb2_grpc.ControllerServiceStub(self._channel)
        self._seg = pb2_grpc.SegmentServiceStub(self._channel)
        self._metadata: tuple[tuple[str, str], ...] = ()
        if opts.username is not None:
            token = base64.b64encode(f"{opts.username}:{opts.password or ''}".encode()).decode()
            self._metadata = (("authorization", f"Basic {token}"),)

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: Callable[..., T], request: Any) -> T:
        deadline = time.monotonic() + _RETRY_S
        delay_s = 0.05
        while True:
            try:
                return method(request, timeout=_CALL_TIMEOUT_S, metadata=self._metadata)
            except grpc.RpcError as exc:
                code = exc.code()
                if code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 1.0)

    def _names(self) -> dict[str, str]:
        return {"scope": self.opts.scope, "stream": self.opts.stream}

    def cut(self, tail: bool) -> dict[int, int]:
        req = pb2.StreamCutRequest(position=pb2.TAIL if tail else pb2.HEAD, **self._names())
        return dict(self._call(self._seg.GetStreamCut, req).cut.cut)

    def segments(self) -> dict[int, SegmentMeta]:
        """Every segment the stream ever had, by id."""
        epochs = self._call(self._ctl.GetEpochs, pb2.StreamRequest(**self._names())).epochs
        return {s.id: SegmentMeta(s.id, s.key_start, s.key_end) for e in epochs for s in e.segments}

    def successors(self, segment_id: int) -> list[int]:
        req = pb2.SegmentRequest(segment_id=segment_id, **self._names())
        return [e.segment.id for e in self._call(self._ctl.GetSuccessors, req).successors]

    def state(self, segment_id: int) -> SegmentState | None:
        """None when the segment is gone (deleted by retention or truncation)."""
        req = pb2.SegmentInfoRequest(segment_id=segment_id, **self._names())
        try:
            info = self._call(self._seg.GetSegmentInfo, req)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return SegmentState(info.start_offset, info.length, info.sealed)

    def at_or_after(self, a: dict[int, int], b: dict[int, int]) -> bool:
        req = pb2.StreamCutPair(a=pb2.StreamCut(cut=a), b=pb2.StreamCut(cut=b), **self._names())
        return bool(self._call(self._ctl.IsStreamCutAtOrAfter, req).a_at_or_after_b)

    def read(self, segment_id: int, offset: int, max_bytes: int) -> Any:
        req = pb2.ReadSegmentRequest(segment_id=segment_id, offset=offset, max_bytes=max_bytes,
                                     **self._names())
        return self._call(self._seg.ReadSegment, req)

    # -- writes (the stream sink) --------------------------------------------------------

    def append(self, batch: list[Any], txn: str | None) -> None:
        req = pb2.AppendEventsRequest(events=batch, txn_id=txn or "", **self._names())
        self._call(self._seg.AppendEvents, req)

    def create_transaction(self, lease_ms: int) -> str:
        req = pb2.CreateTransactionRequest(lease_ms=lease_ms, **self._names())
        return str(self._call(self._ctl.CreateTransaction, req).id)

    def ping_transaction(self, txn: str, lease_ms: int) -> None:
        req = pb2.PingTransactionRequest(id=txn, lease_ms=lease_ms, **self._names())
        self._call(self._ctl.PingTransaction, req)

    def end_transaction(self, txn: str, commit: bool) -> None:
        req = pb2.TransactionRequest(id=txn, **self._names())
        try:
            self._call(self._ctl.CommitTransaction if commit else self._ctl.AbortTransaction, req)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            raise StreamSourceError(
                f"transaction {txn} of {self.opts.scope}/{self.opts.stream} could not be "
                f"{'committed' if commit else 'aborted'}: {exc.details()} (a lease that ran out "
                "aborts it: transactionTimeoutMs)") from None

    def ensure_stream(self) -> None:
        req = pb2.CreateStreamRequest(**self._names())
        try:
            self._call(self._ctl.CreateStream, req)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise

    def truncate(self, cut: dict[int, int]) -> None:
        self._call(self._ctl.Truncate, pb2.TruncateRequest(cut=pb2.StreamCut(cut=cut), **self._names()))
