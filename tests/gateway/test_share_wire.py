"""Share group APIs (KIP-932) on the wire: the errors a client can cause (session epochs,
acknowledging records it does not hold, unknown members, bad group configs) and the
share-partition state across a gateway restart."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from tidegate.protocol.errors import ErrorCode as E
from tidegate.protocol.share_group import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

from tests.gateway.conftest import Node, RawClient
from tests.gateway.test_fetch_sessions import _produce, _topic

_FT = ShareFetchRequest.FetchTopic
_FP = _FT.FetchPartition
_AB = _FP.AcknowledgementBatch
_AT = ShareAcknowledgeRequest.AcknowledgeTopic
_AP = _AT.AcknowledgePartition
_Res = IncrementalAlterConfigsRequest.AlterConfigsResource
GROUP_CONFIG_RESOURCE = 32
ACCEPT, RELEASE = 1, 2


async def _group_config(c: RawClient, group: str, key: str, value: str) -> Any:
    req = IncrementalAlterConfigsRequest(resources=[_Res(
        resource_type=GROUP_CONFIG_RESOURCE, resource_name=group,
        configs=[_Res.AlterableConfig(name=key, config_operation=0, value=value)],
    )], validate_only=False)
    resp = await c.call(req, 1, IncrementalAlterConfigsResponse)
    return resp.responses[0]


async def _heartbeat(c: RawClient, member: str, epoch: int, topics: list[str] | None) -> Any:
    req = ShareGroupHeartbeatRequest(group_id="g", member_id=member, member_epoch=epoch,
                                     rack_id=None, subscribed_topic_names=topics)
    return await c.call(req, 1, ShareGroupHeartbeatResponse)


async def _fetch(c: RawClient, member: str, epoch: int, topic_id: uuid.UUID,
                 acks: list[Any] | None = None, wait_ms: int = 500) -> Any:
    req = ShareFetchRequest(
        group_id="g", member_id=member, share_session_epoch=epoch, max_wait_ms=wait_ms,
        min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
        topics=[_FT(topic_id=topic_id, partitions=[_FP(partition_index=0,
                                                        acknowledgement_batches=acks or [])])],
        forgotten_topics_data=[],
    )
    return await c.call(req, 1, ShareFetchResponse)


async def _ack(c: RawClient, member: str, epoch: int, topic_id: uuid.UUID, first: int,
               last: int, kind: int) -> Any:
    req = ShareAcknowledgeRequest(
        group_id="g", member_id=member, share_session_epoch=epoch,
        topics=[_AT(topic_id=topic_id, partitions=[_AP(partition_index=0, acknowledgement_batches=[
            _AB(first_offset=first, last_offset=last, acknowledge_types=[kind])])])],
    )
    return await c.call(req, 1, ShareAcknowledgeResponse)


def _acquired(resp: Any) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in resp.responses for p in t.partitions for a in p.acquired_records]


async def test_share_session_acknowledgements_and_restart(node: Node) -> None:
    c = await node.client()
    tid = await _topic(c, "sq", 1)
    await _produce(c, "sq", 0, 4)
    bad = await _group_config(c, "g", "share.auto.offset.reset", "sometimes")
    assert bad.error_code == E.INVALID_CONFIG, bad
    bad = await _group_config(c, "g", "share.no.such.thing", "1")
    assert bad.error_code == E.INVALID_CONFIG, bad
    ok = await _group_config(c, "g", "share.auto.offset.reset", "earliest")
    assert ok.error_code == 0, ok

    hb = await _heartbeat(c, "m1", 0, None)
    assert hb.error_code == E.INVALID_REQUEST, "joining needs a subscription"
    hb = await _heartbeat(c, "m1", 0, ["sq"])
    assert hb.error_code == 0 and hb.member_epoch > 0
    assert [(tp.topic_id, tp.partitions) for tp in hb.assignment.topic_partitions] == [(tid, [0])]
    again = await _heartbeat(c, "m1", hb.member_epoch, None)
    assert again.error_code == 0 and again.assignment is None, "unchanged: no assignment sent"
    stale = await _heartbeat(c, "m1", hb.member_epoch + 7, None)
    assert stale.error_code == E.FENCED_MEMBER_EPOCH
    unknown = await _heartbeat(c, "nobody", 3, None)
    assert unknown.error_code == E.UNKNOWN_MEMBER_ID

    assert (await _fetch(c, "m1", 4, tid)).error_code == E.SHARE_SESSION_NOT_FOUND
    first = await _fetch(c, "m1", 0, tid)
    assert first.error_code == 0 and _acquired(first) == [(0, 3, 1)]
    assert first.acquisition_lock_timeout_ms == 30_000
    acks_on_open = await _fetch(c, "m1", 0, tid, [_AB(first_offset=0, last_offset=0,
                                                      acknowledge_types=[ACCEPT])])
    assert acks_on_open.error_code == E.INVALID_REQUEST
    # The rejected request above opened nothing: the session is still at epoch 1.
    assert (await _ack(c, "m1", 5, tid, 0, 1, ACCEPT)).error_code == E.INVALID_SHARE_SESSION_EPOCH
    done = await _ack(c, "m1", 1, tid, 0, 1, ACCEPT)
    assert done.responses[0].partitions[0].error_code == 0, done
    twice = await _ack(c, "m1", 2, tid, 0, 0, ACCEPT)
    assert twice.responses[0].partitions[0].error_code == E.INVALID_RECORD_STATE, twice
    released = await _fetch(c, "m1", 3, tid, [_AB(first_offset=2, last_offset=2,
                                                   acknowledge_types=[RELEASE])], wait_ms=2_000)
    part = released.responses[0].partitions[0]
    assert part.acknowledge_error_code == 0 and _acquired(released) == [(2, 2, 2)]

    desc = await c.call(ShareGroupDescribeRequest(group_ids=["g", "none"],
                                                  include_authorized_operations=False),
                        1, ShareGroupDescribeResponse)
    g, none = desc.groups
    assert g.error_code == 0 and [m.member_id for m in g.members] == ["m1"]
    assert none.error_code == E.GROUP_ID_NOT_FOUND
    _OG = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    offsets = await c.call(DescribeShareGroupOffsetsRequest(groups=[
        _OG(group_id="g", topics=None), _OG(group_id="none", topics=None),
    ]), 1, DescribeShareGroupOffsetsResponse)
    g_off, none_off = offsets.groups
    p0 = g_off.topics[0].partitions[0]
    assert (g_off.topics[0].topic_name, p0.start_offset, p0.lag) == ("sq", 2, 2), g_off
    assert none_off.error_code == E.GROUP_ID_NOT_FOUND
    deleted = await c.call(DeleteGroupsRequest(groups_names=["g"]), 2, DeleteGroupsResponse)
    assert deleted.results[0].error_code == 68, "NON_EMPTY_GROUP: m1 is still a member"
    await c.close()

    # Offsets 0-1 were accepted and stored; 2 and 3 were held: after a restart they are
    # delivered again, 0-1 never. Acquisitions are not stored (as in Kafka): each delivery
    # count is the stored one plus this delivery.
    await node.restart_gateway()
    c = await node.client()
    assert (await _fetch(c, "m1", 4, tid)).error_code == E.SHARE_SESSION_NOT_FOUND
    after = await _fetch(c, "m1", 0, tid)
    assert _acquired(after) == [(2, 3, 2)], after

    # No members since the restart: the offsets may be reset and deleted.
    _AT2 = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    _AP2 = _AT2.AlterShareGroupOffsetsRequestPartition
    alter = AlterShareGroupOffsetsRequest(group_id="g", topics=[_AT2(topic_name="sq", partitions=[
        _AP2(partition_index=0, start_offset=1), _AP2(partition_index=5, start_offset=0)])])
    altered = await c.call(alter, 0, AlterShareGroupOffsetsResponse)
    assert altered.error_code == 0
    assert [p.error_code for p in altered.responses[0].partitions] == [
        0, E.UNKNOWN_TOPIC_OR_PARTITION]
    reset = await _fetch(c, "m1", 0, tid)
    assert _acquired(reset) == [(1, 3, 1)], reset
    _DT = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    deleted_offsets = await c.call(DeleteShareGroupOffsetsRequest(
        group_id="g", topics=[_DT(topic_name="sq"), _DT(topic_name="nope")]),
        0, DeleteShareGroupOffsetsResponse)
    assert [(t.topic_name, t.error_code) for t in deleted_offsets.responses] == [
        ("nope", E.UNKNOWN_TOPIC_OR_PARTITION), ("sq", 0)]
    again = await _fetch(c, "m1", 0, tid)
    assert _acquired(again) == [(0, 3, 1)], "started again by share.auto.offset.reset"
    await _heartbeat(c, "m1", 0, ["sq"])
    busy = await c.call(alter, 0, AlterShareGroupOffsetsResponse)
    assert busy.error_code == 68, "NON_EMPTY_GROUP"
    await c.close()


async def test_partition_errors_carry_empty_records(node: Node) -> None:
    """A partition answered with an error has empty Records, never null: kafka-clients
    4.3 reads the field as non-nullable and drops the whole answer otherwise."""
    c = await node.client()
    tid = await _topic(c, "sq-err", 1)
    req = ShareFetchRequest(
        group_id="g", member_id="m-err", share_session_epoch=0, max_wait_ms=0, min_bytes=1,
        max_bytes=1 << 20, max_records=500, batch_size=500,
        topics=[_FT(topic_id=tid, partitions=[_FP(partition_index=7, acknowledgement_batches=[])])],
        forgotten_topics_data=[],
    )
    resp = await c.call(req, 1, ShareFetchResponse)
    (part,) = resp.responses[0].partitions
    assert part.error_code == E.UNKNOWN_TOPIC_OR_PARTITION, resp
    assert part.records == b"", resp
    await c.close()


async def test_a_member_id_the_group_does_not_know_is_served(node: Node) -> None:
    """As Kafka's share-partition leader (ShareFetch has no UNKNOWN_MEMBER_ID): the member
    id keys the share session and the records acquired, nothing more; the same in cluster
    mode (``tests/cluster/test_share_cluster.py``)."""
    c = await node.client()
    tid = await _topic(c, "sq-any", 1)
    await _produce(c, "sq-any", 0, 2)
    assert (await _group_config(c, "g", "share.auto.offset.reset", "earliest")).error_code == 0
    first = await _fetch(c, "never-joined", 0, tid)
    assert first.error_code == 0 and _acquired(first) == [(0, 1, 1)], first
    await c.close()
