"""The bench's C producer (`bench/cproducer.c`): it builds against the librdkafka of
confluent-kafka's wheel, produces to a real `tidegate serve`, and every record reads back."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from bench import cproducer
from bench.workloads import ClientTuning, create_topic
from tests.clients.server import serving

RECORDS = 20_000
RECORD_BYTES = 100
TIMEOUT_S = 60.0


@pytest.mark.timeout(180)
def test_c_producer_builds_produces_and_records_read_back(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition

    exe = cproducer.build(tmp_path / "cache")
    assert os.access(exe, os.X_OK)
    assert cproducer.build(tmp_path / "cache") == exe  # cached: built once
    with serving(tmp_path, "") as server:
        topic = f"c-{uuid.uuid4().hex[:8]}"
        create_topic(server.bootstrap, topic, 2, TIMEOUT_S)
        assert server.proc is not None
        result, figures = cproducer.run(
            exe, server.bootstrap, ClientTuning(), topic, RECORD_BYTES, RECORDS,
            server.proc.pid, TIMEOUT_S,
        )  # fmt: skip
        assert result.records == figures["records"] == RECORDS
        assert figures["failures"] == figures["undelivered"] == 0
        assert result.records_per_s > 0 and figures["cpu_s"] > 0 and result.server_cpu_s >= 0

        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "c-check",
                             "enable.auto.commit": False})  # fmt: skip
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
            values: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < RECORDS and time.monotonic() < deadline:
                for m in consumer.consume(10_000, timeout=1.0):
                    value = m.value()
                    assert m.error() is None and value is not None, m.error()
                    values.append(value)
        finally:
            consumer.close()
    assert len(values) == RECORDS
    # One random payload, sent unchanged by every record.
    assert len(set(values)) == 1 and len(values[0]) == RECORD_BYTES


def test_c_producer_refuses_a_bad_property(tmp_path: Path) -> None:
    """A librdkafka property it does not know is an error before anything is produced."""
    import subprocess

    exe = cproducer.build(tmp_path / "cache")
    done = subprocess.run([str(exe), "127.0.0.1:1", "t", "1", "1", "no.such.property=1"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 2 and "no.such.property" in done.stderr
