"""The group APIs on the wire: raw requests in several versions, encoded and decoded by
kafka-python's message classes, against an in-process gateway."""

from __future__ import annotations

import asyncio

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
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
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from tidegate.gateway.groups.errors import NON_EMPTY_GROUP
from tidegate.protocol.errors import ErrorCode as E

from tests.gateway.conftest import Node, RawClient

GROUP_KEYS = {8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47}



def _join(group: str, member_id: str = "", instance: str | None = None) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
        reason=None,
    )


async def _stable_member(c: RawClient, group: str, version: int = 9) -> tuple[str, int]:
    first = await c.call(_join(group), version, JoinGroupResponse)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    joined = await c.call(_join(group, first.member_id), version, JoinGroupResponse)
    assert joined.error_code == 0 and joined.leader == joined.member_id
    assert [m.member_id for m in joined.members] == [joined.member_id]
    assignment = SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"a")
    sync = await c.call(
        SyncGroupRequest(
            group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=[assignment],
        ),
        5, SyncGroupResponse,
    )
    assert sync.error_code == 0 and sync.assignment == b"a" and sync.protocol_name == "range"
    return joined.member_id, joined.generation_id


async def test_api_versions_advertise_the_group_apis(client: RawClient) -> None:
    res = await client.call(ApiVersionsRequest(), 3, ApiVersionsResponse)
    keys = {k.api_key: (k.min_version, k.max_version) for k in res.api_keys}
    assert GROUP_KEYS <= keys.keys()
    assert keys[8] == (2, 9) and keys[9] == (1, 9) and keys[11] == (0, 9)


async def test_find_coordinator_single_and_batched(client: RawClient, node: Node) -> None:
    one = await client.call(FindCoordinatorRequest(key="g", key_type=0), 3, FindCoordinatorResponse)
    assert (one.error_code, one.node_id, one.port) == (0, 0, node.port)
    many = await client.call(
        FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), 4, FindCoordinatorResponse
    )
    assert [(c.key, c.error_code, c.port) for c in many.coordinators] == [("a", 0, node.port), ("b", 0, node.port)]
    share = await client.call(
        FindCoordinatorRequest(key_type=2, coordinator_keys=["s"]), 4, FindCoordinatorResponse
    )
    assert share.coordinators[0].error_code == E.INVALID_REQUEST


async def test_join_sync_heartbeat_leave_versions(client: RawClient) -> None:
    member, gen = await _stable_member(client, "g1")
    hb = await client.call(
        HeartbeatRequest(group_id="g1", generation_id=gen, member_id=member, group_instance_id=None),
        4, HeartbeatResponse,
    )
    assert hb.error_code == 0
    hb = await client.call(
        HeartbeatRequest(group_id="g1", generation_id=gen + 1, member_id=member), 0, HeartbeatResponse
    )
    assert hb.error_code == E.ILLEGAL_GENERATION
    # v3 has no member-id round trip: the first join completes.
    direct = await client.call(_join("g2"), 3, JoinGroupResponse)
    assert direct.error_code == 0 and direct.member_id
    left = await client.call(LeaveGroupRequest(group_id="g2", member_id=direct.member_id), 0, LeaveGroupResponse)
    assert left.error_code == 0
    left = await client.call(LeaveGroupRequest(group_id="g2", member_id="ghost"), 1, LeaveGroupResponse)
    assert left.error_code == E.UNKNOWN_MEMBER_ID
    batch = await client.call(
        LeaveGroupRequest(
            group_id="g1",
            members=[
                LeaveGroupRequest.MemberIdentity(member_id=member, group_instance_id=None, reason="bye"),
                LeaveGroupRequest.MemberIdentity(member_id="ghost", group_instance_id=None, reason=None),
            ],
        ),
        5, LeaveGroupResponse,
    )
    assert batch.error_code == 0
    assert [(m.member_id, m.error_code) for m in batch.members] == [(member, 0), ("ghost", E.UNKNOWN_MEMBER_ID)]


async def test_static_member_fenced_on_the_wire(client: RawClient) -> None:
    first = await client.call(_join("s", instance="i1"), 9, JoinGroupResponse)
    assert first.error_code == 0
    await client.call(
        SyncGroupRequest(group_id="s", generation_id=first.generation_id, member_id=first.member_id,
                         group_instance_id="i1", assignments=[]),
        3, SyncGroupResponse,
    )
    second = await client.call(_join("s", instance="i1"), 9, JoinGroupResponse)
    assert second.error_code == 0 and second.member_id != first.member_id
    hb = await client.call(
        HeartbeatRequest(group_id="s", generation_id=first.generation_id, member_id=first.member_id,
                         group_instance_id="i1"),
        3, HeartbeatResponse,
    )
    assert hb.error_code == E.FENCED_INSTANCE_ID


def _commit(group: str, gen: int, member: str, offsets: dict[tuple[str, int], int]) -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                committed_metadata=f"md{o}",
            )
        )
    return OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member, group_instance_id=None,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


