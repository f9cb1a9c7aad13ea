"""The pipeline of the Spark quick start: events read with ``format("tidegate")``, counted
per user over 10 s event-time windows with a 10 s watermark, results written to another
topic exactly once. Runs until killed.

    python pipeline_job.py BOOTSTRAP CHECKPOINT_DIR

Events are ``user,event_time_ms`` strings on the topic ``events``; results are JSON
``{"window": start_ms, "user": ..., "count": n}`` on ``results``.
"""

from __future__ import annotations

import os
import sys


def main(bootstrap: str, checkpoint: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from tidegate.spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName("tidegate-pipeline")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    events = (
        spark.readStream.format("tidegate")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .select(F.split(F.col("value").cast("string"), ",").alias("f"))
        .select(F.col("f")[0].alias("user"),
                F.timestamp_millis(F.col("f")[1].cast("long")).alias("event_time"))
    )
    counts = (
        events.withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "10 seconds"), "user")
        .count()
        .select(F.to_json(F.struct(
            F.unix_millis(F.col("window.start")).alias("window"), "user", "count")).alias("value"))
    )
    query = (
        counts.writeStream.format("tidegate").outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "results")
        .option("exactly_once", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    print("pipeline started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
