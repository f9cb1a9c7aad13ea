"""Gateway configuration: the ``tidegate serve`` flags, ``--set``, the environment and the
TOML config file.

Every flag has a config key (``data-dir``, ``listen``, ``advertised-listener``, ``rest``,
``grpc``); Kafka-ish broker keys use Kafka's names (``auto.create.topics.enable``,
``num.partitions``, ``socket.request.max.bytes``, ``message.max.bytes``, ...). Dots and
dashes in a key are the same as underscores. The tables ``store``, ``controller`` and
``groups`` hold the segment store's, controller's and group coordinator's settings.

Where a key can be set, most binding first: a flag (``--listen``, then ``--set
key=value`` in the order given), the environment, the file, the default.

- ``--set num.partitions=3``; a table's key as ``--set store.cache_bytes_max=1000000``.
- ``TIDEGATE_`` + the key in capitals with dots and dashes as underscores:
  ``TIDEGATE_NUM_PARTITIONS=3``; a table's key after a double underscore:
  ``TIDEGATE_STORE__CACHE_BYTES_MAX=1000000``.

Values from flags and the environment are read as TOML values where they parse as one
(``3``, ``true``, ``"x"``, ``[1, 2]``), else taken as strings (``0.0.0.0:9092``).
Every key and value is checked before anything starts (``config_values``): an unknown
key, a value of the wrong type or out of its range, or two servers on one port is one line
and exit status 2. ``TIDEGATE_`` variables that name no key are left to whatever else
reads them (tests, images), each with a warning at start naming the nearest key.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidegate.gateway.config_values import (
    check_distinct,
    check_values,
    check_words,
    coerce,
    coerce_table,
    invalid,
    key_name,
    unknown_key,
)
from tidegate.gateway.security.listeners import (
    Listener,
    parse_advertised,
    parse_listeners,
    parse_protocol_map,
)

#: The prefix of the environment variables that set config keys.
ENV_PREFIX = "TIDEGATE_"
#: Config keys that are tables of settings (``[store]`` in the file).
TABLES = ("store", "controller", "groups", "share")


#: Values of ``rest``, ``grpc`` (and the plog server's listen) that turn the server off.
OFF = ("", "off", "none")


def parse_host_port(value: str, key: str = "") -> tuple[str, int]:
    """``HOST:PORT`` with the port in 0..65535 (``key`` named in the error)."""
    host, sep, port = value.rpartition(":")
    where = f"{key_name(key)}: " if key else ""
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{where}expected HOST:PORT, got {value!r}")
    if int(port) > 65535:
        raise ValueError(f"{where}port {port} of {value!r} is out of range: must be 0 to 65535")
    return host.strip("[]"), int(port)


@dataclass
class GatewayConfig:
    data_dir: Path = Path("./tidegate-data")
    listen: str = "127.0.0.1:9092"
    #: What Metadata advertises as this broker's address (default: ``listen``).
    advertised_listener: str | None = None
    #: Admin REST and controller gRPC addresses ("" or "off" disables them).
    rest: str = "127.0.0.1:9080"
    grpc: str = "127.0.0.1:9090"
    node_id: int = 0
    #: Cluster mode (``docs/cluster.md``): ZooKeeper's connect string ``HOST:PORT[/chroot]``
    #: ("" runs the embedded single node), where this node serves its segment store to the
    #: others (port 0: any free one), the Tier-1 and Tier-2 directories every node shares,
    #: and the segment containers of the whole cluster (0: the store's default).
    zookeeper: str = ""
    #: The node's ZooKeeper session timeout: how long after its death (or freeze) its
    #: containers are handed to the others (ZooKeeper bounds it by its tickTime).
    zookeeper_session_timeout_ms: int = 6000
    segment_store: str = "127.0.0.1:0"
    tier1_dir: str = ""
    tier2_dir: str = ""
    container_count: int = 0
    cluster_id: str = "tidegate"
    #: The controller scope that holds Kafka topics as streams.
    scope: str = "kafka"

    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    #: Frames larger than this close the connection before the body is read.
    socket_request_max_bytes: int = 100 * 1024 * 1024
    #: Largest records blob accepted for one partition in a Produce (Kafka's default).
    message_max_bytes: int = 1024 * 1024 + 12
    #: Requests read ahead and processed concurrently per connection.
    max_in_flight_requests_per_connection: int = 16
    #: Node-wide: bytes of request frames read and not yet answered; while they are
    #: spent, no connection takes another frame (Kafka's name; 0 or less: no bound).
    #: The read-ahead above bounds one connection only: 1,000 connections of 16 ~1 MB
    #: produce requests each could otherwise hold 16 GB.
    queued_max_request_bytes: int = 128 * 1024 * 1024
    #: Largest frame read from a SASL listener's client before it logged in (Kafka's name).
    sasl_server_max_receive_size: int = 512 * 1024
    #: Kafka's connection limits (see ``gateway.net.limits``): 0 chooses
    #: ``max.connections`` from the file-descriptor limit and means no per-address limit;
    #: overrides are ``"host:count,..."``; idle connections close after the last key.
    max_connections: int = 0
    max_connections_per_ip: int = 0
    max_connections_per_ip_overrides: str = ""
    connections_max_idle_ms: int = 10 * 60 * 1000
    #: Upper bound on a Fetch's max_wait_ms and a Produce's wait for durability.
    fetch_max_wait_ms_max: int = 30_000
    #: Fetch response size cap applied on top of the request's max_bytes. Kafka's
    #: default is 55 MiB; 8 MiB answers come sooner, bound the memory one fetch takes,
    #: and keep librdkafka consumers under their queue limit (64 MiB), past which they
    #: pause fetching for ``fetch.queue.backoff.ms``.
    fetch_max_bytes: int = 8 * 1024 * 1024
    #: Incremental fetch sessions kept (KIP-227, Kafka's name and default).
    max_incremental_fetch_session_cache_slots: int = 1000
    #: glibc ``M_MMAP_THRESHOLD``: allocations at least this large get their own
    #: mapping, returned to the OS when freed. glibc's default threshold grows to 32 MiB
    #: as such blocks are freed, after which cache blocks and fetch buffers come from
    #: the heap, whose freed holes are kept and RSS outgrows the cache. 0 keeps glibc's
    #: default.
    malloc_mmap_threshold_bytes: int = 256 * 1024
    #: Bytes of segment read per rebuild step at start-up.
    rebuild_read_bytes: int = 4 * 1024 * 1024
    #: The log cleaner of compacted topics (Kafka's names): the pause between its passes
    #: (0 disables it), the memory of its key map and its read rate.
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    #: Bytes per second a cleaner pass reads at most (0: no bound; Kafka's default): the
    #: cleaner shares the process's CPU with produce and fetch (bench/compaction.py).
    log_cleaner_io_max_bytes_per_second: int = 32 * 1024 * 1024
    #: Index entries a cleaner pass holds at most before switching them (tidegate's own:
    #: with the key map, what bounds a pass's memory).
    log_cleaner_switch_entries_max: int = 50_000
    #: Security (``docs/security.md``), Kafka's names. ``listeners`` (``NAME://HOST:PORT,...``)
    #: replaces ``listen`` when set; ``listen`` is the one-PLAINTEXT-listener shorthand.
    listeners: str = ""
    advertised_listeners: str = ""
    listener_security_protocol_map: str = ""
    #: TLS from PEM files: the key and certificate chain (one file, or the chain in
    #: ``ssl.keystore.certificate.chain``), the CA bundle trusted for client certificates,
    #: and whether a client certificate is ``required``, ``requested`` or ``none``.
    ssl_keystore_location: str = ""
    ssl_keystore_certificate_chain: str = ""
    ssl_key_password: str = ""
    ssl_truststore_location: str = ""
    ssl_client_auth: str = "none"
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    #: KIP-368: a SASL session's lifetime, after which the client re-authenticates (0: none).
    connections_max_reauth_ms: int = 0
    #: ``[sasl.users]``: name = password, stored as SCRAM credentials when absent at start.
    sasl: dict[str, Any] = field(default_factory=dict)
    #: Any non-empty value turns on the ACL authorizer (Kafka's class names work).
    authorizer_class_name: str = ""
    #: ``User:alice;User:bob``: principals every operation is allowed to.
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    #: Admin REST and gRPC: Basic credentials of a SASL user required (ACLs apply when the
    #: authorizer is on), TLS with the ``ssl.keystore`` files, and the super user a cluster
    #: node forwards gRPC writes to the controller leader as.
    admin_authentication: bool = False
    admin_tls: bool = False
    admin_forward_user: str = ""
    admin_forward_password: str = ""
    #: The listener cluster nodes call each other's Kafka APIs on (WriteTxnMarkers), with
    #: the ``admin.forward`` credentials on a SASL one (default: the first listener).
    inter_broker_listener_name: str = ""
    #: A failed login is answered, and its connection closed, this long after it failed
    #: (Kafka's name).
    connection_failed_authentication_delay_ms: int = 100
    #: Failed logins from one address in a minute after which its logins are refused
    #: unchecked until the minute's count falls below it (tidegate's own; 0: no limit).
    connection_failed_authentications_per_ip_max: int = 300
    #: Most failed-login log lines per minute (the rest are counted in the next line).
    sasl_failed_login_log_per_minute: int = 20
    #: Extra store configuration passed through to the segment store and controller.
    store: dict[str, Any] = field(default_factory=dict)
    controller: dict[str, Any] = field(default_factory=dict)
    #: Group coordinator settings (``gateway.groups.GroupConfig`` fields).
    groups: dict[str, Any] = field(default_factory=dict)
    #: Share group settings (``gateway.share.config.ShareConfig`` fields).
    share: dict[str, Any] = field(default_factory=dict)
    #: Kafka's ``transaction.max.timeout.ms``: InitProducerId asking for more gets
    #: INVALID_TRANSACTION_TIMEOUT.
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    #: How often Ongoing transactions past their timeout are looked for and aborted
    #: (Kafka's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    #: How long EndTxn waits for its markers before answering (0: answered once the
    #: decision is durable, as Kafka does).
    transaction_end_wait_ms: int = 0
    #: Kafka's ``transactional.id.expiration.ms``: unused transactional ids are forgotten.
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    #: The ``transaction.version`` feature level ApiVersions finalizes: 2 lets
    #: kafka-clients 4.x use KIP-890's transaction version 2; 1 or 0 keeps them on 1.
    transaction_version: int = 2

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen, "listen")

    @property
    def advertised_address(self) -> tuple[str, int]:
        if self.advertised_listener:
            return parse_host_port(self.advertised_listener, "advertised_listener")
        return self.listen_address

    def kafka_listeners(self) -> list[Listener]:
        """``listeners``, or one PLAINTEXT listener at ``listen``."""
        if self.listeners:
            return parse_listeners(self.listeners, self.listener_security_protocol_map)
        host, port = self.listen_address
        return [Listener("PLAINTEXT", "PLAINTEXT", host, port)]

    def advertised_by_listener(self) -> dict[str, tuple[str, int]]:
        """What each listener advertises where configured (others: their bound address)."""
        listeners = self.kafka_listeners()
        if self.advertised_listeners:
            return parse_advertised(self.advertised_listeners, listeners)
        if not self.listeners and self.advertised_listener:
            return {listeners[0].name: self.advertised_address}
        return {}

    def apply(self, values: dict[str, Any]) -> None:
        """Set fields from config keys (``data-dir``, ``num.partitions``, ...), each value
        converted to its key's type (``ValueError`` naming the key if it cannot be)."""
        hints = typing.get_type_hints(GatewayConfig)
        for key, value in values.items():
            name = key.replace(".", "_").replace("-", "_")
            if name not in hints:
                raise unknown_key(key, hints)
            if name in TABLES:
                if not isinstance(value, dict):
                    raise ValueError(f"{name} must be a table ([{name}] in the file)")
                value = {**getattr(self, name), **coerce_table(name, value)}
            elif name == "sasl":
                if not isinstance(value, dict):
                    raise ValueError("sasl must be a table ([sasl.users] in the file)")
                value = {**self.sasl, **value}
            elif name == "data_dir":
                if not coerce(name, value, str).strip():
                    raise invalid(name, value, "must name a directory")
                value = Path(coerce(name, value, str))
            else:
                value = coerce(name, value, hints[name])
            setattr(self, name, value)

    def check(self) -> None:
        """Ranges, choices and relations between keys (``config_values``); the addresses
        parse and no two servers share one."""
        top = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        check_values(top, {t: getattr(self, t) for t in TABLES})
        check_words(top, self.controller)
        if self.listener_security_protocol_map:
            parse_protocol_map(self.listener_security_protocol_map)
        addresses = [
            (f"listener {listener.name}" if self.listeners else "listen",
             listener.host, listener.port)
            for listener in self.kafka_listeners()
        ]
        self.advertised_by_listener()
        for name in ("rest", "grpc"):
            if getattr(self, name) not in OFF:
                addresses.append((name, *parse_host_port(getattr(self, name), name)))
        if self.zookeeper:
            addresses.append(
                ("segment-store", *parse_host_port(self.segment_store, "segment-store"))
            )
        plog = self.store.get("tier1_plog_server_listen")
        if plog and plog not in OFF:
            addresses.append(
                ("store.tier1_plog_server_listen",
                 *parse_host_port(plog, "store.tier1_plog_server_listen")),
            )
        check_distinct(addresses)
        if self.admin_tls and not self.ssl_keystore_location:
            raise ValueError("admin.tls needs ssl.keystore.location (a PEM key)")
        if self.zookeeper and not (self.tier1_dir or self.store.get("tier1_dir")) and not (
            self.tier2_dir or self.store.get("tier2_dir")
        ):
            raise ValueError("zookeeper (cluster mode) needs tier2-dir, a directory every node shares")


