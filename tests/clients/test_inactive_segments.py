"""Idle partitions' segments leave the segment store's memory (their records go to
RocksDB) and come back when a client names them, across a ``kill -9``: every record
produced is consumed back, in order, at dense offsets."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rocksdict import AccessType, Options, Rdict
from tidegate.core.segmentstore.metastore import InactiveSegments

from tests.clients.server import Tidegate

TOPIC = "idle"
PARTITIONS = 4


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []
    for n in range(start, start + count):
        producer.produce(
            TOPIC,
            value=b"rec-%06d" % n,
            partition=n % PARTITIONS,
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert not failed, failed[:3]


def consume_all(bootstrap: str, expected: int) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "idle-check", "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in got.values()) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return got


def inactive_records(data_dir: Path) -> int:
    total = 0
    for d in sorted((data_dir / "segmentstore" / "metadata").iterdir()):
        db = InactiveSegments(d)
        try:
            total += len(db.names())
        finally:
            db.close()
    return total


def wait_inactive_while_running(data_dir: Path, count: int, timeout_s: float = 60) -> None:
    """Until the running server's inactive-segment stores hold ``count`` records (read
    through read-only opens beside the server's own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        total = 0
        for d in sorted((data_dir / "segmentstore" / "metadata").iterdir()):
            db = Rdict(str(d), Options(raw_mode=True), access_type=AccessType.read_only())
            try:
                total += sum(1 for _ in db.keys())
            finally:
                db.close()
        if total >= count:
            return
        assert time.monotonic() < deadline, f"{total} inactive segments after {timeout_s} s"
        time.sleep(0.2)


def check(got: dict[int, list[tuple[int, bytes]]], count: int) -> None:
    for p in range(PARTITIONS):
        assert [off for off, _ in got[p]] == list(range(len(got[p]))), p  # dense
        assert [v for _, v in got[p]] == [b"rec-%06d" % n for n in range(p, count, PARTITIONS)], p


def test_idle_partitions_leave_memory_and_come_back(tmp_path: Path) -> None:
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[store]\nsegment_idle_ms = 200\nsegment_evict_interval_ms = 50\nflush_interval_ms = 100\n"
    )
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config)
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)]).values():
            f.result(timeout=30)
        produce(server.bootstrap, 0, 2000)
        wait_inactive_while_running(tmp_path / "data", PARTITIONS)  # idle: gone from memory
        server.kill9()
        assert inactive_records(tmp_path / "data") >= PARTITIONS, server.tail()

        server.start()
        check(consume_all(server.bootstrap, 2000), 2000)  # brought back by the fetches
        produce(server.bootstrap, 2000, 2000)
        time.sleep(1.0)
        check(consume_all(server.bootstrap, 4000), 4000)
        server.kill9()
        server.start()
        check(consume_all(server.bootstrap, 4000), 4000)
    finally:
        server.close()
