"""Committed offsets, their durability, and the admin views of groups."""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupCoordinator, GroupState, OffsetCommit
from tidegate.gateway.groups.errors import (
    GROUP_SUBSCRIBED_TO_TOPIC,
    NON_EMPTY_GROUP,
    OFFSET_METADATA_TOO_LARGE,
)
from tidegate.protocol.errors import ErrorCode as E

from tests.groups.conftest import FakeClock, join_all, join_req, make_coordinator


async def _one_member_group(coord: GroupCoordinator, group: str = "g", topics: tuple[str, ...] = ("t",)) -> tuple[str, int]:
    sub = ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=b"").encode(version=0)
    [r] = await join_all(coord, [join_req(group, protocols=[("range", sub)])])
    s = await coord.sync_group(group, r.generation_id, r.member_id, None, None, None, {})
    assert s.error == E.NONE
    return r.member_id, r.generation_id


async def test_simple_commit_on_unknown_group_and_fetch_with_metadata(coord: GroupCoordinator) -> None:
    res = await coord.commit_offsets(
        "simple", -1, "", None,
        {("t", 0): OffsetCommit(5, 3, "meta ü"), ("t", 1): OffsetCommit(7, -1, None)},
    )
    assert res == {("t", 0): E.NONE, ("t", 1): E.NONE}
    err, got = coord.fetch_offsets("simple", [("t", 0), ("t", 1), ("t", 2)])
    assert err == E.NONE
    assert got[("t", 0)] is not None and got[("t", 0)].offset == 5
    assert got[("t", 0)].metadata == "meta ü" and got[("t", 0)].leader_epoch == 3
    assert got[("t", 1)] is not None and got[("t", 1)].metadata is None
    assert got[("t", 2)] is None
    _, everything = coord.fetch_offsets("simple", None)
    assert set(everything) == {("t", 0), ("t", 1)}
    assert coord.fetch_offsets("unknown", [("t", 0)]) == (E.NONE, {("t", 0): None})
    listed = [row[:3] for row in coord.list_groups()[1]]
    assert ("simple", "", "Empty") in listed


async def test_member_commit_rules(coord: GroupCoordinator) -> None:
    member, gen = await _one_member_group(coord)
    tp = ("t", 0)
    assert await coord.commit_offsets("g", gen, member, None, {tp: OffsetCommit(1)}) == {tp: E.NONE}
    assert await coord.commit_offsets("g", gen + 1, member, None, {tp: OffsetCommit(2)}) == {tp: E.ILLEGAL_GENERATION}
    assert await coord.commit_offsets("g", gen, "other", None, {tp: OffsetCommit(2)}) == {tp: E.UNKNOWN_MEMBER_ID}
    # A simple commit is refused while the group has members.
    assert await coord.commit_offsets("g", -1, "", None, {tp: OffsetCommit(2)}) == {tp: E.UNKNOWN_MEMBER_ID}
    assert await coord.commit_offsets("new", 3, "m", None, {tp: OffsetCommit(2)}) == {tp: E.ILLEGAL_GENERATION}
    big = OffsetCommit(3, -1, "x" * 5000)
    assert await coord.commit_offsets("g", gen, member, None, {tp: big}) == {tp: OFFSET_METADATA_TOO_LARGE}
    assert coord.fetch_offsets("g", [tp])[1][tp].offset == 1  # type: ignore[union-attr]


async def test_commit_during_rebalance_with_current_generation_is_accepted(coord: GroupCoordinator) -> None:
    member, gen = await _one_member_group(coord)
    first = await coord.join_group(join_req(client_id="second"))
    waiting = asyncio.create_task(coord.join_group(join_req(member_id=first.member_id, client_id="second")))
    await asyncio.sleep(0)
    g = coord.group("g")
    assert g is not None and g.state is GroupState.PREPARING_REBALANCE
    # Revocation-time commit (before rejoining) still carries the old generation.
    assert await coord.commit_offsets("g", gen, member, None, {("t", 0): OffsetCommit(9)}) == {("t", 0): E.NONE}
    r = await coord.join_group(join_req(member_id=member))
    assert r.generation_id == gen + 1
    await waiting
    # Between join and sync the group waits for its assignment.
    res = await coord.commit_offsets("g", gen + 1, member, None, {("t", 0): OffsetCommit(10)})
    assert res == {("t", 0): E.REBALANCE_IN_PROGRESS}


