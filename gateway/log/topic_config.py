"""Topic configs: Kafka's names and defaults, validation, and the mapping onto stream
policies (DESIGN.md section 3).

A topic stores only the configs set on it (``TopicInfo.configs``, strings as Kafka sends
them); every other config reads as Kafka's default. Three groups:

- ``cleanup.policy`` decides whether retention applies at all: ``compact`` alone has no
  time or size retention (the cleaner keeps the latest record of every key forever);
  ``compact,delete`` applies only the retention settings the topic sets explicitly, so a
  compacted topic never inherits the 7-day default, and the cleaner applies them (the
  log start moves first, the stream is truncated behind it: a consumer at a valid offset
  never finds its bytes gone); ``delete`` (the default) as below.
- ``retention.ms`` / ``retention.bytes`` → the stream's retention policy; as in Kafka
  both apply, each when not -1 (``retention.ms`` defaults to 7 days): time retention
  with a size bound, or either alone, or none. Kafka counts ``retention.bytes`` per
  partition while the controller counts the whole stream, so the size limit is
  ``retention.bytes * partitions``. ``retention.ms = 0`` becomes 1 ms (the controller
  wants a positive value).
- ``tidegate.scaling.type`` / ``.target.rate`` / ``.scale.factor`` / ``.min.segments`` →
  the stream's scaling policy (``FIXED_NUM_SEGMENTS`` by default, so a topic keeps one
  segment per partition unless asked otherwise).
- ``max.message.bytes`` is enforced by Produce (``gateway/handlers/produce.py``), the
  timestamp configs by ``gateway/log/batch_policy.py``; ``delete.retention.ms``,
  ``min/max.compaction.lag.ms``, ``min.cleanable.dirty.ratio``, ``segment.bytes``/``.ms``
  and ``file.delete.delay.ms`` by the cleaner of compacted topics
  (``gateway/log/compaction``);
- everything else (``segment.jitter.ms``, ``preallocate``, ...) is validated, stored and
  returned, and its documentation in DescribeConfigs says it is ignored.

Names Kafka 4.x removed (``message.format.version``, ``message.downconversion.enable``,
``message.timestamp.difference.max.ms``) are unknown, as in Kafka 4.x's ``LogConfig``:
INVALID_CONFIG "Unknown topic config name: ...".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.core.controller.api import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfig,
)
from tidegate.gateway.config import GatewayConfig
from tidegate.gateway.groups.config import GroupConfig

_LONG_MAX = (1 << 63) - 1


class ConfigType(enum.IntEnum):
    """DescribeConfigs ``config_type`` (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ``config_source`` (v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class InvalidConfig(ValueError):
    """A config name or value Kafka would refuse (answered as INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str
    doc: str
    #: The broker config that supplies the default (DescribeConfigs synonyms), if any.
    broker_synonym: str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def validate(self, value: str | None) -> str:
        """The value as stored, or ``InvalidConfig`` naming the config."""
        if value is None:
            raise InvalidConfig(f"Null value not supported for topic config {self.name}")
        v = value.strip()
        if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            try:
                n: float = int(v)
            except ValueError:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    "Not a number of type " + self.type.name) from None
            limit = {ConfigType.INT: 1 << 31, ConfigType.SHORT: 1 << 15}.get(self.type, 1 << 63)
            if not -limit <= n < limit:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    f"out of range for {self.type.name}")
        elif self.type == ConfigType.DOUBLE:
            try:
                n = float(v)
            except ValueError:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    "Not a number of type DOUBLE") from None
        elif self.type == ConfigType.BOOLEAN:
            if v.lower() not in ("true", "false"):
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    "Expected value to be either true or false")
            return v.lower()
        elif self.type == ConfigType.LIST:
            items = [i.strip() for i in v.split(",") if i.strip()]
            bad = [i for i in items if self.choices and i not in self.choices]
            if bad or (self.choices and not items):
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    f"String must be one of: {', '.join(self.choices)}")
            return ",".join(items)
        else:
            if self.choices and v not in self.choices:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    f"String must be one of: {', '.join(self.choices)}")
            return v
        if (self.low is not None and n < self.low) or (self.high is not None and n > self.high):
            bound = (f"at least {_num(self.low)}" if self.high is None
                     else f"between {_num(self.low)} and {_num(self.high)}")
            raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                f"Value must be {bound}")
        return v


def _num(x: float | None) -> str:
    return str(int(x)) if x is not None and x == int(x) else str(x)


_T = ConfigType
_SCALING_TYPES = tuple(t.value for t in ScalingType)

#: Kafka's topic configs (3.x names and defaults) and tidegate's scaling configs.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef("cleanup.policy", _T.LIST, "delete", "delete: the stream's "
                  "retention applies; compact: no retention, the cleaner keeps the latest "
                  "record of every key; compact,delete: both (retention only when set).",
                  "log.cleanup.policy", choices=("compact", "delete")),
        ConfigDef("compression.type", _T.STRING, "producer", "The final compression type "
                  "(ignored: batches are kept as the producer compressed them).",
                  "compression.type",
                  choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigDef("delete.retention.ms", _T.LONG, "86400000", "How long the cleaner keeps "
                  "tombstones of compacted topics.", "log.cleaner.delete.retention.ms", low=0),
        ConfigDef("file.delete.delay.ms", _T.LONG, "60000", "Delay before the cleaner "
                  "deletes a replaced clean segment.", "log.segment.delete.delay.ms", low=0),
        ConfigDef("flush.messages", _T.LONG, str(_LONG_MAX), "Messages between forced "
                  "fsyncs (ignored: the segment store makes every acknowledged append "
                  "durable).", "log.flush.interval.messages", low=1),
        ConfigDef("flush.ms", _T.LONG, str(_LONG_MAX), "Time between forced fsyncs "
                  "(ignored).", "log.flush.interval.ms", low=0),
        ConfigDef("index.interval.bytes", _T.INT, "4096", "Offset index granularity "
                  "(ignored: the offset index has an entry per batch).",
                  "log.index.interval.bytes", low=0),
        ConfigDef("max.compaction.lag.ms", _T.LONG, str(_LONG_MAX), "Maximum time a "
                  "message stays uncompacted.", "log.cleaner.max.compaction.lag.ms",
                  low=1),
        ConfigDef("max.message.bytes", _T.INT, "1048588", "Largest record batch size "
                  "allowed.", "message.max.bytes", low=0),
        ConfigDef("message.timestamp.after.max.ms", _T.LONG, str(_LONG_MAX), "Allowed "
                  "timestamp lead over the broker clock (CreateTime; INVALID_TIMESTAMP).",
                  "log.message.timestamp.after.max.ms", low=0),
        ConfigDef("message.timestamp.before.max.ms", _T.LONG, str(_LONG_MAX), "Allowed "
                  "timestamp lag behind the broker clock (CreateTime; INVALID_TIMESTAMP).",
                  "log.message.timestamp.before.max.ms", low=0),
        ConfigDef("message.timestamp.type", _T.STRING, "CreateTime", "Whether record "
                  "timestamps are CreateTime or LogAppendTime (the broker stamps batches).",
                  "log.message.timestamp.type", choices=("CreateTime", "LogAppendTime")),
        ConfigDef("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "Log compaction trigger.", "log.cleaner.min.cleanable.ratio", low=0, high=1),
        ConfigDef("min.compaction.lag.ms", _T.LONG, "0", "Minimum time a message stays "
                  "uncompacted.", "log.cleaner.min.compaction.lag.ms", low=0),
        ConfigDef("min.insync.replicas", _T.INT, "1", "Replicas that must acknowledge "
                  "acks=all (ignored: durability comes from the segment store).",
                  "min.insync.replicas", low=1),
        ConfigDef("preallocate", _T.BOOLEAN, "false", "Preallocate segment files (ignored).",
                  "log.preallocate"),
        ConfigDef("retention.bytes", _T.LONG, "-1", "Bytes kept per partition before old "
                  "data is deleted: the stream's size retention (times the partition "
                  "count), applied with retention.ms.", "log.retention.bytes", low=-1),
        ConfigDef("retention.ms", _T.LONG, "604800000", "How long data is kept: the "
                  "stream's time retention; -1 keeps data forever.", "log.retention.ms",
                  low=-1),
        ConfigDef("segment.bytes", _T.INT, "1073741824", "Size at which the cleaner "
                  "rolls a compacted partition's head (the stream's own segments scale by "
                  "the scaling policy).", "log.segment.bytes", low=1 << 20),  # Kafka 4.x's minimum
        ConfigDef("segment.index.bytes", _T.INT, "10485760", "Index file size (ignored).",
                  "log.index.size.max.bytes", low=4),
        ConfigDef("segment.jitter.ms", _T.LONG, "0", "Segment roll jitter (ignored).",
                  "log.roll.jitter.ms", low=0),
        ConfigDef("segment.ms", _T.LONG, "604800000", "Time after which the cleaner "
                  "rolls a compacted partition's head.",
                  "log.roll.ms", low=1),
        ConfigDef("unclean.leader.election.enable", _T.BOOLEAN, "false", "Unclean leader "
                  "election (ignored: there are no replicas to elect).",
                  "unclean.leader.election.enable"),
        ConfigDef("leader.replication.throttled.replicas", _T.LIST, "", "Ignored: "
                  "replication is the segment store's.",
                  "leader.replication.throttled.replicas"),
        ConfigDef("follower.replication.throttled.replicas", _T.LIST, "", "Ignored: "
                  "replication is the segment store's.",
                  "follower.replication.throttled.replicas"),
        ConfigDef("compression.gzip.level", _T.INT, "-1", "Ignored: batches are kept as the "
                  "producer compressed them.", "compression.gzip.level", low=-1, high=9),
        ConfigDef("compression.lz4.level", _T.INT, "9", "Ignored: batches are kept as the "
                  "producer compressed them.", "compression.lz4.level", low=1, high=17),
        ConfigDef("compression.zstd.level", _T.INT, "3", "Ignored: batches are kept as the "
                  "producer compressed them.", "compression.zstd.level", low=-131072, high=22),
        ConfigDef("remote.storage.enable", _T.BOOLEAN, "false", "Ignored: every topic is "
                  "tiered (Tier-2) already.", "remote.log.storage.system.enable"),
        ConfigDef("local.retention.ms", _T.LONG, "-2", "Ignored: Tier-1 is truncated once "
                  "data is in Tier-2.", "log.local.retention.ms", low=-2),
        ConfigDef("local.retention.bytes", _T.LONG, "-2", "Ignored: Tier-1 is truncated once "
                  "data is in Tier-2.", "log.local.retention.bytes", low=-2),
        ConfigDef("tidegate.scaling.type", _T.STRING, ScalingType.FIXED_NUM_SEGMENTS.value,
                  "The stream's scaling policy type.", choices=_SCALING_TYPES),
        ConfigDef("tidegate.scaling.target.rate", _T.INT, "0", "Scaling target rate (KiB/s "
                  "or events/s per segment).", low=0),
        ConfigDef("tidegate.scaling.scale.factor", _T.INT, "2", "Segments a hot segment is "
                  "split into.", low=0),
        ConfigDef("tidegate.scaling.min.segments", _T.INT, "1", "Fewest segments the "
                  "scaling policy keeps.", low=1),
    ]
}

#: Kafka 3.x topic configs that Kafka 4.x's ``LogConfig`` no longer defines (KIP-724,
#: KIP-937, down-conversion gone): a request naming them is refused as any unknown name
#: is; a topic that stored them before keeps them out of sight and loses them at its next
#: alteration.
REMOVED_CONFIGS = frozenset({
    "message.format.version", "message.timestamp.difference.max.ms",
    "message.downconversion.enable",
})

#: Configs whose change updates the stream's policies (the rest are only stored).
STREAM_POLICY_CONFIGS = frozenset(
    {"cleanup.policy", "retention.ms", "retention.bytes"} | {n for n in TOPIC_CONFIGS if n.startswith("tidegate.")}
)


def validate(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Validated topic configs as stored; ``InvalidConfig`` on an unknown name, a bad
    value or a combination the stream cannot express."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        out[name] = d.validate(value)
    stream_config(out, 1)
    return out


def without_removed(configs: Mapping[str, str]) -> dict[str, str]:
    """A topic's stored configs without the names Kafka 4.x removed."""
    return {k: v for k, v in configs.items() if k not in REMOVED_CONFIGS}


def effective(configs: Mapping[str, str]) -> dict[str, str]:
    """Every topic config: the stored ones over Kafka's defaults."""
    return {name: configs.get(name, d.default) for name, d in TOPIC_CONFIGS.items()}


def cleanup_policies(configs: Mapping[str, str]) -> frozenset[str]:
    """The topic's ``cleanup.policy`` items (``compact``, ``delete``)."""
    raw = configs.get("cleanup.policy", TOPIC_CONFIGS["cleanup.policy"].default)
    return frozenset(i.strip() for i in raw.split(",") if i.strip())


def is_compacted(configs: Mapping[str, str]) -> bool:
    return "compact" in cleanup_policies(configs)


def stream_config(configs: Mapping[str, str], partitions: int) -> StreamConfig:
    """The stream policies a topic's configs ask for (see the module doc)."""
    c = effective(configs)
    ms, size = int(c["retention.ms"]), int(c["retention.bytes"])
    policies = cleanup_policies(c)
    if "delete" not in policies or "compact" in policies:
        # compact,delete: the cleaner applies the retention the topic sets, moving log
        # starts first; the stream is truncated behind them, never ahead of them.
        ms = size = -1
    retention: RetentionPolicy | None = None
    size_max = max(size * max(partitions, 1), 1) if size != -1 else None
    if ms != -1:
        retention = RetentionPolicy(RetentionType.TIME, max(ms, 1), size_max)
    elif size_max is not None:
        retention = RetentionPolicy(RetentionType.SIZE, size_max)
    scaling_type = ScalingType(c["tidegate.scaling.type"])
    rate = int(c["tidegate.scaling.target.rate"])
    factor = int(c["tidegate.scaling.scale.factor"])
    if scaling_type != ScalingType.FIXED_NUM_SEGMENTS and (rate < 1 or factor < 1):
        raise InvalidConfig(f"tidegate.scaling.type={scaling_type.value} needs "
                            "tidegate.scaling.target.rate and .scale.factor of at least 1")
    scaling = ScalingPolicy(scaling_type, rate, factor, int(c["tidegate.scaling.min.segments"]))
    return StreamConfig(scaling=scaling, retention=retention)


# -- broker resources -----------------------------------------------------------------

#: The Kafka release whose broker configs tools read as this node's version.
KAFKA_VERSION = "3.9"


def _migration_policy(g: GatewayConfig) -> str:
    return GroupConfig.from_table(g.groups).consumer_migration_policy.lower()


def broker_configs(g: GatewayConfig) -> dict[str, tuple[str, ConfigType, str]]:
    """The broker configs DescribeConfigs reports: name → (value, type, documentation),
    from ``tidegate serve`` flags and its config file (the dynamic ones, in
    ``gateway/dynamic_configs.py``, may override a few)."""
    values: dict[str, tuple[str, ConfigType, str]] = {
        "broker.id": (str(g.node_id), _T.INT, "This node's id."),
        "node.id": (str(g.node_id), _T.INT, "This node's id."),
        "auto.create.topics.enable": (
            str(g.auto_create_topics_enable).lower(), _T.BOOLEAN,
            "Create unknown topics on Metadata requests that allow it."),
        "num.partitions": (str(g.num_partitions), _T.INT, "Partitions of auto-created topics."),
        "message.max.bytes": (str(g.message_max_bytes), _T.INT,
                              "Largest records blob accepted for one partition."),
        "log.cleaner.io.max.bytes.per.second": (
            str(g.log_cleaner_io_max_bytes_per_second), _T.DOUBLE,
            "The log cleaner's read rate, bytes per second (0: no limit)."),
        "socket.request.max.bytes": (str(g.socket_request_max_bytes), _T.INT,
                                     "Largest request frame accepted."),
        "queued.max.request.bytes": (str(g.queued_max_request_bytes), _T.LONG,
                                     "Request bytes read and not yet answered, node-wide."),
        "default.replication.factor": ("1", _T.INT, "Replication is the segment store's."),
        "offsets.topic.replication.factor": ("1", _T.SHORT, "Replication is the segment "
                                             "store's."),
        "delete.topic.enable": ("true", _T.BOOLEAN, "DeleteTopics is enabled."),
        # What admin UIs read to tell the broker's version (Kafka UI falls back to old
        # APIs without it): the Kafka release whose APIs tidegate answers.
        "inter.broker.protocol.version": (KAFKA_VERSION + "-IV0", _T.STRING,
                                          "The Kafka release whose protocol is spoken."),
        "listeners": ("PLAINTEXT://" + g.listen, _T.LIST, "Where this node listens."),
        "advertised.listeners": ("PLAINTEXT://" + (g.advertised_listener or g.listen),
                                 _T.LIST, "What Metadata advertises."),
        "log.dirs": (str(g.data_dir), _T.STRING, "This node's data directory."),
        "zookeeper.connect": (g.zookeeper, _T.STRING, "Cluster mode's ZooKeeper."),
        "transaction.state.log.replication.factor": ("1", _T.SHORT, "Replication is the "
                                                     "segment store's."),
        "fetch.max.bytes": (str(g.fetch_max_bytes), _T.INT, "Largest Fetch answer."),
        "connections.max.idle.ms": (str(g.connections_max_idle_ms), _T.LONG,
                                    "Idle connections close after this."),
        "max.incremental.fetch.session.cache.slots": (
            str(g.max_incremental_fetch_session_cache_slots), _T.INT,
            "Incremental fetch sessions kept (KIP-227)."),
        "group.consumer.migration.policy": (
            _migration_policy(g), _T.STRING,
            "Whether live groups move between the classic and the consumer protocol "
            "(bidirectional, upgrade, downgrade, disabled)."),
    }
    for d in TOPIC_CONFIGS.values():
        if d.broker_synonym is not None and d.broker_synonym not in values:
            values[d.broker_synonym] = (d.default, d.type, d.doc)
    return values
