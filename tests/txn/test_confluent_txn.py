"""confluent-kafka (librdkafka) transactional producers against ``tidegate serve``."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer

from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic, read_all


def _producer(bootstrap: str, tid: str, **extra: object) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def test_commit_and_abort_seen_as_kafka_shows_them(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "t", 2)
    p = _producer(tidegate.bootstrap, "tx-1")
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(10):
        p.produce("t", f"c1-{i}".encode(), partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce("t", f"a-{i}".encode(), partition=i % 2)
    p.flush(30)  # librdkafka purges what is still queued at abort
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(4):
        p.produce("t", f"c2-{i}".encode(), partition=i % 2)
    p.commit_transaction(15)
    committed = read_all(tidegate.bootstrap, "t", 2, committed=True, expect=14)
    assert sorted(committed) == sorted(
        [f"c1-{i}".encode() for i in range(10)] + [f"c2-{i}".encode() for i in range(4)]
    )
    uncommitted = read_all(tidegate.bootstrap, "t", 2, committed=False)
    assert len(uncommitted) == 19  # aborted records too; the markers are skipped


def test_read_committed_stops_at_an_open_transaction(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "open", 1)
    plain = Producer({"bootstrap.servers": tidegate.bootstrap})
    plain.produce("open", b"before")
    plain.flush(30)
    p = _producer(tidegate.bootstrap, "tx-open")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("open", b"in-txn")
    p.flush(30)
    plain.produce("open", b"after")
    plain.flush(30)
    assert read_all(tidegate.bootstrap, "open", 1, committed=True, timeout_s=3) == [b"before"]
    assert read_all(tidegate.bootstrap, "open", 1, committed=False) == [b"before", b"in-txn", b"after"]
    p.commit_transaction(15)
    assert read_all(tidegate.bootstrap, "open", 1, committed=True, expect=3) == [
        b"before", b"in-txn", b"after"
    ]


def test_zombie_is_fenced(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "z", 1)
    old = _producer(tidegate.bootstrap, "tx-z")
    old.init_transactions(15)
    old.begin_transaction()
    old.produce("z", b"zombie")
    old.flush(30)
    new = _producer(tidegate.bootstrap, "tx-z")
    new.init_transactions(15)  # aborts the old one's transaction and fences it
    new.begin_transaction()
    new.produce("z", b"new")
    new.commit_transaction(15)
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(15)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower()
    assert read_all(tidegate.bootstrap, "z", 1, committed=True, expect=1) == [b"new"]


def test_timed_out_transaction_is_aborted(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "slow", 1)
    p = _producer(tidegate.bootstrap, "tx-slow", **{"transaction.timeout.ms": 1000})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("slow", b"late")
    p.flush(30)
    deadline = time.monotonic() + 30  # the coordinator's sweep, however late a loaded machine runs it
    while "transaction 'tx-slow' timed out after 1000 ms: aborting" not in tidegate.tail(400):
        assert time.monotonic() < deadline, tidegate.tail()
        time.sleep(0.1)
    with pytest.raises(KafkaException):
        p.commit_transaction(15)
    assert read_all(tidegate.bootstrap, "slow", 1, committed=True, timeout_s=3) == []


def test_offsets_for_times_stop_at_the_last_stable_offset(tidegate: Tidegate) -> None:
    """ListOffsets by timestamp answers only offsets below what the isolation level may
    read, as Kafka's Partition does: an open transaction's records are no answer to a
    read_committed consumer until the transaction commits."""
    from confluent_kafka import Consumer, TopicPartition

    create_topic(tidegate.bootstrap, "times", 1)
    plain = Producer({"bootstrap.servers": tidegate.bootstrap})
    plain.produce("times", b"before", timestamp=1_000)
    plain.flush(30)
    p = _producer(tidegate.bootstrap, "tx-times")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("times", b"in-txn", timestamp=2_000)
    p.flush(30)

    def offset_for(ts: int, isolation: str) -> int:
        c = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "times",
                      "isolation.level": isolation})
        try:
            [tp] = c.offsets_for_times([TopicPartition("times", 0, ts)], 10)
            return int(tp.offset)
        finally:
            c.close()

    assert offset_for(1_500, "read_uncommitted") == 1
    assert offset_for(1_500, "read_committed") == -1  # librdkafka's OFFSET_END
    assert offset_for(500, "read_committed") == 0
    p.commit_transaction(15)
    # EndTxn is answered at the durable decision; the LSO moves once the marker is in.
    deadline = time.monotonic() + 60
    while offset_for(1_500, "read_committed") != 1:
        assert time.monotonic() < deadline, "the LSO never passed the committed record"
        time.sleep(0.1)
