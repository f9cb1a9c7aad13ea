"""The transaction coordinator's state machine over the in-memory segment store, with a
clock the test moves and markers recorded instead of appended (the client tests append
real ones): epochs and fencing, KIP-360, timeouts, EndTxn retries, KIP-447 checks, and
recovery of an in-doubt transaction by a new coordinator on the same table."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable

import pytest
from tidegate.core.segmentstore.inmemory import InMemorySegmentStore
from tidegate.gateway.txn.coordinator import TransactionCoordinator, TxnConfig
from tidegate.gateway.txn.state import PendingOffset, TopicPartition, TxnMetadata, TxnState
from tidegate.protocol.errors import ErrorCode as E


class Ids:
    def __init__(self) -> None:
        self._next = itertools.count(100)

    async def allocate(self) -> int:
        return next(self._next)


class Markers:
    def __init__(self) -> None:
        self.written: list[tuple[list[TopicPartition], int, int, bool]] = []
        self.fail = False

    async def write_markers(
        self, partitions: Iterable[TopicPartition], producer_id: int, producer_epoch: int,
        commit: bool,
    ) -> None:
        if self.fail:
            raise OSError("store down")
        self.written.append((list(partitions), producer_id, producer_epoch, commit))


class Groups:
    def __init__(self) -> None:
        self.generation = 3
        self.applied: dict[str, dict[TopicPartition, PendingOffset]] = {}

    def check_txn_commit(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None) -> int:
        if generation_id >= 0 and generation_id != self.generation:
            return E.ILLEGAL_GENERATION
        return E.NONE

    async def apply_txn_offsets(self, group_id: str, offsets: dict[TopicPartition, PendingOffset]) -> None:
        self.applied.setdefault(group_id, {}).update(offsets)


class Clock:
    now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def make(store: InMemorySegmentStore, markers: Markers, groups: Groups, clock: Clock) -> TransactionCoordinator:
    return TransactionCoordinator(store, Ids(), markers, groups, clock, TxnConfig(max_timeout_ms=60_000))


@pytest.fixture
def parts() -> tuple[InMemorySegmentStore, Markers, Groups, Clock]:
    return InMemorySegmentStore(), Markers(), Groups(), Clock()


async def test_timeouts_epochs_and_fencing(parts) -> None:
    coord = make(*parts)
    await coord.start(ticker=False)
    assert (await coord.init_producer_id("a", 60_001))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert (await coord.init_producer_id("a", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert await coord.init_producer_id("a", 1000) == (E.NONE, 100, 0)
    assert await coord.init_producer_id("a", 1000) == (E.NONE, 100, 1)
    # The older incarnation is fenced everywhere.
    assert await coord.add_partitions("a", 100, 0, [("t", 0)]) == E.PRODUCER_FENCED
    assert await coord.end_txn("a", 100, 0, True) == E.PRODUCER_FENCED
    assert await coord.add_partitions("a", 999, 1, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    # KIP-360: a bump from the current epoch, a retry of it, and a stale one.
    assert await coord.init_producer_id("a", 1000, 100, 1) == (E.NONE, 100, 2)
    assert await coord.init_producer_id("a", 1000, 100, 1) == (E.NONE, 100, 2)
    assert (await coord.init_producer_id("a", 1000, 100, 0))[0] == E.PRODUCER_FENCED
    await coord.close()


async def test_new_incarnation_aborts_the_ongoing_transaction(parts) -> None:
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    assert await coord.add_partitions("a", 100, 0, [("t", 0), ("t", 1)]) == E.NONE
    assert (await coord.init_producer_id("a", 1000))[0] == E.CONCURRENT_TRANSACTIONS
    await coord.maintain()  # let the abort finish
    for _ in range(10):
        if coord.describe("a").state == TxnState.COMPLETE_ABORT:
            break
        await coord.maintain()
        await asyncio.sleep(0)
    assert markers.written == [([("t", 0), ("t", 1)], 100, 1, False)]
    assert await coord.init_producer_id("a", 1000) == (E.NONE, 100, 2)
    await coord.close()


async def test_end_txn_rules(parts) -> None:
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    assert await coord.end_txn("a", 100, 0, True) == E.INVALID_TXN_STATE  # nothing begun
    await coord.add_partitions("a", 100, 0, [("t", 0)])
    assert (await coord.end_transaction("a", 100, 0, True))[0] == E.NONE
    assert coord.describe("a").state == TxnState.PREPARE_COMMIT  # answered once durable
    assert (await coord.end_transaction("a", 100, 0, True))[0] == E.NONE  # a retry waits for the markers
    assert coord.describe("a").state == TxnState.COMPLETE_COMMIT
    assert await coord.end_txn("a", 100, 0, False) == E.INVALID_TXN_STATE
    assert markers.written == [([("t", 0)], 100, 0, True)]
    await coord.close()


async def test_txn_offsets_applied_on_commit_only(parts) -> None:
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    offsets = {("in", 0): PendingOffset(7, -1, "")}
    assert await coord.txn_offset_commit("a", 100, 0, "g", 3, "m", None, offsets) == E.INVALID_TXN_STATE
    assert await coord.add_offsets("a", 100, 0, "g") == E.NONE
    assert await coord.txn_offset_commit("a", 100, 0, "g", 2, "m", None, offsets) == E.ILLEGAL_GENERATION
    assert await coord.txn_offset_commit("a", 100, 0, "g", 3, "m", None, offsets) == E.NONE
    assert coord.pending_offsets("g") == {("in", 0)}
    assert await coord.end_txn("a", 100, 0, False) == E.NONE
    assert groups.applied == {}
    await coord.add_offsets("a", 100, 0, "g")
    await coord.txn_offset_commit("a", 100, 0, "g", 3, "m", None, offsets)
    assert (await coord.end_transaction("a", 100, 0, True))[0] == E.NONE
    assert coord.pending_offsets("g") == {("in", 0)}  # until the markers are written
    await coord.add_offsets("a", 100, 0, "g")  # the next transaction waits for them
    assert groups.applied == {"g": offsets}
    assert coord.pending_offsets("g") == set()
    await coord.close()


async def test_timed_out_transaction_is_aborted_with_the_epoch_bumped(parts) -> None:
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    await coord.add_partitions("a", 100, 0, [("t", 0)])
    clock.now_ms += 999
    await coord.maintain()
    assert coord.describe("a").state == TxnState.ONGOING
    clock.now_ms += 2
    await coord.maintain()
    for _ in range(10):
        await asyncio.sleep(0)
    assert coord.describe("a").state == TxnState.COMPLETE_ABORT
    assert markers.written == [([("t", 0)], 100, 1, False)]
    assert await coord.end_txn("a", 100, 0, True) == E.PRODUCER_FENCED
    assert await coord.end_txn("a", 100, 0, False) == E.PRODUCER_FENCED  # version 1: fenced
    await coord.close()


async def test_tv2_producer_aborts_after_a_timeout_and_goes_on(parts) -> None:
    """Transaction version 2 (begun by Produce v12): after the timeout's abort (epoch
    bumped once), the producer's EndTxn abort with its old epoch is a retry of the bumped
    end (Kafka's ``endTxnEpochBumped``) answered with the new epoch; a commit is fenced
    (Kafka's KAFKA-20785, not INVALID_TXN_STATE); the next transaction commits."""
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    _, pid, epoch = await coord.init_producer_id("a", 1000)
    assert await coord.add_partitions("a", pid, epoch, [("t", 0)], tv2=True) == E.NONE
    clock.now_ms += 1001
    await coord.maintain()
    await coord._completed("a")
    assert coord.describe("a").state == TxnState.COMPLETE_ABORT
    assert markers.written == [([("t", 0)], pid, epoch + 1, False)]
    assert await coord.add_partitions("a", pid, epoch, [("t", 0)], tv2=True) == E.PRODUCER_FENCED
    assert await coord.end_transaction("a", pid, epoch, True, tv2=True) == (E.PRODUCER_FENCED, -1, -1)
    assert await coord.end_transaction("a", pid, epoch, False, tv2=True) == (E.NONE, pid, epoch + 1)
    assert await coord.add_partitions("a", pid, epoch + 1, [("t", 0)], tv2=True) == E.NONE
    assert await coord.end_transaction("a", pid, epoch + 1, True, tv2=True) == (E.NONE, pid, epoch + 2)
    await coord.close()


async def test_tv2_timeout_into_the_last_epoch_rotates_the_producer_id(parts) -> None:
    """A version 2 transaction timing out at epoch 32766: the fence takes it to 32767 for
    the markers and its completion to a new producer id (Kafka's KAFKA-20090), which the
    producer's abort with the old id and epoch is answered with."""
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    _, pid, _ = await coord.init_producer_id("a", 1000)
    meta = coord.describe("a")
    assert meta is not None
    meta.producer_epoch = 32766
    assert await coord.add_partitions("a", pid, 32766, [("t", 0)], tv2=True) == E.NONE
    clock.now_ms += 1001
    await coord.maintain()
    await coord._completed("a")
    assert markers.written[-1] == ([("t", 0)], pid, 32767, False)
    error, new_pid, new_epoch = await coord.end_transaction("a", pid, 32766, False, tv2=True)
    assert (error, new_epoch) == (E.NONE, 0) and new_pid != pid
    assert coord.verify_produce("t", 0, pid, 32767) == E.INVALID_PRODUCER_EPOCH
    assert await coord.add_partitions("a", new_pid, 0, [("t", 0)], tv2=True) == E.NONE
    assert await coord.end_transaction("a", new_pid, 0, True, tv2=True) == (E.NONE, new_pid, 1)
    await coord.close()


async def test_in_doubt_commit_is_completed_by_the_next_coordinator(parts) -> None:
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    await coord.add_partitions("a", 100, 0, [("t", 0)])
    await coord.add_offsets("a", 100, 0, "g")
    offsets = {("in", 0): PendingOffset(9, -1, "m")}
    await coord.txn_offset_commit("a", 100, 0, "g", -1, "", None, offsets)
    markers.fail = True  # the markers cannot be written: the "crash" leaves PrepareCommit
    coord.config = TxnConfig(max_timeout_ms=60_000, end_wait_ms=50)
    assert (await coord.end_transaction("a", 100, 0, True))[0] == E.NONE  # the decision is durable
    assert coord.describe("a").state == TxnState.PREPARE_COMMIT
    await coord.close()
    markers2, groups2 = Markers(), Groups()
    coord2 = make(store, markers2, groups2, clock)
    await coord2.start(ticker=False)
    assert coord2.describe("a").state == TxnState.COMPLETE_COMMIT
    assert markers2.written == [([("t", 0)], 100, 0, True)]
    assert groups2.applied == {"g": offsets}
    assert await coord2.init_producer_id("a", 1000) == (E.NONE, 100, 1)
    await coord2.close()


class FailingStore(InMemorySegmentStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    async def table_put(self, name, updates):  # type: ignore[no-untyped-def]
        if self.fail:
            raise OSError("table segment unavailable")
        return await super().table_put(name, updates)


async def test_a_failed_write_leaves_memory_as_the_table_has_it() -> None:
    store, markers, groups, clock = FailingStore(), Markers(), Groups(), Clock()
    coord = make(store, markers, groups, clock)
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    store.fail = True
    with pytest.raises(OSError):
        await coord.add_partitions("a", 100, 0, [("t", 0)])
    assert coord.describe("a").state == TxnState.EMPTY and not coord.describe("a").partitions
    assert coord.verify_produce("t", 0, 100, 0) == E.INVALID_TXN_STATE
    store.fail = False
    assert await coord.add_partitions("a", 100, 0, [("t", 0)]) == E.NONE  # written this time
    reloaded = make(store, Markers(), Groups(), clock)
    await reloaded.start(ticker=False)
    assert reloaded.describe("a").partitions == {("t", 0)}
    await reloaded.close()
    await coord.close()


async def test_unused_ids_expire(parts) -> None:
    store, markers, groups, clock = parts
    coord = TransactionCoordinator(store, Ids(), markers, groups, clock,
                                   TxnConfig(max_timeout_ms=60_000, id_expiration_ms=10_000))
    await coord.start(ticker=False)
    await coord.init_producer_id("old", 1000)
    await coord.init_producer_id("busy", 1000)
    await coord.add_partitions("busy", 101, 0, [("t", 0)])
    clock.now_ms += 5_000
    await coord.init_producer_id("new", 1000)
    clock.now_ms += 6_000
    await coord.maintain()
    assert coord.describe("old") is None and coord.describe("new") is not None
    assert coord.describe("busy") is not None  # timed out and aborted, not expired yet
    await coord.close()


async def test_tv2_epoch_bumps_and_rotation(parts) -> None:
    """Transaction version 2: every end bumps the epoch, the markers carry the bumped one,
    a retry with the epoch before the bump gets the same answer; an exhausted epoch takes
    a new producer id once the markers are written (Kafka's ``prepareComplete``)."""
    store, markers, groups, clock = parts
    coord = make(*parts)
    await coord.start(ticker=False)
    _, pid, epoch = await coord.init_producer_id("a", 60_000)
    assert await coord.add_partitions("a", pid, epoch, [("t", 0)]) == E.NONE
    assert await coord.end_transaction("a", pid, epoch, True, tv2=True) == (E.NONE, pid, epoch + 1)
    await coord._completed("a")
    assert markers.written[-1] == ([("t", 0)], pid, epoch + 1, True)
    assert await coord.end_transaction("a", pid, epoch, True, tv2=True) == (E.NONE, pid, epoch + 1)
    assert (await coord.end_transaction("a", pid, epoch, False, tv2=True))[0] == E.INVALID_TXN_STATE
    assert coord.verify_produce("t", 0, pid, epoch) == E.INVALID_PRODUCER_EPOCH
    # The transaction's state survives a new coordinator on the same table.
    coord2 = TransactionCoordinator(store, coord._ids, markers, groups, clock, TxnConfig(max_timeout_ms=60_000))
    await coord2.start(ticker=False)
    assert await coord2.end_transaction("a", pid, epoch, True, tv2=True) == (E.NONE, pid, epoch + 1)

    # Near the end of the epochs: 32766 is exhausted, so the end rotates the producer id.
    meta = coord2.describe("a")
    assert meta is not None
    meta.producer_epoch = 32766
    assert await coord2.add_partitions("a", pid, 32766, [("t", 0)]) == E.NONE
    error, new_pid, new_epoch = await coord2.end_transaction("a", pid, 32766, False, tv2=True)
    assert (error, new_epoch) == (E.NONE, 0) and new_pid != pid
    await coord2._completed("a")
    assert markers.written[-1] == ([("t", 0)], pid, 32767, False)
    assert await coord2.end_transaction("a", pid, 32766, False, tv2=True) == (E.NONE, new_pid, 0)
    assert await coord2.add_partitions("a", new_pid, 0, [("t", 0)]) == E.NONE
    assert coord2.verify_produce("t", 0, new_pid, 0) == E.NONE
    assert coord2.verify_produce("t", 0, pid, 32767) == E.INVALID_PRODUCER_EPOCH
    assert await coord2.end_transaction("a", new_pid, 0, True, tv2=True) == (E.NONE, new_pid, 1)
    # Version 1 keeps the epoch.
    await coord2._completed("a")
    assert await coord2.add_partitions("a", new_pid, 1, [("t", 0)]) == E.NONE
    assert await coord2.end_transaction("a", new_pid, 1, True) == (E.NONE, new_pid, 1)
    await coord2.close()
    await coord.close()


class CountingStore(InMemorySegmentStore):
    """Records the state each table write carries."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[str] = []

    async def table_put(self, name, updates):  # type: ignore[no-untyped-def]
        self.states += [TxnMetadata.decode("-", u.value).state.name for u in updates]
        return await super().table_put(name, updates)


async def test_next_transaction_supersedes_the_complete_write(parts) -> None:
    """A producer committing in a loop: each transaction costs two table writes (Ongoing,
    Prepare*), not three; Complete* reaches the table on its own only once the id is idle,
    and a crash before it leaves Prepare*, which the next start completes again."""
    _, markers, groups, clock = parts
    store = CountingStore()
    coord = TransactionCoordinator(store, Ids(), markers, groups, clock,
                                   TxnConfig(max_timeout_ms=60_000, complete_write_delay_ms=200))
    await coord.start(ticker=False)
    await coord.init_producer_id("a", 1000)
    store.states.clear()
    for _ in range(3):
        assert await coord.add_partitions("a", 100, 0, [("t", 0)]) == E.NONE
        assert (await coord.end_transaction("a", 100, 0, True))[0] == E.NONE
    assert store.states == ["ONGOING", "PREPARE_COMMIT"] * 3
    assert coord.verify_produce("t", 0, 100, 0) == E.INVALID_TXN_STATE  # not begun yet
    # A "crash" now: the table still says PrepareCommit; a start completes it again.
    again = make(store, Markers(), Groups(), clock)
    await again.start(ticker=False)
    assert again.describe("a").state == TxnState.COMPLETE_COMMIT
    await again.close()  # a closing coordinator leaves it to the next one
    assert store.states[-1] == "PREPARE_COMMIT"
    # Idle: the deferred write lands by itself.
    store.states.clear()
    async with asyncio.timeout(30):
        while store.states != ["COMPLETE_COMMIT"]:
            await asyncio.sleep(0.01)
    assert coord.describe("a").state == TxnState.COMPLETE_COMMIT
    await coord.close()
    assert store.states == ["COMPLETE_COMMIT"]
    reloaded = make(store, Markers(), Groups(), clock)
    await reloaded.start(ticker=False)
    assert reloaded.describe("a").state == TxnState.COMPLETE_COMMIT
    await reloaded.close()
