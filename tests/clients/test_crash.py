"""Crash test: an idempotent acks=all producer keeps producing while the server is
``kill -9``ed and restarted several times; afterwards every acknowledged record is
stored exactly once, in send order, at dense offsets (DESIGN.md invariants 1-3)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.server import Tidegate

TOPIC = "crash"
PARTITIONS = 2
KILLS = 3


def test_kill9_while_producing_idempotent(tidegate: Tidegate) -> None:
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)]).values():
        f.result(timeout=30)

    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    failed: list[str] = []
    lock = threading.Lock()

    def on_delivery(err: object, msg: object) -> None:
        with lock:
            if err is not None:
                failed.append(str(err))
            else:
                acked[msg.partition()].append(msg.value())  # type: ignore[attr-defined]

    producer = Producer({
        "bootstrap.servers": tidegate.bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "message.timeout.ms": 120_000, "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 50,
    })
    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        n = 0
        while not stop.is_set():
            try:
                producer.produce(TOPIC, value=b"rec-%08d" % n, partition=n % PARTITIONS,
                                 on_delivery=on_delivery)
                n += 1
            except BufferError:
                producer.poll(0.05)
                continue
            if n % 50 == 0:
                producer.poll(0.005)
        sent[0] = n

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        for _ in range(KILLS):
            time.sleep(0.8)
            tidegate.kill9()
            time.sleep(0.2)
            tidegate.start()
        time.sleep(0.8)
    finally:
        stop.set()
        thread.join()
    assert producer.flush(120) == 0
    assert not failed, failed[:5]
    total_acked = sum(len(v) for v in acked.values())
    assert total_acked == sent[0] and total_acked > 100
    print(f"crash test: {total_acked} records acknowledged across {KILLS} kill -9s")

    consumer = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "crash-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    stored: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in stored.values()) < total_acked and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        stored[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    for p in range(PARTITIONS):
        offsets = [o for o, _ in stored[p]]
        values = [v for _, v in stored[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not dense"
        assert len(set(values)) == len(values), f"partition {p}: duplicates"
        assert values == acked[p], f"partition {p}: stored records differ from acknowledged"
