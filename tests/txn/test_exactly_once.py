"""Consume-transform-produce with ``send_offsets_to_transaction`` across ``kill -9`` of
the server and of the application: every input record exactly once in the output read
with read_committed, and the group's committed offsets at the end of the input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.clients.server import Tidegate
from tests.txn.helpers import create_topic, read_all

PARTITIONS = 2
PER_PARTITION = 400


def _app(bootstrap: str, log_path: Path) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.txn.ctp_app", bootstrap,
             "--partitions", str(PARTITIONS), "--end", str(PER_PARTITION)],
            stdout=log, stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def _commits(log_path: Path) -> int:
    return log_path.read_bytes().count(b"committed ")


def _wait_for_commits(log_path: Path, more_than: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _commits(log_path) <= more_than:
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
        time.sleep(0.05)


def test_exactly_once_across_kill_9(tidegate: Tidegate, tmp_path: Path) -> None:
    create_topic(tidegate.bootstrap, "in", PARTITIONS)
    create_topic(tidegate.bootstrap, "out", PARTITIONS)
    producer = Producer({"bootstrap.servers": tidegate.bootstrap, "enable.idempotence": True})
    expected = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{p}-{i}".encode()
            producer.produce("in", value, partition=p)
            expected.append(b"out-" + value)
    assert producer.flush(30) == 0
    app_log = tmp_path / "app.log"
    app = _app(tidegate.bootstrap, app_log)
    try:
        _wait_for_commits(app_log, 3)
        tidegate.kill9()  # the server, in the middle of the application's transactions
        tidegate.start()
        _wait_for_commits(app_log, _commits(app_log) + 2)
        os.kill(app.pid, signal.SIGKILL)  # the application, in the middle too
        app.wait()
        app = _app(tidegate.bootstrap, app_log)
        assert app.wait(120) == 0, app_log.read_text(errors="replace")[-3000:]
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
    out = read_all(tidegate.bootstrap, "out", PARTITIONS, committed=True, expect=len(expected))
    assert len(out) == len(expected), f"{len(out)} != {len(expected)}"
    assert sorted(out) == sorted(expected)  # each exactly once
    consumer = Consumer({"bootstrap.servers": tidegate.bootstrap, "group.id": "ctp"})
    try:
        committed = consumer.committed([TopicPartition("in", p) for p in range(PARTITIONS)], 10)
        assert [tp.offset for tp in committed] == [PER_PARTITION] * PARTITIONS
    finally:
        consumer.close()
    # read_uncommitted may see aborted duplicates; read_committed never does.
    assert len(read_all(tidegate.bootstrap, "out", PARTITIONS, committed=False)) >= len(expected)
