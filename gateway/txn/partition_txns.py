"""Each partition's transaction index: open transactions, aborted ones, the LSO.

Kept as Kafka's producer-state snapshot and ``.txnindex`` are, as data derived from the
log: a transactional batch of a producer with no open transaction in the partition opens
one at its base offset; a marker closes it, and an abort marker records
``(producer id, first offset, marker offset)``. Updated as each append is indexed (in
offset order, before the high watermark passes it), in the same RocksDB write as its
index entries, and replayed by the index rebuild, so it is as durable as the index.

RocksDB keys (``IndexWrite.put``), per partition:
- ``x`` + producer id:u64 → first offset:u64 (an open transaction)
- ``a`` + first offset:u64 + producer id:u64 → last offset:u64 (an aborted transaction)

The last stable offset is the first offset of the oldest open transaction, or the high
watermark when none is open: ``read_committed`` fetches stop there.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidegate.gateway.txn.markers import ABORT, marker_type
from tidegate.protocol.record_batch import ATTR_TRANSACTIONAL, BatchHeader

_U64 = struct.Struct(">Q")
_U64X2 = struct.Struct(">QQ")
_OPEN = b"x"
_ABORTED = b"a"


class IndexWriter(Protocol):
    def put(self, kind: bytes, topic: str, partition: int, suffix: bytes, value: bytes) -> None: ...
    def delete(self, kind: bytes, topic: str, partition: int, suffix: bytes) -> None: ...


class _Batch(IndexWriter, Protocol):
    def commit(self) -> None: ...


class AbortedTxnLike(Protocol):
    @property
    def producer_id(self) -> int: ...
    @property
    def first_offset(self) -> int: ...


class IndexReader(Protocol):
    def scan(self, kind: bytes, topic: str, partition: int) -> Iterable[tuple[bytes, bytes]]: ...
    def batch(self) -> _Batch: ...


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _Partition:
    #: producer id → first offset of its open transaction here.
    open: dict[int, int] = field(default_factory=dict)
    #: Sorted by first offset.
    aborted: list[AbortedTxn] = field(default_factory=list)


class PartitionTxns:
    """The transaction index of every partition, loaded lazily from RocksDB."""

    def __init__(self, index: IndexReader) -> None:
        self._index = index
        self._parts: dict[tuple[str, int], _Partition] = {}

    def _get(self, topic: str, partition: int) -> _Partition:
        key = (topic, partition)
        part = self._parts.get(key)
        if part is None:
            part = _Partition()
            for suffix, value in self._index.scan(_OPEN, topic, partition):
                part.open[_U64.unpack(suffix)[0]] = _U64.unpack(value)[0]
            for suffix, value in self._index.scan(_ABORTED, topic, partition):
                first, pid = _U64X2.unpack(suffix)
                part.aborted.append(AbortedTxn(pid, first, _U64.unpack(value)[0]))
            self._parts[key] = part
        return part

    # -- called as appends are indexed (``PartitionLog._index`` and the rebuild) --------

    def on_indexed(
        self, write: IndexWriter, topic: str, partition: int,
        batches: Iterable[BatchHeader], payload: bytes | memoryview,
    ) -> None:
        """Apply the transactional batches among ``batches`` (positions relative to
        ``payload``, base offsets assigned)."""
        for b in batches:
            if not b.attributes & ATTR_TRANSACTIONAL:
                continue
            part = self._get(topic, partition)
            pid = b.producer_id
            if b.is_control:
                kind = marker_type(payload, b)
                if kind is None:
                    continue
                first = part.open.pop(pid, None)
                if first is None:
                    continue  # nothing of this transaction landed here
                write.delete(_OPEN, topic, partition, _U64.pack(pid))
                if kind == ABORT:
                    txn = AbortedTxn(pid, first, b.base_offset)
                    bisect.insort(part.aborted, txn, key=_first)
                    write.put(_ABORTED, topic, partition, _U64X2.pack(first, pid),
                              _U64.pack(b.base_offset))
            elif pid not in part.open:
                part.open[pid] = b.base_offset
                write.put(_OPEN, topic, partition, _U64.pack(pid), _U64.pack(b.base_offset))

    # -- reads ---------------------------------------------------------------------------

    def last_stable_offset(self, topic: str, partition: int, high_watermark: int) -> int:
        part = self._parts.get((topic, partition))
        if part is None:
            part = self._get(topic, partition)
        if not part.open:
            return high_watermark
        return min(high_watermark, min(part.open.values()))

    def aborted(
        self, topic: str, partition: int, fetch_offset: int, upper_offset: int
    ) -> list[AbortedTxn]:
        """Aborted transactions that overlap ``[fetch_offset, upper_offset)``."""
        part = self._get(topic, partition)
        end = bisect.bisect_left(part.aborted, upper_offset, key=_first)
        return [t for t in part.aborted[:end] if t.last_offset >= fetch_offset]

    def open_transactions(self, topic: str, partition: int) -> dict[int, int]:
        """producer id → first offset of every open transaction (DescribeProducers)."""
        return dict(self._get(topic, partition).open)

    def trim(self, topic: str, partition: int, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start (DeleteRecords,
        retention): no fetch can overlap them any more."""
        part = self._parts.get((topic, partition))
        if part is None:
            part = self._get(topic, partition)
        gone = [t for t in part.aborted if t.last_offset < log_start_offset]
        if not gone:
            return
        write = self._index.batch()
        for t in gone:
            write.delete(_ABORTED, topic, partition, _U64X2.pack(t.first_offset, t.producer_id))
        write.commit()
        part.aborted = [t for t in part.aborted if t.last_offset >= log_start_offset]

    def forget_partition(self, topic: str, partition: int) -> None:
        self._parts.pop((topic, partition), None)

    @staticmethod
    def aborted_key(txn: AbortedTxnLike) -> tuple[bytes, bytes]:
        """The (kind, suffix) of ``txn``'s RocksDB key: the cleaner deletes it in the
        write that removes the transaction's abort marker."""
        return _ABORTED, _U64X2.pack(txn.first_offset, txn.producer_id)

    def forget_aborted(self, topic: str, partition: int, txns: Sequence[AbortedTxnLike]) -> None:
        """Drop aborted transactions whose records and marker the cleaner removed (their
        keys went in its switch): a listed transaction without its marker would make
        read_committed clients skip that producer's later records."""
        gone = {(t.producer_id, t.first_offset) for t in txns}
        part = self._get(topic, partition)
        part.aborted = [t for t in part.aborted if (t.producer_id, t.first_offset) not in gone]

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._parts if k[0] == topic]:
            del self._parts[key]


def _first(t: AbortedTxn) -> int:
    return t.first_offset
