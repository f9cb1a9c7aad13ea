"""The classic group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup
and the deadlines that drive rebalances, as Kafka's GroupCoordinator does them.

A rebalance: the group enters PreparingRebalance and every member must send JoinGroup
again (its request waits); when all known members have rejoined, or the rebalance
timeout (the largest of the members') passes and those that did not rejoin are
dropped, the generation is bumped, a protocol is chosen and the group enters
CompletingRebalance; the leader gets every member's metadata, computes the assignment
itself (any client-side assignor) and sends it with SyncGroup; the broker stores the
group durably, then relays each member its assignment and the group is Stable.

Time is injected (``clock_ms``); nothing here sleeps. ``maintain()`` applies every
deadline that has passed and is called by a ticker every ``tick_interval_ms`` (and by
tests directly after they move their clock).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.core.segmentstore.api import TooLargeError
from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.errors import ErrorCode as E
from tidegate.gateway.groups.model import Group, GroupState, JoinResult, Member, SyncResult
from tidegate.gateway.groups.store import GroupStore

S = GroupState
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    #: JoinGroup v4+: an unknown member first gets MEMBER_ID_REQUIRED and its id.
    require_known_member_id: bool = True


class Membership:
    #: What requests get while the groups are not loaded (``NotCoordinator``: never).
    unloaded_error: int = E.COORDINATOR_LOAD_IN_PROGRESS

    def __init__(
        self,
        store: GroupStore,
        config: GroupConfig,
        clock_ms: Callable[[], int],
        wall_clock_ms: Callable[[], int],
        rng: random.Random,
    ) -> None:
        self.config = config
        self._store = store
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._rng = rng
        self._groups: dict[str, Group] = {}
        self._loaded = False

    # -- helpers -------------------------------------------------------------------------

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    def _new_group(self, group_id: str) -> Group:
        g = Group(group_id, state_changed_ms=self._clock_ms(), empty_since_wall_ms=self._wall_clock_ms())
        self._groups[group_id] = g
        return g

    def _join_result(self, g: Group, member_id: str) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member_id == g.leader_id:
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata_for(g.protocol_name))
                for m in g.members.values()
            )
        return JoinResult(
            E.NONE, member_id, g.generation_id, g.protocol_type, g.protocol_name,
            g.leader_id or "", members,
        )

    @staticmethod
    def _resolve(fut: asyncio.Future[JoinResult] | asyncio.Future[SyncResult] | None, value: object) -> None:
        if fut is not None and not fut.done():
            fut.set_result(value)  # type: ignore[arg-type]  # callers pass the future's own type

    # -- JoinGroup -----------------------------------------------------------------------

    async def join_group(self, req: JoinRequest) -> JoinResult:
        if not self._loaded:
            return JoinResult(self.unloaded_error, req.member_id)
        if not req.group_id:
            return JoinResult(E.INVALID_GROUP_ID, req.member_id)
        c = self.config
        if not c.min_session_timeout_ms <= req.session_timeout_ms <= c.max_session_timeout_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, req.member_id)
        if not req.protocol_type or not req.protocols:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        g = self._groups.get(req.group_id)
        if g is None:
            if req.member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id)
            g = self._new_group(req.group_id)
        if g.is_(S.DEAD):
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not g.supports(req.protocol_type, req.protocols):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        held = sum(m.metadata_bytes() for mid, m in g.members.items() if mid != req.member_id)
        if held + sum(len(md) for _, md in req.protocols) > c.group_metadata_bytes_max:
            log.info("JoinGroup of group %.100r refused: its members' metadata would pass "
                     "group_metadata_bytes_max", req.group_id)
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, req.member_id)
        if not req.member_id or req.member_id in g.pending_members:
            outcome = self._join_new(g, req)
        else:
            outcome = self._join_known(g, req)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome

    def _join_new(self, g: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        now = self._clock_ms()
        if req.group_instance_id is not None:
            old_id = g.static_members.get(req.group_instance_id)
            if old_id is not None and old_id in g.members:
                return self._replace_static_member(g, old_id, req)
        member_id = req.member_id
        if not member_id:
            if len(g.members) + len(g.pending_members) >= self.config.max_group_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED)
            member_id = self._new_member_id(req.group_instance_id or req.client_id)
            if req.group_instance_id is None and req.require_known_member_id:
                g.pending_members[member_id] = now + req.session_timeout_ms
                return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        g.pending_members.pop(member_id, None)
        m = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
            list(req.protocols), session_deadline_ms=now + req.session_timeout_ms,
        )
        return self._add_and_wait(g, m)

    def _add_and_wait(self, g: Group, m: Member) -> asyncio.Future[JoinResult]:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m.awaiting_join = fut
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
        if g.is_(S.EMPTY) or g.protocol_type is None:
            g.protocol_type = m.protocol_type
        if g.leader_id is None:
            g.leader_id = m.member_id
        if g.is_(S.PREPARING_REBALANCE) and g.initial_delay_active:
            now = self._clock_ms()
            g.rebalance_deadline_ms = min(
                now + self.config.initial_rebalance_delay_ms,
                g.state_changed_ms + max(g.max_rebalance_timeout_ms(), self.config.initial_rebalance_delay_ms),
            )
        self._prepare_rebalance_if_settled(g)
        self._maybe_complete_join(g)
        return fut

    def _replace_static_member(
        self, g: Group, old_id: str, req: JoinRequest
    ) -> JoinResult | asyncio.Future[JoinResult]:
        """A known ``group.instance.id`` joins with no member id (a restarted static
        member): it takes over the old member's place under a new id and the old id is
        fenced. A Stable group keeps its assignment when the chosen protocol stays."""
        assert req.group_instance_id is not None
        leader_before = g.leader_id or ""
        old = g.members.pop(old_id)
        new_id = self._new_member_id(req.group_instance_id)
        self._resolve(old.awaiting_join, JoinResult(E.FENCED_INSTANCE_ID, old_id))
        self._resolve(old.awaiting_sync, SyncResult(E.FENCED_INSTANCE_ID))
        old.awaiting_join = old.awaiting_sync = None
        old_protocols = old.protocols
        old.member_id = new_id
        old.protocols = list(req.protocols)
        old.session_timeout_ms = req.session_timeout_ms
        old.rebalance_timeout_ms = req.rebalance_timeout_ms
        old.client_id, old.client_host = req.client_id, req.client_host
        old.session_deadline_ms = self._clock_ms() + req.session_timeout_ms
        g.members[new_id] = old
        g.static_members[req.group_instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        if g.is_(S.STABLE):
            if g.select_protocol() == g.protocol_name and old_protocols == old.protocols:
                self._store.put_group(g)
                # As Kafka: the old leader id, so a rejoining leader does not take itself
                # for the leader and run an assignment a Stable group would not relay.
                return JoinResult(
                    E.NONE, new_id, g.generation_id, g.protocol_type, g.protocol_name,
                    leader_before, (),
                )
            fut = self._await_join(old)
            self._prepare_rebalance(g)
            return fut
        fut = self._await_join(old)
        if g.is_(S.COMPLETING_REBALANCE):
            # The leader may have been sent the old member id; its assignment would
            # not reach the new one, so the group rebalances.
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return fut

    @staticmethod
    def _await_join(m: Member) -> asyncio.Future[JoinResult]:
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        m.awaiting_join = fut
        return fut

    def _join_known(self, g: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if g.fenced(req.group_instance_id, req.member_id):
            return JoinResult(E.FENCED_INSTANCE_ID, req.member_id)
        m = g.members.get(req.member_id)
        if m is None or g.is_(S.EMPTY):
            return JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id)
        m.session_deadline_ms = self._clock_ms() + req.session_timeout_ms
        unchanged = m.same_protocols(req.protocols)
        if g.is_(S.COMPLETING_REBALANCE) and unchanged:
            return self._join_result(g, m.member_id)
        if g.is_(S.STABLE) and unchanged and m.member_id != g.leader_id:
            return self._join_result(g, m.member_id)
        m.protocols = list(req.protocols)
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        # A join that supersedes a pending one (a client retry): the old request is
        # answered with a retriable error so its connection does not stall.
        self._resolve(m.awaiting_join, JoinResult(E.REBALANCE_IN_PROGRESS, m.member_id))
        fut = self._await_join(m)
        self._prepare_rebalance_if_settled(g)
        self._maybe_complete_join(g)
        return fut

    # -- rebalance phases ----------------------------------------------------------------

    def _prepare_rebalance_if_settled(self, g: Group) -> None:
        if g.is_(S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(g)

    def _prepare_rebalance(self, g: Group) -> None:
        now = self._clock_ms()
        if g.is_(S.COMPLETING_REBALANCE):
            for m in g.members.values():
                m.assignment = b""
                self._resolve(m.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
                m.awaiting_sync = None
        from_empty = g.is_(S.EMPTY)
        g.transition(S.PREPARING_REBALANCE, now)
        g.initial_delay_active = from_empty and self.config.initial_rebalance_delay_ms > 0
        if g.initial_delay_active:
            g.rebalance_deadline_ms = now + self.config.initial_rebalance_delay_ms
        else:
            g.rebalance_deadline_ms = now + g.max_rebalance_timeout_ms()

    def _maybe_complete_join(self, g: Group) -> None:
        if g.is_(S.PREPARING_REBALANCE) and not g.initial_delay_active and g.all_members_joined():
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        now = self._clock_ms()
        for m in list(g.members.values()):
            # Members that did not rejoin in time leave; static ones keep their place
            # until their session expires, as in Kafka.
            if m.awaiting_join is None and m.group_instance_id is None:
                self._drop(g, m, E.UNKNOWN_MEMBER_ID)
        g.initial_delay_active = False
        g.generation_id += 1
        if not g.members:
            g.protocol_name = None
            g.leader_id = None
            g.transition(S.EMPTY, now)
            g.empty_since_wall_ms = self._wall_clock_ms()
            self._store.put_group(g)
            return
        g.protocol_name = g.select_protocol()
        joined = [m for m in g.members.values() if m.awaiting_join is not None]
        if g.leader_id not in g.members or g.members[g.leader_id].awaiting_join is None:
            g.leader_id = (joined[0] if joined else next(iter(g.members.values()))).member_id
        g.transition(S.COMPLETING_REBALANCE, now)
        g.rebalance_deadline_ms = now + g.max_rebalance_timeout_ms()
        log.info(
            "group %r generation %d: %d members, protocol %s, leader %s",
            g.group_id, g.generation_id, len(g.members), g.protocol_name, g.leader_id,
        )
        for m in joined:
            fut, m.awaiting_join = m.awaiting_join, None
            m.session_deadline_ms = now + m.session_timeout_ms
            self._resolve(fut, self._join_result(g, m.member_id))

    def _drop(self, g: Group, m: Member, error: int) -> None:
        """Take a member out of the group's books (no state change)."""
        self._resolve(m.awaiting_join, JoinResult(error, m.member_id))
        self._resolve(m.awaiting_sync, SyncResult(error))
        m.awaiting_join = m.awaiting_sync = None
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _remove_member(self, g: Group, m: Member, error: int = E.UNKNOWN_MEMBER_ID) -> None:
        """A member leaves or expires: the group rebalances without it."""
        self._drop(g, m, error)
        if g.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)

    # -- SyncGroup -----------------------------------------------------------------------

    def _fail_sync(self, g: Group, error: int) -> None:
        """Every member waiting for its assignment gets ``error``; none is kept; the
        group rebalances (Kafka's ``resetAndPropagateAssignmentError``)."""
        for other in g.members.values():
            other.assignment = b""
            self._resolve(other.awaiting_sync, SyncResult(error))
            other.awaiting_sync = None
        self._prepare_rebalance(g)

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes | memoryview],
    ) -> SyncResult:
        if not self._loaded:
            return SyncResult(self.unloaded_error)
        g = self._groups.get(group_id)
        if g is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if g.is_(S.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        if g.fenced(group_instance_id, member_id):
            return SyncResult(E.FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None or g.is_(S.EMPTY):
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if generation_id != g.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol_name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if g.is_(S.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        m.session_deadline_ms = self._clock_ms() + m.session_timeout_ms
        if g.is_(S.STABLE):
            return SyncResult(E.NONE, m.assignment, g.protocol_type, g.protocol_name)
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._resolve(m.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
        m.awaiting_sync = fut
        if member_id == g.leader_id:
            held = sum(len(md) for o in g.members.values() for _, md in o.protocols)
            held += sum(len(assignments.get(o, b"")) for o in g.members)
            if held > self.config.group_metadata_bytes_max:
                log.info("SyncGroup of group %.100r refused: %d bytes of metadata and "
                         "assignments over group_metadata_bytes_max", group_id, held)
                self._fail_sync(g, E.UNKNOWN_SERVER_ERROR)
                return SyncResult(E.UNKNOWN_SERVER_ERROR)
            for other in g.members.values():
                other.assignment = bytes(assignments.get(other.member_id, b""))  # out of the frame
            written = self._store.put_group(g)
            generation = g.generation_id
            try:
                await written
            except Exception as exc:  # noqa: BLE001 - any storage failure: the group rebalances
                # A group too large to store is final (Kafka: UNKNOWN_SERVER_ERROR); any
                # other failure the client retries.
                error = (E.UNKNOWN_SERVER_ERROR if isinstance(exc, TooLargeError)
                         else E.COORDINATOR_NOT_AVAILABLE)
                if g.is_(S.COMPLETING_REBALANCE) and g.generation_id == generation:
                    self._fail_sync(g, error)
                return await fut if fut.done() else SyncResult(error)
            if g.is_(S.COMPLETING_REBALANCE) and g.generation_id == generation:
                g.transition(S.STABLE, self._clock_ms())
                for other in g.members.values():
                    sync, other.awaiting_sync = other.awaiting_sync, None
                    self._resolve(
                        sync, SyncResult(E.NONE, other.assignment, g.protocol_type, g.protocol_name)
                    )
        return await fut

    # -- Heartbeat / LeaveGroup ----------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        if not self._loaded:
            return self.unloaded_error
        g = self._groups.get(group_id)
        if g is None:
            return E.UNKNOWN_MEMBER_ID
        if g.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if g.fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        m = g.members.get(member_id)
        if m is None or g.is_(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if generation_id != g.generation_id:
            return E.ILLEGAL_GENERATION
        m.session_deadline_ms = self._clock_ms() + m.session_timeout_ms
        if g.is_(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """Remove ``(member_id, group_instance_id)`` pairs; an empty member id with an
        instance id removes whichever member holds that instance id (admin removal).
        Returns the top-level error and one error per member."""
        if not self._loaded:
            return self.unloaded_error, []
        g = self._groups.get(group_id)
        if g is None:
            return E.NONE, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in members]
        if g.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[str, str | None, int]] = []
        for member_id, instance_id in members:
            target = member_id
            if not member_id and instance_id is not None:
                target = g.static_members.get(instance_id, "")
            if member_id and g.fenced(instance_id, member_id):
                results.append((member_id, instance_id, E.FENCED_INSTANCE_ID))
            elif target in g.pending_members:
                del g.pending_members[target]
                self._maybe_complete_join(g)
                results.append((member_id, instance_id, E.NONE))
            elif target not in g.members:
                results.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
            else:
                self._remove_member(g, g.members[target])
                results.append((member_id, instance_id, E.NONE))
        return E.NONE, results

    # -- deadlines -----------------------------------------------------------------------

    def maintain(self) -> None:
        """Apply every deadline that has passed: expired pending member ids, expired
        sessions, ended join phases, and members that never sent SyncGroup."""
        now = self._clock_ms()
        for g in list(self._groups.values()):
            for pid, deadline in list(g.pending_members.items()):
                if now >= deadline:
                    del g.pending_members[pid]
            for m in list(g.members.values()):
                waiting = m.awaiting_join is not None or m.awaiting_sync is not None
                if not waiting and now >= m.session_deadline_ms and g.members.get(m.member_id) is m:
                    self._remove_member(g, m)
            if g.is_(S.PREPARING_REBALANCE) and now >= g.rebalance_deadline_ms:
                if g.initial_delay_active:
                    g.initial_delay_active = False
                    g.rebalance_deadline_ms = g.state_changed_ms + g.max_rebalance_timeout_ms()
                    if now >= g.rebalance_deadline_ms or g.all_members_joined():
                        self._complete_join(g)
                else:
                    self._complete_join(g)
            elif g.is_(S.PREPARING_REBALANCE):
                self._maybe_complete_join(g)
            elif g.is_(S.COMPLETING_REBALANCE) and now >= g.rebalance_deadline_ms:
                laggards = [m for m in g.members.values() if m.awaiting_sync is None]
                if laggards:
                    for m in laggards:
                        self._drop(g, m, E.UNKNOWN_MEMBER_ID)
                    self._prepare_rebalance(g)
                    self._maybe_complete_join(g)
