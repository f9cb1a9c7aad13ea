"""The controller model <-> ``controller.proto`` messages, input checks for RPC
arguments, and the optional controller capabilities the gRPC service uses when present
(``StreamController`` has them; the ``Controller`` protocol does not require them)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from tidegate.core.controller.api import (
    EpochRecord,
    InvalidArgumentError,
    KeyRange,
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    SegmentRecord,
    StreamConfig,
    StreamCut,
    StreamInfo,
    TransactionInfo,
)
from tidegate.gateway.admin.rest.models import NAME_PATTERN
from tidegate.protocol.controller_grpc import pb2

_NAME = re.compile(NAME_PATTERN)
_NAME_LENGTH_MAX = 255


@runtime_checkable
class HistoryQueries(Protocol):
    """History queries beyond ``Controller`` (``StreamController`` has them)."""

    async def get_predecessors(
        self, scope: str, stream: str, seg_id: int
    ) -> Mapping[SegmentRecord, list[int]]: ...

    async def get_segments_at(self, scope: str, stream: str, time_ms: int) -> EpochRecord: ...

    async def is_cut_ge(self, scope: str, stream: str, a: StreamCut, b: StreamCut) -> bool: ...

    async def bytes_between(self, scope: str, stream: str, a: StreamCut, b: StreamCut) -> int: ...


@runtime_checkable
class Transactions(Protocol):
    """Stream transactions beyond ``Controller`` (``StreamController`` has them)."""

    async def create_transaction(
        self, scope: str, stream: str, lease_ms: int | None = None
    ) -> TransactionInfo: ...

    async def ping_transaction(
        self, scope: str, stream: str, txn_id: str, lease_ms: int | None = None
    ) -> TransactionInfo: ...

    async def commit_transaction(self, scope: str, stream: str, txn_id: str) -> None: ...

    async def abort_transaction(self, scope: str, stream: str, txn_id: str) -> None: ...

    async def get_transaction(self, scope: str, stream: str, txn_id: str) -> TransactionInfo: ...

    async def list_transactions(self, scope: str, stream: str) -> list[TransactionInfo]: ...

    def transaction_segment_name(self, scope: str, stream: str, parent: int, txn_id: str) -> str: ...


def check_name(value: str, what: str) -> str:
    if not (0 < len(value) <= _NAME_LENGTH_MAX and _NAME.match(value)):
        raise InvalidArgumentError(f"{what} {value!r} is not 1-255 of [A-Za-z0-9._-]")
    return value


def check_key(value: float) -> float:
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
        retention = RetentionPolicy(
            RetentionType[pb2.RetentionType.Name(r.type)], r.value,
            r.bytes_max if r.HasField("bytes_max") else None,
        )
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
                type=pb2.RetentionType.Value(c.retention.type.name), value=c.retention.value,
                bytes_max=c.retention.bytes_max,
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


def txn_to_pb(t: TransactionInfo, names: Transactions) -> Any:
    return pb2.Transaction(
        id=t.id,
        scope=t.scope,
        stream=t.stream,
        epoch=t.epoch,
        segments=[
            pb2.TransactionSegment(
                parent=segment_to_pb(s),
                segment_name=names.transaction_segment_name(t.scope, t.stream, s.id, t.id),
            )
            for s in t.segments
        ],
        lease_expiry_ms=t.lease_expiry_ms,
        state=str(getattr(t.state, "value", t.state)),
    )


def lease_of(request: Any) -> int | None:
    if not request.HasField("lease_ms"):
        return None
    if request.lease_ms <= 0:
        raise InvalidArgumentError(f"lease_ms {request.lease_ms} is not positive")
    return int(request.lease_ms)


def ranges_of(ranges: Any) -> list[KeyRange]:
    return [KeyRange(check_key(r.start), check_key(r.end)) for r in ranges]
