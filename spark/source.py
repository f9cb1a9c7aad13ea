"""``format("tidegate")``: the data source Spark sees (schema, batch and streaming reads of
Kafka topics and of streams of other scopes (``stream_source``), the sink). Register it with ``spark.dataSource.register(TidegateDataSource)``.

The driver plans with ``KafkaMetadata`` (AdminClient); each task reads one offset range
(``kafka_read``) and returns Arrow record batches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from tidegate.spark.kafka_meta import (
    KafkaMetadata,
    KafkaSourceError,
    from_json_offsets,
    to_json_offsets,
)
from tidegate.spark.kafka_read import OffsetRange, read_range
from tidegate.spark.options import Offsets, OptionError, ReadOptions, read_options, write_options
from tidegate.spark.planning import ranges, rate_limit
from tidegate.spark.stream_options import (
    STREAM_SCHEMA,
    is_stream_read,
    stream_read_options,
    stream_write_options,
)
from tidegate.spark.stream_source import StreamBatchReader, StreamStreamReader

#: Spark's Kafka source schema; ``headers`` only with includeHeaders=true.
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key: string, value: binary>>"


class TidegateDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidegate"

    def schema(self) -> str:
        if is_stream_read(self.options):
            return STREAM_SCHEMA
        if str(self.options.get("includeHeaders", "false")).lower() == "true":
            return f"{KAFKA_SCHEMA}, {HEADERS_FIELD}"
        return KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_stream_read(self.options):
            return StreamBatchReader(stream_read_options(self.options, streaming=False), schema)
        return KafkaBatchReader(read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if is_stream_read(self.options):
            return StreamStreamReader(stream_read_options(self.options, streaming=True), schema)
        return KafkaStreamReader(read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tidegate.spark.sink import KafkaBatchWriter
        from tidegate.spark.stream_sink import StreamBatchWriter

        if overwrite:
            raise OptionError("a topic or stream cannot be overwritten: write with mode append")
        if is_stream_read(self.options):
            return StreamBatchWriter(stream_write_options(self.options), schema)
        return KafkaBatchWriter(write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from tidegate.spark.sink import KafkaStreamWriter
        from tidegate.spark.stream_sink import StreamStreamWriter

        if is_stream_read(self.options):
            return StreamStreamWriter(stream_write_options(self.options), schema)
        return KafkaStreamWriter(write_options(self.options), schema)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        meta = KafkaMetadata(self.opts)
        tps = meta.partitions()
        if not tps:
            raise KafkaSourceError("the query reads no partition: no topic matches")
        start = meta.resolve_start(tps)
        end = meta.resolve_end(tps)
        for tp in tps:
            if end[tp] < start[tp]:
                raise KafkaSourceError(f"{tp[0]}-{tp[1]}: endingOffsets {end[tp]} is before startingOffsets {start[tp]}")
        return ranges(start, end, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no range planned Spark still runs one task, with a partition of its own.
        if isinstance(partition, OffsetRange):
            yield from read_range(self.opts, self.schema, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Spark's Kafka JSON; partitions that appear while the query runs are read
    from their earliest offset, as Spark's Kafka source reads them."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._meta: KafkaMetadata | None = None
        self._available_now: dict[tuple[str, int], int] | None = None

    def _metadata(self) -> KafkaMetadata:
        if self._meta is None:
            self._meta = KafkaMetadata(self.opts)
        return self._meta

    def initialOffset(self) -> Offsets:
        meta = self._metadata()
        return to_json_offsets(meta.resolve_start(meta.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        meta = self._metadata()
        self._available_now = meta.latest(meta.partitions())

    def _start_with_new(self, start: Offsets, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        begin = from_json_offsets(start)
        new = [tp for tp in tps if tp not in begin]
        begin.update(self._metadata().earliest(new))
        return begin

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        meta = self._metadata()
        tps = meta.partitions()
        begin = self._start_with_new(start, tps)
        latest = meta.latest(tps) if self._available_now is None else dict(self._available_now)
        # Never behind the start: a partition whose end moved back lost data (failOnDataLoss).
        latest = {tp: max(end, begin.get(tp, end)) for tp, end in latest.items() if tp in begin}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json_offsets(latest)

    def reportLatestOffset(self) -> Offsets | None:
        meta = self._metadata()
        return to_json_offsets(meta.latest(meta.partitions()))

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        stop = from_json_offsets(end)
        begin = from_json_offsets(start)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self._metadata().earliest(new))
        return ranges(begin, stop, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # With no range planned Spark still runs one task, with a partition of its own.
        if isinstance(partition, OffsetRange):
            yield from read_range(self.opts, self.schema, partition)

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        self._meta = None


def _worker_python(spark: Any) -> str | None:
    """The interpreter Spark's workers should start for this data source: this one when
    nothing chose theirs (Spark's default is ``python3`` from PATH, which may not have
    tidegate, e.g. with a venv that is not activated); None to keep Spark's choice."""
    if os.environ.get("PYSPARK_PYTHON") or spark.conf.get("spark.pyspark.python", None):
        return None
    return sys.executable or None


def _check_worker_python(python: str) -> None:
    """A local Spark's workers run ``python`` here: it must import tidegate.spark."""
    try:
        done = subprocess.run([python, "-c", "import tidegate.spark"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OptionError(f"Spark's Python workers run {python!r} (PYSPARK_PYTHON), which failed: {exc}") from exc
    if done.returncode != 0:
        raise OptionError(
            f"Spark's Python workers run {python!r} (PYSPARK_PYTHON), which cannot import tidegate.spark: "
            f"set PYSPARK_PYTHON to an interpreter where tidegate[spark] is installed (this one: {sys.executable})")


def register(spark: Any) -> None:
    """``spark.dataSource.register`` for ``format("tidegate")``. Its Python workers run
    this interpreter unless PYSPARK_PYTHON (or ``spark.pyspark.python``) names another,
    which then must be able to import tidegate."""
    sc = spark.sparkContext
    worker = _worker_python(spark)
    if worker is None and str(sc.master).startswith("local"):
        _check_worker_python(sc.pythonExec)
    chosen = sc.pythonExec
    if worker is not None:
        sc.pythonExec = worker  # read when the data source is wrapped for the JVM below
    try:
        spark.dataSource.register(TidegateDataSource)
    finally:
        sc.pythonExec = chosen
