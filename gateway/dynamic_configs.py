"""Dynamic broker configs (Kafka's ``DynamicBrokerConfig``): the broker configs Kafka marks
cluster-wide dynamic and this server applies live, set with AlterConfigs or
IncrementalAlterConfigs on a BROKER resource, either for one node (its id) or as the
cluster default (empty name).

They are kept in a table segment every node reads (``broker/<id>/<name>`` and
``default/<name>``); a node loads them at start and again every ``REFRESH_MS`` (Kafka
propagates dynamic configs asynchronously too), and the node that takes a change applies it
at once. Precedence, as in Kafka: the node's own value, the cluster default, the static
value (flags, config file), Kafka's default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.segmentstore.api import SegmentExistsError, TableEntry, TableRemoval, TableUpdate
from tidegate.gateway.config import GatewayConfig

log = logging.getLogger(__name__)

DYNAMIC_TABLE = "_system/gateway/broker-configs"
#: How often a node reads the table for changes other nodes made.
REFRESH_MS = 5_000
#: Longest value stored: values are numbers here.
VALUE_CHARS_MAX = 64


class TableStore(Protocol):
    """The segment store's table operations used here."""

    async def create_table(self, name: str) -> None: ...
    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]: ...
    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None: ...
    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]: ...


class DynamicConfigError(Exception):
    """Refused with INVALID_REQUEST, as Kafka refuses what ``DynamicBrokerConfig`` rejects."""


@dataclass(frozen=True, slots=True)
class DynamicKey:
    #: The ``GatewayConfig`` attribute the value lands in (read live by its users).
    attribute: str
    kafka_type: str
    low: int


#: Kafka's cluster-wide dynamic configs that this server reads live: ``message.max.bytes``
#: at every Produce, the cleaner's read rate at every pass.
DYNAMIC_KEYS: dict[str, DynamicKey] = {
    "message.max.bytes": DynamicKey("message_max_bytes", "INT", 0),
    "log.cleaner.io.max.bytes.per.second": DynamicKey(
        "log_cleaner_io_max_bytes_per_second", "DOUBLE", 0),
}


def _scala_set(names: Sequence[str]) -> str:
    # Kafka's messages print a Scala set.
    return "Set(" + ", ".join(names) + ")"


def parse(name: str, value: str | None) -> int | float:
    """The value of dynamic config ``name`` (raises ``DynamicConfigError`` with Kafka's
    ConfigDef message)."""
    key = DYNAMIC_KEYS[name]
    text = (value or "").strip()
    number: int | float
    try:
        if len(text) > VALUE_CHARS_MAX:
            raise ValueError
        number = int(text) if key.kafka_type == "INT" else float(text)
    except ValueError:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type {key.kafka_type}"
        ) from None
    if key.kafka_type == "INT" and not -(2**31) <= number < 2**31:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type INT")
    if number < key.low:
        raise DynamicConfigError(
            f"Invalid value {value} for configuration {name}: Value must be at least {key.low}")
    return number


def check_names(names: Sequence[str]) -> None:
    """Kafka's refusal of configs that cannot change at run time (here: any not in
    ``DYNAMIC_KEYS``)."""
    static = [n for n in names if n not in DYNAMIC_KEYS]
    if static:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {_scala_set(static)}")


def _prefix(broker: str) -> bytes:
    return b"default/" if broker == "" else f"broker/{broker}/".encode()


class DynamicBrokerConfigs:
    """This node's view of the dynamic configs; ``config`` is the live ``GatewayConfig``,
    whose dynamic attributes it rewrites (the static values are kept aside)."""

    def __init__(self, store: TableStore, config: GatewayConfig) -> None:
        self._store = store
        self.config = config
        self.node = str(config.node_id)
        self.static = {name: getattr(config, k.attribute) for name, k in DYNAMIC_KEYS.items()}
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}
        #: Called after the effective values changed (e.g. the log cleaner's rate).
        self.on_change: list[Callable[[GatewayConfig], None]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        with contextlib.suppress(SegmentExistsError):
            await self._store.create_table(DYNAMIC_TABLE)
        await self.load()
        self._task = asyncio.get_running_loop().create_task(self._refresh())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_MS / 1000)
            try:
                await self.load()
            except Exception:  # a store that is moving: the next round reads again
                log.warning("dynamic broker configs: reload failed", exc_info=True)

    async def _read(self, broker: str) -> dict[str, str]:
        prefix = _prefix(broker)
        out = {}
        for e in await self._store.table_entries(DYNAMIC_TABLE, prefix):
            name = e.key[len(prefix):].decode()
            if name in DYNAMIC_KEYS:
                out[name] = e.value.decode()
        return out

    async def load(self) -> None:
        self.per_broker = await self._read(self.node)
        self.cluster_default = await self._read("")
        self._apply()

    def level(self, broker: str) -> dict[str, str]:
        return self.cluster_default if broker == "" else self.per_broker

    async def replace(self, broker: str, configs: Mapping[str, str | None],
                      validate_only: bool) -> None:
        """Make ``configs`` the complete set of dynamic configs of ``broker`` (a node id or
        "" for the cluster default); a None value removes the name."""
        names = list(configs)
        check_names(names)
        new = {n: v.strip() for n, v in configs.items() if v is not None}
        for n, v in new.items():
            parse(n, v)
        if validate_only:
            return
        old = self.level(broker)
        prefix = _prefix(broker)
        removed = [TableRemoval(prefix + n.encode()) for n in old if n not in new]
        updates = [TableUpdate(prefix + n.encode(), v.encode()) for n, v in new.items()
                   if old.get(n) != v]
        if updates:
            await self._store.table_put(DYNAMIC_TABLE, updates)
        if removed:
            await self._store.table_remove(DYNAMIC_TABLE, removed)
        if broker == "":
            self.cluster_default = new
        else:
            self.per_broker = new
        self._apply()

    def source_values(self, name: str) -> list[tuple[str, str]]:
        """``name``'s values in Kafka's order of precedence: (source, value) for each level
        that sets it (``DYNAMIC_BROKER_CONFIG``, ``DYNAMIC_DEFAULT_BROKER_CONFIG``); the
        static and default levels are the caller's."""
        out = []
        if name in self.per_broker:
            out.append(("DYNAMIC_BROKER_CONFIG", self.per_broker[name]))
        if name in self.cluster_default:
            out.append(("DYNAMIC_DEFAULT_BROKER_CONFIG", self.cluster_default[name]))
        return out

    def _apply(self) -> None:
        changed = False
        for name, key in DYNAMIC_KEYS.items():
            raw = self.per_broker.get(name, self.cluster_default.get(name))
            try:
                value = self.static[name] if raw is None else parse(name, raw)
            except DynamicConfigError:
                log.warning("dynamic broker config %s=%r ignored: not valid", name, raw)
                value = self.static[name]
            if getattr(self.config, key.attribute) != value:
                setattr(self.config, key.attribute, value)
                changed = True
        if changed:
            for callback in self.on_change:
                callback(self.config)
