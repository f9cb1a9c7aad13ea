"""Read throughput of ``format("tidegate")`` (a batch read on local Spark) against reading
the same topic with confluent-kafka in one process.

`python -m bench.spark_read`: one `tidegate serve`, a topic of PARTITIONS partitions
filled with RECORDS records of VALUE_BYTES (idempotent producer), then, RUNS times each:
confluent-kafka (one consumer, every partition assigned from offset 0, until all records
are in); Spark `local[CORES]` reading the topic with `format("tidegate")` and computing
`count(*)` and `sum(length(value))` (every record crosses into the JVM as Arrow). Spark's
first run is a warm-up (JVM, Python workers) and is not counted. Reported: MB/s of
record values and records/s, medians.

With ``--source stream`` (or ``both``, the default) the same for a stream of the scope
``bench`` of PARTITIONS segments, filled with ``SegmentService.AppendEvents`` (1,000 events
a call, routing keys spread): one process reading every segment with ``ReadSegment``
pages against Spark reading the stream with ``format("tidegate")`` (``controller``,
``scope``, ``stream``) computing ``count(*)`` and ``sum(length(event))``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.systems import tidegate_server

TOPIC = "bench-spark-read"
SCOPE, STREAM = "bench", "spark-read"


def _fill(bootstrap: str, partitions: int, records: int, value_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "batch.size": 1_000_000})
    value = b"x" * value_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _confluent(bootstrap: str, partitions: int, records: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-read",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    start = time.perf_counter()
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen = 0
    while seen < records:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _spark_session(cores: int):  # type: ignore[no-untyped-def]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(f"local[{cores}]").appName("bench-spark-read")
                 .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from tidegate.spark import register

    register(spark)
    return spark


def _spark(spark, bootstrap: str, records: int, value_bytes: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    row = (spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", TOPIC).load()
           .selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0])
    elapsed = time.perf_counter() - start
    assert (row.n, row.bytes) == (records, records * value_bytes), row
    return elapsed


def _grpc_address(server) -> str:  # type: ignore[no-untyped-def]
    return f"127.0.0.1:{server.argv[server.argv.index('--grpc') + 1].rsplit(':', 1)[1]}"


def _fill_stream(address: str, segments: int, records: int, value_bytes: int) -> None:
    import grpc
    from tidegate.protocol.controller_grpc import pb2, pb2_grpc

    with grpc.insecure_channel(address) as channel:
        ctl = pb2_grpc.ControllerServiceStub(channel)
        seg = pb2_grpc.SegmentServiceStub(channel)
        ctl.CreateScope(pb2.ScopeRequest(scope=SCOPE), timeout=30)
        ctl.CreateStream(pb2.CreateStreamRequest(scope=SCOPE, stream=STREAM, config=pb2.StreamConfig(
            scaling=pb2.ScalingPolicy(min_segments=segments))), timeout=30)
        value = b"x" * value_bytes
        for first in range(0, records, 1000):
            batch = [pb2.Event(routing_key=f"k{i % 64}", data=value) for i in range(first, min(records, first + 1000))]
            seg.AppendEvents(pb2.AppendEventsRequest(scope=SCOPE, stream=STREAM, events=batch), timeout=60)


def _grpc_reader(address: str, records: int) -> float:
    from tidegate.protocol import events
    from tidegate.spark.stream_client import StreamClient
    from tidegate.spark.stream_options import stream_read_options

    client = StreamClient(stream_read_options({"controller": address, "scope": SCOPE, "stream": STREAM},
                                              streaming=False))
    start = time.perf_counter()
    seen = 0
    for segment, end in client.cut(tail=True).items():
        offset = 0
        while offset < end:
            page = client.read(segment, offset, 1 << 20)
            seen += sum(1 for _e in events.parse(page.data, page.offset))
            offset = page.next_offset
    elapsed = time.perf_counter() - start
    client.close()
    assert seen == records, seen
    return elapsed


def _spark_stream(spark, address: str, records: int, value_bytes: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    row = (spark.read.format("tidegate").option("controller", address)
           .option("scope", SCOPE).option("stream", STREAM).load()
           .selectExpr("count(*) AS n", "sum(length(event)) AS bytes").collect()[0])
    elapsed = time.perf_counter() - start
    assert (row.n, row.bytes) == (records, records * value_bytes), row
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--source", choices=("topic", "stream", "both"), default="both")
    a = p.parse_args()
    topic, stream = a.source in ("topic", "both"), a.source in ("stream", "both")
    mb = a.records * a.value_bytes / 1e6
    with tempfile.TemporaryDirectory(prefix="bench-spark-read-") as tmp:
        server = tidegate_server(Path(tmp) / "data", Path(tmp), None)
        server.start(ready_timeout_s=60)
        try:
            address = _grpc_address(server)
            if topic:
                _fill(server.bootstrap, a.partitions, a.records, a.value_bytes)
            if stream:
                _fill_stream(address, a.partitions, a.records, a.value_bytes)
            spark = _spark_session(a.cores)
            spark_name = f"format(\"tidegate\"), local[{a.cores}]"
            results: dict[str, list[float]] = {}
            if topic:
                _spark(spark, server.bootstrap, a.records, a.value_bytes)  # warm-up
            else:
                _spark_stream(spark, address, a.records, a.value_bytes)
            for _ in range(a.runs):
                if topic:
                    results.setdefault("topic: confluent-kafka, one process", []).append(
                        _confluent(server.bootstrap, a.partitions, a.records))
                    results.setdefault(f"topic: {spark_name}", []).append(
                        _spark(spark, server.bootstrap, a.records, a.value_bytes))
                if stream:
                    results.setdefault("stream: ReadSegment pages, one process", []).append(
                        _grpc_reader(address, a.records))
                    results.setdefault(f"stream: {spark_name}", []).append(
                        _spark_stream(spark, address, a.records, a.value_bytes))
            spark.stop()
        finally:
            server.stop()
    print(f"{a.records} records of {a.value_bytes} B in {a.partitions} partitions/segments, {a.runs} runs (medians)")
    print("| reader | s | MB/s | records/s |\n|---|---|---|---|")
    for name, times in results.items():
        t = statistics.median(times)
        print(f"| {name} | {t:.2f} | {mb / t:.1f} | {a.records / t:,.0f} |")


if __name__ == "__main__":
    main()
