"""A partition leader asks the transaction coordinator on another node whether a
producer's ongoing transaction holds partitions (KIP-890 part 1: AddPartitionsToTxn v4
with ``verify_only``), or has it add them (part 2, for Produce v12: without
``verify_only``), before it appends transactional batches there
(``gateway/log/txn_guards.py``, DESIGN.md invariant 7).

The call goes to the node that FindCoordinator names, over the inter-node listener with
the node credentials, one connection per call: a leader verifies once per transaction
and partition, on the transaction's first batch there. Whatever keeps the answer from
coming (the coordinator moving, a node away, the deadline) is COORDINATOR_NOT_AVAILABLE,
which the produce path answers as a retriable error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from tidegate.gateway.cluster.internode import InterNode
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_VERSION = 4
#: An answer names the partitions of one request: anything larger is not an answer.
_RESPONSE_BYTES_MAX = 1 << 20
_Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
_Topic = _Txn.AddPartitionsToTxnTopic
VERIFIER_CLIENT_ID = "tidegate-txn-verify"


class Coordinators(Protocol):
    def group_coordinator(self, listener: str | None = None) -> tuple[int, tuple[str, int]] | None: ...


class RemoteTxnVerifier:
    def __init__(self, coordinators: Coordinators, *, timeout_ms: int = 5_000,
                 internode: InterNode | None = None) -> None:
        self._coordinators = coordinators
        self._internode = internode or InterNode()
        self.timeout_ms = timeout_ms
        self._correlation = itertools.count(1)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[tuple[str, int]], *, add: bool = False,
    ) -> dict[tuple[str, int], int]:
        """The coordinator's error code for each partition (NONE: the ongoing transaction
        of this producer id and epoch holds it). With ``add`` (transaction version 2)
        the coordinator adds the partitions, beginning the transaction if need be."""
        wanted = list(partitions)
        found = self._coordinators.group_coordinator(self._internode.listener)
        if found is None:
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        node, address = found
        by_topic: dict[str, list[int]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(partition)
        request = AddPartitionsToTxnRequest(transactions=[_Txn(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=not add,
            topics=[_Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )])
        request.API_VERSION = _VERSION
        request.with_header(correlation_id=next(self._correlation), client_id=VERIFIER_CLIENT_ID)
        frame = bytes(request.encode(version=_VERSION, header=True, framed=True))
        try:
            response = await asyncio.wait_for(self._call(address, frame), self.timeout_ms / 1000)
        except Exception as exc:  # noqa: BLE001 - any failure: the client retries the produce
            log.info("transaction verification at node %d failed: %r", node, exc)
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        out: dict[tuple[str, int], int] = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(wanted, int(response.error_code))
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    if (t.name, p.partition_index) in out:
                        out[(t.name, p.partition_index)] = int(p.partition_error_code)
        return out

    async def _call(self, address: tuple[str, int], frame: bytes) -> Any:
        return await self._internode.request(address, frame, AddPartitionsToTxnResponse, _VERSION,
                                             _RESPONSE_BYTES_MAX)
