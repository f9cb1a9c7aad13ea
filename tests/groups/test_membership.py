"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup and the deadlines, on a fake clock."""

from __future__ import annotations

import asyncio

from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupCoordinator, GroupState
from tidegate.protocol.errors import ErrorCode as E

from tests.groups.conftest import (
    FakeClock,
    join_all,
    join_fully,
    join_req,
    make_coordinator,
    settle,
)


async def _stable_group(coord: GroupCoordinator, n: int, group: str = "g") -> list[str]:
    """n members joined and synced; returns member ids (leader first)."""
    # Every member first gets its id; pending ids hold the join phase open until all
    # of them have joined.
    firsts = [await coord.join_group(join_req(group, client_id=f"c{i}")) for i in range(n)]
    results = await asyncio.gather(
        *(coord.join_group(join_req(group, f.member_id, client_id=f"c{i}")) for i, f in enumerate(firsts))
    )
    assert {r.error for r in results} == {E.NONE}
    assert len({r.generation_id for r in results}) == 1
    leader = results[0].leader_id
    assert all(r.leader_id == leader for r in results)
    ids = [r.member_id for r in results]
    gen = results[0].generation_id
    assignments = {mid: f"assign-{mid}".encode() for mid in ids}
    syncs = [
        asyncio.create_task(coord.sync_group(group, gen, mid, None, "consumer", "range", {}))
        for mid in ids
        if mid != leader
    ]
    await settle()
    lead = await coord.sync_group(group, gen, leader, None, "consumer", "range", assignments)
    assert lead.error == E.NONE and lead.assignment == assignments[leader]
    for mid, s in zip([m for m in ids if m != leader], await asyncio.gather(*syncs), strict=True):
        assert s.error == E.NONE and s.assignment == assignments[mid]
    g = coord.group(group)
    assert g is not None and g.state is GroupState.STABLE
    return [leader] + [m for m in ids if m != leader]


async def test_member_id_required_round_trip_then_single_member_group(coord: GroupCoordinator) -> None:
    first = await coord.join_group(join_req())
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    res = await coord.join_group(join_req(member_id=first.member_id))
    assert res.error == E.NONE
    assert res.generation_id == 1 and res.leader_id == first.member_id
    assert res.protocol_name == "range"
    assert [m[0] for m in res.members] == [first.member_id]
    assert res.members[0][2] == b"meta-client"


async def test_three_members_share_a_generation_and_get_relayed_assignments(coord: GroupCoordinator) -> None:
    ids = await _stable_group(coord, 3)
    assert len(set(ids)) == 3
    desc = coord.describe_groups(["g"])[0]
    assert desc.state == "Stable" and desc.protocol_data == "range"
    assert {m.member_id: m.assignment for m in desc.members} == {m: f"assign-{m}".encode() for m in ids}


async def test_followers_get_no_member_list_and_leader_does(coord: GroupCoordinator) -> None:
    t1 = await join_fully(coord, join_req(client_id="a"))
    r1 = await t1
    gen1 = r1.generation_id
    await coord.sync_group("g", gen1, r1.member_id, None, None, None, {r1.member_id: b"x"})
    # A second member joins: the group rebalances; the first must rejoin.
    t2 = await join_fully(coord, join_req(client_id="b"))
    assert coord.heartbeat("g", gen1, r1.member_id, None) == E.REBALANCE_IN_PROGRESS
    r1b = await coord.join_group(join_req(member_id=r1.member_id, client_id="a"))
    r2 = await t2
    assert r1b.generation_id == r2.generation_id == gen1 + 1
    leader = r1b if r1b.leader_id == r1b.member_id else r2
    follower = r2 if leader is r1b else r1b
    assert len(leader.members) == 2 and follower.members == ()


