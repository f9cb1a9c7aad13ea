"""``format("tidegate")`` reads of Kafka topics on a real local Spark (``local[2]``)
against a real ``tidegate serve``: exact offsets, headers, timestamps, minPartitions,
maxOffsetsPerTrigger, a restart from the checkpoint, partitions added while running,
failOnDataLoss after DeleteRecords."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from native import create_topic, produce, server, spark_session, wait_for  # type: ignore[import-not-found]

from tests.clients.server import Tidegate

TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("tidegate-native-source")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def tidegate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    s = server(tmp_path_factory.mktemp("tidegate-source"))
    yield s
    s.close()


def _records(topic: str, partitions: int, per_partition: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        {"topic": topic, "partition": p, "key": f"k{p}-{i}".encode(), "value": f"v{p}-{i}".encode(),
         "timestamp": TS0 + i * 1000, "headers": [("h", f"{p}:{i}".encode())]}
        for p in range(partitions) for i in range(first, first + per_partition)
    ]


def test_batch_read_exact_offsets_headers_timestamps(spark: Any, tidegate: Tidegate) -> None:
    b = tidegate.bootstrap
    create_topic(b, "src-batch", 3)
    produce(b, _records("src-batch", 3, 20))
    df = (
        spark.read.format("tidegate").option("kafka.bootstrap.servers", b)
        .option("subscribe", "src-batch").option("includeHeaders", "true")
        .option("startingOffsets", json.dumps({"src-batch": {"0": 5, "1": -2, "2": 19}}))
        .option("endingOffsets", json.dumps({"src-batch": {"0": 10, "1": -1, "2": -1}}))
        .option("minPartitions", "6")
        .load()
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    assert df.rdd.getNumPartitions() >= 6
    rows = df.collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(20)] + [(2, 19)]
    for r in rows:
        i = r.offset
        assert (r.topic, r.key, r.value) == ("src-batch", f"k{r.partition}-{i}".encode(), f"v{r.partition}-{i}".encode())
        assert int(r.timestamp.timestamp() * 1000) == TS0 + i * 1000
        assert r.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("h", f"{r.partition}:{i}".encode())]
    # By timestamp: the first record at or after it, per partition.
    by_ts = (
        spark.read.format("tidegate").option("kafka.bootstrap.servers", b)
        .option("assign", json.dumps({"src-batch": [1]}))
        .option("startingOffsetsByTimestamp", json.dumps({"src-batch": {"1": TS0 + 15_500}}))
        .load().select("offset").collect()
    )
    assert sorted(r.offset for r in by_ts) == [16, 17, 18, 19]
    # The topic named as the Kafka scope's stream.
    as_stream = (spark.read.format("tidegate").option("kafka.bootstrap.servers", b)
                 .option("scope", "kafka").option("stream", "src-batch")
                 .option("start_stream_cut", "earliest").load())
    assert as_stream.count() == 60


def test_bad_options_are_clear_errors(spark: Any, tidegate: Tidegate) -> None:
    def reader() -> Any:  # options accumulate on a DataFrameReader
        return spark.read.format("tidegate").option("kafka.bootstrap.servers", tidegate.bootstrap)

    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        reader().option("subscribe", "a").option("assign", '{"a":[0]}').load().collect()
    with pytest.raises(Exception, match="option startingOffsets must be earliest or a JSON"):
        reader().option("subscribe", "a").option("startingOffsets", "sideways").load().collect()


def _run_stream(spark: Any, b: str, topic: str, checkpoint: Path, max_per_trigger: int | None) -> list[list[tuple[int, int]]]:
    batches: list[list[tuple[int, int]]] = []
    reader = (spark.readStream.format("tidegate").option("kafka.bootstrap.servers", b)
              .option("subscribePattern", f"{topic}.*").option("startingOffsets", "earliest"))
    if max_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    query = (
        reader.load().writeStream
        .foreachBatch(lambda df, _id: batches.append(sorted((r.partition, r.offset) for r in df.collect())))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(120), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return [b for b in batches if b]


def test_streaming_rate_limit_restart_and_new_partitions(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    b = tidegate.bootstrap
    create_topic(b, "src-stream", 2)
    produce(b, _records("src-stream", 2, 30))
    checkpoint = tmp_path / "checkpoint"
    first = _run_stream(spark, b, "src-stream", checkpoint, max_per_trigger=25)
    assert all(len(batch) <= 25 for batch in first), [len(x) for x in first]
    assert sorted(x for batch in first for x in batch) == [(p, o) for p in range(2) for o in range(30)]
    # The checkpoint holds Spark's Kafka offsets.
    last = sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)[-1]
    assert json.loads(last.read_text().splitlines()[-1]) == {"src-stream": {"0": 30, "1": 30}}
    # More records and a new partition: the restart reads exactly those.
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_partitions([NewPartitions("src-stream", 3)])["src-stream"].result(30)
    produce(b, _records("src-stream", 3, 7, first=30)[:14] + _records("src-stream", 3, 7)[14:])
    second = _run_stream(spark, b, "src-stream", checkpoint, max_per_trigger=None)
    assert sorted(x for batch in second for x in batch) == (
        [(p, o) for p in range(2) for o in range(30, 37)] + [(2, o) for o in range(7)])


def test_fail_on_data_loss_after_delete_records(spark: Any, tidegate: Tidegate) -> None:
    b = tidegate.bootstrap
    create_topic(b, "src-loss", 1)
    produce(b, _records("src-loss", 1, 10))
    admin = AdminClient({"bootstrap.servers": b})
    admin.delete_records([TopicPartition("src-loss", 0, 4)])[TopicPartition("src-loss", 0, 4)].result(30)

    def read(fail: str) -> list[int]:
        return sorted(r.offset for r in (
            spark.read.format("tidegate").option("kafka.bootstrap.servers", b)
            .option("subscribe", "src-loss").option("failOnDataLoss", fail)
            .option("startingOffsets", json.dumps({"src-loss": {"0": 0}}))
            .load().select("offset").collect()))

    with pytest.raises(Exception, match="were deleted before they were read"):
        read("true")
    assert read("false") == list(range(4, 10))


def test_topic_scaled_while_a_query_reads_it(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    """The topic's stream is split (REST scale) between micro-batches and during them:
    no record lost, none twice, each key's records in the order they were produced; then
    partitions are added and the running query reads them."""
    import httpx

    b = tidegate.bootstrap
    create_topic(b, "src-scaled", 4)
    rest = f"http://127.0.0.1:{tidegate.rest_port}/v1/scopes/kafka/streams/src-scaled"
    seen: list[tuple[int, str, int]] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset, r.key.decode(), int(r.value)) for r in df.collect())
        seen.extend((batch_id, key, seq) for _p, _o, key, seq in rows)

    query = (
        spark.readStream.format("tidegate").option("kafka.bootstrap.servers", b)
        .option("subscribe", "src-scaled").option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "200").load()
        .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds").start()
    )
    keys = [f"key{i}" for i in range(8)]
    try:
        for round_ in range(4):
            produce(b, [{"topic": "src-scaled", "key": k.encode(), "value": str(round_ * 25 + i).encode()}
                        for i in range(25) for k in keys])
            segments = httpx.get(f"{rest}/segments", timeout=30).json()["segments"]
            widest = max(segments, key=lambda s: s["keyEnd"] - s["keyStart"])
            mid = (widest["keyStart"] + widest["keyEnd"]) / 2
            answer = httpx.post(f"{rest}/scale", timeout=30, json={
                "sealedSegments": [widest["id"]],
                "newKeyRanges": [[widest["keyStart"], mid], [mid, widest["keyEnd"]]]})
            assert answer.status_code < 300, answer.text
        wait_for("every record", lambda: len(seen) >= 100 * len(keys), 120)
        # Partitions added while the query runs are read from their start.
        admin = AdminClient({"bootstrap.servers": b})
        admin.create_partitions([NewPartitions("src-scaled", 6)])["src-scaled"].result(30)
        produce(b, [{"topic": "src-scaled", "partition": 4 + i % 2, "key": b"late", "value": str(i).encode()}
                    for i in range(20)])
        wait_for("the new partitions' records", lambda: len([x for x in seen if x[1] == "late"]) >= 20, 120)
    finally:
        query.stop()
    assert len(httpx.get(f"{rest}/segments", timeout=30).json()["segments"]) > 4
    for k in keys:
        assert [seq for _b, key, seq in seen if key == k] == list(range(100)), k
    assert sorted(seq for _b, key, seq in seen if key == "late") == list(range(20))
