"""Idempotent producer state per (topic, partition, producer id), as Kafka keeps it.

For each producer the current epoch and its last ``BATCHES_KEPT`` batches (first and
last sequence, offsets) are kept, so that a retried batch is answered with the offset it
got the first time. Persisted in the offset index (``p`` keys) together with the index
entries of the same batches; like them it is derived data, rebuilt from the batch
headers in the segments past each segment's indexed position. In memory, an LRU of
``cache_entries_max`` producer entries fronts RocksDB.

Rules (Kafka's ``ProducerStateManager``):
- epoch below the known one → INVALID_PRODUCER_EPOCH (fenced);
- a new epoch must start at sequence 0 (unless the producer is unknown);
- a batch equal to one of the kept batches → duplicate, answer its original offset;
- otherwise the first sequence must follow the last one (mod 2**31), else
  OUT_OF_ORDER_SEQUENCE_NUMBER; an unknown producer may start anywhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from tidegate.gateway.log.offset_index import IndexWrite, OffsetIndex
from tidegate.gateway.log.txn_guards import TxnGuards
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import BatchHeader

log = logging.getLogger(__name__)

BATCHES_KEPT = 5
_SEQ_MOD = 1 << 31


@dataclass(slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    #: Resolves (to None) when the batch is durable; None once loaded from disk.
    durable: asyncio.Future[None] | None = None


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    #: First sequence of the batches whose appends failed here and were dropped (-1:
    #: none since the last batch accepted): the next batch's gap is this node's.
    failed_seq: int = -1

    def encode(self) -> bytes:
        rows = [[b.first_seq, b.last_seq, b.base_offset, b.last_offset] for b in self.batches]
        return json.dumps({"e": self.epoch, "b": rows}).encode()

    @staticmethod
    def decode(raw: bytes) -> ProducerEntry:
        obj = json.loads(raw)
        entry = ProducerEntry(int(obj["e"]))
        for row in obj["b"]:
            first, last, base, end = (int(x) for x in row)
            entry.batches.append(BatchRecord(first, last, base, end))
        return entry


@dataclass(frozen=True, slots=True)
class Duplicate:
    batch: BatchRecord


class ProducerStates:
    def __init__(self, index: OffsetIndex, cache_entries_max: int = 100_000) -> None:
        self._index = index
        self._cache: OrderedDict[tuple[str, int, int], ProducerEntry] = OrderedDict()
        self._cache_entries_max = cache_entries_max
        #: Which transactions the coordinator confirmed hold a partition (gateway/log/txn_guards.py).
        self.txn_guards = TxnGuards()

    def _get(self, topic: str, partition: int, producer_id: int) -> ProducerEntry | None:
        key = (topic, partition, producer_id)
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            return entry
        raw = self._index.producer_state(topic, partition, producer_id)
        if raw is None:
            return None
        entry = ProducerEntry.decode(raw)
        self._remember(key, entry)
        return entry

    def _remember(self, key: tuple[str, int, int], entry: ProducerEntry) -> None:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_entries_max:
            old_key, old = next(iter(self._cache.items()))
            if any(b.durable is not None and not b.durable.done() for b in old.batches):
                break  # never evict state of batches still in flight
            del self._cache[old_key]

    def check(
        self, topic: str, partition: int, header: BatchHeader
    ) -> ErrorCode | Duplicate | None:
        """None if the batch may be appended; a ``Duplicate`` or an error otherwise."""
        entry = self._get(topic, partition, header.producer_id)
        if entry is None:
            return None
        _forget_failed(entry)
        if header.producer_epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if header.producer_epoch > entry.epoch:
            return None if header.base_sequence == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return Duplicate(batch)
        if not entry.batches:
            # Every batch kept failed here: the producer must send the first of them again.
            failed = entry.failed_seq
            if failed < 0 or header.base_sequence == failed:
                return None
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        expected = (entry.batches[-1].last_seq + 1) % _SEQ_MOD
        if header.base_sequence != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        return None

    def explain(self, topic: str, partition: int, header: BatchHeader) -> str:
        """What this node holds of the batch's producer, for a refusal's message and log."""
        entry = self._get(topic, partition, header.producer_id)
        if entry is None:
            return "no state"
        held = ", ".join(f"{b.first_seq}-{b.last_seq}@{b.base_offset}"
                         f"{'' if _stored(b) else ' (not stored yet)'}" for b in entry.batches)
        failed = f", failed here from sequence {entry.failed_seq}" if entry.failed_seq >= 0 else ""
        return f"epoch {entry.epoch}, batches {held or 'none'}{failed}"

    def failed_here(self, topic: str, partition: int, header: BatchHeader) -> bool:
        """Whether the batch the producer must send before ``header`` (its sequence does
        not follow) is one accepted here whose append failed: the gap is this node's, and
        the producer re-sends that batch once told to retry (issue 36)."""
        entry = self._get(topic, partition, header.producer_id)
        if entry is None or entry.failed_seq < 0 or header.producer_epoch != entry.epoch:
            return False
        expected = (entry.batches[-1].last_seq + 1) % _SEQ_MOD if entry.batches else entry.failed_seq
        return expected == entry.failed_seq

    def is_copy(self, topic: str, partition: int, header: BatchHeader) -> bool:
        """Whether a batch found past the indexed end of a segment is a copy of one this
        state already holds: of an older epoch, or not past the last sequence, yet at an
        offset after that of the last batch (a producer's offsets follow its sequence,
        so a batch merely re-sent late, with its own offsets, is never taken for one)."""
        entry = self._get(topic, partition, header.producer_id)
        # Only batches known stored: one accepted here whose append failed or is still in
        # flight may have been stored by another leader, which this batch then is.
        stored = [b for b in entry.batches if _stored(b)] if entry is not None else []
        if entry is None or not stored or header.base_offset <= stored[-1].last_offset:
            return False
        if header.producer_epoch != entry.epoch:
            return header.producer_epoch < entry.epoch
        behind = (stored[-1].last_seq - header.last_sequence) % _SEQ_MOD
        return behind < _SEQ_MOD // 2

    def record(
        self,
        topic: str,
        partition: int,
        header: BatchHeader,
        base_offset: int,
        durable: asyncio.Future[None] | None,
    ) -> None:
        """Note an accepted batch (offsets assigned) in the in-memory state."""
        key = (topic, partition, header.producer_id)
        entry = self._get(topic, partition, header.producer_id)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = ProducerEntry(header.producer_epoch)
            self._remember(key, entry)
        entry.batches.append(
            BatchRecord(
                header.base_sequence, header.last_sequence, base_offset,
                base_offset + header.last_offset_delta, durable,
            )
        )
        entry.failed_seq = -1

    def producers(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        """``(producer id, epoch, last sequence)`` of every producer known in a partition
        (DescribeProducers), in memory or in the index."""
        pids = {k[2] for k in self._cache if k[0] == topic and k[1] == partition}
        pids.update(int.from_bytes(suffix[:8], "big") for suffix, _ in self._index.scan(b"p", topic, partition))
        out = []
        for pid in sorted(pids):
            entry = self._get(topic, partition, pid)
            if entry is not None:
                out.append((pid, entry.epoch, entry.batches[-1].last_seq if entry.batches else -1))
        return out

    def end_transaction(self, topic: str, partition: int, producer_id: int, epoch: int) -> None:
        """A transaction marker of ``epoch`` is appended: a higher epoch than the
        partition knows (the coordinator fenced the producer) makes every batch of an
        older epoch INVALID_PRODUCER_EPOCH from now on, as Kafka's marker does; a later
        batch of the producer must be verified again (``TxnGuards``)."""
        self.txn_guards.clear(topic, partition, producer_id)
        entry = self._get(topic, partition, producer_id)
        if entry is None or epoch > entry.epoch:
            self._remember((topic, partition, producer_id), ProducerEntry(epoch))

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._cache if k[0] == topic]:
            del self._cache[key]
        self.txn_guards.forget_topic(topic)

    def persist(
        self, write: IndexWrite, topic: str, partition: int, producer_id: int, durable_end: int
    ) -> None:
        """Add a producer's state to an index write, as far as it is durable: only its
        batches below offset ``durable_end`` (appends become durable in offset order), so
        a batch lost in a crash is never remembered as written."""
        entry = self._get(topic, partition, producer_id)
        if entry is not None:
            durable = ProducerEntry(entry.epoch)
            durable.batches.extend(b for b in entry.batches if b.last_offset < durable_end)
            write.producer_state(topic, partition, producer_id, durable.encode())

    def replay(
        self, write: IndexWrite, topic: str, partition: int, header: BatchHeader
    ) -> None:
        """Apply a batch found in a segment during the index rebuild."""
        if header.is_control:
            self.end_transaction(topic, partition, header.producer_id, header.producer_epoch)
            self.persist(write, topic, partition, header.producer_id, header.last_offset + 1)
            return
        found = self.check(topic, partition, header)
        if isinstance(found, Duplicate):
            return
        if found == ErrorCode.INVALID_PRODUCER_EPOCH:
            return  # a fenced producer's batch stored before the fence: its epoch is over
        if isinstance(found, ErrorCode):
            # The log is the truth, as in Kafka's log recovery (no sequence check there):
            # a state that does not lead to a stored batch is behind, and refusing to
            # advance it kept it behind for good, so that the producer's next batch at a
            # node leading the partition got OUT_OF_ORDER_SEQUENCE_NUMBER (fatal to it).
            log.warning("index rebuild: %s/%d offsets %d-%d: producer %d epoch %d sequence "
                        "%d-%d does not follow %s; the producer's state follows the log",
                        topic, partition, header.base_offset, header.last_offset,
                        header.producer_id, header.producer_epoch, header.base_sequence,
                        header.last_sequence, self.explain(topic, partition, header))
        self.record(topic, partition, header, header.base_offset, None)
        self.persist(write, topic, partition, header.producer_id, header.last_offset + 1)


def _stored(b: BatchRecord) -> bool:
    """Loaded from the index, or its append done."""
    return b.durable is None or (b.durable.done() and not b.durable.cancelled()
                                 and b.durable.exception() is None)


def _failed(b: BatchRecord) -> bool:
    return (b.durable is not None and b.durable.done() and not b.durable.cancelled()
            and b.durable.exception() is not None)


def _forget_failed(entry: ProducerEntry) -> None:
    """Drop batches whose append failed: their retry must be accepted, not answered as
    a duplicate (appends fail as a suffix, so the rest stays a sequence)."""
    kept = [b for b in entry.batches if not _failed(b)]
    if len(kept) != len(entry.batches):
        entry.failed_seq = next(b.first_seq for b in entry.batches if _failed(b))
        entry.batches.clear()
        entry.batches.extend(kept)
