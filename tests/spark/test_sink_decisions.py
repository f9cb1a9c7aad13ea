"""The exactly-once Kafka sink's tasks and driver, as Spark calls them (without Spark),
against a real ``tidegate serve``: a missing output topic is created at the query's start,
empty tasks open no transaction, a batch run again after its decision was recorded is
committed once from the first run's transactions, an undecided one is written again
(the first run's open transactions fenced), and the sink leaves no consumer group."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.types import Row, StringType, StructField, StructType
from tidegate.spark.options import write_options
from tidegate.spark.sink import KafkaStreamWriter, Written, end_all, write_in_transaction
from tidegate.spark.sink_log import Decision, decision_topic, record_decision
from tidegate.spark.txn import TransactionEnder, write_transaction

from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(180)

SCHEMA = StructType([StructField("value", StringType())])
TOPIC = "sink-out"
PREFIX = "query-1"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    s.start()
    yield s
    s.close()


def _rows(*values: str) -> Iterator[Row]:
    return iter([Row(value=v) for v in values])


def _batch(writer: KafkaStreamWriter, batch_id: int, tasks: list[tuple[str, ...]]) -> list[Written]:
    return [write_in_transaction(writer.opts, SCHEMA, _rows(*values), batch_id, PREFIX, task)
            for task, values in enumerate(tasks)]


def _committed(bootstrap: str) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        parts = c.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
        c.assign([TopicPartition(TOPIC, p, 0) for p in parts])
        got: list[str] = []
        ended: set[int] = set()
        while len(ended) < len(parts):
            msg = c.poll(30)
            assert msg is not None, "no end of partition in 30 s"
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ended.add(msg.partition())
            else:
                got.append(msg.value().decode())
        return sorted(got)
    finally:
        c.close()


def _no_open_transaction(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
    tps = [TopicPartition(TOPIC, p) for p in parts]

    def ends(isolation: IsolationLevel) -> list[int]:
        got: Any = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=isolation)
        return [got[tp].result().offset for tp in tps]

    assert ends(IsolationLevel.READ_COMMITTED) == ends(IsolationLevel.READ_UNCOMMITTED)


def test_decided_batches_commit_once_and_leave_no_group(server: Tidegate) -> None:
    b = server.bootstrap
    opts = write_options({"kafka.bootstrap.servers": b, "topic": TOPIC, "exactly_once": "true"})
    writer = KafkaStreamWriter(opts, SCHEMA)  # the driver, at the query's start
    assert TOPIC in AdminClient({"bootstrap.servers": b}).list_topics(timeout=30).topics

    # A batch with no row opens nothing and decides nothing.
    empty = _batch(writer, 0, [(), (), ()])
    assert all(w.txn is None and w.log_topic is None for w in empty)
    writer.commit(list(empty), 0)

    first = _batch(writer, 1, [("a", "b"), (), ("c",)])
    assert [w.rows for w in first] == [2, 0, 1] and first[1].txn is None
    writer.commit(list(first), 1)
    assert _committed(b) == ["a", "b", "c"]
    # The query died before Spark recorded batch 1: its replay writes nothing.
    again = _batch(writer, 1, [("a", "b"), (), ("c",)])
    assert [w.rows for w in again] == [0, 0, 0] and all(w.txn is None for w in again)
    writer.commit(list(again), 1)
    assert _committed(b) == ["a", "b", "c"]

    # Batch 2 dies before the driver decided: its replay writes it again, the first run's
    # transaction is fenced (aborted), not left to its timeout.
    _batch(writer, 2, [("d",)])
    replayed = _batch(writer, 2, [("d",)])
    writer.commit(list(replayed), 2)
    assert _committed(b) == ["a", "b", "c", "d"]
    _no_open_transaction(b)

    # Batch 3 dies after the decision, before any EndTxn: the replay commits the first run's.
    decided = _batch(writer, 3, [("e",), ("f",)])
    record_decision(b, decision_topic(TOPIC, PREFIX),
                    Decision(3, tuple(w.txn for w in decided if w.txn is not None)), opts.client)
    replay = _batch(writer, 3, [("e",), ("f",)])
    assert all(w.decided is not None for w in replay)
    end_all(opts, list(replay), 3, commit=True)
    assert _committed(b) == ["a", "b", "c", "d", "e", "f"]
    _no_open_transaction(b)

    admin = AdminClient({"bootstrap.servers": b})
    groups = admin.list_consumer_groups(request_timeout=30).result(30)
    assert [g.group_id for g in groups.valid if g.group_id != "check"] == []


def test_a_task_leaves_its_transaction_open_for_the_driver(server: Tidegate) -> None:
    """librdkafka's producer is let go without close() (which aborts): the transaction
    stays open, and the producer id and epoch read from its statistics end it."""
    b = server.bootstrap
    opts = write_options({"kafka.bootstrap.servers": b, "topic": TOPIC, "exactly_once": "true"})
    KafkaStreamWriter(opts, SCHEMA)
    first, *rest = [{"topic": TOPIC, "value": v.encode(), "key": None} for v in ("x", "y", "z")]
    txn = write_transaction(b, f"{PREFIX}-7", 60_000, {}, first, rest)
    gc.collect()  # the producer is gone, not only unreferenced
    assert txn.rows == 3 and txn.producer_id >= 0
    assert _committed(b) == []
    with pytest.raises(AssertionError):
        _no_open_transaction(b)
    ender = TransactionEnder(b)
    try:
        ender.end(txn, commit=True)
    finally:
        ender.close()
    assert _committed(b) == ["x", "y", "z"]
    _no_open_transaction(b)
