"""``Tier1Index``: where in Tier-1 the segment ranges not yet in Tier-2 lie, in RocksDB.

While Tier-2 lags, a container holds up to ``writer_lag_bytes_max`` of segment data that
only Tier-1 has. The cache keeps as much of it as its bound allows; what it evicts is
recorded here (segment, start offset) -> (end offset, operations ``seq..last_seq``,
Tier-1 address of the frame holding the first of them, position in that frame) and
dropped from memory, so memory stays at the cache bound however far Tier-2 falls
behind (a stub per evicted range in memory would grow with the lag: ~250 bytes per
range, and with 1 KB appends a range can be 1 KB). Reads and the storage writer look a
missed offset up here and read the operations back from Tier-1, seeking straight to the
frame.

The index is rebuildable from Tier-1, so nothing in it is synced, not even written to a
WAL: each owner of the container (each epoch) starts an empty database of its own under
``<directory>/<epoch>``, recovery refills it as replay evicts, and databases of earlier
epochs are destroyed at open (a live, fenced owner in another process keeps its own).

Key ``>QQ`` (segment id, start); value ``>QQQQQI`` (end, seq, last seq, Tier-1 file id,
position, frame position). Ranges of a segment never overlap.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteOptions
from tidegate.core.segmentstore.api import StoreShutdownError
from tidegate.core.segmentstore.tier1.api import LogAddress

_KEY = struct.Struct(">QQ")
_VALUE = struct.Struct(">QQQQQI")
#: RocksDB memtable size: what the index itself may hold in memory before it spills
#: to its own files.
MEMTABLE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Tier1Range:
    """Bytes ``[start, end)`` of a segment, written by its operations ``seq..last_seq``;
    the first of them starts in the frame at ``address``, ``frame_pos`` bytes in."""

    start: int
    end: int
    seq: int
    last_seq: int
    address: LogAddress
    frame_pos: int


class Tier1Index:
    def __init__(self, directory: Path, epoch: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in self.directory.iterdir():
            if old.name != str(epoch):
                _destroy(old)
        self.path = self.directory / str(epoch)
        _destroy(self.path)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(MEMTABLE_BYTES)
        opts.set_max_write_buffer_number(2)
        self._db = Rdict(str(self.path), opts)
        wo = WriteOptions()
        wo.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; the stub says method
        self._db.set_write_options(wo)
        #: Ranges recorded and not yet dropped (tests and metrics).
        self.count = 0
        self._closed = False

    def close(self) -> None:
        """Close and delete the database (the next owner starts its own)."""
        self._closed = True
        self._db.close()
        _destroy(self.path)

    def _check(self) -> None:
        if self._closed:  # a read that outlived its container's stop
            raise StoreShutdownError(str(self.directory), "container stopped")

    def put(self, seg_id: int, r: Tier1Range) -> None:
        if self._closed:  # the container stopped: recovery rebuilds what it needs
            return
        self._db.put(
            _KEY.pack(seg_id, r.start),
            _VALUE.pack(r.end, r.seq, r.last_seq, r.address.file_id, r.address.position, r.frame_pos),
        )
        self.count += 1

    def find(self, seg_id: int, pos: int) -> Tier1Range | None:
        """The range holding offset ``pos``, if one is recorded."""
        self._check()
        it = self._db.iter()
        try:
            it.seek_for_prev(_KEY.pack(seg_id, pos))
            if not it.valid():
                return None
            r = _decode(seg_id, it.key(), it.value())
            return r if r is not None and r.end > pos else None
        finally:
            del it

    def ranges(self, seg_id: int, start: int, end: int) -> Iterator[Tier1Range]:
        """Recorded ranges of the segment that begin in ``[start, end)``, in order."""
        self._check()
        it = self._db.iter()
        try:
            it.seek(_KEY.pack(seg_id, start))
            while it.valid():
                r = _decode(seg_id, it.key(), it.value())
                if r is None or r.start >= end:
                    return
                yield r
                it.next()
        finally:
            del it

    def drop_flushed(self, seg_id: int, storage_length: int) -> int:
        """Forget the segment's ranges wholly below ``storage_length`` (now in Tier-2);
        how many."""
        if self._closed:
            return 0
        dead = [_KEY.pack(seg_id, r.start) for r in self.ranges(seg_id, 0, storage_length) if r.end <= storage_length]
        for key in dead:
            self._db.delete(key)
        self.count -= len(dead)
        return len(dead)

    def drop_segment(self, seg_id: int) -> None:
        if self._closed:
            return
        n = sum(1 for _ in self.ranges(seg_id, 0, 1 << 63))
        if n:
            self._db.delete_range(_KEY.pack(seg_id, 0), _KEY.pack(seg_id + 1, 0))
            self.count -= n


def _decode(seg_id: int, key: bytes, value: bytes) -> Tier1Range | None:
    sid, start = _KEY.unpack(key)
    if sid != seg_id:
        return None
    end, seq, last_seq, file_id, position, frame_pos = _VALUE.unpack(value)
    return Tier1Range(start, end, seq, last_seq, LogAddress(file_id, position), frame_pos)


def _destroy(path: Path) -> None:
    if path.exists():
        try:
            Rdict.destroy(str(path))
        except Exception:  # noqa: BLE001 - a database another live owner holds open
            return
        shutil.rmtree(path, ignore_errors=True)
