"""``InactiveSegments``: the metadata of segments that left memory, in RocksDB.

The seed's Active Segment Metadata: a segment idle for a while (no append, no read for
``segment_idle_ms``), or one of the least recently used when more than
``active_segments_max`` are in memory, becomes *inactive*. The storage writer, which
knows when nothing of it is left to move to Tier-2, writes its record (the checkpoint
format, ``metadata.encode_segment``) here and drops it from memory: from the container
metadata, the read index and its cache, and so from every later checkpoint. The next
call that names it *activates* it: the record is read back (same segment id, as the
seed requires), installed, and a MAP operation carrying the record is logged before the
call's own operation, so a replay from any checkpoint finds the segment without this
store.

Durability. A record is written with ``sync`` before the segment leaves memory, so no
checkpoint that omits the segment becomes durable before its record. A record whose
segment is back in memory is ignored (memory and the log are the truth for active
segments) and may be stale. It is removed once the segment is deleted or merged and the
storage writer is done with it (``remove``: only a record of that segment id, as a new
segment of the same name may have one by then); removals are written without sync, and
``sync`` makes them durable before Tier-1 is truncated past the deletions, so a record
of a deleted segment never outlives the log entries that delete it.

One database per container under ``<data_dir>/metadata/container-N``, kept across
epochs (unlike the ``Tier1Index``, it cannot be rebuilt from Tier-1). In cluster mode
(``for_epoch``) each owner copies the last owner's records into a database of its own
epoch, ``container-N.epoch-E``: an owner that was fenced while frozen or still running
keeps its database and its lock, and nothing it writes there reaches the new owner.
"""

from __future__ import annotations

import logging
import re
import shutil
import struct
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

log = logging.getLogger(__name__)
_ID = struct.Struct("<Q")  # a record's first field: the segment id


class InactiveSegments:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        self._db = Rdict(str(self.directory), opts)
        self._synced = WriteOptions()
        self._synced.sync = True
        self._unsynced_removals = False

    def get(self, name: str) -> bytes | None:
        value = self._db.get(name.encode())
        return None if value is None else bytes(value)

    def put_many(self, records: dict[str, bytes]) -> None:
        """Write records of segments about to leave memory, synced (blocking: call it
        off the event loop)."""
        batch = WriteBatch(raw_mode=True)
        for name, record in records.items():
            batch.put(name.encode(), record)
        self._db.write(batch, self._synced)

    def remove(self, name: str, segment_id: int) -> None:
        """Remove the record of segment ``segment_id`` of that name, if it is the one
        held (durable once ``sync`` returns)."""
        key = name.encode()
        value = self._db.get(key)
        if value is not None and _ID.unpack_from(value, 0)[0] == segment_id:
            del self._db[key]
            self._unsynced_removals = True

    @property
    def needs_sync(self) -> bool:
        return self._unsynced_removals

    def sync(self) -> None:
        """Make every removal so far durable (blocking: call it off the event loop)."""
        if self._unsynced_removals:
            self._unsynced_removals = False
            self._db.flush_wal(True)

    def names(self) -> list[str]:
        return [k.decode() for k in self._db.keys() if isinstance(k, bytes)]

    def close(self) -> None:
        try:
            self._db.close()
        except Exception as exc:  # noqa: BLE001 - a fenced owner's database, removed by the new owner
            log.warning("closing %s: %r", self.directory, exc)


def for_epoch(directory: Path, epoch: int, *, batch_records: int = 4096) -> InactiveSegments:
    """The records of the container's latest earlier epoch (or of the one-database
    layout, ``directory`` itself), copied into ``<directory>.epoch-<epoch>``; earlier
    databases are then removed (blocking: call it off the event loop)."""
    directory = Path(directory)
    pattern = re.compile(re.escape(directory.name) + r"\.epoch-(\d+)")
    earlier: dict[int, Path] = {}
    if (directory / "CURRENT").exists():
        earlier[-1] = directory
    if directory.parent.is_dir():
        for entry in directory.parent.iterdir():
            if (m := pattern.fullmatch(entry.name)) and int(m.group(1)) < epoch:
                earlier[int(m.group(1))] = entry
    target = directory.parent / f"{directory.name}.epoch-{epoch}"
    shutil.rmtree(target, ignore_errors=True)  # a start of this epoch that failed midway
    store = InactiveSegments(target)
    if earlier:
        # Read-only: no lock, so a frozen former owner holding its database cannot stop
        # the container from moving.
        source = Rdict(str(earlier[max(earlier)]), Options(raw_mode=True),
                       access_type=AccessType.read_only())
        try:
            records: dict[str, bytes] = {}
            for key, value in source.items():
                if not isinstance(key, bytes) or not isinstance(value, bytes):
                    continue  # raw mode: bytes only
                records[key.decode()] = value
                if len(records) >= batch_records:
                    store.put_many(records)
                    records = {}
            store.put_many(records)
        finally:
            source.close()
    for path in earlier.values():
        shutil.rmtree(path, ignore_errors=True)
    return store