async def test_offset_commit_fetch_delete_versions(client: RawClient) -> None:
    res = await client.call(_commit("og", -1, "", {("t", 0): 3, ("t", 1): 4, ("nope", 0): 1}), 2, OffsetCommitResponse)
    errors = {(t.name, p.partition_index): p.error_code for t in res.topics for p in t.partitions}
    assert errors == {("t", 0): 0, ("t", 1): 0, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    member, gen = await _stable_member(client, "og2")
    res = await client.call(_commit("og2", gen, member, {("t", 1): 9}), 9, OffsetCommitResponse)
    assert res.topics[0].partitions[0].error_code == 0

    v1 = await client.call(
        OffsetFetchRequest(group_id="og", topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]),
        1, OffsetFetchResponse,
    )
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in v1.topics[0].partitions] == [
        (0, 3, "md3"), (1, 4, "md4")
    ]
    every = await client.call(OffsetFetchRequest(group_id="og", topics=None, require_stable=False), 7, OffsetFetchResponse)
    assert every.error_code == 0 and len(every.topics[0].partitions) == 2
    batched = await client.call(
        OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id="og", member_id=None, member_epoch=-1, topics=None),
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id="og2", member_id=None, member_epoch=-1,
                    topics=[OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])],
                ),
            ],
            require_stable=False,
        ),
        9, OffsetFetchResponse,
    )
    got = {
        g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}
        for g in batched.groups
    }
    assert got == {"og": {("t", 0): 3, ("t", 1): 4}, "og2": {("t", 0): -1, ("t", 1): 9}}

    part = OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)
    deleted = await client.call(
        OffsetDeleteRequest(group_id="og", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(name="t", partitions=[part])]),
        0, OffsetDeleteResponse,
    )
    assert deleted.error_code == 0 and deleted.topics[0].partitions[0].error_code == 0
    missing = await client.call(OffsetDeleteRequest(group_id="nogroup", topics=[]), 0, OffsetDeleteResponse)
    assert missing.error_code == E.GROUP_ID_NOT_FOUND


async def test_describe_list_delete_groups_versions(client: RawClient) -> None:
    member, _ = await _stable_member(client, "busy")
    await client.call(_commit("idle", -1, "", {("t", 0): 1}), 8, OffsetCommitResponse)
    d0 = await client.call(DescribeGroupsRequest(groups=["busy", "unknown"]), 0, DescribeGroupsResponse)
    busy, unknown = d0.groups
    assert (busy.group_state, busy.protocol_data, busy.members[0].member_id) == ("Stable", "range", member)
    assert busy.members[0].member_assignment == b"a" and busy.members[0].client_host == "/127.0.0.1"
    assert (unknown.error_code, unknown.group_state) == (0, "Dead")
    d6 = await client.call(
        DescribeGroupsRequest(groups=["unknown"], include_authorized_operations=False), 6, DescribeGroupsResponse
    )
    assert d6.groups[0].error_code == E.GROUP_ID_NOT_FOUND
    listed = await client.call(ListGroupsRequest(), 0, ListGroupsResponse)
    assert {(g.group_id, g.protocol_type) for g in listed.groups} == {("busy", "consumer"), ("idle", "")}
    stable = await client.call(ListGroupsRequest(states_filter=["Stable"], types_filter=[]), 5, ListGroupsResponse)
    assert [(g.group_id, g.group_state, g.group_type) for g in stable.groups] == [("busy", "Stable", "classic")]
    deleted = await client.call(DeleteGroupsRequest(groups_names=["busy", "idle", "unknown"]), 2, DeleteGroupsResponse)
    assert {r.group_id: r.error_code for r in deleted.results} == {
        "busy": NON_EMPTY_GROUP, "idle": 0, "unknown": E.GROUP_ID_NOT_FOUND
    }


async def test_join_waits_for_the_rest_of_the_group(
    client: RawClient, node: Node
) -> None:
    member, gen = await _stable_member(client, "w")
    other = await node.client()
    try:
        first = await other.call(_join("w"), 9, JoinGroupResponse)
        # The newcomer's join waits for the first member to rejoin...
        waiting = asyncio.create_task(other.call(_join("w", first.member_id), 9, JoinGroupResponse))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        # ...which learns about it from a heartbeat and rejoins.
        hb = await client.call(HeartbeatRequest(group_id="w", generation_id=gen, member_id=member), 4, HeartbeatResponse)
        assert hb.error_code == E.REBALANCE_IN_PROGRESS
        rejoined = await client.call(_join("w", member), 9, JoinGroupResponse)
        joined = await waiting
        assert rejoined.generation_id == joined.generation_id == gen + 1
        assert len(rejoined.members) == 2 and joined.members == []
    finally:
        await other.close()


async def test_deleting_a_topic_removes_its_commits(client: RawClient) -> None:
    from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

    await client.call(_commit("dg", -1, "", {("t", 0): 5}), 8, OffsetCommitResponse)
    res = await client.call(DeleteTopicsRequest(topic_names=["t"], timeout_ms=10_000), 4, DeleteTopicsResponse)
    assert res.responses[0].error_code == 0
    fetched = await client.call(OffsetFetchRequest(group_id="dg", topics=None, require_stable=False), 7, OffsetFetchResponse)
    assert fetched.topics == []
    listed = await client.call(ListGroupsRequest(), 0, ListGroupsResponse)
    assert "dg" not in {g.group_id for g in listed.groups}
