"""Leader epochs on the wire: stamped on appended batches, reported by Metadata and
ListOffsets, checked in Fetch, ListOffsets and OffsetForLeaderEpoch (FENCED_LEADER_EPOCH
/ UNKNOWN_LEADER_EPOCH), and each epoch's end offset from the persisted history."""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from tidegate.protocol.errors import ErrorCode as E

from tests.gateway.conftest import Node, RawClient
from tests.gateway.test_fetch_sessions import _fetch, _parts, _produce, _topic


def _set_epoch(node: Node, epoch: int) -> None:
    """What a takeover in cluster mode does: the partitions' epoch moves on."""
    assert node.gateway is not None and node.gateway.ctx is not None
    epochs = node.gateway.ctx.leader_epochs
    assert epochs is not None
    epochs._current = lambda topic, partition: epoch


async def _end_offset(c: RawClient, epoch: int, current: int = -1) -> tuple[int, int, int]:
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="le", partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
    resp = await c.call(req, 4, OffsetForLeaderEpochResponse)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


async def _fetch_epoch(c: RawClient, current: int, version: int = 12) -> Any:
    req = _fetch(0, -1, [_parts("le", {0: 0})])
    req.topics[0].partitions[0].current_leader_epoch = current
    resp = await c.call(req, version, FetchResponse)
    return resp if version >= 16 else resp.responses[0].partitions[0]


async def _latest(c: RawClient, current: int) -> Any:
    lp = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=current, timestamp=-1)
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="le", partitions=[lp])])
    resp = await c.call(req, 7, ListOffsetsResponse)
    return resp.topics[0].partitions[0]


def _batch_epochs(records: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 17 <= len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        out.append(struct.unpack_from(">i", records, pos + 12)[0])
        pos += 12 + length
    return out


async def test_epochs_reported_checked_and_answered(node: Node) -> None:
    c = await node.client()
    await _topic(c, "le", 1)
    await _produce(c, "le", 0, 3)
    md = await c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="le")],
                                      allow_auto_topic_creation=False), 12, MetadataResponse)
    assert md.topics[0].partitions[0].leader_epoch == 0
    ok = await _fetch_epoch(c, 0)
    assert ok.error_code == 0 and _batch_epochs(ok.records) == [0]  # stamped on append
    assert (await _fetch_epoch(c, 1)).error_code == E.UNKNOWN_LEADER_EPOCH
    assert (await _fetch_epoch(c, -1)).error_code == 0
    assert await _end_offset(c, 0) == (0, 0, 3)
    assert await _end_offset(c, 0, current=2) == (E.UNKNOWN_LEADER_EPOCH, -1, -1)
    assert await _end_offset(c, 4) == (0, -1, -1)  # an epoch not reached yet: undefined
    latest = await _latest(c, 0)
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 3, 0)
    assert (await _latest(c, 5)).error_code == E.UNKNOWN_LEADER_EPOCH

    # The partition's leader changes (epoch 2): old epochs are fenced, new appends are
    # stamped 2, and epoch 0 ends where epoch 2 started.
    _set_epoch(node, 2)
    fenced = await _fetch_epoch(c, 0)
    assert fenced.error_code == E.FENCED_LEADER_EPOCH
    # KIP-951: the answer names the leader and its epoch, and from v16 its address.
    assert (fenced.current_leader.leader_id, fenced.current_leader.leader_epoch) == (0, 2)
    # v16 names topics by id: a full fetch by name cannot be sent, so ask by id.
    md = await c.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="le")],
                                      allow_auto_topic_creation=False), 12, MetadataResponse)
    req = _fetch(0, -1, [_parts("", {0: 0}, md.topics[0].topic_id)])
    req.topics[0].partitions[0].current_leader_epoch = 0
    v16 = await c.call(req, 16, FetchResponse)
    assert v16.responses[0].partitions[0].error_code == E.FENCED_LEADER_EPOCH
    assert [(n.node_id, n.port) for n in v16.node_endpoints] == [(0, node.port)]
    assert (await _latest(c, 1)).error_code == E.FENCED_LEADER_EPOCH
    assert (await _end_offset(c, 0, current=0))[0] == E.FENCED_LEADER_EPOCH
    assert await _end_offset(c, 0, current=2) == (0, 0, 3)  # nothing appended at 2 yet
    await _produce(c, "le", 0, 2)
    fetched = await _fetch_epoch(c, 2)
    assert _batch_epochs(fetched.records) == [0, 2]
    assert await _end_offset(c, 0) == (0, 0, 3)
    assert await _end_offset(c, 1) == (0, 0, 3)  # Kafka: the floor epoch, the next start
    assert await _end_offset(c, 2) == (0, 2, 5)
    await c.close()

    # The history is kept in the offset index across restarts.
    await node.restart_gateway()
    _set_epoch(node, 2)
    c = await node.client()
    assert await _end_offset(c, 0) == (0, 0, 3)
    assert await _end_offset(c, 2) == (0, 2, 5)
    await c.close()
