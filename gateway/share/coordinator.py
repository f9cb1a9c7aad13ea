"""The share group coordinator of one node (KIP-932): members and their assignments,
share sessions, and each share-partition's in-flight records (``partition.py``), with
the share-partition state written to a table segment (``store.py``) before an
acknowledgement is answered.

Assignment: every member gets every partition of the topics it subscribes to (several
members share a partition; the share-partition hands each record to one of them), so a
member's assignment changes only with its subscription or a topic's partition count.

Members are held to ``session_timeout_ms`` (checked on every call, at most once per
second); a member that leaves or times out, and a share session that closes, release the
records they held. Locks expire lazily: an expired record is available to the next
acquire.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tidegate.core.segmentstore.api import SegmentStore, TableRemoval, TableUpdate
from tidegate.gateway.groups.errors import NON_EMPTY_GROUP
from tidegate.gateway.groups.store import GroupStore
from tidegate.gateway.share import store as share_store
from tidegate.gateway.share.claims import Fenced, ShareStateClaims
from tidegate.gateway.share.config import GROUP_CONFIGS, ShareConfig
from tidegate.gateway.share.partition import RecordState, SharePartition
from tidegate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: Topic name -> partition count, for the topics that exist.
PartitionCounts = Callable[[str], int | None]
_MAINTAIN_EVERY_MS = 1_000


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    deadline_ms: int
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partitions: dict[TopicPartition, SharePartition] = field(default_factory=dict)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    #: None: unchanged since the member's last heartbeat.
    assignment: dict[str, tuple[int, ...]] | None = None


class ShareCoordinator:
    def __init__(self, store: SegmentStore, config: ShareConfig,
                 clock_ms: Callable[[], int] | None = None,
                 claims: ShareStateClaims | None = None) -> None:
        self.config = config
        #: Cluster mode's partition-leader half (``claims.py``): share-partitions are
        #: loaded one by one when claimed, and written conditionally.
        self.claims = claims
        #: Cluster mode's coordinator: partition leaders write the share-partitions, so
        #: the admin APIs read them from the table (``refresh``).
        self.shared_table = False
        self._segments = store
        self._configs_task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[set[TopicPartition]]] = set()
        self.store = GroupStore(store, config.table)
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.groups: dict[str, ShareGroup] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.group_configs: dict[str, dict[str, str]] = {}
        #: Stored share-partitions not yet asked for since start.
        self._stored: dict[tuple[str, str, int], tuple[int, share_store.Runs]] = {}
        self._maintained_ms = 0
        #: Woken when records become available other than by an append (release, expiry).
        self._waiters: list[asyncio.Future[None]] = []

    async def start(self) -> None:
        self._stored, self.group_configs = share_store.decode(await self.store.open())
        for group_id, _, _ in self._stored:
            self.groups.setdefault(group_id, ShareGroup(group_id))
        for group_id in self.group_configs:
            self.groups.setdefault(group_id, ShareGroup(group_id))

    async def close(self) -> None:
        self.wake()
        await self.store.close()

    # -- configs -------------------------------------------------------------------------

    def group_config(self, group_id: str, name: str) -> str | None:
        value = self.group_configs.get(group_id, {}).get(name)
        return value if value is not None else GROUP_CONFIGS.get(name)

    def _ms_config(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs.get(group_id, {}).get(name)
        return int(value) if value is not None else default

    def lock_duration_ms(self, group_id: str) -> int:
        return self._ms_config(group_id, "share.record.lock.duration.ms",
                               self.config.record_lock_duration_ms)

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace a share group's configs (validated by the caller), durably."""
        if group_id not in self.groups and len(self.groups) >= self.config.groups_max:
            raise OverflowError(f"this node holds {self.config.groups_max} share groups already")
        self.groups.setdefault(group_id, ShareGroup(group_id))
        self.group_configs[group_id] = dict(configs)
        await self.store.submit([TableUpdate(share_store.configs_key(group_id),
                                             share_store.encode_configs(configs))])

    # -- membership ----------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str,
                  counts: PartitionCounts) -> HeartbeatResult:
        now = self.clock_ms()
        self.maintain(now)
        if not group_id:
            return HeartbeatResult(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:  # leaving
            if group is not None and member_id in group.members:
                self._remove_member(group, member_id)
            return HeartbeatResult(ErrorCode.NONE, member_id=member_id, member_epoch=-1)
        session_ms = self._ms_config(group_id, "share.session.timeout.ms",
                                     self.config.session_timeout_ms)
        interval_ms = self._ms_config(group_id, "share.heartbeat.interval.ms",
                                      self.config.heartbeat_interval_ms)
        if group is None:
            if len(self.groups) >= self.config.groups_max:
                return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                       f"this node holds {self.config.groups_max} share groups")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member_epoch == 0:
            if subscribed is None:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST,
                                       "SubscribedTopicNames must be set in first request.")
            if member is None and len(group.members) >= self.config.group_size_max:
                return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                       f"The share group has reached its maximum capacity of "
                                       f"{self.config.group_size_max} members.")
            if member is None:
                member = ShareMember(member_id, 0, client_id, client_host, rack_id, (), 0)
                group.members[member_id] = member
            member.assignment = {}  # a rejoining member is sent its whole assignment
        elif member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {member_id} is not a member of group {group_id}.")
        elif member_epoch != member.epoch:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                   f"The share group member has a smaller member epoch "
                                   f"({member_epoch}) than the one known by the group "
                                   f"coordinator ({member.epoch}).")
        member.deadline_ms = now + session_ms
        member.rack_id = rack_id
        if subscribed is not None:
            member.subscribed = tuple(sorted(set(subscribed)))
        assignment = {}
        for topic in member.subscribed:
            n = counts(topic)
            if n:
                assignment[topic] = tuple(range(n))
        changed = None
        if assignment != member.assignment or member_epoch == 0:
            group.epoch += 1
            member.epoch = group.epoch
            member.assignment = changed = assignment
        return HeartbeatResult(ErrorCode.NONE, None, member_id, member.epoch, interval_ms, changed)

    def _remove_member(self, group: ShareGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.epoch += 1
        session = self.sessions.pop((group.group_id, member_id), None)
        released = 0
        for sp in group.partitions.values():
            released += sp.release_member(member_id)
        if released:
            self._persist_all(group, (session.partitions if session else set()) or group.partitions)
            self.wake()

    def maintain(self, now_ms: int | None = None) -> None:
        """Members past their session timeout leave (their records are released)."""
        now = self.clock_ms() if now_ms is None else now_ms
        if now - self._maintained_ms < _MAINTAIN_EVERY_MS:
            return
        self._maintained_ms = now
        if self.shared_table and (self._configs_task is None or self._configs_task.done()):
            # Cluster mode: any node writes a group's configs into the table.
            self._configs_task = asyncio.get_running_loop().create_task(self._reload_configs())
        for group in self.groups.values():
            for member in [m for m in group.members.values() if m.deadline_ms <= now]:
                log.info("share group %s: member %s session timed out", group.group_id,
                         member.member_id)
                self._remove_member(group, member.member_id)

    # -- share-partitions ----------------------------------------------------------------

    def share_partition(self, group_id: str, topic: str, partition: int,
                        log_start_offset: int, high_watermark: int,
                        claiming: bool = False) -> SharePartition:
        """The share-partition, made from its stored state or by ``share.auto.offset.reset``
        (cluster mode: only while ``claiming`` it, else ``Fenced``)."""
        group = self.groups.setdefault(group_id, ShareGroup(group_id))
        sp = group.partitions.get((topic, partition))
        if sp is None and self.claims is not None and not claiming:
            raise Fenced(f"share-partition {group_id}:{topic}-{partition} is not claimed here")
        if sp is None:
            sp = SharePartition(
                high_watermark, lock_duration_ms=self.lock_duration_ms(group_id),
                delivery_count_limit=self.config.delivery_count_limit,
                record_locks_max=self.config.partition_record_locks_max,
            )
            stored = self._stored.pop((group_id, topic, partition), None)
            if stored is not None:
                sp.restore(*stored)
            elif self.group_config(group_id, "share.auto.offset.reset") == "earliest":
                sp.restore(log_start_offset, [])
            group.partitions[(topic, partition)] = sp
        sp.lock_duration_ms = self.lock_duration_ms(group_id)
        sp.reset_start(log_start_offset)
        return sp

    async def claim(self, group_id: str, topic: str, partition: int, log_start_offset: int,
                    high_watermark: int, epoch: int, fresh: bool = False) -> None:
        """Cluster mode: hold the share-partition as leader at ``epoch`` (loaded from the
        table, or kept if no one wrote it since this node did; with ``fresh``, as a share
        session opens, that is checked in the table, and the group's configs read
        again); ``Fenced`` or a store error if not."""
        claims = self.claims
        assert claims is not None
        key = (group_id, topic, partition)
        group = self.groups.setdefault(group_id, ShareGroup(group_id))
        if not fresh and (topic, partition) in group.partitions and claims.epochs.get(key) == epoch:
            return
        async with claims.lock(key):
            sp = group.partitions.get((topic, partition))
            if sp is not None and claims.epochs.get(key) == epoch:
                if not fresh:
                    return
                changed, configs = await claims.changed(key)
                self.group_configs[group_id] = configs
                if not changed:
                    return
                claims.forget(key)  # altered or deleted by the coordinator: read again
            if sp is not None and key in claims.versions:
                try:  # the in-memory state is the stored one if the version still matches
                    await claims.write(key, epoch, *sp.snapshot())
                    return
                except Exception as exc:  # noqa: BLE001 - read again below
                    log.info("share-partition %s reloaded: %r", key, exc)
            group.partitions.pop((topic, partition), None)
            claims.forget(key)
            loaded = await claims.read(key, epoch)
            self.group_configs[group_id] = loaded.configs
            if loaded.state is not None:
                self._stored[key] = loaded.state
            else:
                self._stored.pop(key, None)
            try:
                sp = self.share_partition(group_id, topic, partition, log_start_offset,
                                          high_watermark, claiming=True)
                await claims.write(key, epoch, *sp.snapshot())
            except BaseException:
                group.partitions.pop((topic, partition), None)
                self._stored.pop(key, None)
                raise

    async def persist(self, group_id: str, parts: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Store the share-partitions; those that could not be (cluster mode: another
        leader claimed them, or the store failed; they are dropped here)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        if self.claims is not None:
            failed: set[TopicPartition] = await self._persist_all(group, parts)
            return failed
        await self._persist_all(group, parts)
        return set()

    def _persist_all(self, group: ShareGroup, parts: Iterable[TopicPartition]) -> asyncio.Future[Any]:
        if self.claims is not None:
            task = asyncio.get_running_loop().create_task(self._write_claimed(group, set(parts)))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)
            return task
        puts = []
        for tp in parts:
            sp = group.partitions.get(tp)
            if sp is not None:
                start, runs = sp.snapshot()
                puts.append(TableUpdate(share_store.partition_key(group.group_id, *tp),
                                        share_store.encode_partition(start, runs)))
        return self.store.submit(puts)

    async def _write_claimed(self, group: ShareGroup, parts: set[TopicPartition]) -> set[TopicPartition]:
        claims = self.claims
        assert claims is not None

        async def write(tp: TopicPartition) -> bool:
            key = (group.group_id, *tp)
            async with claims.lock(key):
                sp = group.partitions.get(tp)
                epoch = claims.epochs.get(key)
                if sp is None or epoch is None:
                    return False
                try:
                    await claims.write(key, epoch, *sp.snapshot())
                    return True
                except Exception as exc:  # noqa: BLE001 - the member is told; the state reloads
                    log.info("share-partition %s dropped: %r", key, exc)
                    if group.partitions.get(tp) is sp:
                        del group.partitions[tp]
                    return False

        ordered = sorted(parts)
        done = await asyncio.gather(*(write(tp) for tp in ordered))
        return {tp for tp, ok in zip(ordered, done, strict=True) if not ok}

    # -- share sessions ------------------------------------------------------------------

    def open_session(self, group_id: str, member_id: str) -> ShareSession | None:
        """A new session (epoch 0); an earlier one of the member is closed first. None:
        the cache is full."""
        old = self.sessions.pop((group_id, member_id), None)
        if old is not None:
            self.release_session(old)
        if len(self.sessions) >= self.config.sessions_max:
            return None
        session = ShareSession(group_id, member_id, 1)
        self.sessions[(group_id, member_id)] = session
        return session

    def release_session(self, session: ShareSession) -> None:
        group = self.groups.get(session.group_id)
        if group is None:
            return
        released = 0
        for tp in session.partitions:
            sp = group.partitions.get(tp)
            if sp is not None:
                released += sp.release_member(session.member_id)
        if released:
            self._persist_all(group, session.partitions)
            self.wake()

    # -- waiting -------------------------------------------------------------------------

    def waiter(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def forget_waiter(self, fut: asyncio.Future[None]) -> None:
        if fut in self._waiters:
            self._waiters.remove(fut)

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- admin ---------------------------------------------------------------------------

    def describe(self, group_id: str) -> ShareGroup | None:
        self.maintain()
        return self.groups.get(group_id)

    def start_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, int]]:
        """Each initialised share-partition's start offset and the records in its window
        already done (acknowledged or archived), loaded or only stored."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        for (gid, topic, partition), (start, runs) in self._stored.items():
            if gid == group_id:
                done = sum(last - first + 1 for first, last, state, _ in runs
                           if state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
                out[(topic, partition)] = (start, done)
        group = self.groups.get(group_id)
        for tp, sp in (group.partitions.items() if group is not None else ()):
            done = sum(1 for offset in range(sp.start_offset, sp.end_offset)
                       if (r := sp.records.get(offset)) is None
                       or r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
            out[tp] = (sp.start_offset, done)
        return out

    async def _reload_configs(self) -> None:
        try:
            entries = await self._segments.table_entries(self.config.table, share_store.CONFIGS)
        except Exception as exc:  # noqa: BLE001 - the next round tries again
            log.info("share group configs not reloaded: %r", exc)
            return
        self.group_configs = share_store.decode(entries)[1]

    async def refresh(self, group_id: str) -> None:
        """Cluster mode (the coordinator): the group's share-partitions as their leaders
        stored them last, in place of what this node loaded or set."""
        if not self.shared_table:
            return
        entries = await self._segments.table_entries(self.config.table,
                                                      share_store.partitions_prefix(group_id))
        for key in [k for k in self._stored if k[0] == group_id]:
            del self._stored[key]
        for e in entries:
            start, runs, _ = share_store.decode_partition(bytes(e.value))
            self._stored[share_store.parse_partition_key(bytes(e.key))] = (start, runs)
        group = self.groups.get(group_id)
        if group is not None:
            group.partitions.clear()

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: only without members; its state and configs go."""
        await self.refresh(group_id)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return NON_EMPTY_GROUP
        keys = [share_store.partition_key(group_id, *tp) for tp in group.partitions]
        for gid, topic, partition in [k for k in self._stored if k[0] == group_id]:
            keys.append(share_store.partition_key(gid, topic, partition))
            del self._stored[(gid, topic, partition)]
        keys.append(share_store.configs_key(group_id))
        del self.groups[group_id]
        self.group_configs.pop(group_id, None)
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]
        await self.store.submit(removals=[TableRemoval(k) for k in keys])
        return ErrorCode.NONE

    def has_members(self, group_id: str) -> bool:
        self.maintain()
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    async def set_start_offsets(self, group_id: str,
                                offsets: dict[TopicPartition, int]) -> None:
        """AlterShareGroupOffsets of a group without members: each share-partition starts
        again at its offset, nothing in flight (the group is created if need be)."""
        if group_id not in self.groups and len(self.groups) >= self.config.groups_max:
            raise OverflowError(f"this node holds {self.config.groups_max} share groups already")
        group = self.groups.setdefault(group_id, ShareGroup(group_id))
        for (topic, partition), offset in offsets.items():
            self._stored.pop((group_id, topic, partition), None)
            sp = SharePartition(offset, lock_duration_ms=self.lock_duration_ms(group_id),
                                delivery_count_limit=self.config.delivery_count_limit,
                                record_locks_max=self.config.partition_record_locks_max)
            group.partitions[(topic, partition)] = sp
        await self._persist_all(group, offsets)

    async def forget_topics(self, group_id: str, topics: set[str]) -> set[str]:
        """DeleteShareGroupOffsets: the group's share-partitions of ``topics`` go (the next
        fetch starts them by ``share.auto.offset.reset``); the topics that had some."""
        await self.refresh(group_id)
        group = self.groups.get(group_id)
        keys = [k for k in self._stored if k[0] == group_id and k[1] in topics]
        found = {k[1] for k in keys}
        for k in keys:
            del self._stored[k]
        if group is not None:
            for tp in [tp for tp in group.partitions if tp[0] in topics]:
                del group.partitions[tp]
                keys.append((group_id, *tp))
                found.add(tp[0])
        await self.store.submit(removals=[TableRemoval(share_store.partition_key(*k))
                                          for k in keys])
        return found

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.groups
