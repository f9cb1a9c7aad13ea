"""Share group settings; the names in comments are Kafka's broker and group configs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: Group configs (IncrementalAlterConfigs on a GROUP resource) a share group takes, with
#: their defaults; ``None``: the broker setting of the same meaning applies.
GROUP_CONFIGS: dict[str, str | None] = {
    "share.auto.offset.reset": "latest",
    "share.record.lock.duration.ms": None,
    "share.session.timeout.ms": None,
    "share.heartbeat.interval.ms": None,
}
AUTO_OFFSET_RESETS = ("latest", "earliest")


@dataclass(frozen=True, slots=True)
class ShareConfig:
    #: The table segment holding share-partition state and share group configs.
    table: str = "_system/_kafka/share_groups"
    #: group.share.record.lock.duration.ms
    record_lock_duration_ms: int = 30_000
    #: group.share.delivery.count.limit
    delivery_count_limit: int = 5
    #: group.share.partition.max.record.locks: the in-flight window of one share-partition.
    partition_record_locks_max: int = 2_000
    #: group.share.heartbeat.interval.ms / group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    #: group.share.max.size
    group_size_max: int = 200
    #: Share groups one node keeps (tidegate's own bound on memory).
    groups_max: int = 10_000
    #: Open share sessions (max.share.session.cache.slots... Kafka derives it from the
    #: group sizes; one per member here).
    sessions_max: int = 20_000
    #: Fetches wait at most this long for records (share.fetch.max.wait.ms is the client's).
    fetch_wait_ms_max: int = 30_000

    def __post_init__(self) -> None:
        if self.delivery_count_limit < 1 or self.record_lock_duration_ms < 1:
            raise ValueError("share delivery_count_limit and record_lock_duration_ms must be >= 1")

    @classmethod
    def from_table(cls, values: dict[str, object]) -> ShareConfig:
        """From the ``[share]`` table of the TOML config (field names as keys)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown [share] config keys {unknown}; known: {sorted(known)}")
        kwargs = {k: str(v) if k == "table" else int(str(v)) for k, v in values.items()}
        return cls(**kwargs)  # type: ignore[arg-type]  # each value has its field's type


def group_config_defaults(config: ShareConfig) -> dict[str, str]:
    """Each share group config's value for a group that does not set it."""
    broker = {
        "share.record.lock.duration.ms": config.record_lock_duration_ms,
        "share.session.timeout.ms": config.session_timeout_ms,
        "share.heartbeat.interval.ms": config.heartbeat_interval_ms,
    }
    return {name: default if default is not None else str(broker[name])
            for name, default in GROUP_CONFIGS.items()}


def check_group_config(name: str, value: str | None) -> str | None:
    """The error message for a share group config, or None when it is valid."""
    if name not in GROUP_CONFIGS:
        return f"Unknown group config name: {name}"
    if value is None:
        return None
    if name == "share.auto.offset.reset":
        if value.lower() not in AUTO_OFFSET_RESETS:
            return f"Invalid value {value} for configuration {name}: expected one of {AUTO_OFFSET_RESETS}"
        return None
    try:
        ms = int(value)
    except ValueError:
        return f"Invalid value {value} for configuration {name}: not a number"
    if ms < 1:
        return f"Invalid value {value} for configuration {name}: must be at least 1"
    return None
