"""Which kind of group answers a request: a classic group (``membership.py``) or a
KIP-848 consumer group (``consumer_groups.py``, with classic members in it through
``classic_members.py``), and the online migration between the two (``migration.py``)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tidegate.core.segmentstore.api import TableUpdate
from tidegate.gateway.groups import migration
from tidegate.gateway.groups.classic_members import ClassicMembers
from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.consumer_groups import (
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResult,
)
from tidegate.gateway.groups.consumer_model import ConsumerGroup
from tidegate.gateway.groups.errors import ErrorCode as E
from tidegate.gateway.groups.membership import JoinRequest, Membership
from tidegate.gateway.groups.model import Group, GroupState, JoinResult, SyncResult
from tidegate.gateway.groups.reconcile import TopicCatalog
from tidegate.gateway.groups.store import GroupStore, encode_group, group_key

S = GroupState
log = logging.getLogger(__name__)


class _KnownTopics:
    """The topics a consumer group already knows, for a JoinGroup that brought none."""

    def __init__(self, g: ConsumerGroup) -> None:
        self._topics = {t: _KnownTopic(n, tid) for t, (tid, n) in g.topics.items()}

    def get(self, name: str) -> _KnownTopic | None:
        return self._topics.get(name)

    def names(self) -> list[str]:
        return list(self._topics)


@dataclass(frozen=True, slots=True)
class _KnownTopic:
    partitions: int
    topic_id: str


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("writing a group failed: %r", done.exception())



class GroupKinds(Membership):
    """Classic groups (``Membership``) and KIP-848 consumer groups side by side: a
    request is answered by the kind its group id is now, and a live group moves between
    the kinds as Kafka's online migration does (``migration.py``)."""

    def __init__(
        self,
        store: GroupStore,
        config: GroupConfig,
        clock_ms: Callable[[], int],
        wall_clock_ms: Callable[[], int],
        rng: random.Random,
    ) -> None:
        super().__init__(store, config, clock_ms, wall_clock_ms, rng)
        #: KIP-848 groups; a group id is either one of these or a classic group, whose
        #: ``Group`` object then only holds the committed offsets.
        self.consumer = ConsumerGroups(self._store, config, clock_ms)
        self.consumer.downgrade = self._downgrade
        #: Classic-protocol members of consumer groups (after an online upgrade).
        self._classic_in_consumer = ClassicMembers(self.consumer)

    # -- KIP-848 consumer groups --------------------------------------------------------

    async def consumer_heartbeat(self, req: HeartbeatRequest, topics: TopicCatalog) -> HeartbeatResult:
        if not self._loaded:
            return HeartbeatResult(self.unloaded_error)
        classic = self._groups.get(req.group_id)
        if req.group_id not in self.consumer.groups and classic is not None and not classic.is_(S.EMPTY):
            # Kafka converts an empty classic group (its commits stay), and a live one
            # when the migration policy allows it (``migration.py``).
            refused = self.consumer.check(req)
            if refused is not None:
                return refused
            not_consumer = HeartbeatResult(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
            if req.member_epoch != 0:
                return not_consumer
            why = migration.upgrade_refusal(classic, self.config)
            if why is not None:
                log.info("cannot upgrade classic group %r to a consumer group: %s", req.group_id, why)
                return not_consumer
            try:
                self._upgrade(classic)
            except migration.MalformedProtocol as exc:
                log.warning("cannot upgrade classic group %r: %s", req.group_id, exc)
                return HeartbeatResult(
                    E.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {req.group_id} to consumer "
                    "group because the embedded consumer protocol is malformed.",
                )
            result = await self.consumer.heartbeat(req, topics)
            # The classic side is written empty after the consumer group (a crash between
            # the two writes: the consumer group's entry wins at load).
            self._store.put_group(classic).add_done_callback(_log_failure)
            return result
        return await self.consumer.heartbeat(req, topics)

    def _upgrade(self, classic: Group) -> None:
        cg = migration.consumer_group_from_classic(classic)
        log.info(
            "classic group %r (generation %d, %d members) becomes a consumer group",
            classic.group_id, classic.generation_id, len(cg.members),
        )
        for m in classic.members.values():
            self._resolve(m.awaiting_join, JoinResult(E.REBALANCE_IN_PROGRESS, m.member_id))
            self._resolve(m.awaiting_sync, SyncResult(E.REBALANCE_IN_PROGRESS))
            m.awaiting_join = m.awaiting_sync = None
        migration.empty_classic_holder(classic, self._clock_ms(), self._wall_clock_ms())
        self.consumer.groups[cg.group_id] = cg

    def _downgrade(self, cg: ConsumerGroup, leaving: str) -> asyncio.Future[None] | None:
        """The online downgrade (``migration.py``) when ``leaving`` goes; None if not."""
        if not migration.downgrade_allowed(cg, leaving, self.config):
            return None
        now = self._clock_ms()
        g = self._groups.get(cg.group_id) or self._new_group(cg.group_id)
        removals = self.consumer.delete(cg.group_id)
        migration.fill_classic_from_consumer(g, cg, leaving, now)
        log.info(
            "consumer group %r (epoch %d) becomes a classic group of %d members",
            g.group_id, g.generation_id, len(g.members),
        )
        written = self._store.submit([TableUpdate(group_key(g.group_id), encode_group(g))], removals)
        self._prepare_rebalance(g)
        return written

    def describe_consumer_groups(
        self, group_ids: Sequence[str]
    ) -> list[tuple[str, int, str | None, ConsumerGroup | None]]:
        """``(group id, error, message, group)`` for ConsumerGroupDescribe."""
        if not self._loaded:
            return [(gid, self.unloaded_error, None, None) for gid in group_ids]
        return self.consumer.describe(group_ids, classic=self._groups)

    def consumer_group_members(self, group_id: str) -> int:
        """How many members a KIP-848 group has (0 when it is not one)."""
        cg = self.consumer.groups.get(group_id)
        return 0 if cg is None else len(cg.members)

    def assigned_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions the group's members are assigned now (a classic group's only
        while Stable, from its consumer-protocol assignments), committed or not."""
        cg = self.consumer.groups.get(group_id)
        if cg is not None:
            return {(t, p) for m in cg.members.values() for t, ps in m.assigned.items() for p in ps}
        g = self._groups.get(group_id)
        if g is None or not g.is_(GroupState.STABLE) or g.protocol_type != "consumer":
            return set()
        out: set[tuple[str, int]] = set()
        for m in g.members.values():
            try:
                assigned = migration.decode_assignment(m.assignment)
            except migration.MalformedProtocol:
                continue  # a client's own protocol bytes: nothing to report for it
            out.update((t, p) for t, ps in assigned.items() for p in ps)
        return out

    async def join_group(self, req: JoinRequest, topics: TopicCatalog | None = None) -> JoinResult:
        size = sum(len(md) for _, md in req.protocols)
        if size > self.config.member_metadata_bytes_max:
            log.info("JoinGroup of group %.100r refused: %d bytes of protocol metadata over "
                     "member_metadata_bytes_max", req.group_id, size)
            return JoinResult(E.INVALID_REQUEST, req.member_id)
        cg = self.consumer.groups.get(req.group_id)
        if cg is not None and self._loaded:
            if cg.members:
                c = self.config
                if not c.min_session_timeout_ms <= req.session_timeout_ms <= c.max_session_timeout_ms:
                    return JoinResult(E.INVALID_SESSION_TIMEOUT, req.member_id)
                return await self._classic_in_consumer.join(cg, req, topics or _KnownTopics(cg))
            # An empty consumer group becomes a classic one (its commits stay).
            self._store.submit(removals=self.consumer.delete(req.group_id))
        return await super().join_group(req)

    async def sync_group(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
        protocol_type: str | None, protocol_name: str | None,
        assignments: Mapping[str, bytes | memoryview],
    ) -> SyncResult:
        cg = self.consumer.groups.get(group_id)
        if cg is not None and self._loaded:
            if not cg.members:
                return SyncResult(E.UNKNOWN_MEMBER_ID)
            return self._classic_in_consumer.sync(
                cg, generation_id, member_id, group_instance_id, protocol_type, protocol_name
            )
        return await super().sync_group(
            group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, assignments
        )

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        cg = self.consumer.groups.get(group_id)
        if cg is not None and self._loaded:
            return self._classic_in_consumer.heartbeat(cg, generation_id, member_id, group_instance_id)
        return super().heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        cg = self.consumer.groups.get(group_id)
        if cg is not None and self._loaded:
            return E.NONE, self._classic_in_consumer.leave(cg, members)
        return super().leave_group(group_id, members)
