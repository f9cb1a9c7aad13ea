"""A full disk under the offset index and at shutdown (issue 22, finding 8), against a real
``tidegate serve`` with real clients. Small tmpfs mounts (root, as CI has; without it
the tests fail, they do not skip):

- the offset index alone on a full filesystem: once its RocksDB write fails the partition
  refuses new appends (KAFKA_STORAGE_ERROR) and, once space is back, takes records again
  by itself, without a restart, with dense offsets and every acknowledged record kept;
- SIGTERM while the whole data directory is full: a clean exit (status 0, no traceback),
  one log line saying the unflushed index is rebuilt from Tier-1, and after a restart
  with space every acknowledged record is there.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceResponse

from tests.clients import requests as kreq
from tests.clients.server import Tidegate
from tests.clients.test_disk_full import _fill

TOPIC = "idx"
KAFKA_STORAGE_ERROR = 56


def _mount(path: Path, size_bytes: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                   check=True)


@pytest.fixture
def index_fs(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose offset index (``gateway/index``) is on its own 64 MB tmpfs."""
    mount = tmp_path / "data" / "gateway" / "index"
    _mount(mount, 64 << 20)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def data_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    _mount(mount, 192 << 20)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


class _Producing:
    """An idempotent producer on a thread: every value, one partition, acks kept."""

    def __init__(self, bootstrap: str, values: list[bytes] | str, timeout_ms: int) -> None:
        """``values``, or a prefix: values ``prefix-N`` until ``stop`` is set."""
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                   "message.timeout.ms": timeout_ms, "linger.ms": 5})
        self._values = values
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _report(self, err: object, msg: object) -> None:
        if err is None:
            self.acked.append(msg.value())  # type: ignore[attr-defined]
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        values = self._values
        if isinstance(values, str):
            values = (b"%s-%d" % (self._values.encode(), i) for i in itertools.count())
        for value in values:
            if self.stop.is_set():
                break
            self._producer.produce(TOPIC, value, partition=0, on_delivery=self._report)
            self._producer.poll(0)
            time.sleep(0.002)
        self._producer.flush(90)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the producer never finished"


def _consume_all(bootstrap: str, last: bytes) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idx",
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
        if got[-1][1] == last:
            break
    consumer.close()
    return got


def _check_everything(got: list[tuple[int, bytes]], acked: list[bytes]) -> None:
    assert [o for o, _ in got] == list(range(len(got))), "offsets are not dense"
    values = [v for _, v in got]
    assert len(values) == len(set(values)), "a record is stored twice"
    lost = [v for v in acked if v not in set(values)]
    assert not lost, f"{len(lost)} acknowledged records lost: {lost[:5]}"


def _storage_error(port: int) -> ProduceResponse:
    answer = kreq.split_frames(kreq.exchange(
        port, kreq.produce(TOPIC, 0, kreq.record_batch([b"probe"]), version=8), timeout_s=15))
    return ProduceResponse.decode(answer[0][4:], version=8).responses[0].partition_responses[0]


def test_index_write_failure_heals_once_space_is_back(index_fs: Path, tmp_path: Path) -> None:
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1)]).values():
            f.result(timeout=30)
        before = _Producing(server.bootstrap, [b"before-%d" % i for i in range(100)], 10_000)
        before.join(30)
        assert len(before.acked) == 100, before.errors
        filler = index_fs / "filler"
        _fill(filler, 0)
        # Until the index's RocksDB write fails (its log may still have room in a page).
        during = _Producing(server.bootstrap, "during", 60_000)
        deadline = time.monotonic() + 60
        while b"offset index could not be written" not in Path(server.log_path).read_bytes():
            assert time.monotonic() < deadline, (len(during.acked), server.tail())
            time.sleep(0.1)
        during.stop.set()
        part = _storage_error(server.port)
        assert part.error_code == KAFKA_STORAGE_ERROR and part.error_message, part
        filler.unlink()  # space is back: no restart
        during.join(120)
        after = _Producing(server.bootstrap, [b"after-%d" % i for i in range(100)], 30_000)
        after.join(60)
        assert len(after.acked) == 100, (after.errors[:3], server.tail())
        got = _consume_all(server.bootstrap, after.acked[-1])
        _check_everything(got, before.acked + during.acked + after.acked)
        assert b"offset index takes writes again" in Path(server.log_path).read_bytes()
        assert "Traceback" not in server.tail(400)
        assert server.stop() == 0, server.tail()
    finally:
        server.close()


def test_sigterm_on_a_full_disk_is_clean(data_fs: Path, tmp_path: Path) -> None:
    server = Tidegate(data_fs / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1)]).values():
            f.result(timeout=30)
        before = _Producing(server.bootstrap, [b"before-%d" % i for i in range(100)], 10_000)
        before.join(30)
        assert len(before.acked) == 100, before.errors
        filler = data_fs / "filler"
        _fill(filler, 0)
        during = _Producing(server.bootstrap, [b"full-%04d-" % i + b"x" * 2000
                                               for i in range(500)], 8_000)
        during.join(60)
        assert during.errors, "the disk never filled"
        offset = Path(server.log_path).stat().st_size
        code = server.stop(timeout_s=40)
        stopped = Path(server.log_path).read_bytes()[offset:].decode(errors="replace")
        assert code == 0, stopped
        assert "Traceback" not in stopped and "Exception" not in stopped, stopped
        assert "next start" in stopped, stopped  # says what is recovered from Tier-1
        filler.unlink()
        server.start()
        last = _Producing(server.bootstrap, [b"last"], 30_000)
        last.join(60)
        assert last.acked == [b"last"], last.errors
        got = _consume_all(server.bootstrap, b"last")
        _check_everything(got, before.acked + during.acked + last.acked)
    finally:
        server.close()