async def test_heartbeat_fencing(coord: GroupCoordinator) -> None:
    [m] = await _stable_group(coord, 1)
    g = coord.group("g")
    assert g is not None
    assert coord.heartbeat("g", g.generation_id, m, None) == E.NONE
    assert coord.heartbeat("g", g.generation_id - 1, m, None) == E.ILLEGAL_GENERATION
    assert coord.heartbeat("g", g.generation_id, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("nogroup", 1, m, None) == E.UNKNOWN_MEMBER_ID
    sync = await coord.sync_group("g", g.generation_id + 5, m, None, None, None, {})
    assert sync.error == E.ILLEGAL_GENERATION


async def test_session_timeout_removes_member_and_group_rebalances(
    coord: GroupCoordinator, clock: FakeClock
) -> None:
    a, b = await _stable_group(coord, 2)
    g = coord.group("g")
    assert g is not None
    gen = g.generation_id
    clock.advance(6_000)
    assert coord.heartbeat("g", gen, a, None) == E.NONE
    clock.advance(5_000)  # b silent for 11 s > 10 s session
    coord.maintain()
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat("g", gen, a, None) == E.REBALANCE_IN_PROGRESS
    r = await coord.join_group(join_req(member_id=a, client_id="c0"))
    assert r.error == E.NONE and r.generation_id == gen + 1 and r.leader_id == a
    assert coord.heartbeat("g", gen + 1, b, None) == E.UNKNOWN_MEMBER_ID


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(
    coord: GroupCoordinator, clock: FakeClock
) -> None:
    a, b = await _stable_group(coord, 2)
    gen = coord.group("g").generation_id  # type: ignore[union-attr]
    t = await join_fully(coord, join_req(client_id="new"))
    rejoin_a = asyncio.create_task(coord.join_group(join_req(member_id=a, client_id="c0")))
    await settle()
    assert not rejoin_a.done()
    # b keeps heartbeating (so its session lives) but never rejoins.
    for _ in range(3):
        clock.advance(9_000)
        assert coord.heartbeat("g", gen, b, None) == E.REBALANCE_IN_PROGRESS
        coord.maintain()
    clock.advance(4_000)  # 31 s > 30 s rebalance timeout
    coord.maintain()
    ra, rn = await rejoin_a, await t
    assert ra.error == rn.error == E.NONE and ra.generation_id == gen + 1
    g = coord.group("g")
    assert g is not None and b not in g.members and len(g.members) == 2
    assert coord.heartbeat("g", gen + 1, b, None) == E.UNKNOWN_MEMBER_ID


async def test_static_member_restart_keeps_assignment_without_rebalance(
    coord: GroupCoordinator,
) -> None:
    r = await coord.join_group(join_req(instance="i-1", client_id="s"))
    assert r.error == E.NONE  # static members skip MEMBER_ID_REQUIRED
    old = r.member_id
    assert old.startswith("i-1-")
    s = await coord.sync_group("g", r.generation_id, old, "i-1", None, None, {old: b"mine"})
    assert s.assignment == b"mine"
    # The same instance restarts and joins with no member id.
    r2 = await coord.join_group(join_req(instance="i-1", client_id="s"))
    assert r2.error == E.NONE and r2.member_id != old
    assert r2.generation_id == r.generation_id  # no rebalance
    assert r2.leader_id == old and r2.members == ()  # it must not run an assignment
    g = coord.group("g")
    assert g is not None and g.state is GroupState.STABLE
    s2 = await coord.sync_group("g", r2.generation_id, r2.member_id, "i-1", None, None, {})
    assert s2.assignment == b"mine"
    # The old incarnation is fenced everywhere.
    assert coord.heartbeat("g", r.generation_id, old, "i-1") == E.FENCED_INSTANCE_ID
    stale = await coord.join_group(join_req(member_id=old, instance="i-1", client_id="s"))
    assert stale.error == E.FENCED_INSTANCE_ID
    top, per = coord.leave_group("g", [(old, "i-1")])
    assert top == E.NONE and per[0][2] == E.FENCED_INSTANCE_ID
    commit = await coord.commit_offsets("g", r.generation_id, old, "i-1", {})
    assert commit == {}


async def test_leave_group_batched_and_by_instance_id(coord: GroupCoordinator) -> None:
    ids = await _stable_group(coord, 3)
    top, per = coord.leave_group("g", [(ids[1], None), (ids[2], None), ("ghost", None)])
    assert top == E.NONE
    assert [e for _, _, e in per] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    g = coord.group("g")
    assert g is not None and g.state is GroupState.PREPARING_REBALANCE
    r = await coord.join_group(join_req(member_id=ids[0], client_id="c0"))
    assert r.error == E.NONE and [m[0] for m in r.members] == [ids[0]]
    s = await coord.join_group(join_req("h", instance="inst", client_id="x"))
    top, per = coord.leave_group("h", [("", "inst")])
    assert per == [("", "inst", E.NONE)]
    h = coord.group("h")
    assert h is not None and h.state is GroupState.EMPTY and s.error == E.NONE
    assert coord.leave_group("nope", [("m", None)]) == (E.NONE, [("m", None, E.UNKNOWN_MEMBER_ID)])


async def test_last_member_leaving_empties_the_group(coord: GroupCoordinator) -> None:
    [m] = await _stable_group(coord, 1)
    gen = coord.group("g").generation_id  # type: ignore[union-attr]
    coord.leave_group("g", [(m, None)])
    g = coord.group("g")
    assert g is not None and g.state is GroupState.EMPTY and g.generation_id == gen + 1


async def test_leader_that_never_syncs_is_dropped(coord: GroupCoordinator, clock: FakeClock) -> None:
    r1, r2 = await join_all(
        coord, [join_req(client_id=c, rebalance_ms=20_000) for c in ("a", "b")]
    )
    leader = r1.member_id if r1.leader_id == r1.member_id else r2.member_id
    follower = r2.member_id if leader == r1.member_id else r1.member_id
    sync = asyncio.create_task(coord.sync_group("g", r1.generation_id, follower, None, None, None, {}))
    await settle()
    clock.advance(21_000)
    coord.maintain()
    assert (await sync).error == E.REBALANCE_IN_PROGRESS
    g = coord.group("g")
    assert g is not None and leader not in g.members


async def test_inconsistent_protocols_and_bad_requests(coord: GroupCoordinator) -> None:
    await _stable_group(coord, 1)
    r = await coord.join_group(join_req(protocols=[("roundrobin", b"")]))
    assert r.error == E.INCONSISTENT_GROUP_PROTOCOL
    r = await coord.join_group(join_req(session_ms=10))
    assert r.error == E.INVALID_SESSION_TIMEOUT
    r = await coord.join_group(join_req(group=""))
    assert r.error == E.INVALID_GROUP_ID
    r = await coord.join_group(join_req("other", member_id="made-up"))
    assert r.error == E.UNKNOWN_MEMBER_ID


async def test_protocol_chosen_by_vote(coord: GroupCoordinator) -> None:
    both = [("cooperative-sticky", b"cs"), ("range", b"r")]
    other = [("range", b"r2"), ("cooperative-sticky", b"cs2")]
    results = await join_all(
        coord,
        [join_req(protocols=both, client_id="a"), join_req(protocols=other, client_id="b"),
         join_req(protocols=both, client_id="c")],
    )
    assert {r.protocol_name for r in results} == {"cooperative-sticky"}
    lead = next(r for r in results if r.leader_id == r.member_id)
    assert sorted(md for _, _, md in lead.members) == [b"cs", b"cs", b"cs2"]


async def test_initial_rebalance_delay_collects_members(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    coord = make_coordinator(store, clock, initial_rebalance_delay_ms=3_000)
    await coord.start(ticker=False)
    try:
        t1 = await join_fully(coord, join_req(client_id="a"))
        clock.advance(2_000)
        coord.maintain()
        t2 = await join_fully(coord, join_req(client_id="b"))
        clock.advance(2_000)  # 4 s after the start, 2 s after b: still waiting for more
        coord.maintain()
        await settle()
        assert not t1.done() and not t2.done()
        clock.advance(1_500)
        coord.maintain()
        r1, r2 = await t1, await t2
        assert r1.generation_id == r2.generation_id == 1
    finally:
        await coord.close()


async def test_pending_member_id_expires(coord: GroupCoordinator, clock: FakeClock) -> None:
    [a] = await _stable_group(coord, 1)
    first = await coord.join_group(join_req(client_id="late"))
    assert first.error == E.MEMBER_ID_REQUIRED
    clock.advance(6_000)
    assert coord.heartbeat("g", 1, a, None) == E.NONE
    clock.advance(5_000)
    coord.maintain()
    g = coord.group("g")
    assert g is not None and first.member_id not in g.pending_members
