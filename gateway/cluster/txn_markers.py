"""Transaction markers in cluster mode: the coordinator writes each marker where the
partition's leader is, as Kafka's coordinator does.

Markers for partitions this node leads go through the local ``LogMarkerWriter``; the
others are sent to their leaders as ``WriteTxnMarkers`` over the Kafka protocol, under
``COORDINATOR_CLIENT_ID`` (the only sender whose commit markers a leader accepts), on the
inter-node listener with the node credentials (``gateway.cluster.internode``: with the
authorizer on, WriteTxnMarkers needs CLUSTER_ACTION, as Kafka's). Any partition not
written (its leader moving, a node away) fails the whole call, and the coordinator sends
the set again later (markers of an ended transaction are idempotent for the reader).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from tidegate.gateway.cluster.internode import InterNode
from tidegate.gateway.txn.coordinator import MarkerWriter
from tidegate.gateway.txn.markers import COORDINATOR_CLIENT_ID
from tidegate.gateway.txn.state import TopicPartition
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_VERSION = 1
#: An answer names the partitions of one request: anything larger is not an answer.
_RESPONSE_BYTES_MAX = 1 << 20
_Marker = WriteTxnMarkersRequest.WritableTxnMarker
_Topic = _Marker.WritableTxnMarkerTopic


class MarkerNotWritten(Exception):
    """Some partitions did not get their marker; the coordinator retries later."""


class Leaders(Protocol):
    @property
    def node_id(self) -> int: ...

    async def partition_error(self, topic: str, partition: int) -> ErrorCode: ...

    async def leader(self, topic: str, partition: int) -> int | None: ...

    def kafka_address(self, node: int, listener: str | None = None) -> tuple[str, int] | None: ...


class Topics(Protocol):
    def get(self, name: str) -> Any: ...


class ClusterMarkerWriter:
    def __init__(self, local: MarkerWriter, leaders: Leaders, topics: Topics,
                 *, timeout_ms: int = 10_000, internode: InterNode | None = None) -> None:
        self._internode = internode or InterNode()
        self._local = local
        self._leaders = leaders
        self._topics = topics
        self.timeout_ms = timeout_ms
        self._correlation = itertools.count(1)

    async def write_markers(
        self, partitions: Iterable[TopicPartition], producer_id: int, producer_epoch: int,
        commit: bool,
    ) -> None:
        here: list[TopicPartition] = []
        elsewhere: dict[int, list[TopicPartition]] = {}
        missing: list[TopicPartition] = []
        for topic, partition in partitions:
            info = self._topics.get(topic)
            if info is None or partition >= info.partitions:
                continue  # deleted since: nothing left to mark
            if await self._leaders.partition_error(topic, partition) == ErrorCode.NONE:
                here.append((topic, partition))
                continue
            leader = await self._leaders.leader(topic, partition)
            if leader is None or leader == self._leaders.node_id:
                missing.append((topic, partition))
            else:
                elsewhere.setdefault(leader, []).append((topic, partition))
        results = await asyncio.gather(
            self._local.write_markers(here, producer_id, producer_epoch, commit),
            *(self._send(node, tps, producer_id, producer_epoch, commit)
              for node, tps in elsewhere.items()),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if missing or failed:
            raise MarkerNotWritten(
                f"markers of producer {producer_id} not written: no leader for {missing[:5]}, "
                f"{[repr(f) for f in failed[:3]]}"
            )

    async def _send(
        self, node: int, tps: list[TopicPartition], producer_id: int, producer_epoch: int,
        commit: bool,
    ) -> None:
        address = self._leaders.kafka_address(node, self._internode.listener)
        if address is None:
            raise MarkerNotWritten(f"node {node} has no Kafka address")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=[_Marker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=0,
            topics=[_Topic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        )])
        request.API_VERSION = _VERSION
        request.with_header(correlation_id=next(self._correlation), client_id=COORDINATOR_CLIENT_ID)
        frame = bytes(request.encode(version=_VERSION, header=True, framed=True))
        response = await asyncio.wait_for(self._call(address, frame), self.timeout_ms / 1000)
        errors = {
            (t.name, p.partition_index): p.error_code
            for m in response.markers for t in m.topics for p in t.partitions
        }
        bad = {tp: e for tp in tps if (e := errors.get(tp, -1)) != ErrorCode.NONE}
        if bad:
            raise MarkerNotWritten(f"node {node} answered {dict(list(bad.items())[:5])}")

    async def _call(self, address: tuple[str, int], frame: bytes) -> Any:
        """One request on a connection of its own (markers are rare: one per partition
        of an ended transaction, batched per leader)."""
        try:
            return await self._internode.request(address, frame, WriteTxnMarkersResponse, _VERSION,
                                                 _RESPONSE_BYTES_MAX)
        except ValueError as exc:
            raise MarkerNotWritten(str(exc)) from None
