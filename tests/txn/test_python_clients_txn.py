"""kafka-python and aiokafka transactional producers against ``tidegate serve``: a
committed and an aborted transaction each, read back with both isolation levels."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic, read_all


def test_kafka_python_transactions(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "kp", 2)
    producer = KafkaProducer(bootstrap_servers=tidegate.bootstrap, transactional_id="kp-1")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(6):
            producer.send("kp", f"c-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(3):
            producer.send("kp", f"a-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close(5)
    committed = read_all(tidegate.bootstrap, "kp", 2, committed=True, expect=6)
    assert sorted(committed) == sorted(f"c-{i}".encode() for i in range(6))
    assert len(read_all(tidegate.bootstrap, "kp", 2, committed=False)) == 9
    # kafka-python's own consumer, both isolation levels.
    for level, want in (("read_committed", 6), ("read_uncommitted", 9)):
        consumer = KafkaConsumer(bootstrap_servers=tidegate.bootstrap, isolation_level=level,
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition("kp", 0), TopicPartition("kp", 1)])
            values: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(values) < want and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=300).values():
                    values += [r.value for r in records]
            assert len(values) == want, (level, values)
            if level == "read_committed":
                assert sorted(values) == sorted(f"c-{i}".encode() for i in range(6))
        finally:
            consumer.close()


async def _aiokafka_round(bootstrap: str) -> tuple[list[bytes], list[bytes]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-1")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(4):
                await producer.send("aio", f"c-{i}".encode(), partition=0)
        await producer.begin_transaction()
        await (await producer.send("aio", b"aborted", partition=0))
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send("aio", b"last", partition=0)
    finally:
        await producer.stop()
    seen: dict[str, list[bytes]] = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition("aio", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            values: list[bytes] = []
            want = 5 if level == "read_committed" else 6
            deadline = asyncio.get_running_loop().time() + 15
            while len(values) < want and asyncio.get_running_loop().time() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                values += [m.value for m in batch.get(tp, [])]
            seen[level] = values
        finally:
            await consumer.stop()
    return seen["read_committed"], seen["read_uncommitted"]


def test_aiokafka_transactions(tidegate: Tidegate) -> None:
    create_topic(tidegate.bootstrap, "aio", 1)
    committed, uncommitted = asyncio.run(_aiokafka_round(tidegate.bootstrap))
    assert committed == [b"c-0", b"c-1", b"c-2", b"c-3", b"last"]
    assert uncommitted == [b"c-0", b"c-1", b"c-2", b"c-3", b"aborted", b"last"]
