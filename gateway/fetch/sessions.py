"""Incremental fetch sessions (KIP-227), with Kafka's cache and eviction rules
(``FetchSession.scala``).

A full fetch (session epoch 0) may create a session holding its partitions, each with
the fetch offset and byte limit asked and the high watermark, last stable offset and log
start offset last answered. The client then sends incremental fetches (the session id
and its next epoch) naming only the partitions whose fetch position changed, added or
forgotten; the answer holds only the partitions with records, a changed watermark or log
start, or an error. An epoch of -1 asks for no session (librdkafka's way); a full fetch
naming a session closes it. Errors: an unknown session id is FETCH_SESSION_ID_NOT_FOUND,
a wrong epoch INVALID_FETCH_SESSION_EPOCH, a session of topic names asked with topic
ids (or the reverse) FETCH_SESSION_TOPIC_ID_ERROR.

The cache holds at most ``slots`` sessions. When it is full a new session takes the
place of one unused for ``eviction_ms`` (the least recently used first); otherwise of
the smallest session (fewest partitions) older than ``eviction_ms`` if the new one is
larger. Privileged sessions (followers; tidegate has none yet) may also evict any
non-privileged session however young. A full fetch that finds no place gets session id 0
and the client goes on sending full fetches. The partitions of one session and of all
together are bounded too (``SESSION_PARTITIONS_MAX``, ``CACHE_PARTITIONS_MAX``): a session
an incremental fetch grows past them is dropped (FETCH_SESSION_ID_NOT_FOUND), and the
client starts again with a full fetch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tidegate.protocol.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
INVALID_SESSION_ID = 0
#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
EVICTION_MS = 120_000
#: Partitions one session, and all sessions together, may hold: what incremental fetches
#: add over time is bounded (a consumer of more partitions goes on with full fetches).
SESSION_PARTITIONS_MAX = 50_000
CACHE_PARTITIONS_MAX = 500_000

PartKey = tuple[Hashable, int]


class FetchPart:
    """One partition of a fetch: what was asked (kept across fetches in a session), what
    was last answered (the session's cache), and the state of the fetch being answered."""

    __slots__ = ("topic", "topic_id", "partition", "offset", "max_bytes", "leader_epoch",
                 "plog", "error", "chunks", "size", "end", "sent_hw", "sent_lso", "sent_start",
                 "leader_hint", "hint_epoch")

    def __init__(self, topic: str | None, topic_id: Any, partition: int, offset: int,
                 max_bytes: int, leader_epoch: int) -> None:
        #: None for a topic id that names no topic (UNKNOWN_TOPIC_ID).
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        #: The client's current leader epoch (-1: not sent).
        self.leader_epoch = leader_epoch
        self.plog: Any = None
        self.error = ErrorCode.NONE
        self.chunks: list[memoryview] = []
        self.size = 0
        self.end = 0
        self.sent_hw = -1
        self.sent_lso = -1
        self.sent_start = -1
        #: The partition's leader, told with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
        #: (KIP-951); -1: not known.
        self.leader_hint = -1
        #: The leader epoch told with ``leader_hint``, read with it from the same map.
        self.hint_epoch = -1

    def ask(self, offset: int, max_bytes: int, leader_epoch: int) -> None:
        self.offset, self.max_bytes, self.leader_epoch = offset, max_bytes, leader_epoch

    def must_answer(self, hw: int, lso: int, start: int) -> bool:
        """Whether an incremental answer includes this partition; records what it says.
        Kafka's rule: records, a changed high watermark, LSO or log start, or an error
        (after which the cached watermark is reset so the partition is sent once it
        clears)."""
        changed = self.size > 0 or hw != self.sent_hw or lso != self.sent_lso or (
            start != self.sent_start
        )
        self.sent_hw, self.sent_lso, self.sent_start = hw, lso, start
        if self.error != ErrorCode.NONE:
            self.sent_hw = -1
            return True
        return changed


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return epoch  # the final epoch stays final
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    parts: dict[PartKey, FetchPart]
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    #: The size, and whether evictable by privileged / by all, as of the last touch.
    cached_size: int = -1
    evictable_by_privileged: bool = False
    evictable_by_all: bool = False

    def key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: the least valuable session sorts first."""
        return (self.privileged, self.cached_size, self.id)

    def update(self, asked: Iterable[tuple[PartKey, FetchPart]], forgotten: Iterable[PartKey]
               ) -> None:
        """An incremental fetch's changes: new partitions are added, known ones take the
        new position, then the forgotten ones are removed."""
        for key, part in asked:
            cached = self.parts.get(key)
            if cached is None:
                self.parts[key] = part
            else:
                cached.ask(part.offset, part.max_bytes, part.leader_epoch)
        for key in forgotten:
            self.parts.pop(key, None)

    def rotate(self, answered: Iterable[FetchPart]) -> None:
        """Partitions that returned records go last: the next fetch's byte budget
        serves the others first (Kafka's fairness across a session)."""
        for part in answered:
            if part.size > 0:
                key = (part.topic_id if self.uses_topic_ids else part.topic, part.partition)
                if self.parts.get(key) is part:
                    self.parts[key] = self.parts.pop(key)


@dataclass
class SessionCounts:
    """Fetch requests by kind, and sessions evicted (for metrics)."""

    full: int = 0
    incremental: int = 0
    sessionless: int = 0
    errors: int = 0
    evictions: int = 0
    created: int = 0


@dataclass
class FetchSessionCache:
    slots: int
    clock_ms: Callable[[], int]
    eviction_ms: int = EVICTION_MS
    rng: random.Random = field(default_factory=random.Random)
    sessions: dict[int, FetchSession] = field(default_factory=dict)
    counts: SessionCounts = field(default_factory=SessionCounts)
    #: Partitions held by all sessions, as of their last touch.
    partitions: int = 0
    partitions_max: int = CACHE_PARTITIONS_MAX

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size > 0:
            self.partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        if session.cached_size > 0:
            self.partitions -= session.cached_size
        session.cached_size = len(session.parts)
        self.partitions += session.cached_size
        old = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def incremental(self, session_id: int, epoch: int, uses_topic_ids: bool
                    ) -> tuple[FetchSession | None, ErrorCode]:
        """The session an incremental fetch names, or the error that answers it."""
        session = self.sessions.get(session_id)
        if session is None:
            return None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return None, ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if session.uses_topic_ids != uses_topic_ids:
            return None, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        return session, ErrorCode.NONE

    def too_large(self, session: FetchSession) -> bool:
        """Whether a session grown by an incremental fetch passed the bounds (it is then
        dropped: the client's next fetch is a full one)."""
        size = len(session.parts)
        others = self.partitions - max(session.cached_size, 0)
        return size > SESSION_PARTITIONS_MAX or others + size > self.partitions_max

    def maybe_create(self, privileged: bool, parts: dict[PartKey, FetchPart],
                     uses_topic_ids: bool) -> int:
        """A new session of ``parts`` if there is room (or a session to evict); its id,
        or 0 when none was created."""
        now = self.clock_ms()
        if len(parts) > SESSION_PARTITIONS_MAX or self.partitions + len(parts) > self.partitions_max:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.slots and not self._try_evict(
            privileged, (privileged, len(parts), 0), now
        ):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(session_id, privileged, parts, uses_topic_ids, now, now,
                               next_epoch(INITIAL_EPOCH))
        self.sessions[session_id] = session
        self.touch(session, now)
        self.counts.created += 1
        return session_id

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        if not self.sessions:
            return False
        # Bounded by ``slots``, and only when the cache is full.
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            return self._evict(lru)
        candidates = [
            s for s in self.sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.key)
        if key < least.key():
            return False
        return self._evict(least)

    def _evict(self, session: FetchSession) -> bool:
        self.remove(session.id)
        self.counts.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self.rng.randint(1, 0x7FFFFFFF)
            if session_id not in self.sessions:
                return session_id