def parse_value(text: str) -> Any:
    """A flag's or variable's value: a TOML value where it is one, else the string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _nest(key: str, value: Any) -> dict[str, Any]:
    """``store.cache_bytes_max`` -> ``{"store": {"cache_bytes_max": value}}``."""
    table, sep, rest = key.partition(".")
    if sep and table.replace("-", "_") in TABLES:
        return {table: {rest.replace(".", "_").replace("-", "_"): value}}
    return {key: value}


def settings_from_sets(sets: Iterable[str]) -> list[dict[str, Any]]:
    """``--set key=value`` flags, each one setting."""
    out = []
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out.append(_nest(key.strip(), parse_value(text)))
    return out


#: ``TIDEGATE_*`` variables read by tidegate that are not config keys.
OTHER_VARIABLES = ("TIDEGATE_LOG_LEVEL", "TIDEGATE_LOG_FORMAT", "TIDEGATE_FAILPOINTS")


def _env_settings(env: Mapping[str, str]) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Each ``TIDEGATE_*`` variable's setting, and the variables that name no key."""
    names = {f.name for f in dataclasses.fields(GatewayConfig)}
    settings: list[tuple[str, dict[str, Any]]] = []
    unknown = []
    for var, text in sorted(env.items()):
        if not var.startswith(ENV_PREFIX) or var in OTHER_VARIABLES:
            continue
        key = var[len(ENV_PREFIX):].lower()
        table, sep, rest = key.partition("__")
        if sep and table in TABLES and rest:
            settings.append((var, {table: {rest: parse_value(text)}}))
        elif key in names and key not in TABLES:
            settings.append((var, {key: parse_value(text)}))
        else:
            unknown.append(var)
    return settings, unknown


