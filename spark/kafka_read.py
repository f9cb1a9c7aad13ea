"""Executor side: one partition's records ``[start, end)`` as Arrow record batches, read
with confluent-kafka (librdkafka) from ``assign``ed offsets, never a consumer group."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from tidegate.spark.kafka_meta import KafkaSourceError
from tidegate.spark.options import ReadOptions


@dataclass
class OffsetRange(InputPartition):
    """One Spark task: records of ``topic``-``partition`` with ``start <= offset < end``."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, (self.topic, self.partition, self.start, self.end))


def _consumer(opts: ReadOptions) -> Any:
    config: dict[str, Any] = {
        "bootstrap.servers": opts.bootstrap,
        # librdkafka needs a group id; offsets are never committed to it.
        "group.id": f"tidegate-spark-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Out of range (deleted records) is reported to us, never silently reset.
        "auto.offset.reset": "error",
        "isolation.level": "read_uncommitted",
        # librdkafka's default (1 s) pauses fetching whenever its queue is full.
        "fetch.queue.backoff.ms": 10,
    }
    config.update(opts.client)
    return Consumer(config)


class _Columns:
    def __init__(self, headers: bool) -> None:
        self.headers = headers
        self.clear()

    def clear(self) -> None:
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.offset: list[int] = []
        self.ts_us: list[int | None] = []
        self.ts_type: list[int] = []
        self.hdrs: list[list[dict[str, Any]] | None] = []

    def extend(self, msgs: list[Any]) -> None:
        self.key += [m.key() for m in msgs]
        self.value += [m.value() for m in msgs]
        self.offset += [m.offset() for m in msgs]
        stamps = [m.timestamp() for m in msgs]
        self.ts_us += [ts * 1000 if ts >= 0 else None for _kind, ts in stamps]
        # Spark's timestampType: 0 CreateTime, 1 LogAppendTime.
        self.ts_type += [1 if kind == TIMESTAMP_LOG_APPEND_TIME else 0 for kind, _ts in stamps]
        if self.headers:
            for m in msgs:
                raw = m.headers()
                self.hdrs.append([{"key": k, "value": v} for k, v in raw] if raw else [])

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offset)
        arrays = [
            pa.array(self.key, pa.binary()), pa.array(self.value, pa.binary()),
            pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
            pa.array(self.offset, pa.int64()),
            pa.array(self.ts_us, schema.field("timestamp").type),
            pa.array(self.ts_type, pa.int32()),
        ]
        if self.headers:
            arrays.append(pa.array(self.hdrs, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def arrow_schema(schema: StructType) -> pa.Schema:
    # The exact Arrow schema PySpark checks returned batches against.
    return to_arrow_schema(schema, timezone="UTC")


def read_range(opts: ReadOptions, schema: StructType, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of the range in offset order, ``opts.batch_rows`` per batch. Records
    deleted before they were read fail the task (``failOnDataLoss``) or are skipped."""
    if r.start >= r.end:
        return
    pa_schema = arrow_schema(schema)
    cols = _Columns(opts.include_headers)
    consumer = _consumer(opts)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=30.0)
        start = r.start
        if start < low:
            if opts.fail_on_data_loss:
                raise KafkaSourceError(
                    f"{r.topic}-{r.partition}: offsets {start} to {min(low, r.end) - 1} were deleted "
                    "before they were read (set failOnDataLoss=false to skip lost records)")
            start = low
        if start >= r.end:
            return
        consumer.assign([TopicPartition(r.topic, r.partition, start)])
        position = start
        deadline = time.monotonic() + opts.poll_timeout_ms / 1000
        while position < r.end:
            msgs = consumer.consume(num_messages=min(opts.batch_rows, 10_000), timeout=1.0)
            good = []
            for msg in msgs:
                err = msg.error()
                if err is None:
                    good.append(msg)
                elif err.code() == KafkaError._AUTO_OFFSET_RESET and not opts.fail_on_data_loss:
                    consumer.assign([TopicPartition(r.topic, r.partition, OFFSET_BEGINNING)])
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaSourceError(f"{r.topic}-{r.partition} at offset {position}: {err}")
            if good and good[-1].offset() >= r.end:
                good = [m for m in good if m.offset() < r.end]
                position = r.end
            if good:
                cols.extend(good)
                position = max(position, good[-1].offset() + 1)
                if len(cols.offset) >= opts.batch_rows:
                    yield cols.batch(pa_schema, r.topic, r.partition)
                    cols.clear()
            if msgs:
                deadline = time.monotonic() + opts.poll_timeout_ms / 1000
            elif position < r.end:
                # Control records (transaction markers) and compacted gaps hold no message.
                (pos,) = consumer.position([TopicPartition(r.topic, r.partition)])
                if pos.offset >= r.end:
                    break
                if time.monotonic() > deadline:
                    raise KafkaSourceError(
                        f"{r.topic}-{r.partition}: no record in {opts.poll_timeout_ms} ms at offset "
                        f"{position} (range ends at {r.end}; kafkaConsumer.pollTimeoutMs)")
        if cols.offset:
            yield cols.batch(pa_schema, r.topic, r.partition)
    finally:
        consumer.close()
