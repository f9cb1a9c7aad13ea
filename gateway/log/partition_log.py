"""One Kafka partition's log: offset assignment, the append pipeline, the high watermark.

Contract:
- ``append`` is synchronous: it assigns the next dense offsets, rewrites the batches'
  base offsets in place and hands the append (envelope + batches) to the segment store
  before returning, so offsets are assigned in exactly the order appends reach the
  segment (the store enqueues appends in call order; no ``await`` in between).
- Appends complete in offset order. The high watermark is the end of the longest
  durable prefix; only data below it is served or indexed.
- A segment sealed under us (a scale) fails that append and every later one on the same
  segment; once all in-flight appends have settled, the failed ones are re-sent in offset
  order to the segment that now holds the partition's point, ahead of anything newer, so
  no hole appears.
- Cluster mode: an append refused because the segment's container is another node's
  (a scale put the successor there) fails at once, with every append not yet durable
  (``LeaderMovedError``: the produce answers NOT_LEADER_OR_FOLLOWER and the producer
  re-sends to the new leader); nothing of them was written, only the owner appends.
- A transient store error re-sends the same way to the same segment, after
  ``append_retry_delay_ms``, up to ``append_retries_max`` times; the producer's answer
  waits for the re-send. Positions in a segment need not follow offset order: the index
  maps each offset to its position.
- Once ``append_retries_max`` re-sends failed (a full disk, a failing container), the
  partition is ``unavailable``: new appends are refused before they get offsets, and the
  failed ones keep being re-sent every ``UNAVAILABLE_RETRY_S`` until one succeeds (space
  is back), so the offsets stay dense and nothing is lost across the outage.
- Only an append that cannot succeed (too large, controller away for the whole refresh
  budget, the topic deleted) fails; its offsets are skipped, never reused, since a later
  append may already be durable. That is the one way a gap can appear.
- If the offset index cannot be written (a full disk), the partition waits for it
  (``failed``): appends already durable stay pending, unanswered and in offset order,
  new ones are refused, the high watermark stays where it is and reads below it go on.
  Once the index takes writes again (``PartitionLogs.when_index_writable``) the waiting
  appends are indexed and answered, so offsets stay dense and nothing is lost. A stop
  meanwhile leaves them to the next start, which indexes what the segments hold from
  the last marker on, as after a crash.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tidegate.core.controller.api import SegmentRecord
from tidegate.core.segmentstore.api import (
    BadAttributeUpdateError,
    BadOffsetError,
    ContainerNotOwnedError,
    SegmentNotFoundError,
    SegmentSealedError,
    TooLargeError,
)
from tidegate.gateway.log.envelope import ENVELOPE_BYTES, Envelope, encode_envelope_into
from tidegate.gateway.log.log_services import LogServices
from tidegate.gateway.log.offset_index import IndexEntry
from tidegate.protocol.record_batch import BatchHeader, set_base_offset, set_leader_epoch

log = logging.getLogger(__name__)


class StorageFailure(Exception):
    """The append could not be made durable; the client may retry."""


class LeaderMovedError(StorageFailure):
    """Cluster mode: the partition's segment is in another node's container now (a scale
    put its successor there, or the container moved); its leader is that node."""


class _State(enum.Enum):
    WAITING = 1
    SUBMITTED = 2
    SEALED = 3  # the segment was sealed (a scale): re-send to the successor
    RETRY = 4  # a transient store error: re-send to the same segment
    DONE = 5
    FAILED = 6
    MOVED = 7  # the segment's container is another node's: the leader moved


_RESEND = (_State.WAITING, _State.SEALED, _State.RETRY)
#: Store errors that a retry cannot cure.
_NO_ENVELOPE = bytes(ENVELOPE_BYTES)  # overwritten by encode_envelope_into
_PERMANENT = (TooLargeError, BadOffsetError, BadAttributeUpdateError)
#: Seconds between re-sends while the partition's storage is unavailable.
UNAVAILABLE_RETRY_S = 0.5
#: Index entries each partition keeps in memory for tail fetches.
RECENT_ENTRIES_MAX = 64


@dataclass(eq=False, slots=True)  # slots: one object fewer per append for the collector
class PendingAppend:
    base_offset: int
    end_offset: int
    data: memoryview
    batches: list[BatchHeader]
    durable: asyncio.Future[None]
    state: _State = _State.WAITING
    segment: SegmentRecord | None = None
    position: int = -1
    attempts: int = 0
    producer_ids: tuple[int, ...] = ()  # the empty tuple is shared, a set would not be
    #: Called synchronously, once, right after ``durable`` is resolved: a waiting
    #: handler resumes one event-loop hop later (a done callback takes two).
    on_settled: list[Callable[[], None]] | None = None

    def settle(self, exc: BaseException | None = None) -> None:
        if self.durable.done():
            return
        if exc is None:
            self.durable.set_result(None)
        else:
            self.durable.set_exception(exc)
            # Seen here, not by a done callback per append (one loop callback each):
            # acks=0 appends have nobody awaiting them; an awaiter still gets it raised.
            self.durable.exception()
        callbacks, self.on_settled = self.on_settled, None
        for callback in callbacks or ():
            callback()


class PartitionLog:
    def __init__(
        self,
        logs: LogServices,
        topic: str,
        partition: int,
        next_offset: int,
        log_start_offset: int,
        max_timestamp: int,
    ) -> None:
        self._logs = logs
        self.topic = topic
        self.partition = partition
        self.next_offset = next_offset
        self.high_watermark = next_offset
        self.log_start_offset = log_start_offset
        self._max_timestamp = max_timestamp
        self.segment: SegmentRecord | None = None
        self._pending: deque[PendingAppend] = deque()
        self._inflight = 0
        self._recovering = False
        self._settled = asyncio.Event()
        #: Called (synchronously) whenever the high watermark moves.
        self.on_grow: list[Callable[[], None]] = []
        #: Set when the topic is deleted (DeleteTopics): appends still settling after the
        #: seal write nothing more to the index, which is being dropped.
        self.retired = False
        #: The newest index entries, consecutive, oldest first: fetches at the tail find
        #: their batches here instead of iterating RocksDB.
        self.recent: deque[IndexEntry] = deque(maxlen=RECENT_ENTRIES_MAX)
        #: The offset index write error the partition waits out (new appends are
        #: refused meanwhile), or None.
        self.failed: BaseException | None = None
        self._index_waiting = False
        #: The store error that outlasted the re-sends while appends wait to be re-sent
        #: (new appends are refused meanwhile), or None.
        self.unavailable: BaseException | None = None

    # -- produce -----------------------------------------------------------------------

    async def ensure_segment(self) -> None:
        """Resolve the segment that holds the partition's point (once, then cached)."""
        if self.segment is None:
            self.segment = await self._logs.topics.current_segment(self.topic, self.partition)

    def append(
        self, payload: bytes | memoryview, batches: list[BatchHeader], head: memoryview | None = None
    ) -> PendingAppend:
        """Assign offsets to ``batches`` (headers of ``payload``, positions relative to
        it), rewrite their base offsets and submit. Never awaits.

        ``head``, if given, is a writable buffer ending with ``payload`` whose bytes
        before it may be overwritten: the envelope goes there and the batches are
        rewritten where they are, no copy. Otherwise envelope and payload are copied
        into a new buffer."""
        if self.failed is not None:
            raise StorageFailure(
                f"{self.topic}/{self.partition}: offset index unavailable, retry later: "
                f"{self.failed}"
            )
        if self.unavailable is not None:
            raise StorageFailure(
                f"{self.topic}/{self.partition}: storage unavailable: {self.unavailable}"
            )
        base = self.next_offset
        n = len(payload)
        if head is not None and not head.readonly and len(head) >= n + ENVELOPE_BYTES:
            data = head[len(head) - n - ENVELOPE_BYTES :]
        else:
            # One allocation and one copy (``bytearray(n)`` would zero-fill it first).
            data = memoryview(bytearray().join((_NO_ENVELOPE, payload)))
        offset = base
        assigned: list[BatchHeader] = []
        epoch = self._logs.leader_epoch(self.topic, self.partition)
        for b in batches:
            set_base_offset(data, ENVELOPE_BYTES + b.position, offset)
            if epoch >= 0:
                set_leader_epoch(data, ENVELOPE_BYTES + b.position, epoch)
            assigned.append(b.rebased(offset, epoch))
            offset += b.last_offset_delta + 1
        encode_envelope_into(data, Envelope(self.partition, base, offset - base, len(payload)))
        self.next_offset = offset
        traffic = self._logs.traffic
        if traffic is not None:
            traffic.record(self.topic, self.partition, n, offset - base)
        pending = PendingAppend(
            base, offset, data, assigned, asyncio.get_running_loop().create_future(),
            producer_ids=tuple({b.producer_id for b in assigned if b.is_idempotent}),
        )
        self._pending.append(pending)
        self._submit(pending)
        return pending

    def _submit(self, p: PendingAppend) -> None:
        if self._recovering or self.segment is None:
            p.state = _State.WAITING
            if not self._recovering:
                self._start_recovery()
            return
        p.state = _State.SUBMITTED
        p.segment = self.segment
        name = self._logs.topics.segment_name(self.topic, self.segment.id)
        records = sum(b.record_count for b in p.batches)
        # The store queues the append before ``append_future`` returns, so appends
        # reach the segment in submission (offset) order. The view is read-only: the
        # bytes never change after submission, so the store keeps them without a copy.
        view = p.data.toreadonly()
        # ``_on_done`` is called as the append completes, in the loop turn Tier-1 reports
        # it (a done callback would wait one event-loop hop more), never before this
        # returns.
        self._logs.store.append_future(
            name, view, event_count=max(records, 1), on_done=functools.partial(self._on_done, p)
        )
        self._inflight += 1
        self._settled.clear()

    def _on_done(self, p: PendingAppend, task: asyncio.Future[int]) -> None:
        self._inflight -= 1
        if self._logs.closed:
            if not task.cancelled():
                task.exception()
            if self._inflight == 0:
                self._settled.set()
            return
        exc = task.exception() if not task.cancelled() else StorageFailure("append cancelled")
        if exc is None:
            p.position = task.result()
            p.state = _State.DONE
            if self.unavailable is not None:
                log.info("%s/%d: storage available again", self.topic, self.partition)
                self.unavailable = None
            self._advance()
        elif isinstance(exc, SegmentSealedError | SegmentNotFoundError):
            p.state = _State.SEALED
        elif isinstance(exc, ContainerNotOwnedError):
            p.state = _State.MOVED
        elif isinstance(exc, _PERMANENT):
            log.error("append to %s/%d failed: %r", self.topic, self.partition, exc)
            self._fail(p, exc)
        elif self.retired:  # the partition moved on (or was deleted): the producer re-sends
            log.info("append to %s/%d failed after it moved: %r", self.topic, self.partition, exc)
            self._fail(p, exc)
        else:
            p.attempts += 1
            p.state = _State.RETRY
            if p.attempts > self._logs.append_retries_max and self.unavailable is None:
                # A warning: nothing is lost, and in a cluster it is mostly a container
                # failing over (fenced by its next owner); the container logs why it failed.
                log.warning("%s/%d: storage unavailable (%r): appends wait and are re-sent; "
                          "new ones are refused", self.topic, self.partition, exc)
                self.unavailable = exc
        if p.state != _State.DONE:
            self._start_recovery()
        if self._inflight == 0:
            self._settled.set()

    @staticmethod
    def _fail(p: PendingAppend, exc: BaseException) -> None:
        p.state = _State.FAILED
        p.settle(StorageFailure(repr(exc)))

    def _start_recovery(self) -> None:
        if not self._recovering and not self._logs.closed:
            self._recovering = True
            self._logs.spawn(self._recover())

    async def _recover(self) -> None:
        """Once the pipeline has settled, re-send every append that did not make it, in
        offset order: after a seal to the segment that now holds the partition's point,
        after a transient error to the same segment after a delay."""
        try:
            if self._inflight:
                await self._settled.wait()
            if any(p.state == _State.MOVED for p in self._pending):
                self._leader_moved()
                return
            sealed = any(p.state == _State.SEALED for p in self._pending)
            if any(p.state == _State.RETRY for p in self._pending):
                delay_s = self._logs.append_retry_delay_ms / 1000
                await asyncio.sleep(UNAVAILABLE_RETRY_S if self.unavailable else delay_s)
            if sealed or self.segment is None:
                self.segment = await self._refresh(self.segment if sealed else None)
            succession = self._logs.succession
            if sealed and succession is not None and not await succession(
                    self.topic, self.partition, self.segment):
                # A segment between was led by another node: these offsets may be its.
                self._leader_moved()
                return
        except Exception as exc:  # the controller stayed unreachable: give up on these
            log.error("cannot resolve the segment of %s/%d: %r", self.topic, self.partition, exc)
            self.segment = None
            for p in self._pending:
                if p.state in _RESEND:
                    self._fail(p, exc)
        finally:
            self._recovering = False
        if self.retired:  # moved to another node (or deleted): never re-sent from here
            gone = StorageFailure(f"{self.topic}/{self.partition} is no longer served here")
            for p in self._pending:
                if p.state in _RESEND:
                    self._fail(p, gone)
        self._drop_failed()
        resend = [p for p in self._pending if p.state in _RESEND]
        if resend and self.segment is not None:
            log.info("%s/%d: re-sending %d appends to segment %d", self.topic, self.partition,
                     len(resend), self.segment.id)
        for p in resend:
            self._submit(p)

    async def _refresh(self, sealed: SegmentRecord | None) -> SegmentRecord:
        """The partition's current segment (another than ``sealed``), retried with
        backoff while the scale that sealed it completes or the controller is away."""
        error: BaseException = StorageFailure(f"segment {sealed.id if sealed else '-'} stays current")
        for attempt in range(self._logs.refresh_attempts):
            if self.retired:
                raise StorageFailure(f"{self.topic} was deleted")
            try:
                seg = await self._logs.topics.current_segment(self.topic, self.partition)
                if sealed is None or seg.id != sealed.id:
                    return seg
            except Exception as exc:  # controller errors: retry, then give up
                error = exc
            await asyncio.sleep(min(0.01 * 2**attempt, 1.0))
        raise error

    def _leader_moved(self) -> None:
        """Fail every append not yet durable at once, as Kafka answers an in-flight
        produce whose leader moved: the producer refreshes Metadata and sends them to
        the new leader (none of them was written: only a container's owner appends)."""
        moved = LeaderMovedError(f"{self.topic}/{self.partition} is led by another node now")
        log.info("%s/%d: led by another node now; %d appends not made durable here",
                 self.topic, self.partition,
                 sum(p.state in _RESEND or p.state == _State.MOVED for p in self._pending))
        for p in self._pending:
            if p.state in _RESEND or p.state == _State.MOVED:
                self._fail(p, moved)
        self._drop_failed()

    def abandon(self) -> None:
        """Cluster mode: the partition's container was given to another node. The log is
        retired and every append waiting to be (re-)sent fails at once (NOT_LEADER_OR_FOLLOWER:
        the producer sends it to the new leader), never re-sent here: its offsets and
        producer state predate what the new owner may append. Appends in flight settle
        as the container answers them (durable ones are in the log the new owner recovers)."""
        self.retired = True
        moved = LeaderMovedError(f"{self.topic}/{self.partition}: its container moved to another node")
        for p in self._pending:
            if p.state in _RESEND or p.state == _State.MOVED:
                self._fail(p, moved)
        if self._inflight:
            self._start_recovery()  # drops the failed ones once the rest settled
        else:
            self._drop_failed()

    def _drop_failed(self) -> None:
        """Forget failed appends (only while nothing is in flight). Their offsets are
        skipped, not reused: a later append may already be durable."""
        if self._inflight or not any(p.state == _State.FAILED for p in self._pending):
            return
        self._pending = deque(p for p in self._pending if p.state != _State.FAILED)
        self._advance()

    def _advance(self) -> None:
        if self.failed is not None:
            return  # ``_index_writable`` resumes
        moved = False
        while self._pending and self._pending[0].state == _State.DONE:
            p = self._pending[0]
            if not self.retired:
                try:
                    self._index(p)
                except Exception as exc:
                    self._wait_for_index(p, exc)
                    break
            self._pending.popleft()
            self.high_watermark = p.end_offset
            moved = True
            p.settle()
        if moved:
            for callback in self.on_grow:
                callback()

    def _wait_for_index(self, p: PendingAppend, exc: BaseException) -> None:
        """``p`` could not be indexed: it and the appends after it wait (durable, not
        answered) until the index takes writes. The in-memory marker of its segment went
        past it, so it goes: the next one is recomputed from the marker in the index."""
        assert p.segment is not None
        self._logs.forget_marker(self._logs.topics.segment_name(self.topic, p.segment.id))
        hook = self._logs.index_hook
        if hook is not None:  # it applied ``p`` in memory: read again as written
            hook.forget_partition(self.topic, self.partition)
        if not self._index_waiting:
            log.error(
                "%s/%d: the offset index could not be written (%r); appends wait until it "
                "can be, new ones are refused meanwhile", self.topic, self.partition, exc,
            )
        self._index_waiting = True
        self.failed = exc
        self._logs.when_index_writable(self._index_writable)

    def _index_writable(self) -> None:
        if self.retired:
            return
        self.failed = None
        self._advance()
        if self.failed is None:
            self._index_waiting = False
            log.info("%s/%d: the offset index takes writes again; appends resume",
                     self.topic, self.partition)

    def _index(self, p: PendingAppend) -> None:
        assert p.segment is not None
        write = self._logs.index.batch()
        entries = []
        max_ts = self._max_timestamp
        for b in p.batches:
            entry = IndexEntry(
                b.base_offset, b.last_offset, p.segment.id,
                p.position + ENVELOPE_BYTES + b.position, b.size, b.max_timestamp,
            )
            write.entry(self.topic, self.partition, entry)
            entries.append(entry)
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                write.time_entry(self.topic, self.partition, b.max_timestamp, b.base_offset)
        for pid in p.producer_ids:
            self._logs.producers.persist(write, self.topic, self.partition, pid, p.end_offset)
        hook = self._logs.index_hook
        if hook is not None:
            hook.on_indexed(write, self.topic, self.partition, p.batches, p.data[ENVELOPE_BYTES:])
        name = self._logs.topics.segment_name(self.topic, p.segment.id)
        marker = self._logs.mark_indexed(name, p.position, p.position + len(p.data))
        if marker is not None:
            write.marker(name, marker)
        write.commit()
        self._max_timestamp = max_ts
        self.recent.extend(entries)

    # -- fetch -------------------------------------------------------------------------

    def set_log_start(self, offset: int) -> None:
        """Raise the log start offset durably (DeleteRecords, retention)."""
        if offset > self.log_start_offset:
            self._logs.index.set_log_start(self.topic, self.partition, offset)
            self.log_start_stored(offset)

    def log_start_stored(self, offset: int) -> None:
        """Follow a log start already stored in the index (``PartitionLogs.set_log_starts``)."""
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            if self._logs.index_hook is not None:
                self._logs.index_hook.trim(self.topic, self.partition, offset)
            recent = self.recent
            while recent and recent[0].last_offset < offset:  # deleted from the index too
                recent.popleft()

    @property
    def idle(self) -> bool:
        return not self._pending and self._inflight == 0

