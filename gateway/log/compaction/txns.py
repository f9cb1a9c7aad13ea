"""What the cleaner does with transactions, as Kafka's cleaner does it
(``CleanedTransactionMetadata``, KIP-98): records of aborted transactions are removed
and never enter the key map; a marker may go once no record of its transaction is left
in the log (and, like a tombstone, ``delete.retention.ms`` after the cleaner first saw
it). An abort marker whose records were read in this pass is kept: they are removed by
this pass, so the next one may remove the marker. Nothing at or past the last stable
offset is ever cleaned (``clean_partition`` bounds the range)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Protocol

from tidegate.gateway.txn.markers import ABORT, COMMIT
from tidegate.protocol.record_batch import ATTR_TRANSACTIONAL, BatchHeader


class AbortedTxn(Protocol):
    @property
    def producer_id(self) -> int: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...


class TxnIndex(Protocol):
    """The part of the partitions' transaction index (``gateway.txn.partition_txns``)
    the cleaner reads and, at its switch, updates."""

    def last_stable_offset(self, topic: str, partition: int, high_watermark: int) -> int: ...

    def aborted(
        self, topic: str, partition: int, fetch_offset: int, upper_offset: int
    ) -> Sequence[AbortedTxn]: ...

    def aborted_key(self, txn: AbortedTxn) -> tuple[bytes, bytes]: ...

    def forget_aborted(self, topic: str, partition: int, txns: Sequence[AbortedTxn]) -> None: ...


class _Aborted:
    __slots__ = ("txn", "observed")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.observed = False


class CleanedTxns:
    """Transaction state while one pass walks the log in offset order."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = [(t.first_offset, i, t) for i, t in enumerate(aborted)]
        heapq.heapify(self._pending)
        self._aborting: dict[int, _Aborted] = {}
        self._committing: set[int] = set()

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            _, _, txn = heapq.heappop(self._pending)
            self._aborting[txn.producer_id] = _Aborted(txn)

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch read: True if it belongs to an aborted transaction (drop it)."""
        self._reach(header.last_offset)
        if not header.attributes & ATTR_TRANSACTIONAL:
            return False
        state = self._aborting.get(header.producer_id)
        if state is not None:
            state.observed = True
            return True
        self._committing.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, kind: int | None) -> tuple[bool, AbortedTxn | None]:
        """A control batch read: whether no record of its transaction is left (the marker
        may go once past its delete horizon), and the aborted transaction it closes (to
        forget from the index with it), if any."""
        self._reach(header.last_offset)
        pid = header.producer_id
        if kind == ABORT:
            state = self._aborting.pop(pid, None)
            if state is None:
                return True, None
            return not state.observed, state.txn
        if kind == COMMIT:
            if pid in self._committing:
                self._committing.discard(pid)
                return False, None
            return True, None
        return False, None  # an unknown control type stays
