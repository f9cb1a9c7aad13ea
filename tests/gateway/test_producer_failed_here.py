"""A batch accepted here whose append then failed (a container failing over, the partition
given away) leaves a sequence gap that is the node's: the producer's next batch is told
to send the failed one first (``failed_here``; Produce answers NOT_LEADER_OR_FOLLOWER),
not OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch and re-sends
batches of unknown fate as new records (issue 36). With every kept batch failed, a later
sequence is no longer taken as the producer's next: it would be stored before the
failed one."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import BatchHeader, iter_batches

from tests.clients.requests import record_batch

PID = 42


def _batch(base_sequence: int, count: int = 1, epoch: int = 0) -> BatchHeader:
    raw = record_batch([b"v"] * count, producer_id=PID, epoch=epoch, base_sequence=base_sequence)
    return replace(next(iter_batches(raw)), base_offset=0)


def _settled(exc: BaseException | None = None) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
        fut.exception()
    return fut


async def test_the_batch_after_one_that_failed_here_is_told_to_send_it_first(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    try:
        states = ProducerStates(index)
        states.record("t", 0, _batch(0, 2), 0, _settled())
        states.record("t", 0, _batch(2, 3), 2, _settled(OSError("log closed")))
        states.record("t", 0, _batch(5, 1), 5, _settled(OSError("log closed")))
        after = _batch(6)
        assert states.check("t", 0, after) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert states.failed_here("t", 0, after)
        assert "failed here from sequence 2" in states.explain("t", 0, after)
        assert states.check("t", 0, _batch(2, 3)) is None  # the failed one, sent again
        states.record("t", 0, _batch(2, 3), 2, _settled())
        # Accepted again: a gap now is the producer's own.
        assert states.check("t", 0, _batch(9)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert not states.failed_here("t", 0, _batch(9))
        assert states.check("t", 0, _batch(5)) is None
        # Another epoch starts afresh.
        assert not states.failed_here("t", 0, _batch(0, epoch=1))
    finally:
        index.close()


async def test_with_every_batch_failed_only_the_first_failed_one_is_taken(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    try:
        states = ProducerStates(index)
        states.record("t", 0, _batch(7, 2), 0, _settled(OSError("log closed")))
        states.record("t", 0, _batch(9, 1), 2, _settled(OSError("log closed")))
        later = _batch(10)
        assert states.check("t", 0, later) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert states.failed_here("t", 0, later)
        assert states.check("t", 0, _batch(7, 2)) is None
    finally:
        index.close()
