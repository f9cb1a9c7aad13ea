"""A streaming query whose output topic the server refuses to create fails at once with an
error naming the topic (issue 34, item 1), instead of tasks waiting on a topic that never
comes. A real local Spark session in a process of its own against ``tidegate serve``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.server import Tidegate

pytestmark = pytest.mark.timeout(300)

#: Long enough for Spark to start on a loaded machine, far below a transaction timeout.
FAIL_WITHIN_S = 180

USER_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from tidegate.spark import register

spark = SparkSession.builder.master("local[1]").getOrCreate()
register(spark)
rows = spark.readStream.format("rate").option("rowsPerSecond", "1").load()
query = (rows.selectExpr("CAST(value AS STRING) AS value").writeStream.format("tidegate")
         .option("kafka.bootstrap.servers", sys.argv[1]).option("topic", "bad topic!")
         .option("exactly_once", "true").option("checkpointLocation", sys.argv[2]).start())
try:
    query.awaitTermination(int(sys.argv[3]))
    print("QUERY STILL RUNNING", flush=True)
finally:
    query.stop()
    spark.stop()
"""


def test_a_refused_output_topic_fails_the_query_naming_it(tidegate: Tidegate, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    done = subprocess.run([sys.executable, "-c", USER_SCRIPT, tidegate.bootstrap, str(tmp_path / "cp"),
                           str(FAIL_WITHIN_S - 60)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=FAIL_WITHIN_S)
    assert "QUERY STILL RUNNING" not in done.stdout, done.stderr[-3000:]
    assert done.returncode != 0
    assert "the sink's topic 'bad topic!' does not exist and could not be created" in done.stderr, (
        done.stderr[-3000:])
