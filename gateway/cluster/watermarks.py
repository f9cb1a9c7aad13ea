"""High watermarks of partitions other nodes lead, asked of their leaders with ListOffsets
(latest, read_uncommitted) as kafka_exporter asks every leader: the group coordinator's
node reports each group's lag for all its partitions, not only the ones it leads.

One connection per leader per call, all leaders at once, within ``timeout_ms``; a leader
that does not answer in time leaves its partitions out (their lag is not known), it never
holds a scrape longer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from tidegate.gateway.cluster.internode import InterNode
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_VERSION = 2  # the first with isolation_level
_LATEST = -1
#: Largest ListOffsets answer read (a partition's answer is a few dozen bytes).
_RESPONSE_BYTES_MAX = 16 * 1024 * 1024
_Topic = ListOffsetsRequest.ListOffsetsTopic
_Partition = _Topic.ListOffsetsPartition


class Leaders(Protocol):
    @property
    def node_id(self) -> int: ...

    async def leader(self, topic: str, partition: int) -> int | None: ...

    def kafka_address(self, node: int, listener: str | None = None) -> tuple[str, int] | None: ...


class PeerWatermarks:
    def __init__(self, leaders: Leaders, internode: InterNode, *, timeout_ms: int = 3_000) -> None:
        self._leaders = leaders
        self._internode = internode
        self.timeout_ms = timeout_ms
        self._correlation = itertools.count(1)

    async def high_watermarks(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each partition another live node leads and answered for."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            try:
                leader = await self._leaders.leader(topic, partition)
            except Exception as exc:  # noqa: BLE001 - deleted or moving: its lag is unknown
                log.debug("leader of %s/%d not known: %r", topic, partition, exc)
                continue
            if leader is not None and leader != self._leaders.node_id:
                by_leader.setdefault(leader, []).append((topic, partition))
        answers = await asyncio.gather(
            *(self._ask(node, tps) for node, tps in by_leader.items()), return_exceptions=True
        )
        out: dict[tuple[str, int], int] = {}
        for node, answer in zip(by_leader, answers, strict=True):
            if isinstance(answer, BaseException):
                log.debug("high watermarks of node %d not read: %r", node, answer)
                continue
            out.update(answer)
        return out

    async def _ask(self, node: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        address = self._leaders.kafka_address(node, self._internode.listener)
        if address is None:
            return {}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            _Topic(name=t, partitions=[_Partition(partition_index=p, timestamp=_LATEST)
                                       for p in ps])
            for t, ps in by_topic.items()
        ])
        request.API_VERSION = _VERSION
        request.with_header(correlation_id=next(self._correlation), client_id="tidegate-node")
        frame = bytes(request.encode(version=_VERSION, header=True, framed=True))
        response = await asyncio.wait_for(self._call(address, frame), self.timeout_ms / 1000)
        return {
            (t.name, p.partition_index): p.offset
            for t in response.topics for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.offset >= 0
        }

    async def _call(self, address: tuple[str, int], frame: bytes) -> Any:
        return await self._internode.request(address, frame, ListOffsetsResponse, _VERSION,
                                             _RESPONSE_BYTES_MAX)
