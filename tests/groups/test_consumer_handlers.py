"""The KIP-848 APIs on the wire, raw requests against an in-process gateway:
ConsumerGroupHeartbeat and ConsumerGroupDescribe (v0 and v1), their error cases, and
how the classic APIs (DescribeGroups, ListGroups, JoinGroup/SyncGroup/Heartbeat of a
classic member, OffsetCommit/OffsetFetch v9, Metadata by topic id) answer for a
consumer group."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from tidegate.protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tidegate.protocol.errors import ErrorCode as E

from tests.gateway.conftest import RawClient

_Owned = ConsumerGroupHeartbeatRequest.TopicPartitions



def _hb(member: str, epoch: int, owned: list[Any] | None = None, **kw: Any) -> Any:
    fields: dict[str, Any] = dict(
        group_id="cg", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=owned,
    )
    if epoch == 0:
        fields.update(rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], topic_partitions=[])
    fields.update(kw)
    return ConsumerGroupHeartbeatRequest(**fields)


async def _topic_id(c: RawClient, name: str) -> uuid.UUID:
    md = await c.call(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=uuid.UUID(int=0))],
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        12, MetadataResponse,
    )
    return md.topics[0].topic_id  # type: ignore[no-any-return]


async def test_advertised(client: RawClient) -> None:
    res = await client.call(ApiVersionsRequest(), 3, ApiVersionsResponse)
    keys = {k.api_key: (k.min_version, k.max_version) for k in res.api_keys}
    assert keys[68] == (0, 1) and keys[69] == (0, 1)


async def test_join_assign_describe_and_leave(client: RawClient) -> None:
    tid = await _topic_id(client, "t")
    joined = await client.call(_hb("m1", 0), 1, ConsumerGroupHeartbeatResponse)
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m1", 1)
    assert joined.heartbeat_interval_ms > 0
    assert [(tp.topic_id, sorted(tp.partitions)) for tp in joined.assignment.topic_partitions] == [(tid, [0, 1])]
    steady = await client.call(_hb("m1", 1, [_Owned(topic_id=tid, partitions=[0, 1])]), 1,
                               ConsumerGroupHeartbeatResponse)
    assert (steady.error_code, steady.member_epoch, steady.assignment) == (0, 1, None)
    # v0: the coordinator makes the member id.
    v0 = await client.call(_hb("", 0, group_id="cg0"), 0, ConsumerGroupHeartbeatResponse)
    assert v0.error_code == 0 and v0.member_id
    for version in (0, 1):
        d = await client.call(
            ConsumerGroupDescribeRequest(group_ids=["cg", "nope"], include_authorized_operations=False),
            version, ConsumerGroupDescribeResponse,
        )
        g, missing = d.groups
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
            0, "Stable", 1, 1, "uniform"
        )
        (m,) = g.members
        assert (m.member_id, m.member_epoch, m.subscribed_topic_names, m.client_id) == ("m1", 1, ["t"], "raw")
        assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [("t", [0, 1])]
        assert [(tp.topic_id, tp.partitions) for tp in m.target_assignment.topic_partitions] == [(tid, [0, 1])]
        assert (missing.error_code, missing.error_message) == (E.GROUP_ID_NOT_FOUND, "Group nope not found.")
        assert g.authorized_operations == -(2**31)  # not asked for
    asked = await client.call(
        ConsumerGroupDescribeRequest(group_ids=["cg"], include_authorized_operations=True),
        1, ConsumerGroupDescribeResponse,
    )
    # no authorizer: every operation Kafka supports on a group (READ, DELETE, DESCRIBE)
    assert asked.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    left = await client.call(_hb("m1", -1), 1, ConsumerGroupHeartbeatResponse)
    assert (left.error_code, left.member_epoch) == (0, -1)
    listed = await client.call(ListGroupsRequest(states_filter=["Empty"], types_filter=["consumer"]), 5,
                               ListGroupsResponse)
    assert [(g.group_id, g.group_type, g.protocol_type) for g in listed.groups] == [("cg", "consumer", "consumer")]


async def test_heartbeat_errors(client: RawClient) -> None:
    await client.call(_hb("m1", 0), 1, ConsumerGroupHeartbeatResponse)
    cases = [
        (_hb("", 0), E.INVALID_REQUEST, "MemberId can't be empty."),
        (_hb("m2", 0, rebalance_timeout_ms=-1), E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (_hb("m2", 0, subscribed_topic_names=None), E.INVALID_REQUEST,
         "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
        (_hb("m2", 0, topic_partitions=None), E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (_hb("m2", -2), E.INVALID_REQUEST, "InstanceId can't be null."),
        (_hb("m2", 0, server_assignor="sticky"), E.UNSUPPORTED_ASSIGNOR, None),
        (_hb("m2", 0, subscribed_topic_names=None, subscribed_topic_regex="[t"), 128, None),
        (_hb("m1", 7, []), E.FENCED_MEMBER_EPOCH, None),
        (_hb("zz", 1, []), E.UNKNOWN_MEMBER_ID, None),
        (_hb("zz", -1), E.UNKNOWN_MEMBER_ID, None),
        (_hb("m2", 0, group_id="g" * 3000), E.INVALID_REQUEST, None),
        (_hb("m2", 0, subscribed_topic_names=[f"t{i:07d}" for i in range(40_000)]), E.INVALID_REQUEST, None),
    ]
    for req, error, message in cases:
        res = await client.call(req, 1, ConsumerGroupHeartbeatResponse)
        assert res.error_code == error, (req, res)
        assert res.error_message, res
        if message is not None:
            assert res.error_message == message
    # Static: a second incarnation of a live instance is refused.
    await client.call(_hb("s1", 0, instance_id="i"), 1, ConsumerGroupHeartbeatResponse)
    dup = await client.call(_hb("s2", 0, instance_id="i"), 1, ConsumerGroupHeartbeatResponse)
    assert dup.error_code == E.UNRELEASED_INSTANCE_ID


async def test_classic_apis_on_a_consumer_group(client: RawClient) -> None:
    joined = await client.call(_hb("m1", 0), 1, ConsumerGroupHeartbeatResponse)
    v5 = await client.call(DescribeGroupsRequest(groups=["cg"], include_authorized_operations=False), 5,
                           DescribeGroupsResponse)
    assert (v5.groups[0].error_code, v5.groups[0].group_state) == (0, "Dead")
    v6 = await client.call(DescribeGroupsRequest(groups=["cg"], include_authorized_operations=False), 6,
                           DescribeGroupsResponse)
    assert (v6.groups[0].error_code, v6.groups[0].error_message) == (E.GROUP_ID_NOT_FOUND, "Group cg is not a classic group.")
    join = await client.call(
        JoinGroupRequest(
            group_id="cg", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            group_instance_id=None, protocol_type="connect",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")], reason=None,
        ),
        5, JoinGroupResponse,
    )
    # A classic member may join a consumer group (online migration), but only with the
    # consumer embedded protocol.
    assert join.error_code == E.INCONSISTENT_GROUP_PROTOCOL

    def commit(epoch: int, member: str = "m1") -> Any:
        part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata=None,
        )
        return OffsetCommitRequest(
            group_id="cg", generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
            retention_time_ms=-1, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[part])],
        )

    for version, epoch, error in [(9, joined.member_epoch, 0), (9, joined.member_epoch - 1, E.STALE_MEMBER_EPOCH),
                                  (9, joined.member_epoch + 1, E.FENCED_MEMBER_EPOCH),
                                  (8, joined.member_epoch, E.UNSUPPORTED_VERSION)]:
        res = await client.call(commit(epoch), version, OffsetCommitResponse)
        assert res.topics[0].partitions[0].error_code == error, (version, epoch)

    def fetch(member: str | None, epoch: int) -> Any:
        return OffsetFetchRequest(
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="cg", member_id=member, member_epoch=epoch,
                                                               topics=None)],
            require_stable=False,
        )

    good = await client.call(fetch("m1", joined.member_epoch), 9, OffsetFetchResponse)
    assert good.groups[0].error_code == 0 and good.groups[0].topics[0].partitions[0].committed_offset == 5
    stale = await client.call(fetch("m1", joined.member_epoch + 3), 9, OffsetFetchResponse)
    assert stale.groups[0].error_code == E.STALE_MEMBER_EPOCH
    admin = await client.call(fetch(None, -1), 9, OffsetFetchResponse)
    assert admin.groups[0].error_code == 0


async def test_metadata_by_topic_id(client: RawClient) -> None:
    tid, unknown = await _topic_id(client, "t"), uuid.uuid4()
    by_id = await client.call(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=tid),
                                MetadataRequest.MetadataRequestTopic(name=None, topic_id=unknown)],
                        allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        12, MetadataResponse,
    )
    assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [
        ("t", tid, 0), (None, unknown, E.UNKNOWN_TOPIC_ID)
    ]


async def test_classic_member_of_a_consumer_group_on_the_wire(client: RawClient) -> None:
    """A classic consumer joins a consumer group (JoinGroup v5 with MEMBER_ID_REQUIRED,
    SyncGroup v5, Heartbeat v4): answered from the consumer group, and described by
    ConsumerGroupDescribe v1 as a classic member (type 0)."""
    c = await client.call(_hb("m1", 0), 1, ConsumerGroupHeartbeatResponse)
    assert c.error_code == 0
    sub = bytes(ConsumerProtocolSubscription(version=1, topics=["t"], user_data=None, owned_partitions=[]).encode(version=1))

    def join(member_id: str) -> Any:
        return JoinGroupRequest(
            group_id="cg", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=sub)], reason=None,
        )

    first = await client.call(join(""), 5, JoinGroupResponse)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    joined = await client.call(join(first.member_id), 5, JoinGroupResponse)
    assert (joined.error_code, joined.leader, joined.protocol_name, joined.members) == (0, "", "range", [])
    synced = await client.call(
        SyncGroupRequest(group_id="cg", generation_id=joined.generation_id, member_id=joined.member_id,
                         group_instance_id=None, protocol_type="consumer", protocol_name="range", assignments=[]),
        5, SyncGroupResponse,
    )
    assert synced.error_code == 0
    assert ConsumerProtocolAssignment.decode(synced.assignment).assigned_partitions == []  # m1 owns both
    beat = await client.call(
        HeartbeatRequest(group_id="cg", generation_id=joined.generation_id, member_id=joined.member_id,
                         group_instance_id=None), 4, HeartbeatResponse,
    )
    assert beat.error_code == 0
    wrong = await client.call(
        HeartbeatRequest(group_id="cg", generation_id=joined.generation_id + 7, member_id=joined.member_id,
                         group_instance_id=None), 4, HeartbeatResponse,
    )
    assert wrong.error_code == E.ILLEGAL_GENERATION
    described = await client.call(
        ConsumerGroupDescribeRequest(group_ids=["cg"], include_authorized_operations=False), 1,
        ConsumerGroupDescribeResponse,
    )
    types = {m.member_id: (m.member_type, m.subscribed_topic_names) for m in described.groups[0].members}
    assert types == {"m1": (1, ["t"]), joined.member_id: (0, ["t"])}
    listed = await client.call(ListGroupsRequest(states_filter=[], types_filter=[]), 5, ListGroupsResponse)
    assert [(g.group_id, g.protocol_type, g.group_type) for g in listed.groups] == [("cg", "consumer", "consumer")]
