"""Fixtures' helpers for ``format("tidegate")`` tests: one local Spark session per
module with the data source registered, a server, and confluent-kafka helpers."""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.server import Tidegate


def spark_session(app: str) -> Any:
    # Executors' Python workers must import tidegate.spark: this interpreter's venv.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[2]").appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.streaming.pollingDelay", "50ms")
            .getOrCreate()
        )
        from tidegate.spark import register

        register(session)
    return session


def server(tmp: Path) -> Tidegate:
    config = tmp / "tidegate.toml"
    config.write_text("[groups]\ninitial_rebalance_delay_ms = 100\n")
    s = Tidegate(tmp / "data", tmp / "tidegate.log", config, rest=True)
    s.start()
    return s


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[str] = []
    for r in records:
        producer.produce(on_delivery=lambda e, m: errors.append(str(e)) if e else None, **r)
    assert producer.flush(30) == 0
    assert not errors, errors


def wait_for(what: str, check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
