"""The group coordinator: classic and KIP-848 groups (``kinds.py``, over
``membership.py`` and ``consumer_groups.py``) plus committed offsets and the admin views
of groups (DescribeGroups, ListGroups, DeleteGroups, OffsetDelete).

Committed offsets follow Kafka's rules: a commit with generation -1 (a "simple"
consumer using ``assign``, or an admin) is accepted only while the group has no
members; a member's commit must carry its current generation, and is refused with
REBALANCE_IN_PROGRESS while the group waits for its leader's assignment. A commit is
answered once it is durable, and a fetch only ever sees durable commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tidegate.core.segmentstore.api import (
    ContainerNotOwnedError,
    SegmentStore,
    StoreShutdownError,
    TooLargeError,
)
from tidegate.gateway.groups import migration
from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.errors import (
    GROUP_SUBSCRIBED_TO_TOPIC,
    NON_EMPTY_GROUP,
    OFFSET_METADATA_TOO_LARGE,
)
from tidegate.gateway.groups.errors import ErrorCode as E
from tidegate.gateway.groups.kinds import GroupKinds
from tidegate.gateway.groups.model import CommittedOffset, Group, GroupState
from tidegate.gateway.groups.store import (
    GroupStore,
    decode_group,
    decode_offset,
    parse_offset_key,
)

S = GroupState
log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    error: int
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberDescription, ...] = ()
    #: DescribeGroups v6's error message, where Kafka has one of its own.
    message: str | None = None


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinator(GroupKinds):
    """Every group of this node. ``start()`` loads the durable state and starts the
    deadline ticker and the writer; ``close()`` stops both after pending writes."""

    def __init__(
        self,
        store: SegmentStore,
        config: GroupConfig | None = None,
        *,
        clock_ms: Callable[[], int] = _monotonic_ms,
        wall_clock_ms: Callable[[], int] = _wall_ms,
        rng: random.Random | None = None,
    ) -> None:
        config = config or GroupConfig()
        super().__init__(
            GroupStore(store, config.table, queue_writes_max=config.queue_writes_max),
            config,
            clock_ms,
            wall_clock_ms,
            rng or random.Random(),
        )
        self._ticker: asyncio.Task[None] | None = None
        self._retention_checked_ms = clock_ms()

    async def start(self, *, ticker: bool = True) -> None:
        """Load groups and offsets. With ``ticker=False`` nothing runs in the
        background and the caller drives ``maintain()`` (tests with a fake clock)."""
        now = self._clock_ms()
        entries = await self._store.open()
        for e in entries:
            if e.key.startswith(b"g"):
                gid = e.key[1:].decode()
                loaded = decode_group(gid, e.value, now, self._wall_clock_ms())
                if gid in self._groups:
                    loaded.offsets = self._groups[gid].offsets
                self._groups[gid] = loaded
        for e in entries:
            if e.key.startswith(b"o"):
                gid, topic, partition = parse_offset_key(e.key)
                g = self._groups.get(gid) or self._new_group(gid)
                g.offsets[(topic, partition)] = decode_offset(e.value)
        self.consumer.load(entries)
        for gid in self.consumer.groups:
            holder = self._groups.get(gid)
            if holder is not None and holder.members:
                # A crash between an upgrade's writes: the consumer group's entry wins.
                migration.empty_classic_holder(holder, now, self._wall_clock_ms())
        self._loaded = True
        if ticker:
            self._ticker = asyncio.create_task(self._tick(), name="group-coordinator-ticker")
        log.info("group coordinator loaded %d groups", len(self._groups))

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for g in self._groups.values():
            for m in g.members.values():
                for fut in (m.awaiting_join, m.awaiting_sync):
                    if fut is not None and not fut.done():
                        fut.cancel()
        await self._store.close()
        self._loaded = False

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_interval_ms / 1000)
            try:
                self.maintain()
            except Exception:  # a bug here must not stop every deadline for good
                log.exception("group coordinator maintenance failed")

    def maintain(self) -> None:
        super().maintain()
        self.consumer.maintain()
        now = self._clock_ms()
        if now - self._retention_checked_ms >= self.config.offsets_retention_check_interval_ms:
            self._retention_checked_ms = now
            self.expire_offsets()

    def expire_offsets(self) -> int:
        """Drop commits past ``offsets_retention_ms`` (Kafka's KIP-211 rules, see
        ``GroupConfig``); returns how many. Groups left Empty with none are removed."""
        now = self._wall_clock_ms()
        keep_ms = self.config.offsets_retention_ms
        removed = 0
        for g in list(self._groups.values()):
            cg = self.consumer.groups.get(g.group_id)
            if cg is not None and cg.members:
                continue  # a live consumer group's commits stay
            if g.is_(S.EMPTY) and g.protocol_type:
                since = g.empty_since_wall_ms
                expired = list(g.offsets) if since is not None and now - since >= keep_ms else []
            else:
                subscribed: set[str] | None = set()
                if not g.is_(S.EMPTY):
                    subscribed = g.subscribed_topics()
                expired = [] if subscribed is None else [
                    tp for tp, o in g.offsets.items()
                    if tp[0] not in subscribed and now - o.commit_timestamp_ms >= keep_ms
                ]
            if not expired:
                continue
            self._store.remove_offsets(g.group_id, expired)
            for tp in expired:
                del g.offsets[tp]
            removed += len(expired)
            self._forget_if_unused(g)
        if removed:
            log.info("offset retention: %d commits expired", removed)
        for cg in list(self.consumer.groups.values()):
            holder = self._groups.get(cg.group_id)
            if not cg.members and (holder is None or not holder.offsets):
                # An empty consumer group with no commits is gone, as Kafka's cleanup does it.
                self._store.submit(removals=self.consumer.delete(cg.group_id))
        return removed

    # -- offsets -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, OffsetCommit],
        *,
        api_version: int = 9,
    ) -> dict[TopicPartition, int]:
        """``generation_id`` is the member epoch for a consumer (KIP-848) group."""
        def all_(err: int) -> dict[TopicPartition, int]:
            return dict.fromkeys(offsets, err)

        if not self._loaded:
            return all_(self.unloaded_error)
        if not group_id:
            return all_(E.INVALID_GROUP_ID)
        g = self._groups.get(group_id)
        rejected: dict[TopicPartition, int] = {}
        if group_id in self.consumer.groups:
            err, rejected = self.consumer.check_commit(
                group_id, member_id, generation_id, api_version, list(offsets)
            )
            if err != E.NONE:
                return all_(err)
            g = g or self._new_group(group_id)
        elif g is None:
            if generation_id >= 0:
                return all_(E.ILLEGAL_GENERATION)
            g = self._new_group(group_id)
        elif g.is_(S.DEAD):
            return all_(E.COORDINATOR_NOT_AVAILABLE)
        elif g.fenced(group_instance_id, member_id):
            return all_(E.FENCED_INSTANCE_ID)
        elif not (generation_id < 0 and g.is_(S.EMPTY)):
            if g.is_(S.COMPLETING_REBALANCE):
                return all_(E.REBALANCE_IN_PROGRESS)
            m = g.members.get(member_id)
            if m is None:
                return all_(E.UNKNOWN_MEMBER_ID)
            if generation_id != g.generation_id:
                return all_(E.ILLEGAL_GENERATION)
            m.session_deadline_ms = self._clock_ms() + m.session_timeout_ms
        errors: dict[TopicPartition, int] = dict(rejected)
        accepted: dict[TopicPartition, CommittedOffset] = {}
        now = self._wall_clock_ms()
        for tp, c in offsets.items():
            if tp in rejected:
                continue
            if c.metadata is not None and len(c.metadata.encode()) > self.config.offset_metadata_bytes_max:
                errors[tp] = OFFSET_METADATA_TOO_LARGE
            else:
                accepted[tp] = CommittedOffset(c.offset, c.leader_epoch, c.metadata, now)
        if accepted:
            try:
                await self._store.put_offsets(group_id, accepted)
            except TooLargeError as exc:  # a group id longer than a table key may be
                log.warning("offsets of group %.64r not committed: %s", group_id, exc)
                return {**errors, **dict.fromkeys(accepted, E.INVALID_GROUP_ID)}
            except (ContainerNotOwnedError, StoreShutdownError) as exc:
                # The groups' container left this node meanwhile: Kafka's answer when the
                # offsets partition's leadership is lost during the append.
                log.warning("offsets of group %.64r not committed here: %s", group_id, exc)
                return {**errors, **dict.fromkeys(accepted, E.NOT_COORDINATOR)}
            except Exception:  # noqa: BLE001 - reported to the client, which retries
                log.exception("committing offsets of group %r failed", group_id)
                return {**errors, **dict.fromkeys(accepted, E.COORDINATOR_NOT_AVAILABLE)}
            if self._groups.get(group_id) is g:
                g.offsets.update(accepted)
            else:  # deleted meanwhile: the commit must not outlive its group
                self._store.remove_offsets(group_id, list(accepted))
        return {**errors, **dict.fromkeys(accepted, E.NONE)}

    # -- transactional offsets (gateway/txn): checked at TxnOffsetCommit, applied at commit

    def check_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """KIP-447 fencing of a TxnOffsetCommit: a member id, when given, must belong to
        the group and a generation, when given, must be the current one."""
        if not self._loaded:
            return self.unloaded_error
        if not group_id:
            return E.INVALID_GROUP_ID
        if group_id in self.consumer.groups:
            return self.consumer.check_txn_commit(group_id, member_id, generation_id, group_instance_id)
        g = self._groups.get(group_id)
        if g is None:
            return E.ILLEGAL_GENERATION if generation_id >= 0 else E.NONE
        if g.is_(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if g.fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        if member_id and member_id not in g.members:
            return E.UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != g.generation_id:
            return E.ILLEGAL_GENERATION
        return E.NONE

    async def apply_txn_offsets(
        self, group_id: str, offsets: dict[TopicPartition, OffsetCommit]
    ) -> None:
        """Make a committed transaction's offsets the group's (durably); raises if the
        store fails, so the transaction stays in PrepareCommit and is retried."""
        now = self._wall_clock_ms()
        accepted = {
            tp: CommittedOffset(c.offset, c.leader_epoch, c.metadata, now) for tp, c in offsets.items()
        }
        await self._store.put_offsets(group_id, accepted)
        g = self._groups.get(group_id) or self._new_group(group_id)
        g.offsets.update(accepted)

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (None: every committed partition).
        Partitions with no commit map to None. ``member_id``/``member_epoch``
        (OffsetFetch v9) are checked when the group is a consumer (KIP-848) group."""
        if not self._loaded:
            return self.unloaded_error, {}
        if group_id in self.consumer.groups:
            err = self.consumer.check_fetch(group_id, member_id, member_epoch)
            if err != E.NONE:
                return err, {}
        g = self._groups.get(group_id)
        stored = g.offsets if g is not None else {}
        if partitions is None:
            return E.NONE, dict(stored)
        return E.NONE, {tp: stored.get(tp) for tp in partitions}

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        if not self._loaded:
            return self.unloaded_error, {}
        g = self._groups.get(group_id)
        if g is None or g.is_(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        cg = self.consumer.groups.get(group_id)
        if cg is not None:  # a consumer group's members subscribe to its metadata's topics
            subscribed = set(cg.topics)
        elif not g.is_(S.EMPTY):
            topics = g.subscribed_topics()
            if topics is None:
                return NON_EMPTY_GROUP, {}
            subscribed = topics
        result: dict[TopicPartition, int] = {}
        removable: list[TopicPartition] = []
        for tp in partitions:
            if tp[0] in subscribed:
                result[tp] = GROUP_SUBSCRIBED_TO_TOPIC
            else:
                result[tp] = E.NONE
                if tp in g.offsets:
                    removable.append(tp)
        if removable:
            await self._store.remove_offsets(group_id, removable)
            for tp in removable:
                g.offsets.pop(tp, None)
            self._forget_if_unused(g)
        return E.NONE, result

    async def remove_topic_offsets(self, topics: Iterable[str]) -> int:
        """Called by the topic-deletion path: drop every group's commits for
        ``topics`` (durably); returns how many commits were removed."""
        gone = set(topics)
        removed = 0
        writes = []
        for g in list(self._groups.values()):
            tps = [tp for tp in g.offsets if tp[0] in gone]
            if not tps:
                continue
            writes.append(self._store.remove_offsets(g.group_id, tps))
            for tp in tps:
                del g.offsets[tp]
            removed += len(tps)
            self._forget_if_unused(g)
        for w in writes:
            await w
        return removed

    def _forget_if_unused(self, g: Group) -> None:
        """An Empty group with no commits left is gone, as Kafka's cleanup does it."""
        if g.is_(S.EMPTY) and not g.offsets and not g.members and not g.pending_members:
            g.transition(S.DEAD, self._clock_ms())
            del self._groups[g.group_id]
            self._store.remove_group(g)

    # -- admin views ---------------------------------------------------------------------

    def describe_groups(
        self, group_ids: Sequence[str], *, unknown_is_error: bool = False
    ) -> list[GroupDescription]:
        """Kafka's group summary: protocol and member metadata/assignments only when
        Stable. An unknown group is described as Dead, or (``unknown_is_error``,
        DescribeGroups v6+) answered with GROUP_ID_NOT_FOUND."""
        out: list[GroupDescription] = []
        for gid in group_ids:
            if not self._loaded:
                out.append(GroupDescription(self.unloaded_error, gid, "", "", ""))
                continue
            if not gid:
                out.append(GroupDescription(E.INVALID_GROUP_ID, gid, "", "", ""))
                continue
            g = self._groups.get(gid)
            if g is None or gid in self.consumer.groups:
                # Kafka 4.0: a consumer group is "not a classic group" here.
                err = E.GROUP_ID_NOT_FOUND if unknown_is_error else E.NONE
                message = f"Group {gid} is not a classic group." if gid in self.consumer.groups else f"Group {gid} not found."
                out.append(GroupDescription(err, gid, S.DEAD.value, "", "", message=message))
                continue
            stable = g.is_(S.STABLE)
            members = tuple(
                MemberDescription(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata_for(g.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in g.members.values()
            )
            out.append(
                GroupDescription(
                    E.NONE, gid, g.state.value, g.protocol_type or "",
                    (g.protocol_name or "") if stable else "", members,
                )
            )
        return out

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> tuple[int, list[tuple[str, str, str, str]]]:
        """``(group_id, protocol_type, state, group type)`` of every group. ``states``
        filters by state, ``types`` by group type ("classic" or "consumer"), both
        case-insensitive."""
        if not self._loaded:
            return self.unloaded_error, []
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        listed = [
            (g.group_id, g.protocol_type or "", g.state.value, "classic")
            for g in self._groups.values()
            if g.group_id not in self.consumer.groups
        ] + [
            (cg.group_id, "consumer", cg.state.value, "consumer")
            for cg in self.consumer.groups.values()
        ]
        return E.NONE, [
            row for row in listed
            if (not wanted_states or row[2].lower() in wanted_states)
            and (not wanted_types or row[3] in wanted_types)
        ]

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        result: dict[str, int] = {}
        writes = []
        for gid in group_ids:
            if not self._loaded:
                result[gid] = self.unloaded_error
                continue
            if not gid:
                result[gid] = E.INVALID_GROUP_ID
                continue
            g = self._groups.get(gid)
            cg = self.consumer.groups.get(gid)
            if cg is not None:
                if cg.members:
                    result[gid] = NON_EMPTY_GROUP
                    continue
                removals = self.consumer.delete(gid)
                if g is not None:
                    del self._groups[gid]
                    g.transition(S.DEAD, self._clock_ms())
                    writes.append((gid, self._store.remove_group(g)))
                writes.append((gid, self._store.submit(removals=removals)))
                result[gid] = E.NONE
            elif g is None or g.is_(S.DEAD):
                result[gid] = E.GROUP_ID_NOT_FOUND
            elif not g.is_(S.EMPTY):
                result[gid] = NON_EMPTY_GROUP
            else:
                g.transition(S.DEAD, self._clock_ms())
                del self._groups[gid]
                writes.append((gid, self._store.remove_group(g)))
                result[gid] = E.NONE
        for gid, w in writes:
            try:
                await w
            except Exception:  # noqa: BLE001 - reported to the client
                log.exception("deleting group %r failed", gid)
                result[gid] = E.COORDINATOR_NOT_AVAILABLE
        return result

    # -- introspection for tests and the REST service -------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)


class NotCoordinator(GroupCoordinator):
    """Stands in for the coordinator on a cluster node that does not coordinate groups
    now (it is never started): group requests answer ``NOT_COORDINATOR``, so clients look
    the coordinator up again; ListGroups, sent to every broker, lists none here."""

    unloaded_error = E.NOT_COORDINATOR

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> tuple[int, list[tuple[str, str, str, str]]]:
        return E.NONE, []
