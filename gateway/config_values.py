"""What each config key may hold: its type, its range and its relations to other keys, as
Kafka's broker ``ConfigDef`` checks them at start (``Range.atLeast``, ``ValidString``).

Every mistake raises ``ValueError`` with one line naming the key, the value given and
what is allowed (``invalid value 0 for num.partitions: must be at least 1``); the CLI
prints it and exits with status 2 before anything starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from tidegate.core.controller.api import ControllerError
from tidegate.core.controller.config import ControllerConfig
from tidegate.core.controller.validation import check_name
from tidegate.core.segmentstore.config import SegmentStoreConfig


def table_types() -> dict[str, type]:
    """The tables of settings (``[store]`` in the file) and the settings each holds."""
    # Imported here: the groups package pulls in the group coordinator, which every
    # importer of the gateway's config would otherwise load.
    from tidegate.gateway.groups.config import GroupConfig
    from tidegate.gateway.share.config import ShareConfig

    return {"store": SegmentStoreConfig, "controller": ControllerConfig, "groups": GroupConfig,
            "share": ShareConfig}


def _migration_policies() -> tuple[str, ...]:
    from tidegate.gateway.groups.config import MIGRATION_POLICIES

    return tuple(MIGRATION_POLICIES)

#: Keys spelled with dashes, as their flags (``--data-dir``); the others are Kafka-style
#: dotted names (``num.partitions``).
FLAG_KEYS = frozenset({
    "data_dir", "listen", "advertised_listener", "rest", "grpc", "zookeeper", "node_id",
    "segment_store", "tier1_dir", "tier2_dir", "container_count", "cluster_id", "scope",
})

#: Inclusive bounds of integer and float keys (None: unbounded on that side). Top-level
#: keys follow Kafka's broker where it has the key; a table's numbers not named here must
#: be at least 0.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "node_id": (0, None),
    "container_count": (0, None),  # 0: the store's default
    "num_partitions": (1, None),
    "socket_request_max_bytes": (1, None),
    "message_max_bytes": (0, None),
    "max_in_flight_requests_per_connection": (1, None),
    "queued_max_request_bytes": (None, None),  # 0 or less: no bound
    "max_connections": (0, None),
    "max_connections_per_ip": (0, None),
    "connections_max_idle_ms": (0, None),  # 0: never
    "fetch_max_wait_ms_max": (0, None),
    "fetch_max_bytes": (1024, None),
    "max_incremental_fetch_session_cache_slots": (0, None),
    "malloc_mmap_threshold_bytes": (0, None),
    "rebuild_read_bytes": (1, None),
    "zookeeper_session_timeout_ms": (1, None),
    "log_cleaner_backoff_ms": (0, None),
    "log_cleaner_dedupe_buffer_size": (1, None),
    "log_cleaner_io_max_bytes_per_second": (0, None),
    "log_cleaner_switch_entries_max": (1, None),
    "connections_max_reauth_ms": (0, None),
    "connection_failed_authentication_delay_ms": (0, None),
    "sasl_failed_login_log_per_minute": (0, None),
    "transaction_max_timeout_ms": (1, None),
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": (1, None),
    "transaction_end_wait_ms": (0, None),
    "transactional_id_expiration_ms": (1, None),
    "transaction_version": (0, 2),
    "store.container_count": (1, None),
    "store.cache_bytes_max": (1, None),
    "store.frame_bytes_max": (1024, None),
    "store.frames_in_flight_max": (1, None),
    "store.tier1_file_bytes_max": (1, None),
    "store.tier1_replication_factor": (1, None),
    "store.tier1_min_replicas": (1, None),
    "store.tier1_plog_bytes_max": (1, None),
    "store.tier1_plog_timeout_ms": (1, None),
    "store.append_bytes_max": (1, None),
    "store.table_key_bytes_max": (1, None),
    "store.table_value_bytes_max": (1, None),
    "store.flush_bytes": (1, None),
    "store.flush_interval_ms": (1, None),
    "store.writer_lag_bytes_max": (1, None),
    "store.cache_tier2_share_max": (0, 1),
    "store.tier2_write_bytes_max": (1, None),
    "store.tier2_chunk_bytes_max": (1, None),
    "store.tier2_read_block_bytes": (1, None),
    "store.tier2_read_attempts": (1, None),
    "store.writer_retry_delay_ms": (1, None),
    "store.writer_retry_delay_max_ms": (1, None),
    "store.checkpoint_interval_bytes": (1, None),
    "store.checkpoint_interval_ops": (1, None),
    "store.table_compact_bytes_min": (1, None),
    "store.traffic_window_ms": (1, None),
    "store.active_segments_max": (1, None),
    "store.segment_evict_interval_ms": (1, None),
    "controller.workflow_lock_timeout_ms": (1, None),
    "controller.autoscale_cold_fraction": (0, 1),
    "controller.retention_set_max": (1, None),
    "controller.txn_lease_ms_default": (1, None),
    "controller.txn_lease_ms_max": (1, None),
    "controller.watermarks_max": (1, None),
    "controller.kvt_partitions_max": (1, None),
    "controller.name_length_max": (1, None),
    "controller.segments_per_request_max": (1, None),
    "groups.min_session_timeout_ms": (1, None),
    "groups.max_session_timeout_ms": (1, None),
    "groups.max_group_size": (1, None),
    "groups.offsets_retention_ms": (1, None),
    "groups.offsets_retention_check_interval_ms": (1, None),
    "groups.consumer_heartbeat_interval_ms": (1, None),
    "groups.consumer_session_timeout_ms": (1, None),
    "groups.tick_interval_ms": (1, None),
    "groups.queue_writes_max": (1, None),
}

#: Keys that hold one of a few words (compared without case); a callable gives them.
CHOICES: dict[str, tuple[str, ...] | typing.Callable[[], tuple[str, ...]]] = {
    "ssl_client_auth": ("required", "requested", "none"),
    "groups.consumer_migration_policy": _migration_policies,
}

#: Pairs of keys where the first may not exceed the second.
NOT_ABOVE: tuple[tuple[str, str], ...] = (
    ("groups.min_session_timeout_ms", "groups.max_session_timeout_ms"),
    ("store.writer_retry_delay_ms", "store.writer_retry_delay_max_ms"),
    ("store.container_restart_delay_ms", "store.container_restart_delay_max_ms"),
    ("controller.txn_lease_ms_default", "controller.txn_lease_ms_max"),
)


def key_name(name: str) -> str:
    """The key as a user writes it: ``num_partitions`` -> ``num.partitions``,
    ``data_dir`` -> ``data-dir``, ``store.cache_bytes_max`` as it is."""
    if "." in name:
        return name
    return name.replace("_", "-" if name in FLAG_KEYS else ".")


def unknown_key(key: str, known: Iterable[str]) -> ValueError:
    """``unknown config key 'x'``, with the nearest known key when one is close."""
    names = [key_name(k) for k in known]
    near = difflib.get_close_matches(key_name(key), names, n=1, cutoff=0.75)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return ValueError(f"unknown config key {key_name(key)!r}{hint}")


def invalid(key: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"invalid value {value!r} for {key_name(key)}: {allowed}")


def coerce(key: str, value: Any, hint: Any) -> Any:
    """``value`` as the type ``hint`` names (``int``, ``float``, ``bool``, ``str``,
    ``X | None``, ``tuple[int, ...]``); a string from a flag or variable is parsed."""
    if isinstance(hint, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise invalid(key, value, "must be true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        raise invalid(key, value, "must be an integer")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise invalid(key, value, "must be a number")
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # ``--set cluster.id=7``: TOML read it as a number
        raise invalid(key, value, "must be a string")
    if typing.get_origin(hint) is tuple:
        if isinstance(value, list | tuple):
            return tuple(coerce(key, v, typing.get_args(hint)[0]) for v in value)
        raise invalid(key, value, "must be a list")
    return value


def coerce_table(table: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """A table's settings, each key checked against the table's fields and its value
    converted to the field's type."""
    cls = table_types()[table]
    hints = typing.get_type_hints(cls)
    out = {}
    for raw, value in values.items():
        name = raw.replace(".", "_").replace("-", "_")
        if name not in hints:
            raise unknown_key(f"{table}.{raw}", (f"{table}.{k}" for k in hints))
        out[name] = coerce(f"{table}.{name}", value, hints[name])
    return out


