"""Key-value tables: a named set of ``partitions`` table segments in a scope.

The scope's index entry ``kvt/<name>`` holds ``{"partitions", "state", "created"}``.
Create writes it (``CREATING``, which also takes the name), creates the table segments
and marks it ``ACTIVE``; delete marks it ``DELETING``, deletes the table segments and
removes the entry. Both are idempotent and ``start()`` resumes any entry left
``CREATING`` or ``DELETING``. Partition ``i`` of table ``kvt`` is the table segment
``scope/kvt/i.#kvtable`` (never a stream segment's name, which ends ``.#epoch.N``).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from tidegate.core.controller.api import (
    ConflictError,
    InvalidArgumentError,
    KeyValueTableExistsError,
    KeyValueTableInfo,
    KeyValueTableNotFoundError,
)
from tidegate.core.controller.records import Json
from tidegate.core.controller.services import ControllerServices
from tidegate.core.controller.validation import check_name
from tidegate.core.segmentstore.api import (
    NOT_EXISTS,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentStore,
)

CREATING, ACTIVE, DELETING = "CREATING", "ACTIVE", "DELETING"


def kv_table_segment_name(scope: str, kvt: str, partition: int) -> str:
    return f"{scope}/{kvt}/{partition}.#kvtable"


class KeyValueTablesHost(ControllerServices, Protocol):
    """What key-value tables use besides the controller's services: its segment store
    (their table segments) and its scope lock (not racing a scope's deletion)."""

    @property
    def store(self) -> SegmentStore: ...
    @property
    def scope_lock(self) -> asyncio.Lock: ...


class KeyValueTables:
    def __init__(self, ctl: KeyValueTablesHost) -> None:
        self.ctl = ctl

    def _info(self, scope: str, name: str, v: Json) -> KeyValueTableInfo:
        n = int(v["partitions"])
        return KeyValueTableInfo(
            scope=scope,
            name=name,
            partitions=n,
            state=v["state"],
            creation_time_ms=v["created"],
            segments=tuple(kv_table_segment_name(scope, name, i) for i in range(n)),
        )

    async def create(self, scope: str, name: str, partitions: int) -> KeyValueTableInfo:
        check_name("key-value table", name, self.ctl.config)
        limit = self.ctl.config.kvt_partitions_max
        if (
            isinstance(partitions, bool)
            or not isinstance(partitions, int)
            or not 0 < partitions <= limit
        ):
            raise InvalidArgumentError(f"partitions must be 1..{limit}, not {partitions!r}")
        md = self.ctl.md
        async with self.ctl.scope_lock:
            await self.ctl.check_scope(scope)
            entry = {"partitions": partitions, "state": CREATING, "created": self.ctl.now_ms()}
            try:
                await md.put(
                    md.scope_table(scope), {f"kvt/{name}": entry}, {f"kvt/{name}": NOT_EXISTS}
                )
            except ConflictError as e:
                raise KeyValueTableExistsError(f"key-value table {scope}/{name} exists") from e
        await self._create_steps(scope, name, entry)
        return await self.get(scope, name)

    async def _create_steps(self, scope: str, name: str, entry: Json) -> None:
        for i in range(entry["partitions"]):
            try:
                await self.ctl.store.create_table(kv_table_segment_name(scope, name, i))
            except SegmentExistsError:
                pass
        await self.ctl.md.put(
            self.ctl.md.scope_table(scope), {f"kvt/{name}": {**entry, "state": ACTIVE}}
        )

    async def _delete_steps(self, scope: str, name: str, entry: Json) -> None:
        for i in range(entry["partitions"]):
            try:
                await self.ctl.store.delete_table(kv_table_segment_name(scope, name, i))
            except SegmentNotFoundError:
                pass
        await self.ctl.md.remove(self.ctl.md.scope_table(scope), [f"kvt/{name}"])

    async def get(self, scope: str, name: str) -> KeyValueTableInfo:
        await self.ctl.check_scope(scope)
        v = await self.ctl.md.get(self.ctl.md.scope_table(scope), f"kvt/{name}")
        if v is None:
            raise KeyValueTableNotFoundError(f"key-value table {scope}/{name} not found")
        return self._info(scope, name, v.value)

    async def list(self, scope: str) -> list[str]:
        await self.ctl.check_scope(scope)
        return [
            k[len("kvt/") :]
            for k, v in await self.ctl.md.entries(self.ctl.md.scope_table(scope), "kvt/")
            if v.value["state"] == ACTIVE
        ]

    async def delete(self, scope: str, name: str) -> None:
        await self.ctl.check_scope(scope)
        table = self.ctl.md.scope_table(scope)
        v = await self.ctl.md.get(table, f"kvt/{name}")
        if v is None:
            raise KeyValueTableNotFoundError(f"key-value table {scope}/{name} not found")
        if v.value["state"] == CREATING:
            raise ConflictError(f"key-value table {scope}/{name} is being created")
        entry = {**v.value, "state": DELETING}
        await self.ctl.md.put(table, {f"kvt/{name}": entry}, {f"kvt/{name}": v.version})
        await self._delete_steps(scope, name, entry)

    async def resume(self) -> None:
        """Finish creates and deletes a crash interrupted."""
        md = self.ctl.md
        for scope, _ in await md.entries(md.scopes_table):
            for key, v in await md.entries(md.scope_table(scope), "kvt/"):
                name = key[len("kvt/") :]
                if v.value["state"] == CREATING:
                    await self._create_steps(scope, name, v.value)
                elif v.value["state"] == DELETING:
                    await self._delete_steps(scope, name, v.value)
