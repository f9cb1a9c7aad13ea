"""Online migration between the classic and the consumer protocol (``migration.py``,
``classic_members.py``) on a fake clock over the in-memory segment store: a live
classic group upgraded by a consumer-protocol member, its classic members rejoining
into the server-side assignment without a partition ever owned twice, commits kept,
the downgrade when the last consumer-protocol member leaves, and the migration
policies."""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from tidegate.core.segmentstore.api import TableUpdate
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupCoordinator, JoinRequest, OffsetCommit, SyncResult
from tidegate.gateway.groups.consumer_groups import HeartbeatResult
from tidegate.protocol.errors import ErrorCode as E

from tests.groups.conftest import FakeClock, _fields, join_all, make_coordinator
from tests.groups.test_consumer_groups import Catalog, _hb

P = 6


def _sub(owned: set[int] = frozenset()) -> bytes:  # type: ignore[assignment]
    tps = [ConsumerProtocolSubscription.TopicPartition(topic="t", partitions=sorted(owned))] if owned else []
    return bytes(ConsumerProtocolSubscription(
        version=1, topics=["t"], user_data=None, owned_partitions=tps,
    ).encode(version=1))


def _assignment(parts: set[int]) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=sorted(parts))]
    return bytes(ConsumerProtocolAssignment(version=1, assigned_partitions=tps, user_data=None).encode(version=1))


def _decode(data: bytes) -> set[int]:
    a = ConsumerProtocolAssignment.decode(data)
    return {p for tp in a.assigned_partitions for p in tp.partitions}


def _join(member: str, owned: set[int] = frozenset(), group: str = "g") -> JoinRequest:  # type: ignore[assignment]
    return JoinRequest(
        group_id=group, member_id=member, group_instance_id=None, protocol_type="consumer",
        protocols=[("range", _sub(owned))], session_timeout_ms=10_000, rebalance_timeout_ms=20_000,
        require_known_member_id=False,
    )


async def _classic_group(coord: GroupCoordinator) -> tuple[str, str, int]:
    """Two classic members of group ``g``, Stable with {0,1,2} and {3,4,5}."""
    first = JoinRequest(**{**_fields(_join("")), "require_known_member_id": True})
    a, b = await join_all(coord, [first, first])
    leader = a if a.leader_id == a.member_id else b
    assignments = {a.member_id: _assignment({0, 1, 2}), b.member_id: _assignment({3, 4, 5})}
    syncs = [
        asyncio.ensure_future(coord.sync_group("g", r.generation_id, r.member_id, None, "consumer", "range",
                                               assignments if r is leader else {}))
        for r in (a, b)
    ]
    assert [s.error for s in await asyncio.gather(*syncs)] == [E.NONE, E.NONE]
    return a.member_id, b.member_id, a.generation_id


def _owned_disjoint(coord: GroupCoordinator) -> None:
    cg = coord.consumer.groups["g"]
    seen: list[tuple[str, int]] = []
    for m in cg.members.values():
        for a in (m.assigned, m.revoking):
            seen += [(t, p) for t, ps in a.items() for p in ps]
    assert len(seen) == len(set(seen)), seen


async def _classic_round(
    coord: GroupCoordinator, cat: Catalog, member: str, owned: set[int]
) -> tuple[int, set[int]]:
    """The member rejoins, reporting what it owns, and syncs."""
    j = await coord.join_group(_join(member, owned), cat)
    assert (j.error, j.leader_id, j.protocol_name) == (E.NONE, "", "range"), j
    s = await coord.sync_group("g", j.generation_id, member, None, "consumer", "range", {})
    if s.error == E.REBALANCE_IN_PROGRESS:
        return j.generation_id, set()
    assert s.error == E.NONE, s
    return j.generation_id, _decode(s.assignment)


