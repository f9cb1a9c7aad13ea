"""The sink of ``format("tidegate")``: rows with Spark's Kafka sink columns (``value``;
optional ``key``, ``topic``, ``partition``, ``headers``) written with an idempotent
producer (at-least-once) or, with ``exactly_once=true``, in Kafka transactions that the
driver commits when Spark commits the batch (``txn``)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType
from tidegate.spark.options import OptionError, WriteOptions
from tidegate.spark.sink_log import (
    Decision,
    OpenTransaction,
    decision_topic,
    ensure_topic,
    read_decision,
    record_decision,
)
from tidegate.spark.txn import (
    FLUSH_TIMEOUT_S,
    TransactionEnder,
    TransactionError,
    send_all,
    write_transaction,
)

log = logging.getLogger(__name__)

#: Local properties Spark's micro-batch execution sets on every task.
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


@dataclass
class Written(WriterCommitMessage):
    rows: int
    txn: OpenTransaction | None = None
    #: The decision log of the task's query (exactly once).
    log_topic: str | None = None
    #: An earlier run's decision of this batch: the task wrote nothing, the driver commits it.
    decided: Decision | None = None

#: Idempotent producers kept per Python worker across tasks and micro-batches, as Spark's
#: Kafka sink caches its producers (one per configuration).
_PRODUCERS: dict[tuple[tuple[str, str], ...], Producer] = {}


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


def _cached_producer(opts: WriteOptions) -> Producer:
    config: dict[str, Any] = {"bootstrap.servers": opts.bootstrap, "enable.idempotence": True, "acks": "all",
                              "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000)}
    config.update(opts.client)
    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(config)
    return producer


def _write_idempotent(opts: WriteOptions, schema: StructType, rows: Iterator[Row]) -> Written:
    records = _records(rows, schema, opts.topic)
    first = next(records, None)
    if first is None:
        return Written(0)  # an empty task opens nothing
    producer = _cached_producer(opts)
    # Every record's delivery timeout (message.timeout.ms) ends before the flush's.
    return Written(send_all(producer, itertools.chain([first], records), [], FLUSH_TIMEOUT_S + 30))


def _write_transactional(opts: WriteOptions, schema: StructType, rows: Iterator[Row], batch_id: int) -> Written:
    ctx = TaskContext.get()
    if ctx is None or opts.topic is None:
        raise OptionError("exactly_once=true needs the option topic")
    prefix = opts.transactional_id_prefix or ctx.getLocalProperty(_QUERY_ID)
    if not prefix:
        raise OptionError("exactly_once=true needs transactionalIdPrefix outside a streaming query")
    return write_in_transaction(opts, schema, rows, batch_id, prefix, ctx.partitionId())


def write_in_transaction(opts: WriteOptions, schema: StructType, rows: Iterator[Row], batch_id: int,
                         prefix: str, task: int) -> Written:
    """One task's rows of a batch in a transaction left open for the driver (none when
    the task has no row or an earlier run decided the batch)."""
    assert opts.topic is not None
    records = _records(rows, schema, opts.topic)
    first = next(records, None)
    if first is None:
        # An empty task opens no transaction: a replay of it is empty too.
        return Written(0)
    log_topic = decision_topic(opts.topic, prefix)
    decision = read_decision(opts.bootstrap, log_topic, opts.client)
    if decision is not None and decision.batch_id >= batch_id:
        # An earlier run of the query decided this batch: the driver commits that run's
        # transactions, nothing is written twice.
        return Written(0, None, log_topic, decision if decision.batch_id == batch_id else None)
    txn = write_transaction(opts.bootstrap, f"{prefix}-{task}", opts.transaction_timeout_ms, opts.client,
                            first, records)
    return Written(txn.rows, txn, log_topic)


def end_all(opts: WriteOptions, messages: list[Any], batch_id: int, commit: bool) -> None:
    """The driver's end of a batch. A commit first records the decision (the transactions
    of this run, or those of the earlier run that decided the batch), then commits them."""
    written = [m for m in messages if isinstance(m, Written)]
    txns = [m.txn for m in written if m.txn is not None]
    earlier = next((m.decided for m in written if m.decided is not None), None)
    log_topic = next((m.log_topic for m in written if m.log_topic is not None), None)
    if commit and earlier is not None:
        if txns:
            raise TransactionError(f"batch {batch_id} was decided by an earlier run, yet tasks wrote it again")
        txns = list(earlier.txns)
    elif commit and txns and log_topic is not None:
        record_decision(opts.bootstrap, log_topic, Decision(batch_id, tuple(txns)), opts.client)
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


def _prepare(opts: WriteOptions) -> None:
    """On the driver, before any task: the output topic exists (created as auto-create
    would), so no task waits on a missing one."""
    if opts.topic is not None:
        ensure_topic(opts.bootstrap, opts.topic, opts.client)


class KafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        _prepare(opts)

    def write(self, iterator: Iterator[Row]) -> Written:
        if not self.opts.exactly_once:
            return _write_idempotent(self.opts, self.schema, iterator)
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
        if raw is None:
            raise OptionError("exactly_once=true: Spark gave the task no micro-batch id")
        return _write_transactional(self.opts, self.schema, iterator, int(raw))

    def commit(self, messages: list[Any], batchId: int) -> None:
        end_all(self.opts, messages, batchId, commit=True)

    def abort(self, messages: list[Any], batchId: int) -> None:
        end_all(self.opts, messages, batchId, commit=False)


class KafkaBatchWriter(DataSourceWriter):
    """A batch write: one transaction per task with exactly_once (batch id 0 of the
    prefix's markers, so writing the same prefix twice commits once)."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        _prepare(opts)

    def write(self, iterator: Iterator[Row]) -> Written:
        if not self.opts.exactly_once:
            return _write_idempotent(self.opts, self.schema, iterator)
        return _write_transactional(self.opts, self.schema, iterator, 0)

    def commit(self, messages: list[Any]) -> None:
        end_all(self.opts, messages, 0, commit=True)

    def abort(self, messages: list[Any]) -> None:
        end_all(self.opts, messages, 0, commit=False)
