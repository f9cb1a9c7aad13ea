"""``format("tidegate")`` over a stream of a scope other than ``kafka`` on a real local
Spark, against a real ``tidegate serve`` whose gRPC port writes the events
(``SegmentService.AppendEvents``) and serves the segments: batch reads between stream
cuts (earliest, latest, a serialized cut taken midway), and a streaming query that reads
the stream while it is split and merged (nothing lost or twice, each key in order)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from native import spark_session, wait_for  # type: ignore[import-not-found]
from tidegate.protocol import stream_cut
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.clients.server import Tidegate


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("tidegate-native-streams")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def tidegate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    tmp = tmp_path_factory.mktemp("tidegate-streams")
    s = Tidegate(tmp / "data", tmp / "tidegate.log", grpc=True)
    s.start()
    yield s
    s.close()


class Writer:
    def __init__(self, tidegate: Tidegate) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{tidegate.grpc_port}")
        self.ctl = pb2_grpc.ControllerServiceStub(self.channel)
        self.seg = pb2_grpc.SegmentServiceStub(self.channel)

    def create(self, scope: str, stream: str, segments: int) -> None:
        try:
            self.ctl.CreateScope(pb2.ScopeRequest(scope=scope), timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.ALREADY_EXISTS
        self.ctl.CreateStream(pb2.CreateStreamRequest(
            scope=scope, stream=stream,
            config=pb2.StreamConfig(scaling=pb2.ScalingPolicy(min_segments=segments))), timeout=30)

    def write(self, scope: str, stream: str, pairs: list[tuple[str, str]]) -> None:
        self.seg.AppendEvents(pb2.AppendEventsRequest(
            scope=scope, stream=stream,
            events=[pb2.Event(routing_key=k, data=v.encode()) for k, v in pairs]), timeout=30)

    def tail(self, scope: str, stream: str, position: int = pb2.TAIL) -> str:
        return str(self.seg.GetStreamCut(
            pb2.StreamCutRequest(scope=scope, stream=stream, position=position), timeout=30).text)

    def truncate(self, scope: str, stream: str, text: str) -> None:
        cut = stream_cut.from_text(text)[2]
        self.ctl.Truncate(pb2.TruncateRequest(scope=scope, stream=stream, cut=pb2.StreamCut(cut=cut)), timeout=30)

    def current(self, scope: str, stream: str) -> list[Any]:
        return list(self.ctl.GetCurrentSegments(pb2.StreamRequest(scope=scope, stream=stream), timeout=30).segments)

    def scale(self, scope: str, stream: str, sealed: list[int], ranges: list[tuple[float, float]]) -> None:
        self.ctl.Scale(pb2.ScaleRequest(scope=scope, stream=stream, sealed_segments=sealed,
                                        new_ranges=[pb2.KeyRange(start=a, end=b) for a, b in ranges]), timeout=30)


def _reader(spark: Any, tidegate: Tidegate, stream: str, streaming: bool = False) -> Any:
    r = spark.readStream if streaming else spark.read
    return (r.format("tidegate").option("controller", f"tcp://127.0.0.1:{tidegate.grpc_port}")
            .option("scope", "sensors").option("stream", stream))


def test_batch_reads_between_stream_cuts(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    checkpoint = tmp_path / "cp"
    w = Writer(tidegate)
    w.create("sensors", "temps", 3)
    head = w.tail("sensors", "temps", pb2.HEAD)
    first = [(f"dev{i % 7}", f"a{i}") for i in range(60)]
    w.write("sensors", "temps", first)
    midway = w.tail("sensors", "temps")
    second = [(f"dev{i % 7}", f"b{i}") for i in range(40)]
    w.write("sensors", "temps", second)

    df = _reader(spark, tidegate, "temps").load()
    assert df.columns == ["event", "scope", "stream", "segment_id", "offset", "routing_key"]
    assert df.rdd.getNumPartitions() == 3  # one task per segment
    rows = df.collect()
    assert {(r.scope, r.stream) for r in rows} == {("sensors", "temps")}
    assert sorted((r.routing_key, r.event.decode()) for r in rows) == sorted(first + second)
    by_key: dict[str, list[tuple[int, int, str]]] = {}
    for r in rows:
        by_key.setdefault(r.routing_key, []).append((r.segment_id, r.offset, r.event.decode()))
    for key, got in by_key.items():
        assert [e for _s, _o, e in sorted(got)] == [v for k, v in first + second if k == key]

    def events(**cuts: str) -> list[str]:
        reader = _reader(spark, tidegate, "temps")
        for name, cut in cuts.items():
            reader = reader.option(name, cut)
        return sorted(r.event.decode() for r in reader.load().collect())

    assert events(end_stream_cut=midway) == sorted(v for _k, v in first)
    assert events(start_stream_cut=midway) == sorted(v for _k, v in second)
    assert events(start_stream_cut="earliest", end_stream_cut="latest") == sorted(v for _k, v in first + second)
    assert events(start_stream_cut=midway, end_stream_cut=midway) == []
    with pytest.raises(Exception, match="serialized stream cut"):
        events(start_stream_cut="{0: 5}")

    # A streaming query with an end cut reads up to it and no further.
    got: list[str] = []
    query = (_reader(spark, tidegate, "temps", streaming=True).option("start_stream_cut", "earliest")
             .option("end_stream_cut", midway).load()
             .writeStream.foreachBatch(lambda df, _b: got.extend(r.event.decode() for r in df.collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert sorted(got) == sorted(v for _k, v in first)

    # Truncated at the midway cut: a read from the old head lost the first events.
    w.truncate("sensors", "temps", midway)
    with pytest.raises(Exception, match="were truncated before they were read"):
        events(start_stream_cut=head)
    assert events(start_stream_cut=head, failOnDataLoss="false") == sorted(v for _k, v in second)
    assert events() == sorted(v for _k, v in second)  # earliest is the new head


def test_streaming_read_while_the_stream_splits_and_merges(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    w = Writer(tidegate)
    w.create("sensors", "scaled", 2)
    keys = [f"key{i}" for i in range(12)]
    seen: list[tuple[int, str, int]] = []
    lock = threading.Lock()

    def collect(df: Any, batch_id: int) -> None:
        # Within a micro-batch a key's events in a predecessor precede those in its successors.
        rows = sorted(((r.segment_id >> 32, r.segment_id, r.offset), r.routing_key, int(r.event))
                      for r in df.collect())
        with lock:
            seen.extend((batch_id, key, seq) for _pos, key, seq in rows)

    query = (
        _reader(spark, tidegate, "scaled", streaming=True).option("start_stream_cut", "earliest").load()
        .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds").start()
    )
    rounds, per_round = 6, 20
    try:
        for round_ in range(rounds):
            w.write("sensors", "scaled", [(k, str(round_ * per_round + i)) for i in range(per_round) for k in keys])
            if round_ % 3 != 2:  # else the scale races the micro-batch reading the round
                written = (round_ + 1) * per_round * len(keys)
                wait_for("the round", lambda n=written: len(seen) >= n, 60)
            segments = sorted(w.current("sensors", "scaled"), key=lambda s: s.key_start)
            if round_ % 2 == 0:  # split the widest
                widest = max(segments, key=lambda s: s.key_end - s.key_start)
                mid = (widest.key_start + widest.key_end) / 2
                w.scale("sensors", "scaled", [widest.id], [(widest.key_start, mid), (mid, widest.key_end)])
            else:  # merge the first two neighbours
                a, b = segments[0], segments[1]
                w.scale("sensors", "scaled", [a.id, b.id], [(a.key_start, b.key_end)])
        wait_for("every event", lambda: len(seen) >= rounds * per_round * len(keys), 120)
    finally:
        query.stop()
    assert len({b for b, _k, _s in seen}) >= rounds - 2
    assert len(w.current("sensors", "scaled")) == 2  # three splits, three merges
    for k in keys:
        assert [seq for _b, key, seq in seen if key == k] == list(range(rounds * per_round)), k


def _run_copy(spark: Any, tidegate: Tidegate, checkpoint: Path) -> None:
    query = (
        _reader(spark, tidegate, "eos-in", streaming=True).option("start_stream_cut", "earliest").load()
        .selectExpr("event", "routing_key")
        .writeStream.format("tidegate").option("controller", f"127.0.0.1:{tidegate.grpc_port}")
        .option("scope", "sensors").option("stream", "eos-out").option("exactly_once", "true")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    assert query.awaitTermination(180), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()


def _events(spark: Any, tidegate: Tidegate, stream: str) -> list[str]:
    return sorted(r.event.decode() for r in _reader(spark, tidegate, stream).load().collect())


def test_exactly_once_stream_sink_across_a_replayed_batch(spark: Any, tidegate: Tidegate, tmp_path: Path) -> None:
    from pyspark.sql.functions import udf

    w = Writer(tidegate)
    w.create("sensors", "eos-in", 2)
    w.create("sensors", "eos-out", 2)
    w.write("sensors", "eos-in", [(f"k{i % 3}", f"e{i:03}") for i in range(60)])
    checkpoint = tmp_path / "checkpoint"
    _run_copy(spark, tidegate, checkpoint)
    assert _events(spark, tidegate, "eos-out") == [f"e{i:03}" for i in range(60)]
    # The query dies after the sink committed its last batch, before Spark recorded it.
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    w.write("sensors", "eos-in", [(f"k{i % 3}", f"e{i:03}") for i in range(60, 70)])
    _run_copy(spark, tidegate, checkpoint)
    assert last.exists(), "the restarted query did not run the batch again"
    assert _events(spark, tidegate, "eos-out") == [f"e{i:03}" for i in range(70)]

    # A failing exactly-once batch write leaves nothing behind (its transaction aborted).
    w.create("sensors", "eos-fail", 1)

    def fail_at_40(v: str) -> str:
        if v == "v040":
            raise ValueError("a task fails on purpose")
        return v

    rows = spark.createDataFrame(spark.sparkContext.parallelize([(f"v{i:03}",) for i in range(50)], 1), ["event"])
    with pytest.raises(Exception, match="a task fails on purpose"):
        (rows.withColumn("event", udf(fail_at_40, "string", useArrow=False)("event"))
         .write.mode("append").format("tidegate").option("controller", f"127.0.0.1:{tidegate.grpc_port}")
         .option("scope", "sensors").option("stream", "eos-fail").option("exactly_once", "true")
         .option("transactionalIdPrefix", "fail-test").save())
    (rows.write.mode("append").format("tidegate").option("controller", f"127.0.0.1:{tidegate.grpc_port}")
     .option("scope", "sensors").option("stream", "eos-fail").save())  # at-least-once
    assert _events(spark, tidegate, "eos-fail") == [f"v{i:03}" for i in range(50)]
