"""KIP-848 consumer groups in the coordinator, on a fake clock over the in-memory
segment store: joins, the uniform and range assignors, incremental reconciliation
(revoke before reassign), member epochs and fencing, static members, session and
revocation timeouts, durable state, offset commits with member epochs, and the
coexistence with classic groups."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupCoordinator, JoinRequest, OffsetCommit
from tidegate.gateway.groups.consumer_groups import HeartbeatRequest, HeartbeatResult
from tidegate.gateway.groups.errors import NON_EMPTY_GROUP
from tidegate.protocol.errors import ErrorCode as E

from tests.groups.conftest import FakeClock, make_coordinator


@dataclass
class Topic:
    partitions: int
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)


class Catalog:
    def __init__(self, **topics: int) -> None:
        self.topics = {name: Topic(n) for name, n in topics.items()}

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def names(self) -> list[str]:
        return list(self.topics)


def _hb(member: str, epoch: int, owned: dict[str, frozenset[int]] | None = None, *,
        group: str = "g", topics: list[str] | None = None, **kw: object) -> HeartbeatRequest:
    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", 30_000)
        topics = topics if topics is not None else ["t"]
        owned = {} if owned is None else owned
    return HeartbeatRequest(group, member, epoch, subscribed_names=topics, owned=owned,
                            api_version=1, **kw)  # type: ignore[arg-type]


def _parts(r: HeartbeatResult) -> set[int]:
    assert r.assignment is not None
    return set(r.assignment.get("t", frozenset()))


async def test_one_member_gets_everything_then_a_second_takes_half_after_revocation(
    coord: GroupCoordinator, clock: FakeClock
) -> None:
    cat = Catalog(t=4)
    a = await coord.consumer_heartbeat(_hb("A", 0), cat)
    assert (a.error, a.member_epoch, _parts(a), a.heartbeat_interval_ms) == (E.NONE, 1, {0, 1, 2, 3}, 5000)
    b = await coord.consumer_heartbeat(_hb("B", 0), cat)
    # B waits: A still owns every partition of B's target.
    assert b.member_epoch == 2 and _parts(b) == set()
    a2 = await coord.consumer_heartbeat(_hb("A", 1, {"t": frozenset({0, 1, 2, 3})}), cat)
    kept = _parts(a2)
    assert a2.member_epoch == 1 and len(kept) == 2  # revoke first, epoch unchanged
    assert coord.consumer.groups["g"].state.value == "Reconciling"
    # Until A says it let them go, B gets nothing.
    assert (await coord.consumer_heartbeat(_hb("B", 2, {}), cat)).assignment is None
    a3 = await coord.consumer_heartbeat(_hb("A", 1, {"t": frozenset(kept)}), cat)
    assert a3.member_epoch == 2 and _parts(a3) == kept  # the new epoch comes with its assignment
    b2 = await coord.consumer_heartbeat(_hb("B", 2, {}), cat)
    assert _parts(b2) == {0, 1, 2, 3} - kept
    assert coord.consumer.groups["g"].state.value == "Stable"
    # A plain heartbeat carries no assignment.
    assert (await coord.consumer_heartbeat(_hb("B", 2, {"t": frozenset(_parts(b2))}), cat)).assignment is None


async def test_fencing_and_request_errors(coord: GroupCoordinator) -> None:
    cat = Catalog(t=2)
    a = await coord.consumer_heartbeat(_hb("A", 0), cat)
    assert (await coord.consumer_heartbeat(_hb("A", 5, {}), cat)).error == E.FENCED_MEMBER_EPOCH
    assert (await coord.consumer_heartbeat(_hb("Z", 1, {}), cat)).error == E.UNKNOWN_MEMBER_ID
    # The previous epoch is good while the member owns no more than it has now.
    await coord.consumer_heartbeat(_hb("B", 0), cat)
    assert (await coord.consumer_heartbeat(_hb("A", a.member_epoch, None), cat)).error == E.NONE
    bad = [
        (HeartbeatRequest("", "A", 0, api_version=1), "GroupId"),
        (HeartbeatRequest("g", "", 0, api_version=1), "MemberId"),
        (HeartbeatRequest("g", "C", 0, subscribed_names=["t"], owned={}, api_version=1), "RebalanceTimeoutMs"),
        (HeartbeatRequest("g", "C", 0, rebalance_timeout_ms=1, owned={}, api_version=1), "SubscribedTopicNames"),
        (HeartbeatRequest("g", "C", 0, rebalance_timeout_ms=1, subscribed_names=["t"], owned={"t": frozenset({0})},
                          api_version=1), "TopicPartitions"),
        (HeartbeatRequest("g", "C", -2, api_version=1), "InstanceId"),
        (HeartbeatRequest("g", "C", -3, api_version=1), "MemberEpoch"),
    ]
    for req, word in bad:
        r = await coord.consumer_heartbeat(req, cat)
        assert r.error == E.INVALID_REQUEST and word in (r.message or ""), (req, r)
    r = await coord.consumer_heartbeat(_hb("C", 0, server_assignor="sticky"), cat)
    assert r.error == E.UNSUPPORTED_ASSIGNOR
    r = await coord.consumer_heartbeat(_hb("C", 0, subscribed_regex="(", topics=None), cat)
    assert r.error == 128  # INVALID_REGULAR_EXPRESSION
    # v0: the coordinator makes the member id.
    v0 = await coord.consumer_heartbeat(
        HeartbeatRequest("g0", "", 0, rebalance_timeout_ms=1, subscribed_names=["t"], owned={}), cat
    )
    assert v0.error == E.NONE and v0.member_id


async def test_leave_session_timeout_and_revocation_timeout(coord: GroupCoordinator, clock: FakeClock) -> None:
    cat = Catalog(t=2)
    await coord.consumer_heartbeat(_hb("A", 0), cat)
    b = await coord.consumer_heartbeat(_hb("B", 0), cat)
    left = await coord.consumer_heartbeat(_hb("B", -1), cat)
    assert (left.error, left.member_epoch) == (E.NONE, -1)
    assert set(coord.consumer.groups["g"].members) == {"A"}
    assert (await coord.consumer_heartbeat(_hb("B", -1), cat)).error == E.UNKNOWN_MEMBER_ID
    # Session: a member that stops heartbeating is dropped.
    clock.advance(45_001)
    coord.maintain()
    assert not coord.consumer.groups["g"].members
    assert coord.consumer.groups["g"].state.value == "Empty"
    # Revocation: a member that keeps heartbeating but never lets go is dropped after
    # its rebalance timeout.
    a = await coord.consumer_heartbeat(_hb("A", 0, rebalance_timeout_ms=10_000), cat)
    b = await coord.consumer_heartbeat(_hb("B", 0), cat)
    full = frozenset(_parts(a))
    r = await coord.consumer_heartbeat(_hb("A", a.member_epoch, {"t": full}), cat)
    assert len(_parts(r)) == 1
    for _ in range(3):
        clock.advance(4_000)
        await coord.consumer_heartbeat(_hb("A", a.member_epoch, {"t": full}), cat)
        await coord.consumer_heartbeat(_hb("B", b.member_epoch, {}), cat)
        coord.maintain()
    assert set(coord.consumer.groups["g"].members) == {"B"}
    b2 = await coord.consumer_heartbeat(_hb("B", b.member_epoch, {}), cat)
    assert _parts(b2) == {0, 1}


async def test_static_member_leaves_and_rejoins_with_its_partitions(coord: GroupCoordinator) -> None:
    cat = Catalog(t=2)
    s = await coord.consumer_heartbeat(_hb("S1", 0, instance_id="inst"), cat)
    o = await coord.consumer_heartbeat(_hb("O", 0), cat)
    s = await coord.consumer_heartbeat(_hb("S1", s.member_epoch, {"t": frozenset({0, 1})}, instance_id="inst"), cat)
    mine = _parts(s)
    await coord.consumer_heartbeat(_hb("S1", s.member_epoch, {"t": frozenset(mine)}, instance_id="inst"), cat)
    await coord.consumer_heartbeat(_hb("O", o.member_epoch, {}), cat)
    epoch = coord.consumer.groups["g"].group_epoch
    # A second incarnation while the first is live is refused.
    dup = await coord.consumer_heartbeat(_hb("S2", 0, instance_id="inst"), cat)
    assert dup.error == E.UNRELEASED_INSTANCE_ID
    gone = await coord.consumer_heartbeat(_hb("S1", -2, instance_id="inst"), cat)
    assert (gone.error, gone.member_epoch) == (E.NONE, -2)
    back = await coord.consumer_heartbeat(_hb("S2", 0, instance_id="inst"), cat)
    assert back.error == E.NONE and _parts(back) == mine
    assert coord.consumer.groups["g"].group_epoch == epoch  # no rebalance
    wrong = await coord.consumer_heartbeat(_hb("S1", -1, instance_id="inst"), cat)
    assert wrong.error == E.FENCED_INSTANCE_ID


async def test_range_assignor_and_new_partitions(coord: GroupCoordinator) -> None:
    cat = Catalog(t=3, u=3)
    a = await coord.consumer_heartbeat(_hb("A", 0, topics=["t", "u"], server_assignor="range"), cat)
    b = await coord.consumer_heartbeat(_hb("B", 0, topics=["t", "u"], server_assignor="range"), cat)
    g = coord.consumer.groups["g"]
    assert g.assignor == "range"
    assert g.target["A"] == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}
    assert g.target["B"] == {"t": frozenset({2}), "u": frozenset({2})}
    epoch = g.group_epoch
    cat.topics["t"].partitions = 4  # CreatePartitions: the group epoch moves
    await coord.consumer_heartbeat(_hb("A", a.member_epoch, None), cat)
    assert g.group_epoch == epoch + 1 and g.target["B"]["t"] == frozenset({2, 3})
    del b


async def test_regex_subscription(coord: GroupCoordinator) -> None:
    cat = Catalog(**{"orders-1": 1, "orders-2": 1, "other": 1})
    r = await coord.consumer_heartbeat(_hb("A", 0, topics=None, subscribed_regex="orders-.*"), cat)
    assert r.assignment == {"orders-1": frozenset({0}), "orders-2": frozenset({0})}


async def test_state_survives_a_restart(store: InMemorySegmentStore, clock: FakeClock) -> None:
    cat = Catalog(t=2)
    c1 = make_coordinator(store, clock)
    await c1.start(ticker=False)
    a = await c1.consumer_heartbeat(_hb("A", 0), cat)
    assert (await c1.commit_offsets("g", a.member_epoch, "A", None, {("t", 0): OffsetCommit(7)})) == {("t", 0): E.NONE}
    await c1.close()
    c2 = make_coordinator(store, clock)
    await c2.start(ticker=False)
    again = await c2.consumer_heartbeat(_hb("A", a.member_epoch, {"t": frozenset({0, 1})}), cat)
    assert (again.error, again.member_epoch, again.assignment) == (E.NONE, a.member_epoch, None)
    assert c2.fetch_offsets("g", [("t", 0)], member_id="A", member_epoch=a.member_epoch)[1][("t", 0)].offset == 7  # type: ignore[union-attr]
    await c2.close()


async def test_offset_commit_and_fetch_check_member_epochs(coord: GroupCoordinator) -> None:
    cat = Catalog(t=1)
    a = await coord.consumer_heartbeat(_hb("A", 0), cat)
    tp = {("t", 0): OffsetCommit(1)}
    e = a.member_epoch
    assert await coord.commit_offsets("g", e, "A", None, tp) == {("t", 0): E.NONE}
    assert await coord.commit_offsets("g", e + 1, "A", None, tp) == {("t", 0): E.FENCED_MEMBER_EPOCH}
    assert await coord.commit_offsets("g", e - 1, "A", None, tp) == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert await coord.commit_offsets("g", e, "X", None, tp) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await coord.commit_offsets("g", -1, "", None, tp) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await coord.commit_offsets("g", e, "A", None, tp, api_version=8) == {("t", 0): E.UNSUPPORTED_VERSION}
    assert coord.fetch_offsets("g", None, member_id="A", member_epoch=e + 1)[0] == E.STALE_MEMBER_EPOCH
    assert coord.fetch_offsets("g", None, member_id="X", member_epoch=e)[0] == E.UNKNOWN_MEMBER_ID
    assert coord.fetch_offsets("g", None)[0] == E.NONE  # an admin
    # TxnOffsetCommit: the member fields are optional, checked when given.
    assert coord.check_txn_commit("g", e, "A", None) == E.NONE
    assert coord.check_txn_commit("g", -1, "", None) == E.NONE
    assert coord.check_txn_commit("g", e + 1, "A", None) == E.FENCED_MEMBER_EPOCH
    assert coord.check_txn_commit("g", e - 1, "A", None) == E.STALE_MEMBER_EPOCH
    assert coord.check_txn_commit("g", e, "X", None) == E.UNKNOWN_MEMBER_ID
    await coord.consumer_heartbeat(_hb("A", -1), cat)
    # Empty: admin commits (epoch -1) are accepted.
    assert await coord.commit_offsets("g", -1, "", None, tp) == {("t", 0): E.NONE}


async def test_classic_and_consumer_groups_coexist(coord: GroupCoordinator) -> None:
    cat = Catalog(t=1)
    await coord.consumer_heartbeat(_hb("A", 0, group="cg"), cat)
    # A classic member whose subscription does not decode cannot join a live consumer group.
    join = await coord.join_group(JoinRequest(
        group_id="cg", member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=[("range", b"")], session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
        require_known_member_id=False,
    ))
    assert join.error == E.INCONSISTENT_GROUP_PROTOCOL
    classic = await coord.join_group(JoinRequest(
        group_id="old", member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=[("range", b"")], session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
        require_known_member_id=False,
    ))
    assert classic.error == E.NONE
    coord.maintain()
    # A live classic group whose embedded protocol does not decode is not upgraded.
    r = await coord.consumer_heartbeat(_hb("B", 0, group="old"), cat)
    assert r.error == E.GROUP_ID_NOT_FOUND
    # Listing and describing: each kind in its own place.
    _, listed = coord.list_groups()
    assert ("cg", "consumer", "Stable", "consumer") in listed
    assert [row[0] for row in coord.list_groups(types=["consumer"])[1]] == ["cg"]
    assert "cg" not in [row[0] for row in coord.list_groups(types=["classic"])[1]]
    assert coord.describe_groups(["cg"], unknown_is_error=True)[0].error == E.GROUP_ID_NOT_FOUND
    described = coord.describe_consumer_groups(["cg", "old", "none", ""])
    assert [(gid, err) for gid, err, _, _ in described] == [
        ("cg", E.NONE), ("old", E.GROUP_ID_NOT_FOUND), ("none", E.GROUP_ID_NOT_FOUND), ("", E.INVALID_GROUP_ID)
    ]
    assert await coord.delete_groups(["cg"]) == {"cg": NON_EMPTY_GROUP}
    await coord.consumer_heartbeat(_hb("A", -1, group="cg"), cat)
    assert await coord.delete_groups(["cg"]) == {"cg": E.NONE}
    assert "cg" not in coord.consumer.groups
    # An empty classic group (commits only) becomes a consumer group; its commits stay.
    assert await coord.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(3)}) == {("t", 0): E.NONE}
    r = await coord.consumer_heartbeat(_hb("C", 0, group="simple"), cat)
    assert r.error == E.NONE
    assert coord.fetch_offsets("simple", [("t", 0)], member_id="C", member_epoch=r.member_epoch)[1][("t", 0)].offset == 3  # type: ignore[union-attr]
    assert [row[3] for row in coord.list_groups()[1] if row[0] == "simple"] == ["consumer"]


async def test_a_restart_mid_reconciliation_keeps_every_member_and_target(
    store: InMemorySegmentStore, clock: FakeClock
) -> None:
    cat = Catalog(t=4)
    c1 = make_coordinator(store, clock)
    await c1.start(ticker=False)
    a = await c1.consumer_heartbeat(_hb("A", 0), cat)
    b = await c1.consumer_heartbeat(_hb("B", 0, instance_id="ib"), cat)
    a2 = await c1.consumer_heartbeat(_hb("A", a.member_epoch, {"t": frozenset({0, 1, 2, 3})}), cat)
    kept = _parts(a2)
    before = c1.consumer.groups["g"]
    snapshot = {mid: (m.member_epoch, m.state, m.assigned, m.revoking) for mid, m in before.members.items()}
    target, epochs = dict(before.target), (before.group_epoch, before.assignment_epoch)
    await c1.close()
    c2 = make_coordinator(store, clock)
    await c2.start(ticker=False)
    after = c2.consumer.groups["g"]
    assert {mid: (m.member_epoch, m.state, m.assigned, m.revoking) for mid, m in after.members.items()} == snapshot
    assert (after.target, (after.group_epoch, after.assignment_epoch)) == (target, epochs)
    assert after.static_members == {"ib": "B"}
    # Reconciliation carries on where it was.
    await c2.consumer_heartbeat(_hb("A", a.member_epoch, {"t": frozenset(kept)}), cat)
    b2 = await c2.consumer_heartbeat(_hb("B", b.member_epoch, {}, instance_id="ib"), cat)
    assert _parts(b2) == {0, 1, 2, 3} - kept
    # A member that leaves is removed from the table too.
    await c2.consumer_heartbeat(_hb("B", -1, instance_id="ib"), cat)
    await c2.close()
    c3 = make_coordinator(store, clock)
    await c3.start(ticker=False)
    assert set(c3.consumer.groups["g"].members) == {"A"}
    assert await c3.delete_groups(["g"]) == {"g": NON_EMPTY_GROUP}
    await c3.close()


async def test_an_empty_consumer_group_becomes_classic_on_join(coord: GroupCoordinator) -> None:
    cat = Catalog(t=1)
    a = await coord.consumer_heartbeat(_hb("A", 0, group="mig"), cat)
    assert await coord.commit_offsets("mig", a.member_epoch, "A", None, {("t", 0): OffsetCommit(9)}) == {("t", 0): E.NONE}
    await coord.consumer_heartbeat(_hb("A", -1, group="mig"), cat)
    join = await coord.join_group(JoinRequest(
        group_id="mig", member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=[("range", b"")], session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
        require_known_member_id=False,
    ))
    assert join.error == E.NONE and "mig" not in coord.consumer.groups
    assert coord.fetch_offsets("mig", [("t", 0)])[1][("t", 0)].offset == 9  # type: ignore[union-attr]


async def test_a_commit_at_an_older_epoch_is_good_for_partitions_owned_since(coord: GroupCoordinator) -> None:
    """KIP-1251: a commit sent just before a heartbeat moved the member on."""
    cat = Catalog(t=4)
    a = await coord.consumer_heartbeat(_hb("A", 0), cat)
    old = a.member_epoch
    b = await coord.consumer_heartbeat(_hb("B", 0), cat)
    a2 = await coord.consumer_heartbeat(_hb("A", old, {"t": frozenset({0, 1, 2, 3})}), cat)
    kept = _parts(a2)
    a3 = await coord.consumer_heartbeat(_hb("A", old, {"t": frozenset(kept)}), cat)
    assert a3.member_epoch > old
    gone = ({0, 1, 2, 3} - kept).pop()
    offsets = {("t", p): OffsetCommit(1) for p in sorted(kept | {gone})}
    result = await coord.commit_offsets("g", old, "A", None, offsets)
    assert result == {("t", p): (E.STALE_MEMBER_EPOCH if p == gone else E.NONE) for p in sorted(kept | {gone})}
    # B's partitions were given at the new epoch: B's older epoch is stale for them.
    b2 = await coord.consumer_heartbeat(_hb("B", b.member_epoch, {}), cat)
    mine = sorted(_parts(b2))
    assert await coord.commit_offsets("g", b2.member_epoch, "B", None, {("t", mine[0]): OffsetCommit(1)}) == {
        ("t", mine[0]): E.NONE
    }
    assert await coord.commit_offsets("g", old, "B", None, {("t", mine[0]): OffsetCommit(1)}) == {
        ("t", mine[0]): E.STALE_MEMBER_EPOCH
    }


async def test_an_empty_consumer_group_without_commits_is_cleaned_up(coord: GroupCoordinator) -> None:
    cat = Catalog(t=1)
    for gid in ("keep", "drop"):
        await coord.consumer_heartbeat(_hb("A", 0, group=gid), cat)
    assert await coord.commit_offsets("keep", 1, "A", None, {("t", 0): OffsetCommit(2)}) == {("t", 0): E.NONE}
    coord.expire_offsets()
    assert set(coord.consumer.groups) == {"keep", "drop"}  # members: both stay
    for gid in ("keep", "drop"):
        await coord.consumer_heartbeat(_hb("A", -1, group=gid), cat)
    coord.expire_offsets()
    assert set(coord.consumer.groups) == {"keep"}


async def test_the_kafka_exporter_counts_consumer_group_members(coord: GroupCoordinator) -> None:
    from tidegate.gateway.admin.kafka_exporter import _fill_lag, _groups

    cat = Catalog(t=1)
    a = await coord.consumer_heartbeat(_hb("A", 0, group="exp"), cat)
    await coord.consumer_heartbeat(_hb("B", 0, group="exp"), cat)
    await coord.commit_offsets("exp", a.member_epoch, "A", None, {("t", 0): OffsetCommit(4)})
    groups = _groups(coord)
    _fill_lag(groups, {("t", 0): 10})
    (g,) = [g for g in groups if g.group_id == "exp"]
    assert g.members == 2 and g.offsets == {("t", 0): (4, 6)}
