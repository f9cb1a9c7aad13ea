"""librdkafka (confluent-kafka) against fetch sessions and leader epochs: it sends
sessionless fetches (session id 0, epoch -1: it does not implement KIP-227), which must
open no session, and the current leader epoch from Metadata in every fetch; a consumer
resuming from an offset committed with its epoch validates it (KIP-320)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.clients.server import Tidegate

QUIET = {"log_level": 3}


def _metric(server: Tidegate, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 0\n")
    tg = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config, rest=True)
    tg.start()
    try:
        yield tg
    finally:
        tg.close()


def _read(consumer: Consumer, n: int) -> list[tuple[int, int | None]]:
    """``(offset, leader epoch)`` of ``n`` records; any consumer error fails."""
    out: list[tuple[int, int | None]] = []
    for _ in range(100):
        for msg in consumer.consume(100, 0.3):
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.leader_epoch()))
        if len(out) >= n:
            break
    assert len(out) == n, out
    return out


def test_librdkafka_sessionless_fetches_and_epochs(server: Tidegate) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, **QUIET})
    for i in range(10):
        producer.produce("rk-epochs", b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    conf = {"bootstrap.servers": server.bootstrap, "group.id": "rk", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **QUIET}
    first = Consumer(conf)
    first.assign([TopicPartition("rk-epochs", 0, 0)])
    got = _read(first, 10)
    assert [e for _, e in got] == [0] * 10  # the epoch stamped on append
    first.commit(asynchronous=False)
    first.close()
    for i in range(5):
        producer.produce("rk-epochs", b"w%d" % i, partition=0)
    assert producer.flush(30) == 0
    second = Consumer(conf)
    second.subscribe(["rk-epochs"])
    got = _read(second, 5)
    assert [o for o, _ in got] == list(range(10, 15))
    # A position with an epoch is validated first (OffsetForLeaderEpoch) and then read.
    second.seek(TopicPartition("rk-epochs", 0, 3, leader_epoch=0))
    got = _read(second, 12)
    assert got[0][0] == 3
    second.close()
    assert _metric(server, 'tidegate_fetch_requests_total{kind="sessionless"}') >= 2
    assert _metric(server, 'tidegate_fetch_requests_total{kind="full"}') == 0
    assert _metric(server, "tidegate_fetch_sessions") == 0
    assert _metric(server, 'tidegate_request_seconds_count{api="OffsetForLeaderEpoch"}') >= 1
