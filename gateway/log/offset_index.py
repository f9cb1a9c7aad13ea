"""The offset index: ``(topic, partition, base offset)`` → where the batch lies.

Kept in RocksDB (``data_dir/gateway/index``), written without sync: everything in it is
derived from the segments (whose envelopes describe every append) and is rebuilt at
start from each segment's last indexed position (the ``m`` marker, written in the same
atomic write batch as the entries it covers, so RocksDB's prefix recovery keeps them
consistent). The only synced keys are log start offsets, which are not derivable.

A failed write (a full disk) leaves RocksDB refusing every later one until it is opened
again: the index is then ``broken`` and ``recover`` re-opens it (callers retry; nothing
acknowledged depends on the failed write, see ``partition_log``).

Keys (topic names never contain NUL):
- ``o`` topic NUL partition:u32 base:u64 → ``IndexEntry``
- ``t`` topic NUL partition:u32 ts+2**63:u64 → base:u64, written when a batch raises the
  partition's running maximum timestamp (Kafka's time index rule)
- ``m`` segment name → indexed end position in that segment
- ``s`` topic NUL partition:u32 → log start offset (synced)
- ``p`` topic NUL partition:u32 producer id:u64 → producer state (see producer_state)
- ``x`` and ``a``: the transaction index of each partition (see ``gateway.txn.partition_txns``)
- ``e`` topic NUL partition:u32 epoch:u32 → the first offset appended in that leader
  epoch (``gateway.log.leader_epochs``)
- ``n`` topic NUL partition:u32 → the end of the last copy the rebuild left out (a re-sent
  append already stored, see ``partitions``): the next offset never goes below it
- ``c`` topic NUL partition:u32 → the cleaner's checkpoint of a compacted partition
  (``gateway/log/compaction``), written with sync together with the entries it points
  to the clean segment: entries below it are not derivable from the stream's segments
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
# Positions are byte offsets in a segment, which outgrows 32 bits past 2 GiB.
_ENTRY = struct.Struct(">qqqqqq")
_TS_BIAS = 1 << 63
#: Written (synced) by ``recover`` to check that the re-opened index takes writes.
_PROBE_KEY = b"zprobe"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    base_offset: int
    last_offset: int
    segment_id: int
    position: int  # of the batch (after the envelope) in the segment
    length: int
    max_timestamp: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            self.base_offset, self.last_offset, self.segment_id, self.position,
            self.length, self.max_timestamp,
        )

    @staticmethod
    def decode(raw: bytes) -> IndexEntry:
        return IndexEntry(*_ENTRY.unpack(raw))


def _tp(kind: bytes, topic: str, partition: int) -> bytes:
    return kind + topic.encode() + b"\x00" + _U32.pack(partition)


class OffsetIndex:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._db = Rdict(str(path), Options(raw_mode=True))
        self._sync = WriteOptions()
        self._sync.sync = True
        #: The error of the write that failed, until ``recover`` re-opened the index.
        self.broken: BaseException | None = None

    def close(self) -> None:
        """Close; on a full disk what RocksDB cannot flush is said in one log line (its
        writes since the last marker are indexed again from the segments at start)."""
        try:
            self._db.close()
        except Exception as exc:  # RocksDB raises a plain Exception for I/O errors
            log.warning("offset index not flushed (%s): the next start indexes again what "
                        "the segments hold past its markers", exc)

    def recover(self) -> None:
        """Re-open a ``broken`` index and check that it takes a synced write; raises while
        it cannot (the disk still full, an iterator still holding the old handle)."""
        if self.broken is None:
            return
        try:
            self._db.close()
        except Exception:  # the error that broke it, reported again
            pass
        self._db = Rdict(str(self._path), Options(raw_mode=True))
        self._write(lambda db: db.put(_PROBE_KEY, b"", self._sync))
        log.info("offset index re-opened after %r", self.broken)
        self.broken = None

    def _write(self, op: Callable[[Rdict], None]) -> None:
        """Run a write; a failure marks the index broken (RocksDB refuses all later ones)."""
        try:
            op(self._db)
        except Exception as exc:
            if self.broken is None:
                self.broken = exc
            raise

    # -- writes ----------------------------------------------------------------------

    def batch(self) -> IndexWrite:
        return IndexWrite(self)

    def set_log_start(self, topic: str, partition: int, offset: int) -> None:
        self.set_log_starts(topic, {partition: offset})

    def set_log_starts(self, topic: str, starts: Mapping[int, int]) -> None:
        """Record the log starts (partition → offset) in one synced write batch with the
        removal of the entries wholly below each: the one holding the offset stays (it
        is where reads and truncation start). One sync for many partitions
        (DeleteRecords over a whole topic)."""
        wb = WriteBatch(raw_mode=True)
        for partition, offset in starts.items():
            wb.put(_tp(b"s", topic, partition), _U64.pack(offset))
            holder = self.floor(topic, partition, offset)
            if holder is None:
                continue
            prefix = _tp(b"o", topic, partition)
            wb.delete_range(prefix, prefix + _U64.pack(holder.base_offset))
            # Time entries are recorded only for a new maximum timestamp, so their base
            # offsets rise with their keys: the ones below the holder form a prefix.
            times = _tp(b"t", topic, partition)
            it = self._db.iter()
            it.seek(times)
            end: bytes | None = None
            while it.valid():
                key = bytes(it.key())
                if not key.startswith(times) or int(_U64.unpack(it.value())[0]) >= holder.base_offset:
                    break
                end = key
                it.next()
            if end is not None:
                wb.delete_range(times, end + b"\x00")
        self._write(lambda db: db.write(wb, self._sync))

    def delete_topic(self, topic: str, segment_prefix: str) -> None:
        """Drop every key of ``topic`` and the markers of segments named
        ``segment_prefix...`` (its stream is gone; a new topic of the same name reuses the
        segment names, so stale markers would hide its data from the rebuild)."""
        name = topic.encode()
        wb = WriteBatch(raw_mode=True)
        for kind in (b"o", b"t", b"s", b"p", b"x", b"a", b"c", b"e", b"n"):
            wb.delete_range(kind + name + b"\x00", kind + name + b"\x01")
        prefix = b"m" + segment_prefix.encode()
        wb.delete_range(prefix, prefix + b"\xff" * 8)
        self._write(lambda db: db.write(wb))

    def switch_cleaned(
        self, topic: str, partition: int, end_offset: int, entries: list[IndexEntry],
        checkpoint: bytes, log_start: int, deletes: Iterable[tuple[bytes, bytes]] = (),
        from_offset: int = 0,
    ) -> None:
        """Atomically and durably (synced) replace every entry of the partition whose
        base offset is below ``end_offset`` by ``entries`` and store the cleaner's
        ``checkpoint``: readers see the old entries or the new ones. The log start is
        written too: it no longer follows from the first entry, which may be gone.
        ``deletes``: (kind, suffix) keys of the partition to delete with them (the
        aborted transactions whose markers the pass removed). ``from_offset``: only the
        entries from it on are replaced (a pass switches in steps)."""
        wb = WriteBatch(raw_mode=True)
        wb.put(_tp(b"s", topic, partition), _U64.pack(log_start))
        prefix = _tp(b"o", topic, partition)
        wb.delete_range(prefix + _U64.pack(from_offset), prefix + _U64.pack(end_offset))
        for e in entries:
            wb.put(prefix + _U64.pack(e.base_offset), e.encode())
        wb.put(_tp(b"c", topic, partition), checkpoint)
        for kind, suffix in deletes:
            wb.delete(_tp(kind, topic, partition) + suffix)
        self._write(lambda db: db.write(wb, self._sync))

    # -- reads -----------------------------------------------------------------------

    def clean_checkpoint(self, topic: str, partition: int) -> bytes | None:
        raw = self._db.get(_tp(b"c", topic, partition))
        return None if raw is None else bytes(raw)

    def clean_checkpoints(self, topic: str) -> Iterator[tuple[int, bytes]]:
        """``(partition, checkpoint)`` of every partition of ``topic`` that has one, in
        partition order: one seek, however many partitions have none."""
        for suffix, value in self._under(b"c" + topic.encode() + b"\x00"):
            yield int(_U32.unpack(suffix)[0]), value

    def log_start(self, topic: str, partition: int) -> int | None:
        raw = self._db.get(_tp(b"s", topic, partition))
        return None if raw is None else int(_U64.unpack(raw)[0])

    def end_floor(self, topic: str, partition: int) -> int:
        """The offset a partition's next append may not go below (``IndexWrite.end_floor``)."""
        raw = self._db.get(_tp(b"n", topic, partition))
        return 0 if raw is None else int(_U64.unpack(raw)[0])

    def marker(self, segment: str) -> int:
        raw = self._db.get(b"m" + segment.encode())
        return 0 if raw is None else int(_U64.unpack(raw)[0])

    def floor(self, topic: str, partition: int, offset: int) -> IndexEntry | None:
        """The entry with the greatest base offset <= ``offset``."""
        prefix = _tp(b"o", topic, partition)
        it = self._db.iter()
        it.seek_for_prev(prefix + _U64.pack(max(offset, 0)))
        if it.valid() and bytes(it.key()).startswith(prefix):
            return IndexEntry.decode(it.value())
        return None

    def entries_from(self, topic: str, partition: int, offset: int) -> Iterator[IndexEntry]:
        """Entries in offset order, starting with the one that holds ``offset`` (or the
        first one after it)."""
        prefix = _tp(b"o", topic, partition)
        start = self.floor(topic, partition, offset)
        it = self._db.iter()
        it.seek(prefix + _U64.pack(start.base_offset if start else max(offset, 0)))
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            entry = IndexEntry.decode(it.value())
            if entry.last_offset >= offset:
                yield entry
            it.next()

    def first(self, topic: str, partition: int) -> IndexEntry | None:
        prefix = _tp(b"o", topic, partition)
        it = self._db.iter()
        it.seek(prefix)
        if it.valid() and bytes(it.key()).startswith(prefix):
            return IndexEntry.decode(it.value())
        return None

    def last(self, topic: str, partition: int) -> IndexEntry | None:
        return self.floor(topic, partition, (1 << 63) - 1)

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> int | None:
        """Base offset of the first batch whose max timestamp is >= ``timestamp``."""
        prefix = _tp(b"t", topic, partition)
        it = self._db.iter()
        it.seek(prefix + _U64.pack(timestamp + _TS_BIAS))
        if it.valid() and bytes(it.key()).startswith(prefix):
            return int(_U64.unpack(it.value())[0])
        return None

    def max_timestamp(self, topic: str, partition: int) -> tuple[int, int] | None:
        """``(max timestamp, base offset of the batch that holds it)``."""
        prefix = _tp(b"t", topic, partition)
        it = self._db.iter()
        it.seek_for_prev(prefix + b"\xff" * 8)
        if it.valid() and bytes(it.key()).startswith(prefix):
            ts = int(_U64.unpack(bytes(it.key())[len(prefix) :])[0]) - _TS_BIAS
            return ts, int(_U64.unpack(it.value())[0])
        return None

    def producer_state(self, topic: str, partition: int, producer_id: int) -> bytes | None:
        raw = self._db.get(_tp(b"p", topic, partition) + _U64.pack(producer_id))
        return None if raw is None else bytes(raw)

    def scan(self, kind: bytes, topic: str, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """``(key suffix, value)`` of every ``kind`` key of a partition, in key order."""
        return self._under(_tp(kind, topic, partition))

    def _under(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(key suffix, value)`` of every key starting with ``prefix``, in key order."""
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(prefix):
                return
            yield key[len(prefix) :], bytes(it.value())
            it.next()


class IndexWrite:
    """One atomic, unsynced RocksDB write batch."""

    def __init__(self, index: OffsetIndex) -> None:
        self._index = index
        self._wb = WriteBatch(raw_mode=True)

    def entry(self, topic: str, partition: int, entry: IndexEntry) -> None:
        self._wb.put(_tp(b"o", topic, partition) + _U64.pack(entry.base_offset), entry.encode())

    def time_entry(self, topic: str, partition: int, timestamp: int, base_offset: int) -> None:
        key = _tp(b"t", topic, partition) + _U64.pack(timestamp + _TS_BIAS)
        self._wb.put(key, _U64.pack(base_offset))

    def marker(self, segment: str, end: int) -> None:
        self._wb.put(b"m" + segment.encode(), _U64.pack(end))

    def end_floor(self, topic: str, partition: int, end: int) -> None:
        """Offsets below ``end`` were handed out (to a copy left out of the index)."""
        self._wb.put(_tp(b"n", topic, partition), _U64.pack(end))

    def producer_state(self, topic: str, partition: int, producer_id: int, raw: bytes) -> None:
        self._wb.put(_tp(b"p", topic, partition) + _U64.pack(producer_id), raw)

    def put(self, kind: bytes, topic: str, partition: int, suffix: bytes, value: bytes) -> None:
        """A key of another subsystem's kind (the transaction index) in the same batch."""
        self._wb.put(_tp(kind, topic, partition) + suffix, value)

    def delete(self, kind: bytes, topic: str, partition: int, suffix: bytes) -> None:
        self._wb.delete(_tp(kind, topic, partition) + suffix)

    def commit(self) -> None:
        self._index._write(lambda db: db.write(self._wb))