def check_number(key: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = RANGES.get(key, (0, None) if "." in key else (None, None))
    if low is not None and high is not None and not low <= value <= high:
        raise invalid(key, value, f"must be between {low:g} and {high:g}")
    if low is not None and value < low:
        raise invalid(key, value, f"must be at least {low:g}")
    if high is not None and value > high:
        raise invalid(key, value, f"must be at most {high:g}")


def check_values(top: Mapping[str, Any], tables: Mapping[str, Mapping[str, Any]]) -> None:
    """Ranges, choices and order relations of the top-level keys and the tables' keys
    (the tables' defaults filled in)."""
    flat = dict(top)
    for table, values in tables.items():
        defaults = {f.name: f.default for f in dataclasses.fields(table_types()[table])}
        for name, value in {**defaults, **values}.items():
            flat[f"{table}.{name}"] = value
    for key, value in flat.items():
        check_number(key, value)
        choices = CHOICES.get(key)
        allowed = choices() if callable(choices) else choices
        if allowed and str(value).lower() not in allowed:
            raise invalid(key, value, f"must be one of {', '.join(allowed)}")
    for small, large in NOT_ABOVE:
        if flat[small] > flat[large]:
            raise ValueError(
                f"{key_name(small)} ({flat[small]}) may not exceed {key_name(large)} "
                f"({flat[large]})"
            )
    beat, session = flat["groups.consumer_heartbeat_interval_ms"], flat[
        "groups.consumer_session_timeout_ms"]
    if beat >= session:  # as Kafka's GroupCoordinatorConfig requires
        raise ValueError(
            f"groups.consumer_heartbeat_interval_ms ({beat}) must be less than "
            f"groups.consumer_session_timeout_ms ({session})"
        )


def check_words(top: Mapping[str, Any], controller: Mapping[str, Any]) -> None:
    """Keys whose words have a form: the scope is a controller scope name, the cluster
    id is not empty, each super user a ``Type:name`` principal (Kafka's form)."""
    try:
        check_name("scope", top["scope"], ControllerConfig(**controller))
    except ControllerError as exc:
        text = str(exc)
        allowed = text[text.index("must"):] if "must" in text else text
        raise invalid("scope", top["scope"], allowed) from None
    if not str(top["cluster_id"]).strip():
        raise invalid("cluster_id", top["cluster_id"], "must not be empty")
    for user in str(top["super_users"]).split(";"):
        kind, sep, name = user.strip().partition(":")
        if user.strip() and not (sep and kind and name):
            raise invalid("super_users", top["super_users"],
                          "must be principals separated by ';' (User:alice;User:bob)")


def check_distinct(addresses: Iterable[tuple[str, str, int]]) -> None:
    """Two servers of this node may not listen on one port (port 0: any free one); a
    wildcard host takes the port on every address."""
    seen: list[tuple[str, str, int]] = []
    for what, host, port in addresses:
        for other, ohost, oport in seen:
            wild = {"", "0.0.0.0", "::"}
            if port and port == oport and (host == ohost or host in wild or ohost in wild):
                raise ValueError(
                    f"{what} and {other} are both set to {host}:{port}: each needs its own port"
                )
        seen.append((what, host, port))
