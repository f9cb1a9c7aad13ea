"""Classic-protocol members inside a consumer group (after an online upgrade, or a
classic consumer joining a consumer group that has members): JoinGroup, SyncGroup,
Heartbeat and LeaveGroup answered from the consumer group, as Kafka's
GroupMetadataManager does (``classicGroup*ToConsumerGroup``).

- **JoinGroup** subscribes the member with the topics of its ConsumerProtocol
  subscription (a change bumps the group epoch, the server-side assignor computes the
  target), moves it one reconciliation step with the partitions its subscription says
  it owns, and answers at once: generation = its member epoch, its first protocol,
  nobody as leader (so it sends an empty SyncGroup as a follower).
- **SyncGroup** answers its assigned partitions encoded as the ConsumerProtocol
  assignment of its subscription's version; REBALANCE_IN_PROGRESS when the group
  epoch moved past it (unless it is still revoking: it first finishes that step).
- **Heartbeat** is REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch
  moved past it, it must revoke, or the partitions it waits for are free.
- A classic member that is told to rejoin and does not within its rebalance timeout,
  or joins and sends no SyncGroup within it, is removed; its session is its own
  JoinGroup's session timeout.

Generations are member epochs: a wrong one is ILLEGAL_GENERATION (OffsetCommit too).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence

from tidegate.gateway.groups.consumer_groups import ConsumerGroups
from tidegate.gateway.groups.consumer_model import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from tidegate.gateway.groups.errors import ErrorCode as E
from tidegate.gateway.groups.membership import JoinRequest
from tidegate.gateway.groups.migration import (
    CONSUMER_PROTOCOL,
    MalformedProtocol,
    decode_subscription,
    encode_assignment,
    owned_partitions,
)
from tidegate.gateway.groups.model import JoinResult, SyncResult
from tidegate.gateway.groups.reconcile import (
    TopicCatalog,
    compute_target,
    reconcile,
    subscription_metadata,
)

log = logging.getLogger(__name__)


def _waiting_on_unreleased(g: ConsumerGroup, m: ConsumerMember) -> bool:
    """Kafka's ``waitingOnUnreleasedPartition``: a target partition it lacks is still
    owned by another member."""
    if m.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    others = g.owners(besides=m.member_id)
    return any(
        (t, p) in others
        for t, ps in g.target.get(m.member_id, {}).items() for p in ps
        if p not in m.assigned.get(t, frozenset())
    )


class ClassicMembers:
    def __init__(self, consumer: ConsumerGroups) -> None:
        self._consumer = consumer

    def _member(
        self, g: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerMember | int:
        """Kafka's ``validateConsumerGroupMember`` plus the classic-protocol check."""
        if instance_id is None:
            m = g.members.get(member_id)
        else:
            mid = g.static_members.get(instance_id)
            if mid is None:
                return E.UNKNOWN_MEMBER_ID
            if mid != member_id:
                return E.FENCED_INSTANCE_ID
            m = g.members[mid]
        if m is None or m.classic is None:
            return E.UNKNOWN_MEMBER_ID
        return m

    def _rejoin_needed(self, m: ConsumerMember, now_ms: int) -> None:
        if m.join_deadline_ms is None:
            m.join_deadline_ms = now_ms + m.rebalance_timeout_ms

    # -- JoinGroup -----------------------------------------------------------------------

    async def join(self, g: ConsumerGroup, req: JoinRequest, catalog: TopicCatalog) -> JoinResult:
        c = self._consumer
        now = c.clock_ms()
        member_id = req.member_id or str(uuid.uuid4())
        if req.member_id not in g.members and len(g.members) >= c.config.max_group_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, req.member_id)
        mine = {n for n, _ in req.protocols}
        classic_others = [m for m in g.members.values() if m.classic is not None and m.member_id != member_id]
        if req.protocol_type != CONSUMER_PROTOCOL or not req.protocols or any(
            not mine & {n for n, _ in m.classic.protocols} for m in classic_others if m.classic is not None
        ):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id)
        try:
            sub = decode_subscription(req.protocols[0][1])
        except MalformedProtocol:
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        before_epochs, before_ids = (g.group_epoch, g.assignment_epoch), set(g.members)
        epoch_at_start = g.group_epoch
        m = self._join_member(g, req, member_id)
        if isinstance(m, JoinResult):
            return m
        changed = False  # a new member's subscription differs from its empty one
        names = tuple(sorted(sub.topics or ()))
        if names != m.subscribed_names or m.subscribed_regex is not None:
            m.subscribed_names, m.subscribed_regex, changed = names, None, True
        rack = getattr(sub, "rack_id", None)
        if rack is not None:
            m.rack_id = rack
        if req.rebalance_timeout_ms > 0:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.server_assignor = None
        m.client_id, m.client_host = req.client_id, req.client_host
        m.classic = ClassicMetadata(req.session_timeout_ms, list(req.protocols))
        metadata = subscription_metadata(g, catalog)
        if metadata != g.topics:
            g.topics, changed = metadata, True
        if changed and g.group_epoch == epoch_at_start:
            g.group_epoch += 1
        if g.group_epoch > g.assignment_epoch:
            compute_target(g)
        reconcile(g, m, owned_partitions(sub), now)
        m.join_deadline_ms = None
        m.session_deadline_ms = now + req.session_timeout_ms
        m.sync_deadline_ms = now + m.rebalance_timeout_ms
        try:
            await c.persist(g, before_epochs, before_ids, m.member_id)
        except Exception:  # noqa: BLE001 - reported to the client, which retries
            log.exception("writing consumer group %r failed", g.group_id)
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, req.member_id)
        return JoinResult(
            E.NONE, m.member_id, m.member_epoch, CONSUMER_PROTOCOL, m.classic.protocol_name, "", ()
        )

    def _join_member(self, g: ConsumerGroup, req: JoinRequest, member_id: str) -> ConsumerMember | JoinResult:
        iid = req.group_instance_id
        if iid is None:
            existing = g.members.get(member_id)
            if existing is not None and existing.classic is None:
                return JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id)
            if existing is None:
                existing = g.members[member_id] = ConsumerMember(member_id)
            return existing
        old_id = g.static_members.get(iid)
        if old_id is None:
            m = g.members.get(member_id) or ConsumerMember(member_id, instance_id=iid)
            g.members[member_id] = m
            g.static_members[iid] = member_id
            return m
        if req.member_id and req.member_id != old_id:
            return JoinResult(E.FENCED_INSTANCE_ID, req.member_id)
        if old_id == member_id:
            return g.members[old_id]
        # A restarted static member (no member id) takes its old place and partitions.
        old = g.members.pop(old_id)
        m = ConsumerMember(
            member_id, instance_id=iid, assigned=old.assigned, revoking=old.revoking, state=old.state,
            member_epoch=old.member_epoch, previous_epoch=old.previous_epoch,
            assignment_epochs=old.assignment_epochs, subscribed_names=old.subscribed_names,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
        )
        g.target[member_id] = g.target.pop(old_id, {})
        g.members[member_id] = m
        g.static_members[iid] = member_id
        return m

    # -- SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------

    def sync(
        self, g: ConsumerGroup, generation_id: int, member_id: str, instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None,
    ) -> SyncResult:
        m = self._member(g, member_id, instance_id)
        if isinstance(m, int):
            return SyncResult(m)
        assert m.classic is not None
        if generation_id != m.member_epoch:
            return SyncResult(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) or (
            protocol_name is not None and protocol_name != m.classic.protocol_name
        ):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        now = self._consumer.clock_ms()
        if g.group_epoch > m.member_epoch and m.state is not MemberState.UNREVOKED_PARTITIONS:
            self._rejoin_needed(m, now)
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        m.sync_deadline_ms = None
        m.session_deadline_ms = now + m.classic.session_timeout_ms
        name = m.classic.protocol_name
        return SyncResult(
            E.NONE, encode_assignment(m.assigned, m.classic.protocols[0][1]), CONSUMER_PROTOCOL, name
        )

    def heartbeat(self, g: ConsumerGroup, generation_id: int, member_id: str, instance_id: str | None) -> int:
        m = self._member(g, member_id, instance_id)
        if isinstance(m, int):
            return m
        assert m.classic is not None
        if generation_id != m.member_epoch:
            return E.ILLEGAL_GENERATION
        now = self._consumer.clock_ms()
        m.session_deadline_ms = now + m.classic.session_timeout_ms
        if (
            m.member_epoch < g.group_epoch
            or m.state is MemberState.UNREVOKED_PARTITIONS
            or (m.state is MemberState.UNRELEASED_PARTITIONS and not _waiting_on_unreleased(g, m))
        ):
            self._rejoin_needed(m, now)
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave(
        self, g: ConsumerGroup, members: Sequence[tuple[str, str | None]]
    ) -> list[tuple[str, str | None, int]]:
        """Remove classic members (LeaveGroup answers once they are out of the books;
        the write follows in order with every other write of the group)."""
        c = self._consumer
        results: list[tuple[str, str | None, int]] = []
        before_epochs, before_ids = (g.group_epoch, g.assignment_epoch), set(g.members)
        converted = None
        for member_id, instance_id in members:
            if converted is not None:  # the group became classic: the rest are unknown here
                results.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                continue
            target = member_id
            if instance_id is not None and not member_id:  # an admin's removal by instance id
                target = g.static_members.get(instance_id, "")
            found = self._member(g, target, instance_id)
            if isinstance(found, int):
                results.append((member_id, instance_id, found))
                continue
            log.info("consumer group %r: classic member %s left", g.group_id, found.member_id)
            converted = c.fence(g, found.member_id)
            results.append((member_id, instance_id, E.NONE))
        if converted is not None:
            converted.add_done_callback(_log_failure)
        elif set(g.members) != before_ids:
            c.persist(g, before_epochs, before_ids, None).add_done_callback(_log_failure)
        return results


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("writing a consumer group after a leave failed: %r", done.exception())
