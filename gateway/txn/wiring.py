"""The adapters the gateway's transaction coordinator (``HandlerContext.transactions``)
is built from: markers appended through the partition logs, offsets applied through the
group coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tidegate.gateway.groups import GroupCoordinator, OffsetCommit
from tidegate.gateway.txn.coordinator import MarkerWriter, TransactionCoordinator
from tidegate.gateway.txn.markers import build_marker, marker_header
from tidegate.gateway.txn.state import PendingOffset, TopicPartition


class _Appendable(Protocol):
    async def ensure_segment(self) -> None: ...
    def append(self, payload: bytes, batches: list[Any]) -> Any: ...


class _Logs(Protocol):
    def get(self, topic: str, partition: int) -> Any: ...


class _Topics(Protocol):
    def get(self, name: str) -> Any: ...


class _Producers(Protocol):
    def end_transaction(self, topic: str, partition: int, producer_id: int, epoch: int) -> None: ...


class LogMarkerWriter:
    """Markers go through ``PartitionLog.append`` like any batch: dense offsets, the
    transaction index updated as they are indexed."""

    def __init__(
        self, topics: _Topics, logs: _Logs, producers: _Producers, clock_ms: Callable[[], int]
    ) -> None:
        self._topics = topics
        self._logs = logs
        self._producers = producers
        self._clock_ms = clock_ms

    async def write_markers(
        self, partitions: Iterable[TopicPartition], producer_id: int, producer_epoch: int,
        commit: bool,
    ) -> None:
        batch = build_marker(producer_id, producer_epoch, commit, self._clock_ms())
        header = marker_header(batch)
        waits = []
        for topic, partition in partitions:
            info = self._topics.get(topic)
            if info is None or partition >= info.partitions:
                continue  # deleted since: nothing left to mark
            plog = self._logs.get(topic, partition)
            await plog.ensure_segment()
            # No await between the epoch taking effect and the marker's offset.
            self._producers.end_transaction(topic, partition, producer_id, producer_epoch)
            waits.append(plog.append(batch, [header]).durable)
        if waits:
            await asyncio.gather(*waits)


class GroupOffsetsAdapter:
    """The group coordinator of the moment (``groups()`` raises where this node has none)."""

    def __init__(self, groups: Callable[[], GroupCoordinator]) -> None:
        self._groups_of = groups

    def check_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        return self._groups_of().check_txn_commit(group_id, generation_id, member_id, group_instance_id)

    async def apply_txn_offsets(
        self, group_id: str, offsets: dict[TopicPartition, PendingOffset]
    ) -> None:
        await self._groups_of().apply_txn_offsets(
            group_id,
            {tp: OffsetCommit(o.offset, o.leader_epoch, o.metadata) for tp, o in offsets.items()},
        )


def build_coordinator(ctx: Any, markers: MarkerWriter) -> TransactionCoordinator:
    """The gateway's transaction coordinator over ``ctx``'s store, producer ids and
    groups (not started)."""
    from tidegate.gateway.txn.coordinator import TxnConfig

    config = ctx.config
    return TransactionCoordinator(
        ctx.store, ctx.producer_ids, markers, GroupOffsetsAdapter(lambda: ctx.groups),
        ctx.clock_ms,
        TxnConfig(
            max_timeout_ms=config.transaction_max_timeout_ms,
            check_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            id_expiration_ms=config.transactional_id_expiration_ms,
            end_wait_ms=config.transaction_end_wait_ms,
        ),
    )


def coordinator_of(ctx: Any) -> TransactionCoordinator:
    """This node's coordinator; in cluster mode on a node that does not coordinate now,
    the stand-in answering NOT_COORDINATOR."""
    coord: TransactionCoordinator | None = ctx.transactions
    if coord is None:
        coord = ctx.not_txn_coordinator
    if coord is None:
        raise RuntimeError("the transaction coordinator is not wired into this gateway")
    return coord


def for_version(error: int, api_version: int, fenced_since: int) -> int:
    """KIP-588: request versions before ``fenced_since`` know fencing as
    INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED."""
    from tidegate.protocol.errors import ErrorCode

    if error == ErrorCode.PRODUCER_FENCED and api_version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
