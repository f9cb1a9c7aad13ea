"""Group coordinator settings; the names in comments are Kafka's broker configs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: Kafka's ``ConsumerGroupMigrationPolicy``: name -> (upgrade enabled, downgrade enabled).
MIGRATION_POLICIES: dict[str, tuple[bool, bool]] = {
    "bidirectional": (True, True),
    "upgrade": (True, False),
    "downgrade": (False, True),
    "disabled": (False, False),
}
_STRINGS = frozenset({"table", "consumer_migration_policy"})


@dataclass(frozen=True, slots=True)
class GroupConfig:
    #: The table segment holding committed offsets and group metadata.
    table: str = "_system/_kafka/consumer_groups"
    #: group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    #: group.initial.rebalance.delay.ms: how long a group that starts from Empty waits
    #: for more members before it completes its first join phase.
    initial_rebalance_delay_ms: int = 3_000
    #: group.max.size (Kafka's default is unbounded; members and member ids handed out
    #: but not yet used count, so one client cannot grow a group's memory without end).
    max_group_size: int = 10_000
    #: What a member's JoinGroup protocols may carry, and what a classic group holds of
    #: its members' protocol metadata and assignments together (tidegate's own: the
    #: group is stored as one table entry, which the segment store bounds). A join past
    #: them answers INVALID_REQUEST (the member's own) or GROUP_MAX_SIZE_REACHED (the
    #: group's), a SyncGroup past them UNKNOWN_SERVER_ERROR (Kafka's answer for a group
    #: record too large to store).
    member_metadata_bytes_max: int = 256 * 1024
    group_metadata_bytes_max: int = 512 * 1024
    #: offset.metadata.max.bytes
    offset_metadata_bytes_max: int = 4_096
    #: offsets.retention.minutes (in ms): the commits of a consumer group expire once it
    #: has been Empty this long; a group that never had members (commits with
    #: generation -1) loses each commit this long after it was made; a group with
    #: members loses commits of topics it no longer subscribes to this long after them.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: offsets.retention.check.interval.ms
    offsets_retention_check_interval_ms: int = 600_000
    #: group.consumer.heartbeat.interval.ms / group.consumer.session.timeout.ms: what
    #: KIP-848 ("consumer" protocol) members are told and held to.
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_session_timeout_ms: int = 45_000
    #: group.consumer.migration.policy: whether a live classic group becomes a consumer
    #: group when a consumer-protocol member joins (upgrade) and back when its last
    #: consumer-protocol member leaves (downgrade); one of ``MIGRATION_POLICIES``.
    consumer_migration_policy: str = "bidirectional"
    #: How often session, join and sync deadlines are checked.
    tick_interval_ms: int = 100
    #: Bound on durable writes queued and not yet done.
    queue_writes_max: int = 10_000

    def __post_init__(self) -> None:
        if self.consumer_migration_policy.lower() not in MIGRATION_POLICIES:
            raise ValueError(
                f"consumer_migration_policy {self.consumer_migration_policy!r}: "
                f"expected one of {', '.join(MIGRATION_POLICIES)}"
            )

    @property
    def upgrade_enabled(self) -> bool:
        return MIGRATION_POLICIES[self.consumer_migration_policy.lower()][0]

    @property
    def downgrade_enabled(self) -> bool:
        return MIGRATION_POLICIES[self.consumer_migration_policy.lower()][1]

    @classmethod
    def from_table(cls, values: dict[str, object]) -> GroupConfig:
        """From the ``[groups]`` table of the TOML config (field names as keys)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown [groups] config keys {unknown}; known: {sorted(known)}")
        kwargs = {k: str(v) if k in _STRINGS else int(str(v)) for k, v in values.items()}
        return cls(**kwargs)  # type: ignore[arg-type]  # each value has its field's type (above)
