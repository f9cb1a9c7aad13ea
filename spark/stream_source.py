"""``format("tidegate")`` over a stream of any scope but the Kafka one, as Pravega's Spark
connector reads it: the driver plans the segment ranges between two stream cuts
(``stream_planning``); each task reads one range through ``SegmentService.ReadSegment``
and returns Arrow record batches of ``STREAM_SCHEMA``. Streaming offsets are stream cuts
(``{"cut": {"<segment id>": offset}}``); each micro-batch ends at the stream's tail cut,
following successors of the segments sealed by scaling."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType
from tidegate.protocol import events
from tidegate.spark.kafka_read import arrow_schema
from tidegate.spark.stream_client import StreamClient, StreamSourceError
from tidegate.spark.stream_options import EARLIEST_CUT, LATEST_CUT, CutSpec, StreamReadOptions
from tidegate.spark.stream_planning import SegmentRange, plan

#: Spark's offset of a stream: the cut as JSON.
CutOffset = dict[str, dict[str, int]]


def _to_offset(cut: dict[int, int]) -> CutOffset:
    return {"cut": {str(k): v for k, v in sorted(cut.items())}}


def _from_offset(offset: CutOffset) -> dict[int, int]:
    return {int(k): int(v) for k, v in offset["cut"].items()}


class _Planner:
    """Driver side: cuts resolved and ranges planned with one gRPC channel."""

    def __init__(self, opts: StreamReadOptions) -> None:
        self.opts = opts
        self.client = StreamClient(opts)

    def resolve(self, spec: CutSpec | None) -> dict[int, int]:
        if spec == EARLIEST_CUT:
            return self.client.cut(tail=False)
        if spec == LATEST_CUT:
            return self.client.cut(tail=True)
        if not isinstance(spec, dict):
            raise StreamSourceError(f"no stream cut: {spec!r}")
        return dict(spec)

    def ranges(self, start: dict[int, int], end: dict[int, int]) -> list[SegmentRange]:
        return plan(start, end, self.client.segments(), self.client.state, self.client.successors,
                    self.opts.fail_on_data_loss)


class StreamBatchReader(DataSourceReader):
    def __init__(self, opts: StreamReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        planner = _Planner(self.opts)
        try:
            start, end = planner.resolve(self.opts.start), planner.resolve(self.opts.end)
            if isinstance(self.opts.end, dict) and not planner.client.at_or_after(planner.resolve(LATEST_CUT), end):
                raise StreamSourceError("end_stream_cut is ahead of the stream's tail")
            if not planner.client.at_or_after(end, start):
                raise StreamSourceError("end_stream_cut is before start_stream_cut")
            return planner.ranges(start, end)
        finally:
            planner.client.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SegmentRange):
            yield from read_segment_range(self.opts, self.schema, partition)


class StreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: StreamReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._planner: _Planner | None = None
        self._available_now: dict[int, int] | None = None
        self._end: dict[int, int] | None = None

    def _plan(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.opts)
        return self._planner

    def initialOffset(self) -> CutOffset:
        return _to_offset(self._plan().resolve(self.opts.start))

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._frontier()

    def _frontier(self) -> dict[int, int]:
        """Where the next micro-batch may end: the tail, or the end cut once it is reached
        (``latest``: the tail when this run of the query first asks, as Pravega's)."""
        planner = self._plan()
        tail = planner.resolve(LATEST_CUT)
        if self._end is None and self.opts.end is not None:
            self._end = tail if self.opts.end == LATEST_CUT else planner.resolve(self.opts.end)
        if self._end is not None:
            # A cut not yet reached in every segment waits: reading to the tail could pass it.
            return dict(self._end) if planner.client.at_or_after(tail, self._end) else {}
        return tail

    def latestOffset(self, start: CutOffset, limit: ReadLimit) -> CutOffset:
        frontier = self._frontier() if self._available_now is None else self._available_now
        return _to_offset(frontier) if frontier else start

    def partitions(self, start: CutOffset, end: CutOffset) -> Sequence[InputPartition]:
        return self._plan().ranges(_from_offset(start), _from_offset(end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SegmentRange):
            yield from read_segment_range(self.opts, self.schema, partition)

    def commit(self, end: CutOffset) -> None:
        pass

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.client.close()
            self._planner = None


class _Columns:
    def __init__(self) -> None:
        self.event: list[bytes] = []
        self.segment: list[int] = []
        self.offset: list[int] = []
        self.key: list[str | None] = []

    def batch(self, schema: pa.Schema, scope: str, stream: str) -> pa.RecordBatch:
        n = len(self.offset)
        arrays = [
            pa.array(self.event, pa.binary()), pa.array([scope] * n, pa.string()),
            pa.array([stream] * n, pa.string()), pa.array(self.segment, pa.int64()),
            pa.array(self.offset, pa.int64()), pa.array(self.key, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_segment_range(opts: StreamReadOptions, schema: StructType, r: SegmentRange) -> Iterator[pa.RecordBatch]:
    """Every event of the range in offset order, ``opts.batch_rows`` per batch."""
    pa_schema = arrow_schema(schema)
    client = StreamClient(opts)
    cols = _Columns()
    try:
        offset = r.start
        idle_deadline = time.monotonic() + 60
        while offset < r.end:
            try:
                page = client.read(r.segment_id, offset, min(opts.read_bytes, r.end - offset))
            except grpc.RpcError as exc:
                offset = _lost(client, opts, r, offset, exc)
                continue
            if page.next_offset == offset:
                if time.monotonic() > idle_deadline:
                    raise StreamSourceError(f"segment {r.segment_id}: no event at {offset} (range ends at {r.end})")
                time.sleep(0.05)
                continue
            for e in events.parse(page.data, page.offset):
                cols.event.append(e.data)
                cols.offset.append(e.offset)
                cols.key.append(e.routing_key)
            cols.segment += [r.segment_id] * (len(cols.offset) - len(cols.segment))
            offset = page.next_offset
            if len(cols.offset) >= opts.batch_rows:
                yield cols.batch(pa_schema, opts.scope, opts.stream)
                cols = _Columns()
        if cols.offset:
            yield cols.batch(pa_schema, opts.scope, opts.stream)
    finally:
        client.close()


def _lost(client: StreamClient, opts: StreamReadOptions, r: SegmentRange, offset: int, exc: Any) -> int:
    """Where to go on after events were truncated or deleted under the read."""
    code = exc.code()
    if code not in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND):
        raise StreamSourceError(f"segment {r.segment_id} at {offset}: {code.name}: {exc.details()}") from None
    if opts.fail_on_data_loss:
        raise StreamSourceError(
            f"segment {r.segment_id}: events from offset {offset} were truncated or deleted before they "
            f"were read ({exc.details()}; set failOnDataLoss=false to skip lost events)") from None
    info = client.state(r.segment_id)
    if info is None or info.start_offset <= offset:
        return r.end
    return min(info.start_offset, r.end)
