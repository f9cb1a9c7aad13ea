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


def _app(bootstrap: str, log_path: Path, *pacing: str) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.txn.ctp_app", bootstrap,
             "--partitions", str(PARTITIONS), "--end", str(PER_PARTITION), *pacing],
            stdout=log, stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def _commits(log_path: Path) -> int:
    return sum(line.startswith(b"committed ") for line in log_path.read_bytes().splitlines())


def _wait_for_commits(log_path: Path, more_than: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _commits(log_path) <= more_than:
        text = log_path.read_text(errors="replace")
        # a finished application can no longer be killed in the middle of its work
        assert "\ndone\n" not in "\n" + text, "the application finished before the kill"
        assert time.monotonic() < deadline, text[-3000:]
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
    # 40 paced transactions: still at work when the server and then the application die
    app = _app(tidegate.bootstrap, app_log, "--batch", "20", "--pause-ms", "200")
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
