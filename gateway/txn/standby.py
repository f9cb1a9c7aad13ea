"""``NotTxnCoordinator``: the transaction coordinator as a cluster node that does not
coordinate transactional ids now sees it (it is never started). Every request of a
transactional id answers ``NOT_COORDINATOR``, so the client looks its coordinator up
again (FindCoordinator names the node that has it); ListTransactions, sent to every
broker, lists none here."""

from __future__ import annotations

from collections.abc import Iterable

from tidegate.gateway.txn.coordinator import TransactionCoordinator
from tidegate.gateway.txn.state import PendingOffset, TopicPartition
from tidegate.protocol.errors import ErrorCode as E


class NotTxnCoordinator(TransactionCoordinator):
    coordinating = False

    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[int, int, int]:
        return E.NOT_COORDINATOR, -1, -1

    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition],
        *, tv2: bool = False,
    ) -> int:
        return E.NOT_COORDINATOR

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, E.NOT_COORDINATOR)

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str) -> int:
        return E.NOT_COORDINATOR

    async def txn_offset_commit(
        self, tid: str, pid: int, epoch: int, group_id: str, generation_id: int,
        member_id: str, group_instance_id: str | None,
        offsets: dict[TopicPartition, PendingOffset], *, implicit: bool = False,
    ) -> int:
        return E.NOT_COORDINATOR

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> int:
        return E.NOT_COORDINATOR

    async def end_transaction(
        self, tid: str, pid: int, epoch: int, commit: bool, *, tv2: bool = False
    ) -> tuple[int, int, int]:
        return E.NOT_COORDINATOR, -1, -1
