"""The sink of ``format("tidegate")`` on a real local Spark: idempotent writes, and
``exactly_once=true`` (Kafka transactions the driver commits with Spark's batch) across a
query restart that runs a committed batch again, and a failed write that Spark aborts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from native import create_topic, produce, server, spark_session  # type: ignore[import-not-found]

from tests.clients.server import Tidegate


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("tidegate-native-sink")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def tidegate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    s = server(tmp_path_factory.mktemp("tidegate-sink"))
    yield s
    s.close()


def _values(spark: Any, b: str, topic: str, isolation: str) -> list[str]:
    rows = (
        spark.read.format("tidegate").option("kafka.bootstrap.servers", b).option("subscribe", topic)
        .option("kafka.isolation.level", isolation).load()
        .selectExpr("CAST(value AS STRING) v").collect()
    )
    return sorted(r.v for r in rows)


def test_batch_write_idempotent_and_aborted_exactly_once(spark: Any, tidegate: Tidegate) -> None:
    b = tidegate.bootstrap
    create_topic(b, "sink-plain", 2)
    df = spark.createDataFrame([(f"k{i}", f"v{i:03}", i % 2) for i in range(50)], ["key", "value", "partition"])
    df.write.mode("append").format("tidegate").option("kafka.bootstrap.servers", b).option("topic", "sink-plain").save()
    assert _values(spark, b, "sink-plain", "read_uncommitted") == [f"v{i:03}" for i in range(50)]
    by_partition = (spark.read.format("tidegate").option("kafka.bootstrap.servers", b)
                    .option("subscribe", "sink-plain").load()
                    .selectExpr("partition", "CAST(key AS STRING) k").collect())
    assert all(int(r.k[1:]) % 2 == r.partition for r in by_partition)

    # A task fails: Spark aborts the write, the other tasks' transactions are aborted.
    create_topic(b, "sink-abort", 1)
    from pyspark.sql.functions import udf

    def fail_at_40(v: str) -> str:
        if v == "v040":
            raise ValueError("a task fails on purpose")
        return v

    explode_at_40 = udf(fail_at_40, "string", useArrow=False)
    # One task, in order: 40 records go out in its transaction before it fails.
    one_task = spark.createDataFrame(spark.sparkContext.parallelize([(f"k{i}", f"v{i:03}") for i in range(50)], 1),
                                     ["key", "value"])
    failing = one_task.withColumn("value", explode_at_40("value"))
    with pytest.raises(Exception, match="a task fails on purpose"):
        (failing.write.mode("append").format("tidegate").option("kafka.bootstrap.servers", b)
         .option("topic", "sink-abort").option("exactly_once", "true")
         .option("transactionalIdPrefix", "abort-test").save())
    assert _values(spark, b, "sink-abort", "read_committed") == []
    # No transaction is left open: the last stable offset is the high watermark.
    admin = AdminClient({"bootstrap.servers": b})
    tp = TopicPartition("sink-abort", 0)

    def latest(isolation: IsolationLevel) -> int:
        return int(admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation)[tp].result().offset)

    assert latest(IsolationLevel.READ_COMMITTED) == latest(IsolationLevel.READ_UNCOMMITTED)


def _run(spark: Any, b: str, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("tidegate").option("kafka.bootstrap.servers", b)
        .option("subscribe", "eos-in").option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20").load()
        .selectExpr("key", "value")
        .writeStream.format("tidegate").option("kafka.bootstrap.servers", b)
        .option("topic", "eos-out").option("exactly_once", "true")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()


def test_exactly_once_stream_across_a_restart_that_repeats_a_batch(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    b = tidegate.bootstrap
    create_topic(b, "eos-in", 2)
    create_topic(b, "eos-out", 2)
    produce(b, [{"topic": "eos-in", "partition": i % 2, "value": f"e{i:03}".encode()} for i in range(60)])
    checkpoint = tmp_path / "checkpoint"
    _run(spark, b, checkpoint)
    assert _values(spark, b, "eos-out", "read_committed") == [f"e{i:03}" for i in range(60)]
    # The query dies after the sink committed its last batch but before Spark recorded
    # it: the restart runs that batch again.
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    produce(b, [{"topic": "eos-in", "partition": i % 2, "value": f"e{i:03}".encode()} for i in range(60, 70)])
    _run(spark, b, checkpoint)
    assert last.exists(), "the restarted query did not run the batch again"
    committed = _values(spark, b, "eos-out", "read_committed")
    assert committed == [f"e{i:03}" for i in range(70)]
    assert _values(spark, b, "eos-out", "read_uncommitted") == committed
    batch = json.loads((checkpoint / "offsets" / last.name).read_text().splitlines()[-1])
    assert set(batch) == {"eos-in"}
