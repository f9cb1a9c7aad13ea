"""What one pass keeps of each batch it rewrites (``docs/compaction.md`` step 3): the
latest record of every key, tombstones and removable markers until their delete horizon
(``delete.retention.ms`` after the cleaner first saw them, Kafka's rule), nothing of an
aborted transaction (``txns.py``)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from tidegate.gateway.log.compaction.checkpoint import NO_TOMBSTONE
from tidegate.gateway.log.compaction.records import Record
from tidegate.gateway.log.compaction.rewrite import Filtered, filter_batch
from tidegate.gateway.log.compaction.txns import AbortedTxn, CleanedTxns
from tidegate.gateway.txn.markers import ABORT, marker_type
from tidegate.protocol.record_batch import BatchHeader


def key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


class Retention:
    """Per pass: ``keys`` (digest → latest offset) from the key map, ``first_seen_ms``
    (offset → when the cleaner first saw it), ``horizon_ms`` (now minus
    ``delete.retention.ms``)."""

    def __init__(
        self, keys: dict[bytes, int], txns: CleanedTxns, first_seen_ms: Callable[[int], int],
        horizon_ms: int,
    ) -> None:
        self.keys = keys
        self.txns = txns
        self.first_seen_ms = first_seen_ms
        self.horizon_ms = horizon_ms
        self.removed = 0
        #: When the oldest tombstone or marker kept for its horizon was first seen.
        self.oldest_due_ms = NO_TOMBSTONE
        #: Aborted transactions whose marker this pass removes.
        self.forgotten: list[AbortedTxn] = []

    def batch(self, data: bytes, header: BatchHeader) -> Filtered:
        """The batch as the pass writes it (``data`` None: removed)."""
        if header.is_control:
            return self._marker(data, header)
        if self.txns.on_batch(header):
            self.removed += header.record_count
            return Filtered(None, 0, header.max_timestamp)
        return filter_batch(data, header, self._keep)

    def _marker(self, data: bytes, header: BatchHeader) -> Filtered:
        kind = marker_type(data, header)
        removable, aborted = self.txns.on_marker(header, kind)
        kept = Filtered(data, header.record_count, header.max_timestamp)
        if kind is None:
            return kept
        seen_ms = self.first_seen_ms(header.base_offset)
        if removable and seen_ms <= self.horizon_ms:
            if aborted is not None:
                self.forgotten.append(aborted)
            self.removed += header.record_count
            return Filtered(None, 0, header.max_timestamp)
        if removable or (kind == ABORT and aborted is not None):
            # Due at its horizon (an abort marker: its records go in this pass).
            self.oldest_due_ms = min(self.oldest_due_ms, seen_ms)
        return kept

    def _keep(self, r: Record, offset: int, timestamp: int) -> bool:
        if r.key is None:
            return True
        latest = self.keys.get(key_digest(r.key))
        if latest is not None and latest != offset:
            self.removed += 1
            return False
        if r.is_tombstone:
            seen_ms = self.first_seen_ms(offset)
            if seen_ms <= self.horizon_ms:
                self.removed += 1
                return False
            self.oldest_due_ms = min(self.oldest_due_ms, seen_ms)
        return True
