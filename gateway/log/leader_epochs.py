"""Leader epochs (KIP-101, KIP-320): each partition's current leader epoch, the epoch
stamped on every batch appended, and each partition's epoch history, which answers
OffsetForLeaderEpoch.

The epoch grows whenever a partition's leader may have changed. On the single node it
is always 0: the node never hands a partition over. In cluster mode it is the version
of the container map in ZooKeeper plus the creation epoch of the partition's current
segment (``gateway/cluster/leadership.py``): both only grow, and a partition's leader
changes only when one of them does (a takeover moves its container, a scale its
segment), so its epoch grows on every leader change (and, harmlessly, when other
containers move or other key ranges scale). A client whose epoch is
older gets FENCED_LEADER_EPOCH, one that is newer (this node has not seen the new map
yet) UNKNOWN_LEADER_EPOCH, as Kafka's partition answers.

The history is Kafka's leader-epoch cache: ``(epoch, start offset)`` for each epoch that
appended, derived from the epochs stamped in the batches as they are indexed (so a node
taking a partition over learns it by indexing what the previous leader wrote) and kept
in the offset index (``e`` keys) in the same write as the entries. Offsets are never
truncated, so the history only grows, and it is never asked to report a divergence that
did not happen.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Protocol

from tidegate.gateway.log.log_services import IndexHook
from tidegate.gateway.log.offset_index import IndexWrite
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import BatchHeader

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_KIND = b"e"
_EPOCH = struct.Struct(">I")
_OFFSET = struct.Struct(">Q")


def epoch_error(client_epoch: int, current: int) -> ErrorCode:
    """Kafka's answer to a client's current leader epoch (-1: not checked)."""
    if client_epoch < 0 or client_epoch == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if client_epoch < current else ErrorCode.UNKNOWN_LEADER_EPOCH


class EpochIndex(Protocol):
    def scan(self, kind: bytes, topic: str, partition: int) -> Iterable[tuple[bytes, bytes]]: ...


class LeaderEpochs:
    def __init__(self, index: EpochIndex, current: Callable[[str, int], int]) -> None:
        self._index = index
        #: Each partition's current epoch (0, or the cluster's: see above).
        self._current = current
        self._history: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def current(self, topic: str, partition: int) -> int:
        return max(self._current(topic, partition), 0)

    def check(self, topic: str, partition: int, client_epoch: int) -> ErrorCode:
        """A request's current leader epoch against the partition's (-1: not checked)."""
        return epoch_error(client_epoch, self.current(topic, partition))

    def history(self, topic: str, partition: int) -> list[tuple[int, int]]:
        key = (topic, partition)
        found = self._history.get(key)
        if found is None:
            found = self._history[key] = [
                (int(_EPOCH.unpack(k)[0]), int(_OFFSET.unpack(v)[0]))
                for k, v in self._index.scan(_KIND, topic, partition)
            ]
        return found

    def end_offset(self, topic: str, partition: int, requested: int, next_offset: int
                   ) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` of the requested epoch, the
        start of the first later epoch, or the log end for the current epoch. The current
        epoch counts as starting at ``next_offset`` when nothing was appended in it yet."""
        current = self.current(topic, partition)
        if requested < 0 or requested > current:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested == current:
            return current, next_offset
        entries = self.history(topic, partition)
        floor: int | None = None
        for epoch, start in entries:
            if epoch > requested:
                return (requested if floor is None else floor), start
            floor = epoch
        # No later epoch appended: the current one starts where the log ends now.
        return (requested if floor is None else floor), next_offset

    def epoch_of(self, topic: str, partition: int, offset: int, next_offset: int) -> int:
        """The epoch that appended ``offset`` (ListOffsets answers it with the offset): the
        current one from the log end on, -1 for offsets older than the history."""
        if offset >= next_offset:
            return self.current(topic, partition)
        found = UNDEFINED_EPOCH
        for epoch, start in self.history(topic, partition):
            if start > offset:
                break
            found = epoch
        return found

    # -- the index hook: told of every batch as it is indexed --------------------------

    def on_indexed(self, write: IndexWrite, topic: str, partition: int,
                   batches: Iterable[BatchHeader], payload: bytes | memoryview) -> None:
        entries = self.history(topic, partition)
        for b in batches:
            epoch = b.partition_leader_epoch
            # -1: stamped by a client, before tidegate stamped epochs.
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, b.base_offset))
                write.put(_KIND, topic, partition, _EPOCH.pack(epoch), _OFFSET.pack(b.base_offset))

    def forget_partition(self, topic: str, partition: int) -> None:
        self._history.pop((topic, partition), None)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._history if k[0] == topic]:
            del self._history[key]

    def trim(self, topic: str, partition: int, log_start_offset: int) -> None:
        """Kept whole: one entry per epoch change, and a request for an epoch wholly
        below the log start still gets its end offset, as Kafka's cache keeps it."""


class IndexHooks:
    """Several index hooks told in turn (the transaction index, the epoch history)."""

    def __init__(self, *hooks: IndexHook) -> None:
        self.hooks = hooks

    def on_indexed(self, write: IndexWrite, topic: str, partition: int,
                   batches: Iterable[BatchHeader], payload: bytes | memoryview) -> None:
        listed = list(batches)
        for hook in self.hooks:
            hook.on_indexed(write, topic, partition, listed, payload)

    def forget_partition(self, topic: str, partition: int) -> None:
        for hook in self.hooks:
            hook.forget_partition(topic, partition)

    def forget_topic(self, topic: str) -> None:
        for hook in self.hooks:
            hook.forget_topic(topic)

    def trim(self, topic: str, partition: int, log_start_offset: int) -> None:
        for hook in self.hooks:
            hook.trim(topic, partition, log_start_offset)