async def test_upgrade_then_downgrade_of_a_live_group(coord: GroupCoordinator, clock: FakeClock) -> None:
    cat = Catalog(t=P)
    a, b, generation = await _classic_group(coord)
    assert await coord.commit_offsets("g", generation, a, None, {("t", 0): OffsetCommit(7)}) == {("t", 0): E.NONE}

    c = await coord.consumer_heartbeat(_hb("C", 0, group="g"), cat)
    assert c.error == E.NONE and c.member_epoch == generation + 1
    assert c.assignment == {}  # everything is still owned by the classic members
    assert [row for row in coord.list_groups()[1] if row[0] == "g"] == [("g", "consumer", "Reconciling", "consumer")]
    described = coord.describe_consumer_groups(["g"])[0][3]
    assert described is not None and {m.member_id: m.classic is not None for m in described.members.values()} == {
        a: True, b: True, "C": False,
    }
    _owned_disjoint(coord)
    # Commits made before the upgrade stay; a classic member's generation is its epoch.
    assert coord.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 7  # type: ignore[union-attr]
    assert await coord.commit_offsets("g", generation + 5, a, None, {("t", 0): OffsetCommit(8)}) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert coord.heartbeat("g", generation + 1, a, None) == E.ILLEGAL_GENERATION
    assert coord.heartbeat("g", generation, "nobody", None) == E.UNKNOWN_MEMBER_ID

    # The classic members are told to rejoin and reach the target step by step.
    owned = {a: {0, 1, 2}, b: {3, 4, 5}}
    c_owned: set[int] = set()
    c_epoch = c.member_epoch
    gens = {a: generation, b: generation}
    for _ in range(6):
        for member in (a, b):
            if coord.heartbeat("g", gens[member], member, None) == E.REBALANCE_IN_PROGRESS:
                gens[member], owned[member] = await _classic_round(coord, cat, member, owned[member])
                _owned_disjoint(coord)
        r = await coord.consumer_heartbeat(_hb("C", c_epoch, {"t": frozenset(c_owned)}, group="g"), cat)
        assert r.error == E.NONE
        c_epoch = r.member_epoch
        if r.assignment is not None:
            c_owned = set(r.assignment.get("t", frozenset()))
        _owned_disjoint(coord)
        assert not (owned[a] & owned[b]) and not (owned[a] | owned[b]) & c_owned
    assert coord.consumer.groups["g"].state.value == "Stable"
    assert sorted(map(len, (owned[a], owned[b], c_owned))) == [2, 2, 2]
    assert owned[a] | owned[b] | c_owned == set(range(P))
    assert await coord.commit_offsets("g", gens[a], a, None, {("t", min(owned[a])): OffsetCommit(1)}) == {
        ("t", min(owned[a])): E.NONE
    }

    # Downgrade: the last consumer-protocol member leaves; the classic group rebalances.
    left = await coord.consumer_heartbeat(_hb("C", -1, group="g"), cat)
    assert left.error == E.NONE
    assert "g" not in coord.consumer.groups
    g = coord.group("g")
    assert g is not None and g.state.value == "PreparingRebalance" and set(g.members) == {a, b}
    assert {m: _decode(g.members[m].assignment) for m in (a, b)} == {a: owned[a], b: owned[b]}
    assert coord.heartbeat("g", gens[a], a, None) == E.REBALANCE_IN_PROGRESS
    assert [row for row in coord.list_groups()[1] if row[0] == "g"] == [("g", "consumer", "PreparingRebalance", "classic")]
    committed = {tp: o.offset for tp, o in coord.fetch_offsets("g", None)[1].items() if o is not None}
    assert committed == {("t", 0): 7, ("t", min(owned[a])): 1}
    joins = [asyncio.ensure_future(coord.join_group(_join(m), cat)) for m in (a, b)]
    await asyncio.sleep(0)
    coord.maintain()
    results = await asyncio.gather(*joins)
    assert [r.error for r in results] == [E.NONE, E.NONE]
    assert results[0].generation_id > gens[a] and any(r.members for r in results)  # a leader assigns again


