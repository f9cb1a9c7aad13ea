"""kafka-clients 4.3.0 (Java) consuming 1,000 partitions through incremental fetch
sessions (KIP-227), checked from the server's side by its fetch session metrics."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.java.conftest import Java

PARTITIONS = 1000


def metric(server: Tidegate, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m is not None, f"{name} not in /metrics"
    return float(m.group(1))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Tidegate]:
    tg = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", rest=True)
    tg.start()
    try:
        yield tg
    finally:
        tg.close()


def test_consumer_of_1000_partitions_uses_an_incremental_session(java: Java, server: Tidegate) -> None:
    out = java.run("ManyPartitionsConsumer", server.bootstrap, "many", str(PARTITIONS), "2000")
    assert f"OK many read={PARTITIONS}" in out, out
    full = metric(server, 'tidegate_fetch_requests_total{kind="full"}')
    incremental = metric(server, 'tidegate_fetch_requests_total{kind="incremental"}')
    # One full fetch opened the session; the polls after it (at least one per 100 ms of
    # the 2 s idle) were incremental.
    assert full >= 1 and incremental >= 10 and incremental > 5 * full, (full, incremental)
    assert metric(server, 'tidegate_fetch_requests_total{kind="session_error"}') == 0
    # Closing, the consumer ended its session with a final-epoch fetch.
    assert metric(server, 'tidegate_fetch_requests_total{kind="sessionless"}') >= 1
    assert metric(server, "tidegate_fetch_sessions") == 0
    assert metric(server, "tidegate_fetch_session_partitions") == 0


def test_consumer_validates_positions_with_leader_epochs(java: Java, server: Tidegate) -> None:
    out = java.run("EpochConsumer", server.bootstrap, "epochs", "10")
    assert "OK epochs" in out, out
    assert "record epoch 0" in out and "committed 10 epoch 0" in out, out
    assert "resumed read=5" in out and "seek read=13" in out, out
    # The truncation check ran: the consumer asked for its epoch's end offset.
    assert metric(server, 'tidegate_request_seconds_count{api="OffsetForLeaderEpoch"}') >= 1
