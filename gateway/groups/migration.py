"""Online migration of a live group between the classic and the consumer protocol
(KIP-848, Kafka 3.8+ with ``group.consumer.migration.policy``), as Kafka's
GroupMetadataManager does it:

- **Upgrade.** The first ConsumerGroupHeartbeat (epoch 0) into a classic group with
  members turns it into a consumer group when the policy allows it, the classic group
  speaks the ``consumer`` embedded protocol and has no more members than a consumer
  group may. Whatever state the classic group was in (a pending JoinGroup or SyncGroup
  is answered REBALANCE_IN_PROGRESS), its generation becomes the group epoch and the
  assignment epoch, and every classic member becomes a member at that epoch, Stable,
  owning what its last assignment gave it, which is also its target; the joining
  member then bumps the epoch, and the classic members learn from their heartbeats
  that they must rejoin (``classic_members.py``).
- **Downgrade.** When a member leaves or is fenced and every remaining member speaks
  the classic protocol, the group becomes a classic group again (when the policy
  allows it and the members fit a classic group): generation = group epoch, each
  member's assignment its target, encoded in the ConsumerProtocol version of its own
  subscription, then a rebalance, so the members rejoin and their leader assigns.

Committed offsets belong to the group id and are untouched by either conversion.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from tidegate.gateway.groups.config import GroupConfig
from tidegate.gateway.groups.consumer_model import (
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from tidegate.gateway.groups.model import Group, GroupState, Member

#: The embedded protocol a group must use to move between the two protocols.
CONSUMER_PROTOCOL = "consumer"
#: ConsumerProtocol versions Kafka knows (a newer client's is answered in the latest).
_PROTOCOL_VERSION_MAX = 3


class MalformedProtocol(ValueError):
    """A member's embedded ConsumerProtocol metadata or assignment does not decode."""


def decode_subscription(metadata: bytes) -> ConsumerProtocolSubscription:
    try:
        return ConsumerProtocolSubscription.decode(metadata)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed protocol
        raise MalformedProtocol(str(exc)) from exc


def owned_partitions(sub: ConsumerProtocolSubscription) -> Assignment:
    """What a classic member says it owns (v1+; an older subscription owns nothing:
    eager clients give everything up before they rejoin)."""
    return _assignment_of(getattr(sub, "owned_partitions", None) or ())


def decode_assignment(data: bytes) -> Assignment:
    if not data:  # a member that joined but was never assigned
        return {}
    try:
        a = ConsumerProtocolAssignment.decode(data)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed protocol
        raise MalformedProtocol(str(exc)) from exc
    return _assignment_of(a.assigned_partitions or ())


def _assignment_of(tps: Iterable[Any]) -> Assignment:
    """ConsumerProtocol ``(topic, partitions)`` entries as an Assignment (a topic named
    twice is merged, one with no partitions left out)."""
    out: dict[str, frozenset[int]] = {}
    for tp in tps:
        out[tp.topic] = out.get(tp.topic, frozenset()) | frozenset(tp.partitions)
    return {t: ps for t, ps in out.items() if ps}


def encode_assignment(a: Assignment, subscription: bytes) -> bytes:
    """``a`` as a ConsumerProtocol assignment in the version of the member's subscription."""
    version = 0
    if len(subscription) >= 2:
        version = max(0, min(int.from_bytes(subscription[:2], "big", signed=True), _PROTOCOL_VERSION_MAX))
    tps = [
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps))
        for t, ps in sorted(a.items()) if ps
    ]
    return bytes(
        ConsumerProtocolAssignment(version=version, assigned_partitions=tps, user_data=None).encode(version=version)
    )


# -- upgrade -------------------------------------------------------------------------------


def upgrade_refusal(g: Group, config: GroupConfig) -> str | None:
    """Why the live classic group ``g`` cannot become a consumer group, or None."""
    if not config.upgrade_enabled:
        return "the online upgrade is disabled"
    if g.protocol_type != CONSUMER_PROTOCOL:
        return "the group does not use the consumer embedded protocol"
    if len(g.members) >= config.max_group_size:
        return "the group size exceeds the consumer group maximum size"
    return None


