"""The log stream's metadata (the seed's metadata manager, kept in ZooKeeper in the
place of its CPO) and the narrow Protocol the replicated log needs from coordination.

One JSON node per log::

    {"epoch": E,                                  the current owner's epoch
     "start": [index, position] | null,           the truncation point
     "plogs": [{"i": index, "id": ID, "servers": [S, S, S], "end": END | null}, ...],
     "spares": [{"id": ID, "servers": [...]}, ...]}

``plogs`` is the chain, oldest first; only the last may have no ``end`` (the active plog
of the current owner). A plog is recorded here only once it exists on all of its
servers; a spare is recorded *before* it is created, so a crash never leaves a plog no
record names. Every write is conditional on the version read (compare-and-set): an
owner that loses one has been fenced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Protocol

from tidegate.core.segmentstore.tier1.api import DataLogCorruptError, LogAddress


class MetadataConflictError(Exception):
    """A conditional write lost: someone else changed the log's metadata."""


class MetadataExistsError(Exception):
    pass


class PlogCoordinator(Protocol):
    """Where log metadata lives and which plog servers are alive."""

    async def read_log(self, name: str) -> tuple[bytes, int] | None: ...

    async def create_log(self, name: str, data: bytes) -> int:
        """Create the log's node (``MetadataExistsError`` if it exists); its version."""
        ...

    async def write_log(self, name: str, data: bytes, version: int) -> int:
        """Write if still at ``version`` (else ``MetadataConflictError``); the new version."""
        ...

    async def live_servers(self) -> dict[str, tuple[str, int]]:
        """Registered plog servers: id -> (host, port)."""
        ...


@dataclass
class PlogRecord:
    index: int
    id: str
    servers: list[str]
    end: int | None = None


@dataclass
class Spare:
    id: str
    servers: list[str]


@dataclass
class LogMeta:
    epoch: int = 0
    start: LogAddress | None = None
    plogs: list[PlogRecord] = field(default_factory=list)
    spares: list[Spare] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "epoch": self.epoch,
                "start": None if self.start is None else [self.start.file_id, self.start.position],
                "plogs": [{"i": p.index, "id": p.id, "servers": p.servers, "end": p.end} for p in self.plogs],
                "spares": [{"id": s.id, "servers": s.servers} for s in self.spares],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_bytes(raw: bytes) -> LogMeta:
        try:
            obj = json.loads(raw)
            start = obj["start"]
            return LogMeta(
                int(obj["epoch"]),
                None if start is None else LogAddress(int(start[0]), int(start[1])),
                [
                    PlogRecord(int(p["i"]), str(p["id"]), [str(s) for s in p["servers"]],
                               None if p["end"] is None else int(p["end"]))
                    for p in obj["plogs"]
                ],
                [Spare(str(s["id"]), [str(x) for x in s["servers"]]) for s in obj["spares"]],
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise DataLogCorruptError(f"malformed log metadata: {raw[:200]!r}") from exc

    def next_index(self) -> int:
        if self.plogs:
            return self.plogs[-1].index + 1
        return self.start.file_id if self.start is not None else 1