def settings_from_env(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The settings ``TIDEGATE_*`` variables make, and the variables that name no key."""
    settings: dict[str, Any] = {}
    each, unknown = _env_settings(env)
    for _, setting in each:
        for key, value in setting.items():
            if key in TABLES:
                settings.setdefault(key, {}).update(value)
            else:
                settings[key] = value
    return settings, unknown


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """A line per ``TIDEGATE_*`` variable that names no config key, with the variable
    it is closest to (``TIDEGATE_NUM_PARTITONS``: did you mean ``TIDEGATE_NUM_PARTITIONS``?)."""
    known = [ENV_PREFIX + f.name.upper() for f in dataclasses.fields(GatewayConfig)]
    known += [f"{ENV_PREFIX}{t.upper()}__" for t in TABLES]
    lines = []
    for var in _env_settings(env)[1]:
        near = difflib.get_close_matches(var, known, n=1, cutoff=0.8)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"environment variable {var} names no config key{hint}; it is ignored")
    return lines


def load_config(
    path: Path | None,
    overrides: dict[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    sets: Iterable[str] = (),
) -> GatewayConfig:
    """Defaults, then the file, the environment (``env``: ``TIDEGATE_*`` variables),
    ``--set`` flags in order, then the other flags (``overrides``; None: not given)."""
    config = GatewayConfig()
    if path is not None:
        try:
            with open(path, "rb") as f:
                config.apply(tomllib.load(f))
        except OSError as exc:
            raise ValueError(f"config file {path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # TOMLDecodeError too: its line and column
            raise ValueError(f"config file {path}: {exc}") from None
    for var, setting in _env_settings(env or {})[0]:
        try:
            config.apply(setting)
        except ValueError as exc:
            raise ValueError(f"{var}: {exc}") from None
    for setting in settings_from_sets(sets):
        config.apply(setting)
    config.apply({k: v for k, v in overrides.items() if v is not None})
    config.check()
    return config
