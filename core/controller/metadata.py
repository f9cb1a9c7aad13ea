"""Controller metadata kept in table segments of the segment store.

Layout (``P`` is ``ControllerConfig.metadata_prefix``):

* ``P/scopes`` — one key per scope name.
* ``P/scope/<scope>`` — ``stream/<name>`` per stream (value: ``null`` once created, or
  the create request while a create is in flight), ``kvt/<name>`` per key-value table,
  ``rg/<name>`` per reader group.
* ``P/stream/<scope>/<stream>`` — the stream's own table: ``config``, ``state``,
  ``created``, ``current_epoch``, ``epoch/<n>`` (zero-padded), ``sealed/<id>``,
  ``truncation``, ``retention/<time>``, ``workflow`` (the running workflow's record, or
  ``null``), ``cold/<id>``, ``txn/<id>``, ``txn_order``, ``writer/<name>``,
  ``watermark/<time>``, ``subscriber/<rg>``.

Every value is JSON (``records.py``). Conditional updates use the table's key versions;
a version mismatch means another writer got there first and surfaces as
``ConflictError``. Epoch records never change once written, so they are cached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidegate.core.controller.api import ConflictError, EpochRecord, StreamConfig, StreamState
from tidegate.core.controller.records import (
    Json,
    SealedRecord,
    TruncationRecord,
    config_from_json,
    dumps,
    epoch_from_json,
    loads,
)
from tidegate.core.segmentstore.api import (
    BadKeyVersionError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStore,
    TableRemoval,
    TableUpdate,
)


@dataclass(frozen=True, slots=True)
class Versioned:
    value: Json
    version: int


def epoch_key(n: int) -> str:
    return f"epoch/{n:010d}"


def seg_key(kind: str, seg_id: int) -> str:
    return f"{kind}/{seg_id:020d}"


def time_key(kind: str, time_ms: int) -> str:
    return f"{kind}/{time_ms:020d}"


class MetadataStore:
    def __init__(self, store: SegmentStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self._epochs: dict[tuple[str, int], EpochRecord] = {}

    # -- table names ----------------------------------------------------------------------
    @property
    def scopes_table(self) -> str:
        return f"{self.prefix}/scopes"

    def scope_table(self, scope: str) -> str:
        return f"{self.prefix}/scope/{scope}"

    def stream_table(self, scope: str, stream: str) -> str:
        return f"{self.prefix}/stream/{scope}/{stream}"

    def kvt_table(self, scope: str, kvt: str) -> str:
        return f"{self.prefix}/kvt/{scope}/{kvt}"

    # -- tables -----------------------------------------------------------------------------
    async def ensure_table(self, table: str) -> None:
        try:
            await self.store.create_table(table)
        except SegmentExistsError:
            pass

    async def drop_table(self, table: str) -> None:
        try:
            await self.store.delete_table(table)
        except SegmentNotFoundError:
            pass
        self.forget(table)

    def forget(self, table: str) -> None:
        """Drop the cached epochs of ``table`` (its stream was deleted, maybe by another
        node of the cluster, and a stream of the same name may follow)."""
        for k in [k for k in self._epochs if k[0] == table]:
            del self._epochs[k]

    # -- entries ------------------------------------------------------------------------------
    async def get(self, table: str, key: str) -> Versioned | None:
        (entry,) = await self.store.table_get(table, [key.encode()])
        return None if entry is None else Versioned(loads(entry.value), entry.version)

    async def get_many(self, table: str, keys: Sequence[str]) -> list[Versioned | None]:
        if not keys:
            return []
        entries = await self.store.table_get(table, [k.encode() for k in keys])
        return [None if e is None else Versioned(loads(e.value), e.version) for e in entries]

    async def put(
        self,
        table: str,
        values: Mapping[str, Json],
        expected: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """Write all ``values`` atomically; with ``expected``, only if each named key has
        that version (``NOT_EXISTS``: absent). Returns the new versions."""
        expected = expected or {}
        keys = list(values)

        def encode() -> list[TableUpdate]:
            return [TableUpdate(k.encode(), dumps(values[k]), expected.get(k)) for k in keys]

        # Epoch records of thousands of segments, or thousands of keys, are encoded in a
        # worker thread: on the event loop they stall every other request.
        updates = await asyncio.to_thread(encode) if _large(values) else encode()
        try:
            versions = await self.store.table_put(table, updates)
        except BadKeyVersionError as e:
            raise ConflictError(f"concurrent metadata update of {e.key!r} in {table}") from e
        return dict(zip(keys, versions, strict=True))

    async def remove(self, table: str, keys: Sequence[str]) -> None:
        if keys:
            await self.store.table_remove(table, [TableRemoval(k.encode()) for k in keys])

    async def entries(self, table: str, prefix: str = "") -> list[tuple[str, Versioned]]:
        found = await self.store.table_entries(table, prefix.encode())

        def decode() -> list[tuple[str, Versioned]]:
            return [(e.key.decode(), Versioned(loads(e.value), e.version)) for e in found]

        # Retention's cuts of thousands of segments each: decoded in a worker thread, as
        # ``put`` encodes, or every other request waits for all of them.
        large = sum(len(e.value) for e in found) > LARGE_BYTES
        return await asyncio.to_thread(decode) if large else decode()

    # -- epochs (immutable, cached) ----------------------------------------------------------
    async def epoch(self, table: str, n: int) -> EpochRecord:
        cached = self._epochs.get((table, n))
        if cached is not None:
            return cached
        v = await self.get(table, epoch_key(n))
        if v is None:
            raise KeyError(f"{table}: no epoch {n}")
        large = len(v.value.get("segments", ())) > LARGE_ITEMS
        rec = await asyncio.to_thread(epoch_from_json, v.value) if large else epoch_from_json(v.value)
        self._epochs[(table, n)] = rec
        return rec


class StreamMeta:
    """Typed reads of one stream's table."""

    def __init__(self, md: MetadataStore, scope: str, stream: str) -> None:
        self.md = md
        self.scope = scope
        self.stream = stream
        self.table = md.stream_table(scope, stream)

    @property
    def name(self) -> str:
        return f"{self.scope}/{self.stream}"

    async def get(self, key: str) -> Versioned | None:
        return await self.md.get(self.table, key)

    async def put(
        self, values: Mapping[str, Json], expected: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        return await self.md.put(self.table, values, expected)

    async def state(self) -> tuple[StreamState, int]:
        v = await self.get("state")
        if v is None:
            raise KeyError(f"{self.table}: no state")
        return StreamState(v.value), v.version

    async def config(self) -> StreamConfig:
        v = await self.get("config")
        if v is None:
            raise KeyError(f"{self.table}: no config")
        return config_from_json(v.value)

    async def created_ms(self) -> int:
        v = await self.get("created")
        return 0 if v is None else int(v.value)

    async def current_epoch_no(self) -> int:
        v = await self.get("current_epoch")
        if v is None:
            raise KeyError(f"{self.table}: no current epoch")
        return int(v.value)

    async def epoch(self, n: int) -> EpochRecord:
        return await self.md.epoch(self.table, n)

    async def current_epoch(self) -> EpochRecord:
        return await self.epoch(await self.current_epoch_no())

    async def epochs(self) -> list[EpochRecord]:
        return [await self.epoch(n) for n in range(await self.current_epoch_no() + 1)]

    async def sealed(self) -> dict[int, SealedRecord]:
        return {
            int(k.split("/", 1)[1]): SealedRecord.from_json(v.value)
            for k, v in await self.md.entries(self.table, "sealed/")
        }

    async def truncation(self) -> TruncationRecord | None:
        v = await self.get("truncation")
        return None if v is None or v.value is None else TruncationRecord.from_json(v.value)

    async def workflow(self) -> Versioned:
        v = await self.get("workflow")
        return Versioned(None, -1) if v is None else v


#: Lists (or key counts) longer than this make ``MetadataStore.put`` encode off the loop.
LARGE_ITEMS = 256
#: Entries larger than this in all make ``MetadataStore.entries`` decode off the loop.
LARGE_BYTES = 64 * 1024


def _large(values: Mapping[str, Json]) -> bool:
    """Whether encoding ``values`` is long: many keys, or a list or mapping of many items
    at the top or second level of a value (an epoch's segments, a workflow record's
    epoch, a truncation's stream cut)."""
    if len(values) > LARGE_ITEMS:
        return True
    for v in values.values():
        if not isinstance(v, dict):
            continue
        if len(v) > LARGE_ITEMS:
            return True
        for inner in v.values():
            if isinstance(inner, (list, dict)) and len(inner) > LARGE_ITEMS:
                return True
            if isinstance(inner, dict) and any(
                isinstance(x, (list, dict)) and len(x) > LARGE_ITEMS for x in inner.values()
            ):
                return True
    return False
