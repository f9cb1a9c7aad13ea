"""The micro-batches of docs/spark.md's quick start, with Spark's default shuffle partitions
(200) against the doc's setting (2), each with the quick start's sink (``tidegate``,
exactly once) and with Spark's ``noop`` sink (Spark alone).

`python -m bench.spark_quickstart [--partitions 2 200] [--sinks tidegate noop]`: one
`tidegate serve`; each case runs in a Spark session of its own (``local[2]``) on a topic
of its own holding the doc test's five events (three users in a window a minute ago and
a later event whose watermark closes it). Per case and micro-batch it prints Spark's
``triggerExecution`` and, from Spark's status API, the tasks run, their summed and
median executor run time: batch 0 reads the five rows, batch 1 (no input) emits the
closed windows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.systems import tidegate_server

#: A case that has not emitted its windows by then is reported as unfinished.
CASE_DEADLINE_S = 900.0


def _events(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    start_ms = (int(time.time() * 1000) - 60_000) // 10_000 * 10_000
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, user in enumerate(["u0", "u1", "u2", "u0"]):
        producer.produce(topic, key=user.encode(), value=b"clicked", timestamp=start_ms + 1000 * i)
    producer.produce(topic, key=b"late", value=b"clicked", timestamp=start_ms + 30_000)
    if producer.flush(30) != 0:
        raise RuntimeError("the input events were not acknowledged")


def _stages(ui: str, app: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages?status=complete",
                                timeout=30) as r:
        stages: list[dict[str, Any]] = json.loads(r.read())
    return stages


def _task_times_ms(ui: str, app: str, stage: dict[str, Any]) -> list[float]:
    url = (f"{ui}/api/v1/applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}"
           "/taskList?length=100000")
    with urllib.request.urlopen(url, timeout=30) as r:
        return [float(t["taskMetrics"]["executorRunTime"]) for t in json.loads(r.read())
                if t.get("taskMetrics")]


def case(bootstrap: str, partitions: int, sink: str, tmp: str) -> dict[str, Any]:
    """One quick start query until batch 1 is done; run in a process of its own."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from tidegate.spark import register

    topic = f"events-{sink}-{partitions}"
    _events(bootstrap, topic)
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.sql.shuffle.partitions", str(partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    events = (spark.readStream.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    counts = (events.select(F.col("timestamp"), F.col("key").cast("string").alias("user"))
              .withWatermark("timestamp", "10 seconds")
              .groupBy(F.window("timestamp", "10 seconds"), "user").count()
              .select(F.to_json(F.struct("window", "user", "count")).alias("value")))
    writer = counts.writeStream.outputMode("append").option("checkpointLocation", f"{tmp}/cp")
    if sink == "tidegate":
        writer = (writer.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", f"results-{partitions}").option("exactly_once", "true"))
    else:
        writer = writer.format(sink)
    started = time.monotonic()
    query = writer.start()
    try:
        while time.monotonic() - started < CASE_DEADLINE_S:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if any(p["batchId"] >= 1 for p in query.recentProgress):
                break
            time.sleep(0.5)
        progress = [p for p in query.recentProgress if p["batchId"] <= 1]
    finally:
        query.stop()
    ui, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    stages = _stages(ui, app) if ui else []
    # The aggregation's stages run ``partitions`` tasks (state store load and commit, the
    # sink's write); the reading stage runs one per Kafka partition.
    wide = [s for s in stages if s["numTasks"] == partitions]
    times = sorted(t for s in wide for t in _task_times_ms(ui, app, s)) if ui else []
    spark.stop()
    return {
        "partitions": partitions, "sink": sink,
        "batches": [{"batch": p["batchId"], "rows": p["numInputRows"],
                     "trigger_ms": p["durationMs"].get("triggerExecution")} for p in progress],
        "wide_stages": len(wide), "tasks": len(times),
        "task_run_ms_sum": round(sum(times)), "task_run_ms_median": times[len(times) // 2] if times else None,
    }


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, nargs="+", default=[2, 200])
    parser.add_argument("--sinks", nargs="+", default=["tidegate", "noop"])
    parser.add_argument("--case", nargs=3, metavar=("BOOTSTRAP", "PARTITIONS", "SINK"),
                        help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.case:
        with tempfile.TemporaryDirectory(prefix="bench-spark-qs-") as tmp:
            print(json.dumps(case(a.case[0], int(a.case[1]), a.case[2], tmp)), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="bench-spark-qs-") as tmp:
        server = tidegate_server(Path(tmp) / "data", Path(tmp), None)
        server.start(ready_timeout_s=120)
        try:
            for partitions in a.partitions:
                for sink in a.sinks:
                    before = _load()
                    started = time.monotonic()
                    run = subprocess.run(
                        [sys.executable, "-m", "bench.spark_quickstart", "--case",
                         server.bootstrap, str(partitions), sink],
                        capture_output=True, text=True, timeout=CASE_DEADLINE_S + 120,
                    )
                    lines = [x for x in run.stdout.splitlines() if x.startswith("{")]
                    if run.returncode != 0 or not lines:
                        print(f"{partitions} {sink}: failed\n{run.stderr[-3000:]}", flush=True)
                        continue
                    result = json.loads(lines[-1])
                    result["wall_s"] = round(time.monotonic() - started, 1)
                    result["load"] = f"{before} -> {_load()}"
                    print(json.dumps(result), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
