"""What Spark 4's Kafka source does per micro-batch and what its sink does, replayed
with kafka-clients 4.3.0 (``java/SparkSourceReplay.java`` says call by call)."""

from __future__ import annotations

import pytest

from tests.clients.server import Tidegate
from tests.java.conftest import Java


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_source_and_sink_replay(java: Java, tidegate_groups: Tidegate, isolation: str) -> None:
    out = java.run(
        "SparkSourceReplay", tidegate_groups.bootstrap, f"spark-{isolation}", "4", "3", "40",
        "1700000000000", isolation,
    )
    assert "OK spark replay" in out, out
    assert out.count("read 40 until") == 3, out
    assert "data loss detected below" in out, out
