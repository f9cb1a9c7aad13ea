"""The sink of ``format("tidegate")``: rows with Spark's Kafka sink columns (``value``;
optional ``key``, ``topic``, ``partition``, ``headers``) written with an idempotent
producer (at-least-once) or, with ``exactly_once=true``, in Kafka transactions that the
driver commits when Spark commits the batch (``txn``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType
from tidegate.spark.options import OptionError, WriteOptions
from tidegate.spark.txn import (
    OpenTransaction,
    TransactionEnder,
    TransactionError,
    committed_batch,
    fenced_producer,
    leave_open,
    marker_group,
)

log = logging.getLogger(__name__)

#: Local properties Spark's micro-batch execution sets on every task.
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


@dataclass
class Written(WriterCommitMessage):
    rows: int
    txn: OpenTransaction | None = None


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise OptionError(f"key and value must be string or binary, not {type(value).__name__}")


def _records(rows: Iterator[Row], schema: StructType, topic: str | None) -> Iterator[dict[str, Any]]:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise OptionError("the sink needs a value column (string or binary)")
    if topic is None and "topic" not in names:
        raise OptionError("the sink needs the option topic or a topic column")
    for row in rows:
        record: dict[str, Any] = {
            "topic": topic or row["topic"], "value": _bytes(row["value"]),
            "key": _bytes(row["key"]) if "key" in names else None,
        }
        if record["topic"] is None:
            raise OptionError("a row has a null topic and the option topic is not set")
        if "partition" in names and row["partition"] is not None:
            record["partition"] = int(row["partition"])
        if "headers" in names and row["headers"]:
            record["headers"] = [(h["key"], _bytes(h["value"])) for h in row["headers"]]
        yield record


def _write_idempotent(opts: WriteOptions, schema: StructType, rows: Iterator[Row]) -> Written:
    config: dict[str, Any] = {"bootstrap.servers": opts.bootstrap, "enable.idempotence": True, "acks": "all"}
    config.update(opts.client)
    producer = Producer(config)
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for record in _records(rows, schema, opts.topic):
        while True:
            try:
                producer.produce(on_delivery=delivered, **record)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if errors:
            break
    producer.flush()
    if errors:
        raise KafkaException(f"{len(errors)} records not delivered; first: {errors[0]}")
    return Written(count)


def _write_transactional(opts: WriteOptions, schema: StructType, rows: Iterator[Row], batch_id: int) -> Written:
    ctx = TaskContext.get()
    if ctx is None or opts.topic is None:
        raise OptionError("exactly_once=true needs the option topic (its partition 0 keeps the batch markers)")
    prefix = opts.transactional_id_prefix or ctx.getLocalProperty(_QUERY_ID)
    if not prefix:
        raise OptionError("exactly_once=true needs transactionalIdPrefix outside a streaming query")
    task = ctx.partitionId()
    marker = marker_group(prefix, task)
    producer = fenced_producer(opts.bootstrap, f"{prefix}-{task}", opts.transaction_timeout_ms)
    if committed_batch(opts.bootstrap, marker, opts.topic) >= batch_id:
        # An earlier run of the query committed this batch: it is not written twice.
        producer.close()
        return Written(0, None)
    producer.begin_transaction()
    count = 0
    try:
        for record in _records(rows, schema, opts.topic):
            producer.send(record["topic"], value=record["value"], key=record["key"],
                          partition=record.get("partition"), headers=record.get("headers"))
            count += 1
    except BaseException:
        # Aborted now rather than at its timeout: an open transaction holds read_committed
        # readers of its partitions at its first record.
        try:
            producer.abort_transaction()
        finally:
            producer.close()
        raise
    return Written(count, leave_open(producer, marker, opts.topic, batch_id, count))


def _end_all(opts: WriteOptions, messages: list[Any], batch_id: int, commit: bool) -> None:
    txns = [m.txn for m in messages if isinstance(m, Written) and m.txn is not None]
    if not txns:
        return
    ender = TransactionEnder(opts.bootstrap)
    try:
        for txn in txns:
            try:
                ender.end(txn, commit)
            except TransactionError as exc:
                if commit:
                    raise
                # Fenced or timed out already: the coordinator aborted it.
                log.warning("%s", exc)
    finally:
        ender.close()


class KafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[Row]) -> Written:
        if not self.opts.exactly_once:
            return _write_idempotent(self.opts, self.schema, iterator)
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
        if raw is None:
            raise OptionError("exactly_once=true: Spark gave the task no micro-batch id")
        return _write_transactional(self.opts, self.schema, iterator, int(raw))

    def commit(self, messages: list[Any], batchId: int) -> None:
        _end_all(self.opts, messages, batchId, commit=True)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _end_all(self.opts, messages, batchId, commit=False)


class KafkaBatchWriter(DataSourceWriter):
    """A batch write: one transaction per task with exactly_once (batch id 0 of the
    prefix's markers, so writing the same prefix twice commits once)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[Row]) -> Written:
        if not self.opts.exactly_once:
            return _write_idempotent(self.opts, self.schema, iterator)
        return _write_transactional(self.opts, self.schema, iterator, 0)

    def commit(self, messages: list[Any]) -> None:
        _end_all(self.opts, messages, 0, commit=True)

    def abort(self, messages: list[Any]) -> None:
        _end_all(self.opts, messages, 0, commit=False)
