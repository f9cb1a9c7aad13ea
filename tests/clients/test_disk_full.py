"""A full disk (issue 22, finding 8) on a real filesystem: a small tmpfs mounted for the
test (it needs root, as CI has; without it the test fails, it does not skip). Produce
fails with KAFKA_STORAGE_ERROR and a message while the disk is full; once space is
freed the same partition takes records again without a restart, and a consumer reads
every acknowledged record at dense offsets."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
from kafka.protocol.producer import ProduceResponse

from tests.clients import requests as kreq
from tests.clients.server import Tidegate

TOPIC = "full"
FS_BYTES = 192 * 1024 * 1024
KAFKA_STORAGE_ERROR = 56


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(path: Path, leave_bytes: int) -> None:
    """Fill the file system of ``path`` until at most ``leave_bytes`` are free."""
    st = os.statvfs(path.parent)
    free = st.f_bavail * st.f_frsize
    try:
        with open(path, "wb") as f:
            chunk = b"\0" * (1 << 20)
            remaining = max(free - leave_bytes, 0)
            while remaining > 0:
                n = f.write(chunk[: min(len(chunk), remaining)])
                remaining -= n
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # The server's writers took some of the room meanwhile: full all the same.


def _produce(bootstrap: str, values: list[bytes]) -> tuple[list[bytes], list[str]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 8000, "linger.ms": 5})
    acked: list[bytes] = []
    errors: list[str] = []

    def report(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            errors.append(str(err))

    for value in values:
        producer.produce(TOPIC, value, partition=0, on_delivery=report)
        producer.poll(0)
    producer.flush(30)
    return acked, errors


def test_disk_full_then_freed(small_fs: Path, tmp_path: Path) -> None:
    server = Tidegate(small_fs / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1),
                                      NewTopic("other", num_partitions=4)]).values():
            f.result(timeout=30)
        acked, errors = _produce(server.bootstrap, [b"before-%d" % i for i in range(100)])
        assert len(acked) == 100 and not errors, errors
        filler = small_fs / "filler"
        _fill(filler, 4 * 1024 * 1024)
        big = [b"full-%06d-" % i + b"x" * 10_000 for i in range(2000)]
        acked_full, errors = _produce(server.bootstrap, big)
        assert errors, "the disk never filled"
        answer = kreq.split_frames(kreq.exchange(
            server.port, kreq.produce(TOPIC, 0, kreq.record_batch([b"y" * 100_000]), version=8),
            timeout_s=15))
        part = ProduceResponse.decode(answer[0][4:], version=8).responses[0].partition_responses[0]
        assert part.error_code == KAFKA_STORAGE_ERROR and part.error_message, part
        # A client can still ask to delete a topic (to free space): it gets an answer.
        answer = kreq.split_frames(kreq.exchange(
            server.port, kreq.frame(DeleteTopicsRequest(topic_names=["other"], timeout_ms=10_000),
                                    4), timeout_s=30))
        assert answer, "DeleteTopics on a full disk closed the connection"
        deleted = DeleteTopicsResponse.decode(answer[0][5:], version=4).responses[0]
        assert deleted.error_code in (0, KAFKA_STORAGE_ERROR), deleted
        filler.unlink()
        time.sleep(1)
        deadline = time.monotonic() + 30
        while True:
            acked_after, errors = _produce(server.bootstrap, [b"after-%d" % i for i in range(100)])
            if len(acked_after) == 100 or time.monotonic() > deadline:
                break
        assert len(acked_after) == 100, (errors, server.tail())
        everything = acked + acked_full + acked_after
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "full",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        last_seen = time.monotonic()
        while time.monotonic() - last_seen < 10:
            msg = consumer.poll(1)
            if msg is None or msg.error():
                continue
            got.append((msg.offset(), msg.value()))
            last_seen = time.monotonic()
            if got[-1][1] == acked_after[-1]:
                break
        consumer.close()
        assert [o for o, _ in got] == list(range(len(got))), "offsets are not dense"
        values = {v for _, v in got}
        lost = [v[:20] for v in everything if v not in values]
        assert not lost, f"{len(lost)} acknowledged records lost: {lost[:5]}"
    finally:
        server.close()
