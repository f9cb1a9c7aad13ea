"""KIP-848 consumer groups (``group.protocol=consumer``): ConsumerGroupHeartbeat,
leaves, session and revocation timeouts, ConsumerGroupDescribe, and the member-epoch
checks of OffsetCommit/OffsetFetch v9. State and its steps are in ``consumer_model.py``
and ``reconcile.py``; the group is written durably (one table entry) before a
heartbeat that changed it is answered, so after a restart every member carries on with
the epoch and partitions it was last told.

A group id is one kind at a time: ``kinds.py`` routes each request to the kind its group
is now and moves live groups between the kinds (``migration.py``); a consumer group may
hold classic-protocol members (``ClassicMetadata`` set, ``classic_members.py``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass

import re2
from tidegate.core.segmentstore.api import TableEntry, TableRemoval, TableUpdate
from tidegate.gateway.groups.assignors import ASSIGNORS
from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.consumer_model import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    decode_group,
    decode_member,
    encode_group,
    encode_member,
    group_key,
    member_key,
    parse_key,
)
from tidegate.gateway.groups.errors import INVALID_REGULAR_EXPRESSION
from tidegate.gateway.groups.errors import ErrorCode as E
from tidegate.gateway.groups.reconcile import (
    TopicCatalog,
    compile_regex,
    compute_target,
    is_subset,
    reconcile,
    subscription_metadata,
)
from tidegate.gateway.groups.store import GroupStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: list[str] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    #: topic name -> partitions the member owns; None when not sent
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 0
    #: The topics the member's principal may DESCRIBE (None: no authorizer): what its
    #: regex may resolve to.
    may_describe: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    #: Sent when it changed or the member's view differs; None otherwise.
    assignment: Assignment | None = None


#: Bounds that keep a member's stored entry within the group table's key and value
#: limits (Kafka has none; a request past them is INVALID_REQUEST, never a failed write).
IDS_BYTES_MAX = 2_048
SUBSCRIPTION_BYTES_MAX = 256 * 1024


def _validate(r: HeartbeatRequest) -> str | None:
    """Kafka's request checks (INVALID_REQUEST with these messages), and our bounds."""
    if not r.group_id:
        return "GroupId can't be empty."
    ids = (r.group_id, r.member_id, r.instance_id or "", r.rack_id or "", r.server_assignor or "")
    if sum(len(x.encode()) for x in ids) > IDS_BYTES_MAX:
        return f"GroupId, MemberId, InstanceId, RackId and ServerAssignor exceed {IDS_BYTES_MAX} bytes."
    subscription = list(r.subscribed_names or ()) + [r.subscribed_regex or ""]
    if sum(len(x.encode()) + 3 for x in subscription) > SUBSCRIPTION_BYTES_MAX:
        return f"The subscription exceeds {SUBSCRIPTION_BYTES_MAX} bytes."
    if r.api_version >= 1 and not r.member_id:
        return "MemberId can't be empty."
    if r.member_epoch == 0:
        if r.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if r.owned is None or r.owned:
            return "TopicPartitions must be empty when (re-)joining."
        if r.subscribed_names is None and r.subscribed_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif r.member_epoch > 0 or r.member_epoch == LEAVE_EPOCH:
        if not r.member_id:
            return "MemberId can't be empty."
    elif r.member_epoch == STATIC_LEAVE_EPOCH:
        if r.instance_id is None:
            return "InstanceId can't be null."
    else:
        return f"MemberEpoch {r.member_epoch} is invalid."
    return None


def _durable_view(g: ConsumerGroup | None, member_id: str) -> object:
    """What a heartbeat of ``member_id`` may change of the stored group: any change to
    the rest (the target, the subscription metadata) comes with a new group epoch, and
    members come and go only with a new epoch or as a static member's new incarnation."""
    if g is None:
        return None
    m = g.members.get(member_id)
    member = None if m is None else (
        m.member_epoch, m.previous_epoch, m.state, m.assigned, m.revoking, m.rebalance_timeout_ms,
        m.rack_id, m.subscribed_names, m.subscribed_regex, m.server_assignor, m.client_id, m.client_host,
    )
    return (g.group_epoch, g.assignment_epoch, g.assignor, tuple(g.members), member)