def consumer_group_from_classic(g: Group) -> ConsumerGroup:
    """Kafka's ``ConsumerGroup.fromClassicGroup``. Raises ``MalformedProtocol``."""
    epoch = g.generation_id
    cg = ConsumerGroup(g.group_id, group_epoch=epoch, assignment_epoch=epoch)
    for m in g.members.values():
        metadata = m.metadata_for(g.protocol_name) if g.protocol_name else (m.protocols[0][1] if m.protocols else b"")
        sub = decode_subscription(metadata)
        assigned = decode_assignment(m.assignment)
        cm = ConsumerMember(
            m.member_id, instance_id=m.group_instance_id, rack_id=getattr(sub, "rack_id", None),
            client_id=m.client_id, client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_names=tuple(sorted(sub.topics or ())),
            member_epoch=epoch, previous_epoch=epoch, state=MemberState.STABLE,
            assigned=assigned,
            assignment_epochs={(t, p): epoch for t, ps in assigned.items() for p in ps},
            classic=ClassicMetadata(m.session_timeout_ms, list(m.protocols)),
            session_deadline_ms=m.session_deadline_ms,
        )
        cg.members[cm.member_id] = cm
        cg.target[cm.member_id] = dict(assigned)
        if cm.instance_id is not None:
            cg.static_members[cm.instance_id] = cm.member_id
    return cg


def empty_classic_holder(g: Group, now_ms: int, now_wall_ms: int) -> None:
    """Leave ``g`` as what a consumer group's id keeps on the classic side: its commits.
    (Not a state transition: the group changes type, as Kafka replaces the object.)"""
    g.members.clear()
    g.static_members.clear()
    g.pending_members.clear()
    g.state = GroupState.EMPTY
    g.state_changed_ms = now_ms
    g.empty_since_wall_ms = now_wall_ms
    g.protocol_name = None
    g.leader_id = None
    g.initial_delay_active = False


# -- downgrade -----------------------------------------------------------------------------


def downgrade_allowed(cg: ConsumerGroup, leaving: str, config: GroupConfig) -> bool:
    """Kafka's ``validateOnlineDowngradeWithFencedMembers``."""
    rest = [m for mid, m in cg.members.items() if mid != leaving]
    return (
        bool(rest)
        and all(m.classic is not None for m in rest)
        and config.downgrade_enabled
        and len(rest) <= config.max_group_size
    )


def fill_classic_from_consumer(g: Group, cg: ConsumerGroup, leaving: str, now_ms: int) -> None:
    """Kafka's ``ClassicGroup.fromConsumerGroup`` into ``g`` (the id's classic holder,
    Empty): Stable at generation = group epoch, members with their target as their
    assignment, the protocol chosen by vote; the caller starts the rebalance."""
    g.members.clear()
    g.static_members.clear()
    g.pending_members.clear()
    g.generation_id = cg.group_epoch
    g.protocol_type = CONSUMER_PROTOCOL
    for cm in cg.members.values():
        if cm.member_id == leaving or cm.classic is None:
            continue
        m = Member(
            cm.member_id, cm.instance_id, cm.client_id, cm.client_host,
            cm.classic.session_timeout_ms, cm.rebalance_timeout_ms, CONSUMER_PROTOCOL,
            list(cm.classic.protocols), session_deadline_ms=now_ms + cm.classic.session_timeout_ms,
        )
        g.members[m.member_id] = m
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = m.member_id
    g.protocol_name = g.select_protocol()
    for m in g.members.values():
        m.assignment = encode_assignment(cg.target.get(m.member_id, {}), m.metadata_for(g.protocol_name))
    g.leader_id = next(iter(g.members))
    g.state = GroupState.STABLE  # not a transition: the group changes type
    g.state_changed_ms = now_ms
    g.empty_since_wall_ms = None
