"""The steps of KIP-848 consumer groups that are pure functions of the group: the
subscription metadata, the target assignment and one member's reconciliation towards
it (Kafka's ``CurrentAssignmentBuilder``). No I/O, no clock."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Protocol

import re2
from tidegate.gateway.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, AssignmentSpec
from tidegate.gateway.groups.consumer_model import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)

M = MemberState


class TopicLike(Protocol):
    @property
    def partitions(self) -> int: ...

    @property
    def topic_id(self) -> object: ...


class TopicCatalog(Protocol):
    """What the coordinator needs of the gateway's topics (``TopicRegistry``)."""

    def get(self, name: str) -> TopicLike | None: ...

    def names(self) -> list[str]: ...


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    """A subscription regex, in RE2 as Kafka's RE2/J: linear time whatever a client
    sends, so a hostile pattern cannot stall the event loop. Raises ``re2.error``."""
    return re2.compile(pattern)


def subscribed_topics(m: ConsumerMember, all_names: Iterable[str]) -> set[str]:
    topics = set(m.subscribed_names)
    if m.subscribed_regex:
        pattern = compile_regex(m.subscribed_regex)
        may = m.may_describe
        topics.update(n for n in all_names
                      if pattern.fullmatch(n) and (may is None or may(n)))
    return topics


def subscription_metadata(g: ConsumerGroup, catalog: TopicCatalog) -> dict[str, tuple[str, int]]:
    names = catalog.names() if any(m.subscribed_regex for m in g.members.values()) else []
    out: dict[str, tuple[str, int]] = {}
    for m in g.members.values():
        for topic in subscribed_topics(m, names):
            if topic in out:
                continue
            info = catalog.get(topic)
            if info is not None and info.partitions > 0:
                out[topic] = (str(info.topic_id), int(info.partitions))
    return out


def preferred_assignor(g: ConsumerGroup) -> str:
    """The assignor most members ask for (ties: by name), else the default."""
    votes: dict[str, int] = {}
    for m in g.members.values():
        if m.server_assignor:
            votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
    if not votes:
        return DEFAULT_ASSIGNOR
    return min(votes, key=lambda name: (-votes[name], name))


def compute_target(g: ConsumerGroup) -> None:
    """A new target assignment at the current group epoch."""
    g.assignor = preferred_assignor(g)
    all_names = list(g.topics)
    specs = [
        AssignmentSpec(
            m.member_id, frozenset(t for t in subscribed_topics(m, all_names) if t in g.topics), m.instance_id
        )
        for m in g.members.values()
    ]
    partitions = {t: n for t, (_, n) in g.topics.items()}
    g.target = ASSIGNORS[g.assignor](specs, partitions, g.target)
    g.assignment_epoch = g.group_epoch


def _minus(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _overlaps(a: Assignment, b: Assignment) -> bool:
    return any(ps & b.get(t, frozenset()) for t, ps in a.items())


def is_subset(a: Assignment, b: Assignment) -> bool:
    return not _minus(a, b)


def reconcile(g: ConsumerGroup, m: ConsumerMember, owned: Assignment | None, now_ms: int) -> None:
    """Move ``m`` one step towards its target. ``owned`` is what the member says it
    owns (None when the heartbeat left it out)."""
    if m.state is M.UNREVOKED_PARTITIONS:
        if owned is None or _overlaps(owned, m.revoking):
            return
        m.revoking = {}
        m.revocation_deadline_ms = None
        m.state = M.STABLE
    elif m.state is M.STABLE and m.member_epoch == g.assignment_epoch:
        return
    target = g.target.get(m.member_id, {})
    kept = _intersect(m.assigned, target)
    revoke = _minus(m.assigned, target)
    if revoke:
        m.assigned, m.revoking = kept, revoke
        m.assignment_epochs = {tp: e for tp, e in m.assignment_epochs.items() if tp[1] in kept.get(tp[0], ())}
        m.state = M.UNREVOKED_PARTITIONS
        m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
        return
    others = g.owners(besides=m.member_id)
    new: dict[str, frozenset[int]] = {}
    for topic, parts in target.items():
        free = frozenset(p for p in parts if (topic, p) not in others)
        if free:
            new[topic] = free
    if m.member_epoch != g.assignment_epoch:
        m.previous_epoch, m.member_epoch = m.member_epoch, g.assignment_epoch
    m.assignment_epochs = {
        (topic, p): m.assignment_epochs.get((topic, p), m.member_epoch)
        for topic, parts in new.items() for p in parts
    }
    m.assigned = new
    m.state = M.STABLE if new == {t: ps for t, ps in target.items() if ps} else M.UNRELEASED_PARTITIONS