async def test_offsets_and_group_survive_a_new_coordinator(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    member, gen = await _one_member_group(coord, "durable")
    await coord.commit_offsets("durable", gen, member, None, {("t", 3): OffsetCommit(42, 1, "m")})
    await coord.commit_offsets("simple", -1, "", None, {("u", 0): OffsetCommit(7)})
    await coord.close()

    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    try:
        got = again.fetch_offsets("durable", [("t", 3)])[1][("t", 3)]
        assert got is not None and (got.offset, got.leader_epoch, got.metadata) == (42, 1, "m")
        assert again.fetch_offsets("simple", None)[1][("u", 0)].offset == 7  # type: ignore[union-attr]
        g = again.group("durable")
        assert g is not None and g.state is GroupState.STABLE and g.generation_id == gen
        # The member carries on with its generation after the restart.
        assert again.heartbeat("durable", gen, member, None) == E.NONE
        clock.advance(11_000)
        again.maintain()  # ...and expires like any other if it is gone.
        assert again.group("durable").state is GroupState.EMPTY  # type: ignore[union-attr]
    finally:
        await again.close()


async def test_offset_delete(coord: GroupCoordinator) -> None:
    member, gen = await _one_member_group(coord, topics=("t",))
    await coord.commit_offsets("g", gen, member, None, {("t", 0): OffsetCommit(1), ("u", 0): OffsetCommit(2)})
    err, res = await coord.delete_offsets("g", [("t", 0), ("u", 0)])
    assert err == E.NONE and res == {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE}
    assert coord.fetch_offsets("g", None)[1].keys() == {("t", 0)}
    assert (await coord.delete_offsets("nope", [("t", 0)]))[0] == E.GROUP_ID_NOT_FOUND
    coord.leave_group("g", [(member, None)])
    err, res = await coord.delete_offsets("g", [("t", 0)])
    assert err == E.NONE and res == {("t", 0): E.NONE}
    assert coord.group("g") is None  # Empty with no commits left: gone


async def test_describe_list_delete_groups(coord: GroupCoordinator) -> None:
    member, _ = await _one_member_group(coord, "busy")
    await coord.commit_offsets("idle", -1, "", None, {("t", 0): OffsetCommit(1)})
    [busy, idle, missing] = coord.describe_groups(["busy", "idle", "missing"])
    assert busy.state == "Stable" and busy.protocol_type == "consumer" and busy.protocol_data == "range"
    assert [m.member_id for m in busy.members] == [member] and busy.members[0].client_host == "/127.0.0.1"
    assert idle.state == "Empty" and idle.members == ()
    assert missing.error == E.NONE and missing.state == "Dead"
    assert coord.describe_groups(["missing"], unknown_is_error=True)[0].error == E.GROUP_ID_NOT_FOUND
    assert sorted(coord.list_groups()[1]) == [("busy", "consumer", "Stable", "classic"), ("idle", "", "Empty", "classic")]
    assert coord.list_groups(states=["stable"])[1] == [("busy", "consumer", "Stable", "classic")]
    assert coord.list_groups(types=["consumer"])[1] == []
    res = await coord.delete_groups(["busy", "idle", "missing", ""])
    assert res == {"busy": NON_EMPTY_GROUP, "idle": E.NONE, "missing": E.GROUP_ID_NOT_FOUND, "": E.INVALID_GROUP_ID}
    assert coord.fetch_offsets("idle", None) == (E.NONE, {})


async def test_deleted_group_stays_deleted_after_restart(store: InMemorySegmentStore, clock: FakeClock) -> None:
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    await coord.commit_offsets("gone", -1, "", None, {("t", 0): OffsetCommit(1)})
    assert await coord.delete_groups(["gone"]) == {"gone": E.NONE}
    await coord.close()
    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    assert again.group("gone") is None
    await again.close()


async def test_topic_deletion_removes_commits(store: InMemorySegmentStore, clock: FakeClock) -> None:
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    await coord.commit_offsets("a", -1, "", None, {("doomed", 0): OffsetCommit(1), ("kept", 0): OffsetCommit(2)})
    await coord.commit_offsets("b", -1, "", None, {("doomed", 1): OffsetCommit(3)})
    assert await coord.remove_topic_offsets(["doomed"]) == 2
    assert coord.fetch_offsets("a", None)[1].keys() == {("kept", 0)}
    assert coord.group("b") is None
    await coord.close()
    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    assert again.fetch_offsets("a", None)[1].keys() == {("kept", 0)}
    assert again.group("b") is None
    await again.close()


async def test_any_group_and_topic_names_round_trip(store: InMemorySegmentStore, clock: FakeClock) -> None:
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    names = ["a\x00b", "ü" * 40_000, "g"]
    for n in names:
        res = await coord.commit_offsets(n, -1, "", None, {("t\x00x", 1): OffsetCommit(3)})
        assert res == {("t\x00x", 1): E.NONE}
    await coord.close()
    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    for n in names:
        assert again.fetch_offsets(n, None)[1][("t\x00x", 1)].offset == 3  # type: ignore[union-attr]
    await again.close()


async def test_group_size_is_bounded(store: InMemorySegmentStore, clock: FakeClock) -> None:
    coord = make_coordinator(store, clock, max_group_size=2)
    await coord.start(ticker=False)
    try:
        assert (await coord.join_group(join_req(client_id="a"))).error == E.MEMBER_ID_REQUIRED
        assert (await coord.join_group(join_req(client_id="b"))).error == E.MEMBER_ID_REQUIRED
        assert (await coord.join_group(join_req(client_id="c"))).error == E.GROUP_MAX_SIZE_REACHED
    finally:
        await coord.close()


async def test_offset_retention(store: InMemorySegmentStore, clock: FakeClock) -> None:
    day = 24 * 3600 * 1000
    coord = make_coordinator(store, clock, offsets_retention_ms=day, offsets_retention_check_interval_ms=60_000)
    await coord.start(ticker=False)
    # A standalone group: each commit expires on its own.
    await coord.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(1)})
    clock.advance(day // 2)
    await coord.commit_offsets("simple", -1, "", None, {("t", 1): OffsetCommit(2)})
    # A consumer group: its commits expire a day after it became Empty.
    member, gen = await _one_member_group(coord, "cg")
    await coord.commit_offsets("cg", gen, member, None, {("t", 0): OffsetCommit(3)})
    clock.advance(day // 2 + 1)
    coord.maintain()
    assert coord.fetch_offsets("simple", None)[1].keys() == {("t", 1)}
    assert coord.fetch_offsets("cg", None)[1].keys() == {("t", 0)}  # Stable: subscribed topic kept
    coord.leave_group("cg", [(member, None)])
    await coord.close()
    again = make_coordinator(store, clock, offsets_retention_ms=day, offsets_retention_check_interval_ms=60_000)
    await again.start(ticker=False)  # "Empty since" survives the restart
    clock.advance(day - 1_000)
    again.maintain()
    assert again.fetch_offsets("cg", None)[1].keys() == {("t", 0)}
    assert again.group("simple") is None  # its last commit is 1.5 days old
    clock.advance(2_000)
    assert again.expire_offsets() == 1
    assert again.group("cg") is None
    await again.close()


def test_config_from_toml_table() -> None:
    import pytest
    from tidegate.gateway.groups import GroupConfig

    assert GroupConfig.from_table({"initial_rebalance_delay_ms": 0}).initial_rebalance_delay_ms == 0
    with pytest.raises(ValueError, match="initial_rebalance_delay"):
        GroupConfig.from_table({"initial.rebalance.delay.ms": 0})
