"""An in-memory ``SegmentStore``: the reference model of the contract in ``api.py``.

It keeps nothing on disk. Property tests compare the real store against it, and unit
tests of upper layers may run on it. It is deliberately simple: one dict per concern,
no caching, no background work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    AttributeUpdate,
    BadAttributeUpdateError,
    BadKeyVersionError,
    BadOffsetError,
    ReadResult,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentProperties,
    SegmentSealedError,
    SegmentTraffic,
    SegmentTruncatedError,
    TableEntry,
    TableNotEmptyError,
    TableRemoval,
    TableUpdate,
)
from tidegate.core.segmentstore.callbacks import DoneCallback, when_done


@dataclass
class _Segment:
    data: bytearray = field(default_factory=bytearray)
    start_offset: int = 0
    sealed: bool = False
    attributes: dict[str, int] = field(default_factory=dict)
    last_modified_ms: int = 0
    grown: asyncio.Event = field(default_factory=asyncio.Event)


class InMemorySegmentStore:
    def __init__(self) -> None:
        self._segments: dict[str, _Segment] = {}
        self._tables: dict[str, dict[bytes, TableEntry]] = {}
        self._next_version = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def _get(self, name: str) -> _Segment:
        seg = self._segments.get(name)
        if seg is None:
            raise SegmentNotFoundError(name)
        return seg

    @staticmethod
    def _check_attributes(
        name: str, seg: _Segment, updates: Sequence[AttributeUpdate]
    ) -> None:
        for u in updates:
            if u.expected is None:
                continue
            current = seg.attributes.get(u.key, NOT_EXISTS)
            if current != u.expected:
                raise BadAttributeUpdateError(
                    name, f"attribute {u.key}={current}, expected {u.expected}"
                )

    async def create_segment(self, name: str, attributes: Mapping[str, int] | None = None) -> None:
        if name in self._segments or name in self._tables:
            raise SegmentExistsError(name)
        self._segments[name] = _Segment(attributes=dict(attributes or {}))

    async def append(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
    ) -> int:
        seg = self._get(name)
        if seg.sealed:
            raise SegmentSealedError(name)
        offset = len(seg.data)
        if expected_offset is not None and expected_offset != offset:
            raise BadOffsetError(name, f"expected offset {expected_offset}, length {offset}", actual=offset)
        self._check_attributes(name, seg, attribute_updates)
        seg.data += data
        for u in attribute_updates:
            seg.attributes[u.key] = u.value
        seg.last_modified_ms = int(time.time() * 1000)
        seg.grown.set()
        seg.grown = asyncio.Event()
        return offset

    def append_future(
        self,
        name: str,
        data: bytes | memoryview,
        *,
        expected_offset: int | None = None,
        attribute_updates: Sequence[AttributeUpdate] = (),
        event_count: int = 1,
        on_done: DoneCallback | None = None,
    ) -> asyncio.Future[int]:
        # ``append`` changes the segment before its first suspension and tasks start in
        # creation order, so appends land in call order (subclasses overriding
        # ``append`` are honoured).
        fut = asyncio.ensure_future(
            self.append(
                name, data, expected_offset=expected_offset,
                attribute_updates=attribute_updates, event_count=event_count,
            )
        )
        when_done(fut, on_done)
        return fut

    async def update_attributes(self, name: str, updates: Sequence[AttributeUpdate]) -> None:
        seg = self._get(name)
        if seg.sealed:
            raise SegmentSealedError(name)
        self._check_attributes(name, seg, updates)
        for u in updates:
            seg.attributes[u.key] = u.value

    async def read(self, name: str, offset: int, max_length: int, timeout_ms: int = 0) -> ReadResult:
        seg = self._get(name)
        if offset < seg.start_offset:
            raise SegmentTruncatedError(name, f"offset {offset} < start {seg.start_offset}")
        if offset > len(seg.data):
            raise BadOffsetError(name, f"offset {offset} > length {len(seg.data)}")
        if offset == len(seg.data) and not seg.sealed and timeout_ms > 0:
            try:
                await asyncio.wait_for(seg.grown.wait(), timeout_ms / 1000)
            except TimeoutError:
                pass
            seg = self._get(name)
        end = min(len(seg.data), offset + max_length)
        chunk = bytes(seg.data[offset:end])
        return ReadResult(
            offset=offset,
            chunks=[memoryview(chunk)] if chunk else [],
            end_of_segment=seg.sealed and end == len(seg.data),
        )

    async def get_info(self, name: str) -> SegmentProperties:
        seg = self._get(name)
        return SegmentProperties(
            name=name,
            length=len(seg.data),
            storage_length=len(seg.data),
            start_offset=seg.start_offset,
            sealed=seg.sealed,
            attributes=dict(seg.attributes),
            last_modified_ms=seg.last_modified_ms,
        )

    async def seal(self, name: str) -> int:
        seg = self._get(name)
        seg.sealed = True
        seg.grown.set()
        return len(seg.data)

    async def truncate(self, name: str, offset: int) -> None:
        seg = self._get(name)
        if not seg.start_offset <= offset <= len(seg.data):
            raise BadOffsetError(name, f"truncate to {offset} outside [{seg.start_offset}, {len(seg.data)}]")
        seg.start_offset = offset

    async def merge(self, target: str, source: str) -> int:
        tgt = self._get(target)
        src = self._get(source)
        if tgt.sealed:
            raise SegmentSealedError(target)
        offset = len(tgt.data)
        tgt.data += src.data
        del self._segments[source]
        tgt.grown.set()
        tgt.grown = asyncio.Event()
        return offset

    async def delete_segment(self, name: str) -> None:
        self._get(name)
        del self._segments[name]

    def traffic(self, name: str) -> SegmentTraffic:
        return SegmentTraffic(0.0, 0.0)

    # -- tables ------------------------------------------------------------------------

    def _table(self, name: str) -> dict[bytes, TableEntry]:
        table = self._tables.get(name)
        if table is None:
            raise SegmentNotFoundError(name)
        return table

    async def create_table(self, name: str) -> None:
        if name in self._tables or name in self._segments:
            raise SegmentExistsError(name)
        self._tables[name] = {}

    async def delete_table(self, name: str, must_be_empty: bool = False) -> None:
        table = self._table(name)
        if must_be_empty and table:
            raise TableNotEmptyError(name)
        del self._tables[name]

    @staticmethod
    def _check_version(name: str, table: dict[bytes, TableEntry], key: bytes, expected: int | None) -> None:
        if expected is None:
            return
        current = table.get(key)
        version = NOT_EXISTS if current is None else current.version
        if version != expected:
            raise BadKeyVersionError(name, key)

    async def table_put(self, name: str, updates: Sequence[TableUpdate]) -> list[int]:
        table = self._table(name)
        for u in updates:
            self._check_version(name, table, u.key, u.expected_version)
        versions = []
        for u in updates:
            self._next_version += 1
            table[u.key] = TableEntry(u.key, u.value, self._next_version)
            versions.append(self._next_version)
        return versions

    async def table_remove(self, name: str, removals: Sequence[TableRemoval]) -> None:
        table = self._table(name)
        for r in removals:
            self._check_version(name, table, r.key, r.expected_version)
        for r in removals:
            table.pop(r.key, None)

    async def table_get(self, name: str, keys: Sequence[bytes]) -> list[TableEntry | None]:
        table = self._table(name)
        return [table.get(k) for k in keys]

    async def table_entries(self, name: str, prefix: bytes = b"") -> list[TableEntry]:
        table = self._table(name)
        return [table[k] for k in sorted(table) if k.startswith(prefix)]