async def test_restart_after_an_upgrade_keeps_the_consumer_group(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    cat = Catalog(t=P)
    a, b, generation = await _classic_group(coord)
    c = await coord.consumer_heartbeat(_hb("C", 0, group="g"), cat)
    assert c.error == E.NONE
    await coord.close()
    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    try:
        cg = again.consumer.groups["g"]
        assert set(cg.members) == {a, b, "C"}
        assert cg.members[a].classic is not None and cg.members["C"].classic is None
        g = again.group("g")
        assert g is not None and not g.members  # the classic side keeps only the commits
        assert again.heartbeat("g", generation, a, None) == E.REBALANCE_IN_PROGRESS
    finally:
        await again.close()


async def _with_policy(store: InMemorySegmentStore, clock: FakeClock, policy: str) -> GroupCoordinator:
    coord = make_coordinator(store, clock)
    object.__setattr__(coord.config, "consumer_migration_policy", policy)
    await coord.start(ticker=False)
    return coord


async def test_disabled_and_downgrade_policies_refuse_the_upgrade(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    for policy in ("disabled", "downgrade"):
        coord = await _with_policy(InMemorySegmentStore(), clock, policy)
        try:
            await _classic_group(coord)
            r: HeartbeatResult = await coord.consumer_heartbeat(_hb("C", 0, group="g"), Catalog(t=P))
            assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group."), policy
            assert "g" not in coord.consumer.groups
        finally:
            await coord.close()


async def test_upgrade_policy_keeps_a_consumer_group_of_classic_members(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    coord = await _with_policy(store, clock, "upgrade")
    try:
        a, b, _ = await _classic_group(coord)
        c = await coord.consumer_heartbeat(_hb("C", 0, group="g"), Catalog(t=P))
        assert c.error == E.NONE
        await coord.consumer_heartbeat(_hb("C", -1, group="g"), Catalog(t=P))
        assert set(coord.consumer.groups["g"].members) == {a, b}  # no downgrade
    finally:
        await coord.close()


async def test_a_classic_member_that_does_not_rejoin_is_removed(coord: GroupCoordinator, clock: FakeClock) -> None:
    cat = Catalog(t=P)
    a, b, generation = await _classic_group(coord)
    await coord.consumer_heartbeat(_hb("C", 0, group="g"), cat)
    assert coord.heartbeat("g", generation, a, None) == E.REBALANCE_IN_PROGRESS
    clock.advance(9_000)  # b's session (10 s) is kept alive, a's rebalance timeout (20 s) runs
    assert coord.heartbeat("g", generation, b, None) == E.REBALANCE_IN_PROGRESS
    clock.advance(9_000)
    coord.heartbeat("g", generation, b, None)
    coord.heartbeat("g", generation, a, None)
    clock.advance(3_000)
    coord.maintain()
    assert a not in coord.consumer.groups["g"].members
    assert coord.heartbeat("g", generation, a, None) == E.UNKNOWN_MEMBER_ID
    # A classic LeaveGroup removes b (the group stays a consumer group: C speaks KIP-848).
    assert coord.leave_group("g", [(b, None)]) == (E.NONE, [(b, None, E.NONE)])
    assert set(coord.consumer.groups["g"].members) == {"C"}


async def test_a_crash_between_an_upgrades_writes_keeps_the_consumer_group(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    """The consumer group is written first, the emptied classic side after: if only the
    first write made it, the consumer group's entry wins at load."""
    coord = make_coordinator(store, clock)
    await coord.start(ticker=False)
    a, b, generation = await _classic_group(coord)
    table = coord.config.table
    classic_entry = [e for e in await store.table_entries(table) if e.key == b"gg"]
    assert len(classic_entry) == 1
    assert (await coord.consumer_heartbeat(_hb("C", 0, group="g"), Catalog(t=P))).error == E.NONE
    await coord.close()
    await store.table_put(table, [TableUpdate(b"gg", classic_entry[0].value)])  # the lost write
    again = make_coordinator(store, clock)
    await again.start(ticker=False)
    try:
        assert set(again.consumer.groups["g"].members) == {a, b, "C"}
        g = again.group("g")
        assert g is not None and not g.members and g.state.value == "Empty"
        assert again.heartbeat("g", generation, a, None) == E.REBALANCE_IN_PROGRESS
    finally:
        await again.close()


async def test_a_new_classic_member_joins_a_consumer_group(coord: GroupCoordinator) -> None:
    cat = Catalog(t=P)
    c = await coord.consumer_heartbeat(_hb("C", 0, group="g"), cat)
    assert c.error == E.NONE and len(_parts_of(c)) == P
    first = await coord.join_group(JoinRequest(**{**_fields(_join("")), "require_known_member_id": True}), cat)
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id
    j = await coord.join_group(_join(first.member_id), cat)
    assert (j.error, j.leader_id, j.members) == (E.NONE, "", ())
    s = await coord.sync_group("g", j.generation_id, first.member_id, None, "consumer", "range", {})
    assert s.error == E.NONE and _decode(s.assignment) == set()  # C still owns them all
    assert await coord.sync_group("g", j.generation_id, first.member_id, None, "consumer", "roundrobin", {}) == (
        SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
    )
    # A classic member with no protocol in common with the classic members is refused.
    other = JoinRequest(**{**_fields(_join("")), "protocols": [("roundrobin", _sub())]})
    assert (await coord.join_group(other, cat)).error == E.INCONSISTENT_GROUP_PROTOCOL
    # C gives half up; the classic member is told to rejoin and gets them.
    r = await coord.consumer_heartbeat(_hb("C", c.member_epoch, {"t": frozenset(range(P))}, group="g"), cat)
    kept = _parts_of(r)
    r = await coord.consumer_heartbeat(_hb("C", c.member_epoch, {"t": frozenset(kept)}, group="g"), cat)
    assert coord.heartbeat("g", j.generation_id, first.member_id, None) == E.REBALANCE_IN_PROGRESS
    generation, got = await _classic_round(coord, cat, first.member_id, set())
    assert got == set(range(P)) - kept and generation == r.member_epoch
    assert coord.heartbeat("g", generation, first.member_id, None) == E.NONE


def _parts_of(r: HeartbeatResult) -> set[int]:
    assert r.assignment is not None
    return set(r.assignment.get("t", frozenset()))
