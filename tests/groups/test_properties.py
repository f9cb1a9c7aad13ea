"""Random interleavings of the group protocol by several clients (two of them static
members), with clock jumps and coordinator restarts: no call fails, the state machine's
invariants hold after every step, and once the clients go quiet every pending JoinGroup
and SyncGroup is answered within the configured timeouts."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.groups import GroupCoordinator, GroupState, OffsetCommit
from tidegate.protocol.errors import ErrorCode as E

from tests.groups.conftest import FakeClock, join_req, make_coordinator

ACTIONS = ["join", "join", "sync", "heartbeat", "leave", "commit", "tick", "restart"]
S = GroupState


@dataclass
class Client:
    index: int
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


def check_invariants(coord: GroupCoordinator) -> None:
    g = coord.group("g")
    if g is None:
        return
    members = g.members
    assert (g.leader_id in members) if members else g.leader_id is None or g.state is S.PREPARING_REBALANCE
    if g.state is S.EMPTY:
        assert not members
    if g.state in (S.STABLE, S.COMPLETING_REBALANCE):
        assert members and g.leader_id in members
        assert all(m.awaiting_join is None for m in members.values())
    if g.state in (S.STABLE, S.PREPARING_REBALANCE):
        assert all(m.awaiting_sync is None for m in members.values())
    assert set(g.static_members.values()) <= set(members)
    for instance, mid in g.static_members.items():
        assert members[mid].group_instance_id == instance


def absorb(c: Client) -> None:
    """Take the answers of finished calls as a client would."""
    for t in [t for t in c.tasks if t.done()]:
        c.tasks.remove(t)
        if t.cancelled():
            continue
        kind, res = t.result()
        if kind == "join":
            if res.error in (E.MEMBER_ID_REQUIRED, E.NONE):
                c.member_id = res.member_id
            if res.error == E.NONE:
                c.generation = res.generation_id
                c.leader = res.leader_id == res.member_id
                c.members = [m[0] for m in res.members]
            elif res.error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1


async def _call(kind: str, coro: Any) -> tuple[str, Any]:
    return kind, await coro


async def run(ops: list[tuple[str, int, int]], seed: int) -> None:
    store = InMemorySegmentStore()
    clock = FakeClock()
    coord = make_coordinator(store, clock, initial_rebalance_delay_ms=500)
    await coord.start(ticker=False)
    clients = [Client(i, f"static-{i}" if i < 2 else None) for i in range(4)]
    rng = random.Random(seed)
    for action, who, amount in ops:
        c = clients[who]
        if action == "join" and not c.tasks:
            req = join_req(member_id=c.member_id, instance=c.instance, client_id=f"c{who}",
                           session_ms=6_000, rebalance_ms=8_000)
            c.tasks.append(asyncio.create_task(_call("join", coord.join_group(req))))
        elif action == "sync" and not c.tasks and c.member_id:
            assignments = {m: f"{m}@{c.generation}".encode() for m in c.members} if c.leader else {}
            c.tasks.append(asyncio.create_task(_call("sync", coord.sync_group(
                "g", c.generation, c.member_id, c.instance, None, None, assignments))))
        elif action == "heartbeat" and c.member_id:
            coord.heartbeat("g", c.generation, c.member_id, c.instance)
        elif action == "leave" and c.member_id:
            coord.leave_group("g", [(c.member_id, c.instance)])
        elif action == "commit":
            await coord.commit_offsets("g", c.generation, c.member_id, c.instance,
                                       {("t", who): OffsetCommit(amount)})
        elif action == "tick":
            clock.advance(amount)
            coord.maintain()
        elif action == "restart" and rng.random() < 0.3:
            await coord.close()
            coord = make_coordinator(store, clock, initial_rebalance_delay_ms=500)
            await coord.start(ticker=False)
        for _ in range(3):
            await asyncio.sleep(0)
        for cl in clients:
            absorb(cl)
        check_invariants(coord)
    # Quiet: within a few rebalance/session timeouts every pending call is answered.
    for _ in range(6):
        clock.advance(10_000)
        coord.maintain()
        for _ in range(3):
            await asyncio.sleep(0)
        check_invariants(coord)
    pending = [t for cl in clients for t in cl.tasks if not t.done()]
    assert not pending, "calls left unanswered after every timeout passed"
    g = coord.group("g")
    assert g is None or g.state in (S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE) or not g.members
    await coord.close()


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(ACTIONS), st.integers(0, 3), st.integers(0, 12_000)),
        max_size=50,
    ),
    seed=st.integers(0, 2**16),
)
def test_random_interleavings_keep_invariants_and_answer_every_call(
    ops: list[tuple[str, int, int]], seed: int
) -> None:
    asyncio.run(run(ops, seed))
