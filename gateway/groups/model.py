"""The classic group protocol's state: groups, members, committed offsets.

A group moves through Kafka's five states; ``TRANSITIONS`` is the whole table and
``Group.transition`` refuses anything else (a refused transition is a coordinator bug,
so it raises rather than answering a client with an error).

Members carry what Kafka's ``MemberMetadata`` carries: their supported protocols with
metadata (opaque to the broker except for OffsetDelete's subscription check), the
assignment the leader gave them, their timeouts, and the futures of a JoinGroup or
SyncGroup that waits on the rest of the group.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    # Values are the strings DescribeGroups and ListGroups put on the wire.
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState

#: Allowed transitions, as in Kafka's GroupMetadata (state -> valid previous states).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.EMPTY, S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.DEAD}),
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    """What a JoinGroup answers. ``members`` is filled for the leader only:
    ``(member_id, group_instance_id, metadata of the chosen protocol)``."""

    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    #: ``(name, metadata)`` in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    session_deadline_ms: int = 0
    awaiting_join: asyncio.Future[JoinResult] | None = None
    awaiting_sync: asyncio.Future[SyncResult] | None = None

    def metadata_bytes(self) -> int:
        """Bytes of protocol metadata and assignment held for this member."""
        return sum(len(md) for _, md in self.protocols) + len(self.assignment)

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: Static membership: group.instance.id -> current member id.
    static_members: dict[str, str] = field(default_factory=dict)
    #: Member ids handed out by a MEMBER_ID_REQUIRED answer, with their expiry.
    pending_members: dict[str, int] = field(default_factory=dict)
    #: (topic, partition) -> committed offset.
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    #: When the current join phase ends at the latest (PreparingRebalance), or when
    #: members that have not sent SyncGroup are dropped (CompletingRebalance).
    rebalance_deadline_ms: int = 0
    #: The group started rebalancing from Empty: wait ``initial_rebalance_delay_ms``
    #: for more members instead of completing as soon as everybody known has joined.
    initial_delay_active: bool = False
    state_changed_ms: int = 0
    #: Wall-clock time the group last became Empty (offset retention counts from it).
    empty_since_wall_ms: int | None = None

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in TRANSITIONS[target]:
            raise RuntimeError(
                f"group {self.group_id!r}: illegal transition {self.state.value} -> {target.value}"
            )
        self.state = target
        self.state_changed_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A static member whose instance id now belongs to another member id."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def candidate_protocols(self) -> set[str]:
        names: set[str] | None = None
        for m in self.members.values():
            mine = {n for n, _ in m.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {n for n, _ in protocols})

    def select_protocol(self) -> str:
        """Kafka's rule: every member votes for its most preferred protocol among those
        all members support; the most votes wins (ties: the candidate first named by the
        earliest member, so the choice is deterministic)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to under the chosen protocol, decoded from the
        consumer protocol's subscription; None when the group is not a consumer group
        or a subscription cannot be decoded."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

        topics: set[str] = set()
        for m in self.members.values():
            try:
                sub = ConsumerProtocolSubscription.decode(m.metadata_for(self.protocol_name))
            except Exception:  # noqa: BLE001 - any undecodable metadata means "unknown"
                return None
            topics.update(sub.topics or ())
        return topics
