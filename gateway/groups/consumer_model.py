"""The state of KIP-848 ("consumer" protocol) groups and its durable form.

A group has a *group epoch* (bumped whenever its members, their subscriptions or the
partition counts of subscribed topics change), a *target assignment* computed by the
server-side assignor at the *assignment epoch*, and members each with a *member epoch*
and the partitions they own now. A member reaches the target in steps (Kafka's
CurrentAssignmentBuilder): it first gives up partitions the target takes away
(UNREVOKED_PARTITIONS, its epoch unchanged), then moves to the assignment epoch and
gets the target's partitions that no other member still owns (UNRELEASED_PARTITIONS
until every one is free, then STABLE). So a partition is never owned by two members.

Durable form, so that a heartbeat writes its own member and only a new epoch writes the
whole group (UTF-8, big-endian length prefixes keep keys unambiguous):

- ``b"c" + u32 len + group id`` -> the group (JSON: epochs, assignor, subscription
  metadata);
- ``b"m" + u32 len + group id + member id`` -> one member (JSON: its epochs, state,
  subscription, owned and revoking partitions, and its part of the target).

Sessions are not stored: they start again when the group is loaded.
"""

from __future__ import annotations

import base64
import enum
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

#: topic name -> partitions
Assignment = dict[str, frozenset[int]]

GROUP_PREFIX = b"c"
MEMBER_PREFIX = b"m"
#: The epoch a static member leaves with when it will come back (KIP-848).
STATIC_LEAVE_EPOCH = -2
LEAVE_EPOCH = -1


def _str32(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">I", len(b)) + b


def group_key(group_id: str) -> bytes:
    return GROUP_PREFIX + _str32(group_id)


def member_key(group_id: str, member_id: str) -> bytes:
    return MEMBER_PREFIX + _str32(group_id) + member_id.encode()


def parse_key(key: bytes) -> tuple[str, str | None]:
    """``(group id, member id or None)`` of a group or member key."""
    (n,) = struct.unpack_from(">I", key, 1)
    group_id = key[5 : 5 + n].decode()
    return group_id, (key[5 + n :].decode() if key[:1] == MEMBER_PREFIX else None)


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    # Values are the strings ListGroups and ConsumerGroupDescribe put on the wire.
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(slots=True)
class ClassicMetadata:
    """What a member speaking the classic protocol inside a consumer group keeps of its
    JoinGroup (Kafka's ``ClassicMemberMetadata``): its session timeout and protocols."""

    session_timeout_ms: int
    #: ``(name, ConsumerProtocol subscription)`` in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    #: The protocol named in its JoinGroup answers: its most preferred one.
    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0]


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    #: KIP-1251: the member epoch at which each owned partition was given to it (a
    #: commit at an older epoch is good for partitions owned since then).
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Set for a member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    classic: ClassicMetadata | None = None
    #: Monotonic deadlines (not stored); a classic member must rejoin after being told
    #: REBALANCE_IN_PROGRESS, and send SyncGroup after its JoinGroup, within its
    #: rebalance timeout.
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    #: Which topics the member's principal may DESCRIBE, from its last heartbeat (not
    #: stored; None: no authorizer): its regex resolves over those only, as Kafka's.
    may_describe: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)

    def session_timeout_ms(self, consumer_session_timeout_ms: int) -> int:
        return consumer_session_timeout_ms if self.classic is None else self.classic.session_timeout_ms


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    #: Subscription metadata: subscribed topic -> (topic id, partition count); a change
    #: (a topic created, deleted, recreated or given partitions) bumps the group epoch.
    topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    #: group.instance.id -> member id
    static_members: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owners(self, *, besides: str) -> dict[tuple[str, int], str]:
        """Who owns each partition now (assigned or still being revoked), other than
        member ``besides``."""
        out: dict[tuple[str, int], str] = {}
        for m in self.members.values():
            if m.member_id == besides:
                continue
            for a in (m.assigned, m.revoking):
                for topic, parts in a.items():
                    for p in parts:
                        out[(topic, p)] = m.member_id
        return out


def _enc_assignment(a: Assignment) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(a.items()) if ps}


def _dec_assignment(d: dict[str, list[int]]) -> Assignment:
    return {t: frozenset(int(p) for p in ps) for t, ps in d.items()}


def encode_group(g: ConsumerGroup) -> bytes:
    return json.dumps(
        {
            "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch,
            "assignor": g.assignor, "topics": {t: list(v) for t, v in sorted(g.topics.items())},
        },
        sort_keys=True,
    ).encode()


def encode_member(g: ConsumerGroup, m: ConsumerMember) -> bytes:
    return json.dumps(
        {
            "instance": m.instance_id, "rack": m.rack_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "rebalance_ms": m.rebalance_timeout_ms, "names": list(m.subscribed_names),
            "regex": m.subscribed_regex, "assignor": m.server_assignor,
            "epoch": m.member_epoch, "previous_epoch": m.previous_epoch, "state": m.state.value,
            "assigned": _enc_assignment(m.assigned), "revoking": _enc_assignment(m.revoking),
            "target": _enc_assignment(g.target.get(m.member_id, {})),
            "assignment_epochs": sorted([t, p, e] for (t, p), e in m.assignment_epochs.items()),
            "classic": None if m.classic is None else {
                "session_ms": m.classic.session_timeout_ms,
                "protocols": [[n, base64.b64encode(md).decode()] for n, md in m.classic.protocols],
            },
        },
        sort_keys=True,
    ).encode()


def decode_group(group_id: str, value: bytes) -> ConsumerGroup:
    d = json.loads(value)
    return ConsumerGroup(
        group_id, int(d["group_epoch"]), int(d["assignment_epoch"]), str(d["assignor"]),
        {t: (str(v[0]), int(v[1])) for t, v in d["topics"].items()},
    )


def decode_member(
    g: ConsumerGroup, member_id: str, value: bytes, now_ms: int, session_timeout_ms: int
) -> None:
    """Add a stored member to ``g``: its session starts again now, and a member still
    revoking gets its whole rebalance timeout again."""
    md = json.loads(value)
    m = ConsumerMember(
        member_id=member_id, instance_id=md["instance"], rack_id=md["rack"],
        client_id=md["client_id"], client_host=md["client_host"],
        rebalance_timeout_ms=int(md["rebalance_ms"]), subscribed_names=tuple(md["names"]),
        subscribed_regex=md["regex"], server_assignor=md["assignor"],
        member_epoch=int(md["epoch"]), previous_epoch=int(md["previous_epoch"]),
        state=MemberState(md["state"]), assigned=_dec_assignment(md["assigned"]),
        revoking=_dec_assignment(md["revoking"]),
        assignment_epochs={(t, int(p)): int(e) for t, p, e in md["assignment_epochs"]},
    )
    classic = md.get("classic")
    if classic is not None:
        m.classic = ClassicMetadata(
            int(classic["session_ms"]), [(n, base64.b64decode(b)) for n, b in classic["protocols"]]
        )
    m.session_deadline_ms = now_ms + m.session_timeout_ms(session_timeout_ms)
    if m.state is MemberState.UNREVOKED_PARTITIONS:
        m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
    g.members[member_id] = m
    g.target[member_id] = _dec_assignment(md["target"])
    if m.instance_id is not None:
        g.static_members[m.instance_id] = member_id
