"""The transaction coordinator: Kafka's ``TransactionCoordinator`` for every
transactional id of this node (KIP-98, KIP-360 epoch bumps, KIP-447 offsets, KIP-588
PRODUCER_FENCED).

Every state change is written to the coordinator's table segment before it is answered
(one JSON value per transactional id, ``state.TxnMetadata``). Ending a transaction
writes PrepareCommit/PrepareAbort first, then a marker into every partition of the
transaction through the partition's append path, then (on commit) the transaction's
offsets into its groups, then CompleteCommit/CompleteAbort. The Complete* write is
deferred (``complete_write_delay_ms``): the id's next write (the next transaction's
AddPartitionsToTxn) supersedes it, so a producer committing in a loop costs two table
writes per transaction, not three, and its next AddPartitionsToTxn never waits for the
third; a crash or a stop before either leaves Prepare*, which the next start (or
coordinator) completes again (markers written twice are harmless: a marker with no open
transaction changes nothing). EndTxn is answered once the
Prepare* state is durable, as Kafka answers it; a request of the same id that comes
while the markers are still being written waits for them (bounded), and past that bound
gets CONCURRENT_TRANSACTIONS, Kafka's answer. At
start every transaction found in Prepare* is completed before requests are served
(Ongoing ones stay open until they end or time out). Ongoing transactions past their timeout are aborted by the
ticker with the epoch bumped, which fences the producer that let them time out (under
transaction version 2 it may abort in turn and go on with the bumped epoch, as on Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from tidegate.core.segmentstore.api import (
    SegmentExistsError,
    SegmentStore,
    TableRemoval,
    TableUpdate,
)
from tidegate.gateway.txn.state import PendingOffset, TopicPartition, TxnMetadata, TxnState
from tidegate.protocol.errors import ErrorCode as E

log = logging.getLogger(__name__)

TXN_TABLE = "_system/gateway/transactions"
EPOCH_MAX = 32767
_KEY = b"t"


class IdAllocator(Protocol):
    async def allocate(self) -> int: ...


class MarkerWriter(Protocol):
    async def write_markers(
        self, partitions: Iterable[TopicPartition], producer_id: int, producer_epoch: int,
        commit: bool,
    ) -> None:
        """Append a marker to every partition and wait until all are durable; raise if
        any cannot be written (the caller retries the whole set later)."""
        ...


class GroupOffsets(Protocol):
    def check_txn_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int: ...

    async def apply_txn_offsets(self, group_id: str, offsets: dict[TopicPartition, PendingOffset]) -> None: ...


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms
    check_interval_ms: int = 1000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    #: How long EndTxn waits for its markers before answering; 0 answers once the
    #: decision is durable, as Kafka does (the next request of that id waits instead).
    end_wait_ms: int = 0
    #: How long a request waits for its id's previous transaction to complete before it
    #: is answered CONCURRENT_TRANSACTIONS (Kafka answers at once; clients retry).
    completion_wait_ms: int = 10_000
    #: How long the Complete* state may wait in memory for the id's next write, which
    #: supersedes it, before it is written on its own.
    complete_write_delay_ms: int = 100
    #: Kafka's ``transactional.id.expiration.ms``: an id with no transaction open that
    #: has not been used for this long is forgotten (its state and producer id).
    id_expiration_ms: int = 7 * 24 * 3600 * 1000


class TransactionCoordinator:
    #: False for the cluster-mode stand-in on a node that does not coordinate (``standby``).
    coordinating = True

    def __init__(
        self,
        store: SegmentStore,
        ids: IdAllocator,
        markers: MarkerWriter,
        groups: GroupOffsets,
        clock_ms: Callable[[], int],
        config: TxnConfig | None = None,
    ) -> None:
        self._store = store
        self._ids = ids
        self._markers = markers
        self._groups = groups
        self._clock_ms = clock_ms
        self.config = config or TxnConfig()
        self._txns: dict[str, TxnMetadata] = {}
        #: producer id → its transactional id's state (the produce-path check).
        self._by_pid: dict[int, TxnMetadata] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._completing: dict[str, asyncio.Task[None]] = {}
        #: Ids whose Complete* state is in memory only (the table still says Prepare*),
        #: with the task that writes it unless another write of the id comes first.
        self._unwritten: dict[str, asyncio.Task[None]] = {}
        self._ticker: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, *, ticker: bool = True) -> None:
        """Load every transactional id and finish what a crash left in doubt."""
        with contextlib.suppress(SegmentExistsError):
            await self._store.create_table(TXN_TABLE)
        for entry in await self._store.table_entries(TXN_TABLE, _KEY):
            tid = entry.key[len(_KEY) :].decode()
            meta = self._txns[tid] = TxnMetadata.decode(tid, entry.value)
            self._by_pid[meta.producer_id] = meta
        # Ongoing ones stay open, as Kafka keeps them across a coordinator move: their
        # producer may go on, and the timeout aborts them if it does not.
        doubtful = [m for m in self._txns.values() if m.state.preparing]
        for meta in doubtful:
            try:
                await self._complete(meta)
            except Exception as exc:  # the ticker retries from Prepare*
                log.warning("completing transaction %r at start failed: %r", meta.transactional_id, exc)
        if doubtful:
            log.info("transactions: %d in doubt after restart completed", len(doubtful))
        if ticker:
            self._ticker = asyncio.create_task(self._tick(), name="txn-coordinator-ticker")

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for task in list(self._completing.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Not written from a closing coordinator (in a cluster, the table's container may
        # be another node's by now): the next one finds Prepare* and completes it again.
        for task in list(self._unwritten.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._unwritten.clear()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.config.check_interval_ms / 1000)
            try:
                await self.maintain()
            except Exception:  # a bug here must not stop every timeout for good
                log.exception("transaction coordinator maintenance failed")

    async def maintain(self) -> None:
        """Abort Ongoing transactions past their timeout; retry stuck completions."""
        now = self._clock_ms()
        for meta in list(self._txns.values()):
            tid = meta.transactional_id
            if meta.state == TxnState.ONGOING and now - meta.start_ms > meta.timeout_ms:
                async with self._lock(tid):
                    if meta.state != TxnState.ONGOING or self._clock_ms() - meta.start_ms <= meta.timeout_ms:
                        continue
                    log.info("transaction %r timed out after %d ms: aborting", tid, meta.timeout_ms)
                    await self._begin_end(meta, commit=False, bump=True)
                self._spawn_completion(meta)
            elif meta.state.preparing and tid not in self._completing:
                self._spawn_completion(meta)
            elif (meta.state.complete or meta.state == TxnState.EMPTY) and (
                now - meta.updated_ms > self.config.id_expiration_ms
            ):
                await self._expire(meta)

    async def _expire(self, meta: TxnMetadata) -> None:
        tid = meta.transactional_id
        async with self._lock(tid):
            if self._txns.get(tid) is not meta or not (
                meta.state.complete or meta.state == TxnState.EMPTY
            ):
                return
            await self._store.table_remove(TXN_TABLE, [TableRemoval(_KEY + tid.encode())])
            self._superseded(tid)
            del self._txns[tid]
            if self._by_pid.get(meta.producer_id) is meta:
                del self._by_pid[meta.producer_id]
        self._locks.pop(tid, None)
        log.info("transactional id %r expired", tid)

    def _lock(self, tid: str) -> asyncio.Lock:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = asyncio.Lock()
        return lock

    async def _persist(self, meta: TxnMetadata, before: TxnMetadata) -> None:
        """Write ``meta`` (changed in memory from ``before``); if the write fails, the
        change is undone in memory too, so memory never runs ahead of the table (a
        partition remembered as added but not durably so would get no marker)."""
        meta.updated_ms = self._clock_ms()
        key = _KEY + meta.transactional_id.encode()
        try:
            await self._store.table_put(TXN_TABLE, [TableUpdate(key, meta.encode())])
        except BaseException:
            meta.__dict__.update(copy.deepcopy(before).__dict__)
            raise
        self._superseded(meta.transactional_id)

    def _superseded(self, tid: str) -> None:
        """The id's latest state is in the table: a deferred Complete* write is moot."""
        task = self._unwritten.pop(tid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _write_complete_later(self, meta: TxnMetadata) -> None:
        await asyncio.sleep(self.config.complete_write_delay_ms / 1000)
        async with self._lock(meta.transactional_id):
            if self._unwritten.get(meta.transactional_id) is asyncio.current_task():
                await self._write_complete(meta)

    async def _write_complete(self, meta: TxnMetadata) -> None:
        """Write the Complete* state held in memory (under the id's lock). On failure
        the table keeps Prepare*, which a start completes again: nothing is undone."""
        try:
            await self._persist(meta, copy.deepcopy(meta))
        except Exception as exc:
            self._unwritten.pop(meta.transactional_id, None)
            log.warning("writing the completion of transaction %r failed (completed again "
                        "at the next start): %r", meta.transactional_id, exc)

    # -- InitProducerId --------------------------------------------------------------------

    async def init_producer_id(
        self, tid: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> tuple[int, int, int]:
        """``(error, producer id, epoch)``; PRODUCER_FENCED is left to the handler to
        translate for old request versions."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return E.INVALID_TRANSACTION_TIMEOUT, -1, -1
        await self._completed(tid)
        async with self._lock(tid):
            meta = self._txns.get(tid)
            if meta is None:
                meta = TxnMetadata(tid, await self._ids.allocate(), -1, timeout_ms)
            before = copy.deepcopy(meta)
            if expected_pid >= 0 and not (
                (expected_pid, expected_epoch) == (meta.producer_id, meta.producer_epoch)
                or (expected_pid, expected_epoch) == (meta.last_producer_id, meta.last_producer_epoch)
            ):
                return E.PRODUCER_FENCED, -1, -1
            if meta.state.preparing:
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            if meta.state == TxnState.ONGOING:
                # A new incarnation: fence the old one (epoch bump) and abort its work.
                await self._begin_end(meta, commit=False, bump=True)
                self._spawn_completion(meta)
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            if expected_pid >= 0 and (expected_pid, expected_epoch) == (
                meta.last_producer_id, meta.last_producer_epoch
            ) and meta.producer_epoch >= 0:
                return E.NONE, meta.producer_id, meta.producer_epoch  # a retried bump
            meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
            if meta.producer_epoch + 1 > EPOCH_MAX:
                meta.producer_id, meta.producer_epoch = await self._ids.allocate(), 0
            else:
                meta.producer_epoch += 1
            meta.timeout_ms = timeout_ms
            meta.state = TxnState.EMPTY
            meta.tv2, meta.next_producer_id = False, -1
            meta.partitions.clear()
            meta.offsets.clear()
            meta.groups.clear()
            meta.start_ms = -1
            await self._persist(meta, before)
            self._txns[tid] = meta
            self._by_pid[meta.producer_id] = meta
            return E.NONE, meta.producer_id, meta.producer_epoch

    # -- within a transaction --------------------------------------------------------------

    def _check(self, tid: str, pid: int, epoch: int) -> tuple[int, TxnMetadata | None]:
        meta = self._txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != meta.producer_epoch:
            return E.PRODUCER_FENCED, None
        if meta.state.preparing:
            return E.CONCURRENT_TRANSACTIONS, None
        return E.NONE, meta

    def _begin(self, meta: TxnMetadata, *, tv2: bool) -> None:
        """Begin a transaction unless one is open; ``tv2``: begun by a request of
        transaction version 2 (Kafka's ``clientTransactionVersion``), whose end by the
        coordinator (a timeout) the producer may answer as a retry of a bumped end."""
        if meta.state != TxnState.ONGOING:
            meta.state = TxnState.ONGOING
            meta.tv2 = tv2
            meta.start_ms = self._clock_ms()
            meta.partitions.clear()
            meta.offsets.clear()
            meta.groups.clear()

    async def add_partitions(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition],
        *, tv2: bool = False,
    ) -> int:
        """``tv2``: the add of a Produce v12 batch (transaction version 2), not a
        client's AddPartitionsToTxn."""
        await self._completed(tid)
        async with self._lock(tid):
            error, meta = self._check(tid, pid, epoch)
            if meta is None:
                return error
            wanted = set(partitions)
            if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
                return E.NONE
            before = copy.deepcopy(meta)
            self._begin(meta, tv2=tv2)
            meta.partitions |= wanted
            await self._persist(meta, before)
            return E.NONE

    def verify_partitions(
        self, tid: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ ``verify_only``: is each partition in the open
        transaction?"""
        error, meta = self._check(tid, pid, epoch)
        out = {}
        for tp in partitions:
            if meta is None:
                out[tp] = error
            elif meta.state == TxnState.ONGOING and tp in meta.partitions:
                out[tp] = E.NONE
            else:
                out[tp] = E.INVALID_TXN_STATE
        return out

    def verify_produce(self, topic: str, partition: int, producer_id: int, epoch: int) -> int:
        """The produce path's check of a transactional batch (synchronous, in the step
        that assigns its offsets): its producer's transaction must be open and hold the
        partition. A batch outside any transaction would open one in the partition that
        no marker ever closes, holding its last stable offset back for good; one of a
        fenced epoch is a zombie's."""
        meta = self._by_pid.get(producer_id)
        if meta is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        if producer_id != meta.producer_id or epoch != meta.producer_epoch:  # rotated or bumped
            return E.INVALID_PRODUCER_EPOCH
        if meta.state != TxnState.ONGOING or (topic, partition) not in meta.partitions:
            return E.INVALID_TXN_STATE
        return E.NONE

    def holds(self, producer_id: int, tp: TopicPartition) -> bool:
        """Whether ``producer_id``'s open transaction holds ``tp`` (WriteTxnMarkers)."""
        meta = self._by_pid.get(producer_id)
        return (
            meta is not None and meta.producer_id == producer_id
            and meta.state != TxnState.EMPTY and not meta.state.complete
            and tp in meta.partitions
        )

    async def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str) -> int:
        await self._completed(tid)
        async with self._lock(tid):
            error, meta = self._check(tid, pid, epoch)
            if meta is None:
                return error
            if meta.state == TxnState.ONGOING and group_id in meta.groups:
                return E.NONE
            before = copy.deepcopy(meta)
            self._begin(meta, tv2=False)
            meta.groups.add(group_id)
            await self._persist(meta, before)
            return E.NONE

    async def txn_offset_commit(
        self, tid: str, pid: int, epoch: int, group_id: str, generation_id: int,
        member_id: str, group_instance_id: str | None,
        offsets: dict[TopicPartition, PendingOffset], *, implicit: bool = False,
    ) -> int:
        """``implicit``: TxnOffsetCommit v5 (transaction version 2) adds the group to the
        transaction, beginning it if need be, without AddOffsetsToTxn."""
        if implicit:
            await self._completed(tid)
        async with self._lock(tid):
            error, meta = self._check(tid, pid, epoch)
            if meta is None:
                return error
            if not implicit and (meta.state != TxnState.ONGOING or group_id not in meta.groups):
                return E.INVALID_TXN_STATE  # AddOffsetsToTxn comes first
            error = self._groups.check_txn_commit(group_id, generation_id, member_id, group_instance_id)
            if error != E.NONE:
                return error
            before = copy.deepcopy(meta)
            self._begin(meta, tv2=implicit)  # TV2: the commit adds its group itself (KIP-890)
            meta.groups.add(group_id)
            meta.offsets.setdefault(group_id, {}).update(offsets)
            await self._persist(meta, before)
            return E.NONE

    # -- ending ----------------------------------------------------------------------------

    async def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> int:
        """EndTxn of transaction version 1: the error only."""
        return (await self.end_transaction(tid, pid, epoch, commit))[0]

    async def end_transaction(
        self, tid: str, pid: int, epoch: int, commit: bool, *, tv2: bool = False
    ) -> tuple[int, int, int]:
        """``(error, producer id, epoch)`` the producer goes on with. With transaction
        version 2 (EndTxn v5, KIP-890) every commit or abort bumps the epoch (a new
        producer id once it is exhausted) and the markers carry the bumped one, so a
        batch of the ended transaction arriving late is of a fenced epoch."""
        await self._completed(tid)  # a retried EndTxn finds its transaction complete
        async with self._lock(tid):
            meta = self._txns.get(tid)
            if meta is None:
                return E.INVALID_PRODUCER_ID_MAPPING, -1, -1
            # A TV2 retry comes with the epoch before the bump (Kafka's endTxnEpochBumped)
            # or, past an exhausted epoch, with the producer id before the rotation. The
            # bump may be the coordinator's own (a timeout): the producer's abort is then
            # taken as a retry and goes on with the bumped epoch, as on Kafka.
            retry_bump = meta.tv2 and pid == meta.producer_id and meta.producer_epoch == epoch + 1
            retry_rotation = (
                meta.tv2 and meta.state.complete and pid == meta.last_producer_id
                and pid != meta.producer_id and epoch + 1 >= EPOCH_MAX and meta.producer_epoch == 0
            )
            if meta.producer_id != pid and not retry_rotation:
                return E.INVALID_PRODUCER_ID_MAPPING, -1, -1
            if meta.tv2 and (meta.state.preparing or meta.state.complete):
                valid = retry_bump or retry_rotation
            else:
                valid = epoch == meta.producer_epoch
            if not valid:
                return E.PRODUCER_FENCED, -1, -1
            wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if meta.state == done:
                return E.NONE, meta.producer_id, meta.producer_epoch  # a retry of the EndTxn that completed it
            if commit and meta.state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT) and (
                retry_bump or retry_rotation
            ):
                # A commit of a transaction the coordinator aborted (a timeout): fenced,
                # not INVALID_TXN_STATE (Kafka's KAFKA-20785), as under version 1.
                return E.PRODUCER_FENCED, -1, -1
            if meta.state == wanted:
                return E.CONCURRENT_TRANSACTIONS, -1, -1
            if meta.state != TxnState.ONGOING:
                return E.INVALID_TXN_STATE, -1, -1
            await self._begin_end(meta, commit=commit, bump=False, tv2=tv2)
            task = self._spawn_completion(meta)
            if meta.next_producer_id >= 0:
                answer = E.NONE, meta.next_producer_id, 0
            else:
                answer = E.NONE, meta.producer_id, meta.producer_epoch
        if self.config.end_wait_ms > 0:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), self.config.end_wait_ms / 1000)
        return answer  # the decision is durable; the markers follow

    async def _completed(self, tid: str) -> None:
        """Wait (bounded) for the completion of ``tid``'s previous transaction, so that a
        producer that begins the next one right after EndTxn is not turned away."""
        task = self._completing.get(tid)
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), self.config.completion_wait_ms / 1000)

    async def _begin_end(
        self, meta: TxnMetadata, *, commit: bool, bump: bool, tv2: bool = False
    ) -> None:
        """Ongoing → Prepare*, durably (with the epoch bumped when fencing, or at every
        end of a TV2 transaction)."""
        before = copy.deepcopy(meta)
        if bump:
            if meta.producer_epoch + 1 > EPOCH_MAX:
                # Kafka aborts with the last epoch here; the next InitProducerId rotates the id.
                pass
            else:
                meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
                meta.producer_epoch += 1
            if meta.tv2 and meta.producer_epoch >= EPOCH_MAX and meta.next_producer_id < 0:
                # Version 2 fenced into the last epoch: Complete* takes a new producer id,
                # which the producer's abort then gets (Kafka's KAFKA-20090).
                meta.next_producer_id = await self._ids.allocate()
        elif tv2:
            meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
            if meta.producer_epoch + 1 >= EPOCH_MAX:  # exhausted: Complete* takes a new id
                meta.next_producer_id = await self._ids.allocate()
            meta.producer_epoch = min(meta.producer_epoch + 1, EPOCH_MAX)
        if not bump:
            meta.tv2 = tv2
        # A fencing bump keeps the transaction's version: under version 2 the producer's
        # EndTxn with the epoch before it is a retry (Kafka's endTxnEpochBumped looks at
        # the transaction's client version); under version 1 it is PRODUCER_FENCED.
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if not commit:
            meta.offsets.clear()
        await self._persist(meta, before)

    def _spawn_completion(self, meta: TxnMetadata) -> asyncio.Task[None]:
        tid = meta.transactional_id
        task = self._completing.get(tid)
        if task is None or task.done():
            task = asyncio.create_task(self._complete(meta), name=f"txn-complete:{tid}")
            self._completing[tid] = task
            task.add_done_callback(functools.partial(self._done_completing, tid))
        return task

    def _done_completing(self, tid: str, task: asyncio.Task[None]) -> None:
        if self._completing.get(tid) is task:
            del self._completing[tid]
        if not task.cancelled() and task.exception() is not None:
            log.warning("completing transaction %r failed (retried): %r", tid, task.exception())

    async def _complete(self, meta: TxnMetadata) -> None:
        """Prepare* → markers → offsets (commit) → Complete*. Raises on a store error;
        the ticker retries from Prepare*."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        await self._markers.write_markers(
            sorted(meta.partitions), meta.producer_id, meta.producer_epoch, commit
        )
        if commit:
            for group_id, offsets in meta.offsets.items():
                await self._groups.apply_txn_offsets(group_id, offsets)
        tid = meta.transactional_id
        async with self._lock(tid):
            # Durably done (markers and offsets); the table learns it from the id's next
            # write or from the deferred one, whichever comes first.
            if meta.next_producer_id >= 0:
                # TV2 past an exhausted epoch (the markers carried the last one): the new
                # producer id is written at once, not deferred.
                before = copy.deepcopy(meta)
                meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                meta.last_producer_id, meta.last_producer_epoch = meta.producer_id, meta.producer_epoch
                meta.producer_id, meta.producer_epoch = meta.next_producer_id, 0
                meta.next_producer_id = -1
                await self._persist(meta, before)
                self._by_pid[meta.producer_id] = meta
                return
            meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            meta.updated_ms = self._clock_ms()
            self._superseded(tid)
            self._unwritten[tid] = asyncio.create_task(
                self._write_complete_later(meta), name=f"txn-complete-write:{tid}"
            )

    # -- views -----------------------------------------------------------------------------

    def describe(self, tid: str) -> TxnMetadata | None:
        meta = self._txns.get(tid)
        return meta if meta is not None and meta.producer_epoch >= 0 else None

    def transactions(self) -> list[TxnMetadata]:
        return [m for m in self._txns.values() if m.producer_epoch >= 0]

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with offsets in a transaction not yet complete
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them)."""
        out: set[TopicPartition] = set()
        for meta in self._txns.values():
            if not meta.state.complete and group_id in meta.offsets:
                out |= set(meta.offsets[group_id])
        return out
