"""Spark's own ``format("kafka")`` source and sink against ``tidegate serve``.

The Kafka connector (``spark-sql-kafka-0-10`` and its dependencies) is not in any
package registry this project can reach, so this runs only when it is supplied:

- ``SPARK_KAFKA_JARS``: comma-separated jar paths (passed as ``spark.jars``), or
- ``SPARK_KAFKA_PACKAGES``: Maven coordinates (``spark.jars.packages``, as ``--packages``),
  e.g. ``org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1``.

Without them the test is reported as skipped with that reason (``-ra`` lists it), never
as passed; with ``TIDEGATE_REQUIRE_SPARK_KAFKA=1`` it fails instead.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients.server import Tidegate

JARS = os.environ.get("SPARK_KAFKA_JARS", "")
PACKAGES = os.environ.get("SPARK_KAFKA_PACKAGES", "")
REQUIRED = os.environ.get("TIDEGATE_REQUIRE_SPARK_KAFKA", "") not in ("", "0")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    if not (JARS or PACKAGES):
        message = (
            'format("kafka") did NOT run: Spark\'s Kafka connector jars are not supplied. '
            "Set SPARK_KAFKA_JARS (comma-separated jars) or SPARK_KAFKA_PACKAGES "
            "(Maven coordinates) to run it."
        )
        if REQUIRED:
            pytest.fail(message + " (TIDEGATE_REQUIRE_SPARK_KAFKA is set)")
        pytest.skip(message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.master("local[2]")
            .appName("tidegate-spark-kafka")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
        )
        if JARS:
            builder = builder.config("spark.jars", JARS)
        if PACKAGES:
            builder = builder.config("spark.jars.packages", PACKAGES)
        session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def test_spark_kafka_sink_then_batch_and_streaming_source(
    spark: Any, tidegate_groups: Tidegate, tmp_path: Any
) -> None:
    bootstrap = tidegate_groups.bootstrap
    rows = [(f"k{i}", f"v{i}") for i in range(100)]
    df = spark.createDataFrame(rows, ["key", "value"])
    # Sink: Spark's KafkaWriter (idempotent producer).
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", "spark-real"
    ).save()
    # Batch source: offsets from the AdminClient, one consumer per partition.
    got = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "spark-real")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "offset")
        .collect()
    )
    assert sorted((r.k, r.v) for r in got) == sorted(rows)
    # Streaming source, one availableNow run into a memory sink.
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "spark-real")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) v")
        .writeStream.format("memory")
        .queryName("tidegate_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    streamed = [r.v for r in spark.sql("SELECT v FROM tidegate_stream").collect()]
    assert sorted(streamed) == sorted(v for _, v in rows)
