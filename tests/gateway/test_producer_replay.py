"""The index rebuild's producer state follows the log: a stored batch whose sequence does
not follow what the node held of its producer advances the state all the same, as Kafka's
log recovery does. Refusing it kept a node's state behind for good (every later batch was
refused too), and once the node led the partition the producer's next batch got
OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to librdkafka (fault campaigns, issue 36)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tidegate.gateway.log.offset_index import OffsetIndex
from tidegate.gateway.log.producer_state import ProducerStates
from tidegate.protocol.errors import ErrorCode
from tidegate.protocol.record_batch import BatchHeader, iter_batches

from tests.clients.requests import record_batch

PID = 42


def _batch(base_sequence: int, count: int, base_offset: int) -> BatchHeader:
    raw = record_batch([b"v"] * count, producer_id=PID, epoch=0, base_sequence=base_sequence)
    return replace(next(iter_batches(raw)), base_offset=base_offset)


def test_a_stored_batch_after_a_gap_advances_the_state(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "index")
    try:
        states = ProducerStates(index)
        write = index.batch()
        states.replay(write, "t", 0, _batch(0, 5, 0))
        # Sequences 5-7 are not where this node read: another node's append it never saw.
        states.replay(write, "t", 0, _batch(8, 2, 10))
        states.replay(write, "t", 0, _batch(10, 3, 12))
        write.commit()
        assert states.check("t", 0, _batch(13, 1, 0)) is None
        assert states.check("t", 0, _batch(5, 1, 0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # As persisted: a restart reads the same state back.
        again = ProducerStates(index)
        assert again.check("t", 0, _batch(13, 1, 0)) is None
    finally:
        index.close()
