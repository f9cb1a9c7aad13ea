"""Topics and partitions as streams (DESIGN.md section 3).

- Topic ``t`` is stream ``t`` in the configured scope (``kafka``).
- Partition ``p`` is the routing key at the bit-reversal of ``p`` in [0, 1)
  (0 → 0, 1 → 0.5, 2 → 0.25, 3 → 0.75, ...), so points never move when partitions are
  added. A topic with P partitions starts with one segment per partition, the key ranges
  cut halfway between neighbouring points; a topic with a scaling policy starts with
  ``tidegate.scaling.min.segments`` segments (at most P), each holding a run of about
  equally many neighbouring points, and the auto-scaler splits them between points as
  partitions heat (``docs/autoscaling.md``).
- The topic list (partition count, configs) is a table segment, written before the stream
  is created; a topic whose stream is missing (a crash between the two) gets its stream
  when the registry starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from dataclasses import dataclass, field, replace

from tidegate.core.controller.api import (
    Controller,
    ControllerError,
    KeyRange,
    ScalingType,
    ScopeExistsError,
    SegmentRecord,
    StreamConfig,
    StreamExistsError,
    qualified_segment_name,
)
from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    BadKeyVersionError,
    SegmentExistsError,
    SegmentStore,
    TableRemoval,
    TableUpdate,
)
from tidegate.gateway import failpoints
from tidegate.gateway.log.topic_config import stream_config

log = logging.getLogger(__name__)

TOPICS_TABLE = "_system/gateway/topics"
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def partition_point(partition: int) -> float:
    """The bit-reversal of ``partition`` as a fraction in [0, 1)."""
    if partition < 0:
        raise ValueError(f"negative partition {partition}")
    bits = partition.bit_length()
    reversed_bits = int(format(partition, "b")[::-1], 2) if partition else 0
    return reversed_bits / (1 << bits) if bits else 0.0


#: Topics of more partitions have their initial key ranges computed in a worker thread.
LOOP_PARTITIONS_MAX = 1000


def initial_key_ranges(partitions: int, segments: int | None = None) -> list[KeyRange]:
    """``segments`` ranges (default and at most one per partition), each holding a run of
    about equally many neighbouring partition points, cut halfway between the last point
    of a run and the first of the next."""
    points = sorted(partition_point(p) for p in range(partitions))
    n = partitions if segments is None else max(1, min(segments, partitions))
    runs = [round(i * partitions / n) for i in range(1, n)]
    cuts = [(points[j - 1] + points[j]) / 2 for j in runs]
    bounds = [0.0, *cuts, 1.0]
    return [KeyRange(bounds[i], bounds[i + 1]) for i in range(n)]


def initial_segments(config: StreamConfig, partitions: int) -> int:
    """How many segments a topic's stream starts with (see the module doc)."""
    if config.scaling.type == ScalingType.FIXED_NUM_SEGMENTS:
        return partitions
    return min(config.scaling.min_segments, partitions)


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid Kafka topic name, or None."""
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not _TOPIC_RE.match(name):
        return f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]"
    return None


@dataclass
class TopicInfo:
    name: str
    partitions: int
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    #: Admin operations under way, stored before their first step so that a restart
    #: finishes them (``gateway.handlers.admin_recovery``): a DeleteTopics, and a
    #: CreatePartitions' split of the segments from the partition count it started at.
    deleting: bool = False
    splitting_from: int | None = None

    def encode(self) -> bytes:
        obj: dict[str, object] = {
            "partitions": self.partitions, "id": str(self.topic_id), "configs": self.configs
        }
        if self.deleting:
            obj["deleting"] = True
        if self.splitting_from is not None:
            obj["splitting_from"] = self.splitting_from
        return json.dumps(obj).encode()

    @staticmethod
    def decode(name: str, raw: bytes) -> TopicInfo:
        obj = json.loads(raw)
        splitting = obj.get("splitting_from")
        return TopicInfo(
            name, int(obj["partitions"]), uuid.UUID(obj["id"]), dict(obj["configs"]),
            deleting=bool(obj.get("deleting", False)),
            splitting_from=None if splitting is None else int(splitting),
        )


class TopicRegistry:
    """The gateway's view of topics; every change goes through the controller and the
    topics table, so the in-memory map is a cache of durable state."""

    def __init__(self, controller: Controller, store: SegmentStore, scope: str) -> None:
        self.controller = controller
        self.store = store
        self.scope = scope
        self._topics: dict[str, TopicInfo] = {}
        self._ids: dict[uuid.UUID, str] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            await self.controller.create_scope(self.scope)
        except ScopeExistsError:
            pass
        try:
            await self.store.create_table(TOPICS_TABLE)
        except SegmentExistsError:
            pass
        for entry in await self.store.table_entries(TOPICS_TABLE):
            info = TopicInfo.decode(entry.key.decode(), entry.value)
            if not info.deleting:  # a deletion's stream is not brought back
                await self._ensure_stream(info)
            self._topics[info.name] = info

    async def reload(self) -> set[str]:
        """Read the topics table again (cluster mode: other gateways change it); return
        the names of topics gone or replaced by a new topic of the same name."""
        async with self._lock:
            found = {
                e.key.decode(): TopicInfo.decode(e.key.decode(), e.value)
                for e in await self.store.table_entries(TOPICS_TABLE)
            }
            gone = {
                name for name, info in self._topics.items()
                if name not in found or found[name].topic_id != info.topic_id
            }
            self._topics = found
            return gone

    def get(self, name: str) -> TopicInfo | None:
        """The topic, unless it does not exist or is being deleted."""
        info = self._topics.get(name)
        return None if info is None or info.deleting else info

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        """The topic with this id (Fetch v13+ names topics by id); a miss rebuilds the
        id map once, so ids of topics created or replaced since are found."""
        name = self._ids.get(topic_id)
        info = self._topics.get(name) if name is not None else None
        if info is None or info.topic_id != topic_id:
            self._ids = {i.topic_id: n for n, i in self._topics.items()}
            name = self._ids.get(topic_id)
        return name if name is not None and self.get(name) is not None else None

    def names(self) -> list[str]:
        return sorted(n for n, info in self._topics.items() if not info.deleting)

    def unfinished(self) -> list[TopicInfo]:
        """Topics with an admin operation a crash interrupted (being deleted, or their
        segments being split for new partitions)."""
        return [i for i in self._topics.values() if i.deleting or i.splitting_from is not None]

    async def _ensure_stream(self, info: TopicInfo) -> None:
        wanted = stream_config(info.configs, info.partitions)
        segments = initial_segments(wanted, info.partitions)
        if info.partitions > LOOP_PARTITIONS_MAX:  # sorting thousands of points: off the loop
            ranges = await asyncio.to_thread(initial_key_ranges, info.partitions, segments)
        else:
            ranges = initial_key_ranges(info.partitions, segments)
        try:
            await self.controller.create_stream(self.scope, info.name, wanted, ranges)
        except StreamExistsError:
            await self._reconcile_policies(info.name, wanted)

    async def _reconcile_policies(self, topic: str, wanted: StreamConfig) -> None:
        """A stream whose retention or scaling policy differs from its topic's configs
        gets them: AlterConfigs stores the configs before it updates the stream, so a
        crash in between is finished here (and topics compacted before
        ``cleanup.policy`` decided retention had the 7-day default)."""
        try:
            current = (await self.controller.get_stream(self.scope, topic)).config
            if (current.retention, current.scaling) != (wanted.retention, wanted.scaling):
                log.warning("topic %s: stream policies %s, %s become %s, %s (its topic configs)",
                            topic, current.retention, current.scaling, wanted.retention,
                            wanted.scaling)
                await self.controller.update_stream(
                    self.scope, topic,
                    replace(current, retention=wanted.retention, scaling=wanted.scaling))
        except ControllerError as exc:  # the next start tries again
            log.warning("topic %s: stream policies not reconciled: %s", topic, exc)

    async def create(
        self, name: str, partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo | None:
        """Create a topic; None if it already exists. Callers validate the arguments."""
        async with self._lock:
            if name in self._topics:
                return None
            info = TopicInfo(name, partitions, uuid.uuid4(), dict(configs or {}))
            try:
                await self.store.table_put(
                    TOPICS_TABLE, [TableUpdate(name.encode(), info.encode(), NOT_EXISTS)]
                )
            except BadKeyVersionError:
                # Created meanwhile by another gateway of the cluster: take its entry.
                (entry,) = await self.store.table_get(TOPICS_TABLE, [name.encode()])
                if entry is not None:
                    self._topics[name] = TopicInfo.decode(name, entry.value)
                return None
            failpoints.hit("create_topics.entry_stored")
            await self._ensure_stream(info)
            self._topics[name] = info
            return info

    async def update(self, info: TopicInfo) -> None:
        """Store changed partition count or configs (for admin handlers)."""
        async with self._lock:
            await self.store.table_put(
                TOPICS_TABLE, [TableUpdate(info.name.encode(), info.encode())]
            )
            self._topics[info.name] = info

    async def forget(self, name: str) -> None:
        """Drop a topic's entry (its stream is deleted by the caller)."""
        async with self._lock:
            await self.store.table_remove(TOPICS_TABLE, [TableRemoval(name.encode())])
            self._topics.pop(name, None)

    async def current_segment(self, topic: str, partition: int) -> SegmentRecord:
        return await self.controller.get_segment_for_key(
            self.scope, topic, partition_point(partition)
        )

    def segment_name(self, topic: str, segment_id: int) -> str:
        return qualified_segment_name(self.scope, topic, segment_id)

    async def all_segments(self, topic: str) -> list[SegmentRecord]:
        """Every segment in the stream's history, oldest epoch first."""
        seen: dict[int, SegmentRecord] = {}
        for epoch in await self.controller.get_epochs(self.scope, topic):
            for seg in epoch.segments:
                seen.setdefault(seg.id, seg)
        return list(seen.values())
