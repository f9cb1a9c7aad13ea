"""One consumer-group member as a process, for the mixed-client group test.

Usage: python -m tests.groups.member CLIENT BOOTSTRAP TOPIC GROUP STOP_FILE ASSIGNOR
(CLIENT: kafka-python, aiokafka or confluent-kafka; ASSIGNOR ``consumer:uniform`` or
``consumer:range`` makes confluent-kafka a KIP-848 member, ``group.protocol=consumer``).

It subscribes to TOPIC in GROUP and, until STOP_FILE exists, polls and after every poll
commits (synchronously, explicit offsets) what it read. Output lines, flushed at once:

- ``R partition offset`` for every record read;
- ``D partition offset`` for every record whose commit the broker acknowledged (a
  delivery: this member's reading of it counts);
- ``X error`` when a commit failed (those reads are dropped; another member or a later
  poll reads the records again);
- ``E error`` when a poll failed (the broker was restarting) and was retried;
- ``OK closed`` after a clean close (LeaveGroup).

The same protocol is spoken by ``tests/java/GroupConsumer.java``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import warnings

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
MAX_POLL_INTERVAL_MS = 30_000


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def delivered(pending: list[tuple[int, int]]) -> None:
    for p, o in pending:
        out(f"D {p} {o}")


def next_offsets(pending: list[tuple[int, int]]) -> dict[int, int]:
    nxt: dict[int, int] = {}
    for p, o in pending:
        nxt[p] = max(nxt.get(p, 0), o + 1)
    return nxt


def run_kafka_python(bootstrap: str, topic: str, group: str, stop: str, assignor: str) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        partition_assignment_strategy=[assignors[assignor]], max_poll_records=50,
    )
    consumer.subscribe([topic])
    while not os.path.exists(stop):
        pending: list[tuple[int, int]] = []
        try:
            polled = consumer.poll(timeout_ms=200)
        except KafkaError as e:
            # kafka-python 3.0.12 lets a refused connection escape poll() while the
            # broker restarts; a real application retries, and so does this one.
            out(f"E {type(e).__name__}")
            time.sleep(0.2)
            continue
        for tp, records in polled.items():
            for r in records:
                out(f"R {tp.partition} {r.offset}")
                pending.append((tp.partition, r.offset))
        if not pending:
            continue
        offsets = {
            TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
            for p, o in next_offsets(pending).items()
        }
        try:
            consumer.commit(offsets)
        except Exception as e:  # noqa: BLE001 - any failure: the reads do not count
            out(f"X {type(e).__name__}")
            continue
        delivered(pending)
    consumer.close()
    out("OK closed")


async def run_aiokafka(bootstrap: str, topic: str, group: str, stop: str, assignor: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError
    from aiokafka.structs import OffsetAndMetadata

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        partition_assignment_strategy=(assignors[assignor],),
    )
    await consumer.start()
    while not os.path.exists(stop):
        pending: list[tuple[int, int]] = []
        try:
            batch = await consumer.getmany(timeout_ms=200, max_records=50)
        except KafkaError as e:
            out(f"E {type(e).__name__}")
            await asyncio.sleep(0.2)
            continue
        for tp, records in batch.items():
            for r in records:
                out(f"R {tp.partition} {r.offset}")
                pending.append((tp.partition, r.offset))
        if not pending:
            continue
        offsets = {
            TopicPartition(topic, p): OffsetAndMetadata(o, "")
            for p, o in next_offsets(pending).items()
        }
        try:
            await consumer.commit(offsets)
        except Exception as e:  # noqa: BLE001 - any failure: the reads do not count
            out(f"X {type(e).__name__}")
            continue
        delivered(pending)
    await consumer.stop()
    out("OK closed")


def run_confluent(bootstrap: str, topic: str, group: str, stop: str, assignor: str) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config: dict[str, object] = {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
    }
    if assignor.startswith("consumer:"):
        # KIP-848: the broker assigns and sets session and heartbeat timing.
        config.update({"group.protocol": "consumer", "group.remote.assignor": assignor[9:]})
    else:
        config.update({
            "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "partition.assignment.strategy": assignor,
        })
    consumer = Consumer(config)
    consumer.subscribe([topic])
    while not os.path.exists(stop):
        pending: list[tuple[int, int]] = []
        for msg in consumer.consume(num_messages=50, timeout=0.2):
            if msg.error() is not None:
                continue
            out(f"R {msg.partition()} {msg.offset()}")
            pending.append((msg.partition(), msg.offset()))
        if not pending:
            continue
        offsets = [TopicPartition(topic, p, o) for p, o in next_offsets(pending).items()]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
            failed = [tp for tp in result or () if tp.error is not None]
            if failed:
                raise KafkaException(failed[0].error)
        except KafkaException as e:
            out(f"X {e}")
            continue
        delivered(pending)
    consumer.close()
    out("OK closed")


def main() -> None:
    client, bootstrap, topic, group, stop, assignor = sys.argv[1:7]
    warnings.simplefilter("ignore")
    if client == "kafka-python":
        run_kafka_python(bootstrap, topic, group, stop, assignor)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group, stop, assignor))
    elif client == "confluent-kafka":
        run_confluent(bootstrap, topic, group, stop, assignor)
    else:
        raise SystemExit(f"unknown client {client}")


if __name__ == "__main__":
    main()
