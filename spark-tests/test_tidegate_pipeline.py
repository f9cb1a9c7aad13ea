"""The pipeline of ``pipeline_job.py`` on a real local Spark, killed (``kill -9``) and
restarted in the middle together with the server: every window's result arrives once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from native import create_topic, produce, server, wait_for  # type: ignore[import-not-found]

from tests.clients.server import Tidegate

JOB = Path(__file__).with_name("pipeline_job.py")
T0 = 1_700_000_000_000
USERS = 4
STEP_MS = 500


class Job:
    def __init__(self, bootstrap: str, checkpoint: Path, log: Path) -> None:
        self.log = open(log, "ab")
        # Its own process group: kill -9 reaches the driver and Spark's JVM.
        self.proc = subprocess.Popen(
            [sys.executable, str(JOB), bootstrap, str(checkpoint)],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


def _events(first: int, last: int) -> list[dict[str, object]]:
    return [{"topic": "events", "partition": i % 2, "key": f"u{i % USERS}".encode(),
             "value": f"u{i % USERS},{T0 + i * STEP_MS}".encode()} for i in range(first, last)]


def _results(bootstrap: str) -> list[tuple[int, str, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("results", 0, OFFSET_BEGINNING)])
    out = []
    idle_until = time.monotonic() + 3
    while time.monotonic() < idle_until:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        r = json.loads(msg.value())
        out.append((r["window"], r["user"], r["count"]))
        idle_until = time.monotonic() + 1
    consumer.close()
    return sorted(out)


@pytest.fixture
def tidegate(tmp_path: Path) -> Iterator[Tidegate]:
    s = server(tmp_path)
    yield s
    s.close()


def _commits(checkpoint: Path) -> int:
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pipeline_every_window_once_across_kills(tidegate: Tidegate, tmp_path: Path) -> None:
    b = tidegate.bootstrap
    create_topic(b, "events", 2)
    create_topic(b, "results", 1)
    produce(b, _events(0, 120))
    checkpoint = tmp_path / "checkpoint"
    job = Job(b, checkpoint, tmp_path / "job.log")
    try:
        # Generous: on a loaded 2-core machine Spark's start and first batch took 220 s.
        wait_for("two committed micro-batches", lambda: _commits(checkpoint) >= 2, 400)
    finally:
        job.kill9()
    # The server dies too, and comes back on its data.
    tidegate.kill9()
    tidegate.start()
    # 30 s more of events, then one far in the future that moves the watermark past all.
    produce(b, _events(120, 180) + [{"topic": "events", "partition": 0, "value": f"flush,{T0 + 3_600_000}".encode()}])
    expected = sorted(
        (T0 + w * 10_000, f"u{u}", 10_000 // STEP_MS // USERS) for w in range(180 * STEP_MS // 10_000) for u in range(USERS))
    job = Job(b, checkpoint, tmp_path / "job.log")
    try:
        wait_for("every window's result", lambda: len(_results(b)) >= len(expected), 400)
        time.sleep(2)
    finally:
        job.kill9()
    assert _results(b) == expected, (tmp_path / "job.log").read_text()[-3000:]
