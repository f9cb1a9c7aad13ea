"""The sink of ``format("tidegate")`` into a stream of a scope other than the Kafka one,
with Pravega's connector's columns: ``event`` (string or binary) and an optional
``routing_key`` (string). Rows go out with ``SegmentService.AppendEvents``.

With ``exactly_once=true`` each task appends into a stream transaction of its own and
leaves it open; the driver commits them when Spark commits the batch, after recording
its decision (the batch id and its transactions) as the one event of the decision
stream ``<stream>.sink.<prefix>``. A replayed batch whose decision is recorded commits
the recorded transactions (again: committing is idempotent) and aborts the replay's."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import grpc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import Row, StructType
from tidegate.protocol import events
from tidegate.protocol.controller_grpc import pb2
from tidegate.spark.options import OptionError
from tidegate.spark.stream_client import StreamClient, StreamSourceError
from tidegate.spark.stream_options import StreamWriteOptions
from tidegate.spark.stream_planning import plan

log = logging.getLogger(__name__)

_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"
#: One AppendEvents request carries at most this much (the gRPC message limit is 4 MiB).
_REQUEST_BYTES = 1 << 20
_DECISION_KEY = "decision"


@dataclass
class StreamWritten(WriterCommitMessage):
    events: int
    txn: str | None = None
    prefix: str | None = None


def _bytes(value: Any, column: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise OptionError(f"column {column} must be string or binary, not {type(value).__name__}")


def _requests(rows: Iterator[Row], schema: StructType) -> Iterator[list[Any]]:
    names = set(schema.fieldNames())
    if "event" not in names:
        raise OptionError("a stream sink needs an event column (string or binary)")
    keyed = "routing_key" in names
    batch: list[Any] = []
    size = 0
    for row in rows:
        if row["event"] is None:
            raise OptionError("a row has a null event")
        data = _bytes(row["event"], "event")
        key = str(row["routing_key"]) if keyed and row["routing_key"] is not None else ""
        if len(data) + len(key) > events.EVENT_BYTES_MAX:
            raise OptionError(f"an event of {len(data)} bytes is larger than {events.EVENT_BYTES_MAX}")
        if batch and size + len(data) + len(key) > _REQUEST_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(pb2.Event(routing_key=key, data=data))
        size += len(data) + len(key) + 16
    if batch:
        yield batch


def _write(opts: StreamWriteOptions, schema: StructType, rows: Iterator[Row], exactly_once: bool) -> StreamWritten:
    client = StreamClient(opts.read)
    txn: str | None = None
    prefix: str | None = None
    try:
        if exactly_once:
            ctx = TaskContext.get()
            prefix = opts.prefix or (ctx.getLocalProperty(_QUERY_ID) if ctx is not None else None)
            if not prefix:
                raise OptionError("exactly_once=true needs transactionalIdPrefix outside a streaming query")
            txn = client.create_transaction(opts.transaction_timeout_ms)
        count = 0
        pinged = time.monotonic()
        try:
            for request in _requests(rows, schema):
                client.append(request, txn)
                count += len(request)
                if txn is not None and time.monotonic() - pinged > opts.transaction_timeout_ms / 3000:
                    # A long task renews its transaction's lease as it writes.
                    client.ping_transaction(txn, opts.transaction_timeout_ms)
                    pinged = time.monotonic()
        except BaseException:
            if txn is not None:
                client.end_transaction(txn, commit=False)
            raise
        return StreamWritten(count, txn, prefix)
    finally:
        client.close()


def _decision_stream(opts: StreamWriteOptions, prefix: str) -> StreamClient:
    name = f"{opts.read.stream}.sink.{prefix}"[:255]
    return StreamClient(replace(opts.read, stream=name))


def _last_decision(log_client: StreamClient) -> dict[str, Any] | None:
    """The decision stream's last event (it is truncated to hold one)."""
    start, end = log_client.cut(tail=False), log_client.cut(tail=True)
    last = None
    for r in plan(start, end, log_client.segments(), log_client.state, log_client.successors, True):
        offset = r.start
        while offset < r.end:
            page = log_client.read(r.segment_id, offset, 1 << 20)
            for e in events.parse(page.data, page.offset):
                last = json.loads(e.data)
            offset = page.next_offset
    return last


def _commit(opts: StreamWriteOptions, messages: list[Any], batch_id: int) -> None:
    written = [m for m in messages if isinstance(m, StreamWritten) and m.txn is not None]
    if not written:
        return
    prefix = written[0].prefix or "batch"
    txns = [m.txn for m in written if m.txn is not None]
    decisions = _decision_stream(opts, prefix)
    client = StreamClient(opts.read)
    try:
        decisions.ensure_stream()
        before = decisions.cut(tail=True)
        last = _last_decision(decisions)
        if last is not None and last.get("batch") == batch_id:
            # A replay of a batch already decided: its first run's transactions stand.
            for txn in txns:
                if txn not in last["txns"]:
                    client.end_transaction(txn, commit=False)
            txns = list(last["txns"])
        else:
            decision = json.dumps({"batch": batch_id, "txns": txns}).encode()
            decisions.append([pb2.Event(routing_key=_DECISION_KEY, data=decision)], None)
            decisions.truncate(before)
        for txn in txns:
            client.end_transaction(txn, commit=True)
    finally:
        client.close()
        decisions.close()


def _abort(opts: StreamWriteOptions, messages: list[Any]) -> None:
    client = StreamClient(opts.read)
    try:
        for m in messages:
            if isinstance(m, StreamWritten) and m.txn is not None:
                try:
                    client.end_transaction(m.txn, commit=False)
                except (grpc.RpcError, StreamSourceError) as exc:
                    log.warning("aborting transaction %s: %s", m.txn, exc)  # timed out already
    finally:
        client.close()


class StreamStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: StreamWriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[Row]) -> StreamWritten:
        return _write(self.opts, self.schema, iterator, self.opts.exactly_once)

    def commit(self, messages: list[Any], batchId: int) -> None:
        _commit(self.opts, messages, batchId)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _abort(self.opts, messages)


class StreamBatchWriter(DataSourceWriter):
    """A batch write: with exactly_once, batch 0 of the prefix's decisions (writing the
    same prefix twice commits once)."""

    def __init__(self, opts: StreamWriteOptions, schema: StructType) -> None:
        if opts.exactly_once and not opts.prefix:
            raise OptionError("exactly_once=true needs transactionalIdPrefix outside a streaming query")
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[Row]) -> StreamWritten:
        return _write(self.opts, self.schema, iterator, self.opts.exactly_once)

    def commit(self, messages: list[Any]) -> None:
        _commit(self.opts, messages, 0)

    def abort(self, messages: list[Any]) -> None:
        _abort(self.opts, messages)