def _expired(m: ConsumerMember, now_ms: int) -> bool:
    return any(
        deadline is not None and now_ms >= deadline
        for deadline in (m.session_deadline_ms, m.revocation_deadline_ms, m.join_deadline_ms, m.sync_deadline_ms)
    )


def _log_failure(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("writing a consumer group failed: %r", done.exception())


class ConsumerGroups:
    def __init__(
        self, store: GroupStore, config: GroupConfig, clock_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self._store = store
        self.clock_ms = clock_ms
        self.groups: dict[str, ConsumerGroup] = {}
        #: Called before a member is removed (left, expired, fenced): may turn the group
        #: into a classic one instead (the online downgrade), then returns the write.
        self.downgrade: Callable[[ConsumerGroup, str], asyncio.Future[None] | None] | None = None

    def load(self, entries: list[TableEntry]) -> None:
        now = self.clock_ms()
        for e in entries:
            if e.key.startswith(b"c"):
                gid, _ = parse_key(e.key)
                self.groups[gid] = decode_group(gid, e.value)
        for e in entries:
            if e.key.startswith(b"m"):
                gid, mid = parse_key(e.key)
                g = self.groups.get(gid)
                if g is not None and mid is not None:
                    decode_member(g, mid, e.value, now, self.config.consumer_session_timeout_ms)

    def persist(
        self, g: ConsumerGroup, before_epochs: tuple[int, int] | None, before_ids: set[str],
        member_id: str | None,
    ) -> asyncio.Future[None]:
        """Write what changed: the whole group after a new epoch, else one member; and
        remove the members that are gone."""
        puts = [TableUpdate(group_key(g.group_id), encode_group(g))]
        if before_epochs != (g.group_epoch, g.assignment_epoch):
            puts += [TableUpdate(member_key(g.group_id, m.member_id), encode_member(g, m))
                     for m in g.members.values()]
        elif member_id in g.members:
            puts.append(TableUpdate(member_key(g.group_id, member_id), encode_member(g, g.members[member_id])))
        removals = [TableRemoval(member_key(g.group_id, mid)) for mid in sorted(before_ids - set(g.members))]
        return self._store.submit(puts, removals)

    # -- ConsumerGroupHeartbeat ----------------------------------------------------------

    @staticmethod
    def check(r: HeartbeatRequest) -> HeartbeatResult | None:
        """The request's own errors (before any group is looked at), or None."""
        problem = _validate(r)
        if problem is not None:
            return HeartbeatResult(E.INVALID_REQUEST, problem)
        if r.server_assignor is not None and r.server_assignor not in ASSIGNORS:
            return HeartbeatResult(
                E.UNSUPPORTED_ASSIGNOR, f"Assignor {r.server_assignor} is not supported; "
                f"supported: {', '.join(ASSIGNORS)}."
            )
        if r.subscribed_regex is not None:
            try:
                compile_regex(r.subscribed_regex)
            except re2.error as exc:
                return HeartbeatResult(
                    INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {r.subscribed_regex!r}: {exc}"
                )
        return None

    async def heartbeat(self, r: HeartbeatRequest, catalog: TopicCatalog) -> HeartbeatResult:
        refused = self.check(r)
        if refused is not None:
            return refused
        g = self.groups.get(r.group_id)
        before = _durable_view(g, r.member_id)
        before_epochs = None if g is None else (g.group_epoch, g.assignment_epoch)
        before_ids = set() if g is None else set(g.members)
        converted: asyncio.Future[None] | None = None
        if r.member_epoch < 0:
            result, converted = self._leave(g, r)
        else:
            result = self._heartbeat(g, r, catalog)
        if converted is not None:
            try:
                await converted
            except Exception:  # noqa: BLE001 - reported to the client, which retries
                log.exception("writing group %r as a classic group failed", r.group_id)
                return HeartbeatResult(E.COORDINATOR_NOT_AVAILABLE, "the group could not be written")
            return result
        g = self.groups.get(r.group_id)
        if result.error == E.NONE and g is not None and _durable_view(g, result.member_id or "") != before:
            try:
                await self.persist(g, before_epochs, before_ids, result.member_id)
            except Exception:  # noqa: BLE001 - reported to the client, which retries
                log.exception("writing consumer group %r failed", r.group_id)
                return HeartbeatResult(E.COORDINATOR_NOT_AVAILABLE, "the group could not be written")
        return result

    def _leave(
        self, g: ConsumerGroup | None, r: HeartbeatRequest
    ) -> tuple[HeartbeatResult, asyncio.Future[None] | None]:
        if g is None:
            return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Group {r.group_id} has no member {r.member_id}."), None
        if r.instance_id is not None:
            mid = g.static_members.get(r.instance_id)
            if mid is None:
                return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown."), None
            if mid != r.member_id:
                return HeartbeatResult(
                    E.FENCED_INSTANCE_ID, f"Instance id {r.instance_id} belongs to another member."
                ), None
            m = g.members[mid]
            if r.member_epoch == STATIC_LEAVE_EPOCH:
                # The static member keeps its partitions until it rejoins or its session ends.
                m.member_epoch = STATIC_LEAVE_EPOCH
                return HeartbeatResult(E.NONE, None, m.member_id, STATIC_LEAVE_EPOCH), None
        elif r.member_id not in g.members or g.members[r.member_id].classic is not None:
            return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not in group {g.group_id}."), None
        converted = self.fence(g, r.member_id)
        return HeartbeatResult(E.NONE, None, r.member_id, LEAVE_EPOCH), converted

    def fence(self, g: ConsumerGroup, member_id: str) -> asyncio.Future[None] | None:
        """Remove a member that left or expired; when the rest speak the classic protocol
        the group may become a classic group instead (returns that write)."""
        if self.downgrade is not None:
            converted = self.downgrade(g, member_id)
            if converted is not None:
                return converted
        self.remove_member(g, member_id)
        return None

    def remove_member(self, g: ConsumerGroup, member_id: str) -> None:
        m = g.members.pop(member_id)
        if m.instance_id is not None and g.static_members.get(m.instance_id) == member_id:
            del g.static_members[m.instance_id]
        g.target.pop(member_id, None)
        g.group_epoch += 1

    def _heartbeat(
        self, g: ConsumerGroup | None, r: HeartbeatRequest, catalog: TopicCatalog
    ) -> HeartbeatResult:
        now = self.clock_ms()
        if r.member_epoch == 0:
            if g is None:
                g = self.groups[r.group_id] = ConsumerGroup(r.group_id)
            epoch_at_start = g.group_epoch
            joined = self._join(g, r)
            if isinstance(joined, HeartbeatResult):
                if not g.members and g.group_epoch == 0:  # made for this join only
                    del self.groups[r.group_id]
                return joined
            m = joined
        else:
            found = self._known_member(g, r)
            if isinstance(found, HeartbeatResult):
                return found
            g, m = found
            epoch_at_start = g.group_epoch
        old = (m.member_epoch, dict(m.assigned))
        if r.rebalance_timeout_ms >= 0:
            m.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.rack_id is not None:
            m.rack_id = r.rack_id
        m.client_id, m.client_host = r.client_id, r.client_host
        m.may_describe = r.may_describe
        changed = False
        if r.subscribed_names is not None and tuple(sorted(r.subscribed_names)) != m.subscribed_names:
            m.subscribed_names, changed = tuple(sorted(r.subscribed_names)), True
        if r.subscribed_regex is not None and (r.subscribed_regex or None) != m.subscribed_regex:
            m.subscribed_regex, changed = r.subscribed_regex or None, True
        if r.server_assignor is not None and r.server_assignor != m.server_assignor:
            m.server_assignor, changed = r.server_assignor, True
        m.session_deadline_ms = now + self.config.consumer_session_timeout_ms
        metadata = subscription_metadata(g, catalog)
        if metadata != g.topics:
            g.topics, changed = metadata, True
        if changed and g.group_epoch == epoch_at_start:  # one bump per heartbeat
            g.group_epoch += 1
        if g.group_epoch > g.assignment_epoch:
            compute_target(g)
        reconcile(g, m, r.owned, now)
        send = r.member_epoch == 0 or old != (m.member_epoch, m.assigned) or (
            r.owned is not None and r.owned != m.assigned
        )
        return HeartbeatResult(
            E.NONE, None, m.member_id, m.member_epoch, self.config.consumer_heartbeat_interval_ms,
            dict(m.assigned) if send else None,
        )

    def _join(self, g: ConsumerGroup, r: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        member_id = r.member_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        m = ConsumerMember(member_id, instance_id=r.instance_id)
        if r.instance_id is not None:
            previous_id = g.static_members.get(r.instance_id)
            if previous_id is not None:
                previous = g.members[previous_id]
                if previous.member_epoch != STATIC_LEAVE_EPOCH and previous_id != member_id:
                    return HeartbeatResult(
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {r.instance_id} with member id {previous_id} is not released.",
                    )
                # The new incarnation takes the old one's place and partitions (no
                # rebalance); it reaches the assignment epoch as any joining member.
                del g.members[previous_id]
                g.target[member_id] = g.target.pop(previous_id, {})
                m.assigned, m.revoking, m.state = previous.assigned, previous.revoking, previous.state
                m.assignment_epochs = previous.assignment_epochs
                m.subscribed_names, m.subscribed_regex = previous.subscribed_names, previous.subscribed_regex
                m.server_assignor = previous.server_assignor
                g.members[member_id] = m
                g.static_members[r.instance_id] = member_id
                return m
        if member_id in g.members:
            # A member rejoining with epoch 0 lost its partitions: it starts afresh.
            self.remove_member(g, member_id)
        elif len(g.members) >= self.config.max_group_size:
            return HeartbeatResult(
                E.GROUP_MAX_SIZE_REACHED, f"Group {g.group_id} has {len(g.members)} members."
            )
        g.members[member_id] = m
        if r.instance_id is not None:
            g.static_members[r.instance_id] = member_id
        return m  # its subscription is new: the caller bumps the group epoch

    def _known_member(
        self, g: ConsumerGroup | None, r: HeartbeatRequest
    ) -> tuple[ConsumerGroup, ConsumerMember] | HeartbeatResult:
        m = g.members.get(r.member_id) if g is not None else None
        if g is None or m is None or m.classic is not None:
            return HeartbeatResult(E.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not in group {r.group_id}.")
        if r.instance_id is not None and g.static_members.get(r.instance_id) != m.member_id:
            return HeartbeatResult(E.FENCED_INSTANCE_ID, f"Instance id {r.instance_id} belongs to another member.")
        if r.member_epoch > m.member_epoch or (
            r.member_epoch < m.member_epoch
            # The answer that moved the member on may have been lost: its previous epoch
            # is still good while it owns no more than it has now.
            and not (r.member_epoch == m.previous_epoch and r.owned is not None and is_subset(r.owned, m.assigned))
        ):
            return HeartbeatResult(
                E.FENCED_MEMBER_EPOCH,
                f"Member epoch {r.member_epoch} is fenced; the member's epoch is {m.member_epoch}.",
            )
        return g, m

    # -- timeouts ------------------------------------------------------------------------

    def maintain(self) -> None:
        """Drop members whose session ended, that did not revoke in time, or (classic
        members) that did not rejoin or sync within their rebalance timeout."""
        now = self.clock_ms()
        for g in list(self.groups.values()):
            before_epochs, before_ids = (g.group_epoch, g.assignment_epoch), set(g.members)
            expired = [m.member_id for m in g.members.values() if _expired(m, now)]
            converted = None
            for mid in expired:
                log.info("consumer group %r: member %s expired", g.group_id, mid)
                converted = self.fence(g, mid)
                if converted is not None:  # the group is classic now, its write covers all
                    converted.add_done_callback(_log_failure)
                    break
            if expired and converted is None:
                self.persist(g, before_epochs, before_ids, None).add_done_callback(_log_failure)

    # -- offsets and admin ---------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int,
        partitions: list[tuple[str, int]],
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` with KIP-1251's assignment
        epochs: an error for the whole request, or the partitions refused. A commit at
        an older epoch is accepted for each partition the member still owns since that
        epoch or before (a commit sent just before a heartbeat moved the member on);
        STALE_MEMBER_EPOCH for the others."""
        g = self.groups[group_id]
        if member_epoch < 0 and not g.members:
            return E.NONE, {}
        m = g.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID, {}
        if m.classic is not None:  # its generation is its member epoch, checked exactly
            return (E.NONE if member_epoch == m.member_epoch else E.ILLEGAL_GENERATION), {}
        if api_version < 9:
            return E.UNSUPPORTED_VERSION, {}
        if member_epoch > m.member_epoch:
            return E.FENCED_MEMBER_EPOCH, {}
        if member_epoch == m.member_epoch:
            return E.NONE, {}
        stale: dict[tuple[str, int], int] = {
            tp: E.STALE_MEMBER_EPOCH for tp in partitions
            if tp[1] not in m.assigned.get(tp[0], ()) or m.assignment_epochs.get(tp, m.member_epoch) > member_epoch
        }
        return E.NONE, stale

    def check_txn_commit(
        self, group_id: str, member_id: str, member_epoch: int, group_instance_id: str | None
    ) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetCommit`` for TxnOffsetCommit: the member
        fields are optional there, and checked only when one is given; the epoch exactly."""
        g = self.groups[group_id]
        if member_epoch < 0 and not g.members:
            return E.NONE
        if member_epoch < 0 and not member_id and group_instance_id is None:
            return E.NONE
        m = g.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch == m.member_epoch:
            return E.NONE
        if m.classic is not None:
            return E.ILLEGAL_GENERATION
        return E.FENCED_MEMBER_EPOCH if member_epoch > m.member_epoch else E.STALE_MEMBER_EPOCH

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+)."""
        g = self.groups[group_id]
        if member_epoch < 0 and not member_id:
            return E.NONE
        m = g.members.get(member_id or "")
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != m.member_epoch:
            return E.STALE_MEMBER_EPOCH if m.classic is None else E.ILLEGAL_GENERATION
        return E.NONE

    def describe(
        self, group_ids: Sequence[str], *, classic: Container[str]
    ) -> list[tuple[str, int, str | None, ConsumerGroup | None]]:
        """``(group id, error, message, group)``: a classic (in ``classic``) or unknown
        group is GROUP_ID_NOT_FOUND, so the admin client asks DescribeGroups next."""
        out: list[tuple[str, int, str | None, ConsumerGroup | None]] = []
        for gid in group_ids:
            cg = self.groups.get(gid)
            if not gid:
                out.append((gid, E.INVALID_GROUP_ID, "Group id can't be empty.", None))
            elif cg is not None:
                out.append((gid, E.NONE, None, cg))
            elif gid in classic:
                out.append((gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.", None))
            else:
                out.append((gid, E.GROUP_ID_NOT_FOUND, f"Group {gid} not found.", None))
        return out

    def delete(self, group_id: str) -> list[TableRemoval]:
        g = self.groups.pop(group_id)
        return [TableRemoval(group_key(group_id))] + [
            TableRemoval(member_key(group_id, mid)) for mid in g.members
        ]
