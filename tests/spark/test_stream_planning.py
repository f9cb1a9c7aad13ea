"""Stream reads' options and the segment ranges between two cuts, without Spark."""

from __future__ import annotations

import pytest
from tidegate.protocol import stream_cut
from tidegate.spark.options import OptionError
from tidegate.spark.stream_client import SegmentMeta, SegmentState, StreamSourceError
from tidegate.spark.stream_options import is_stream_read, stream_read_options
from tidegate.spark.stream_planning import SegmentRange, plan

OPTS = {"controller": "tcp://127.0.0.1:9090", "scope": "sensors", "stream": "temps"}


def test_stream_options() -> None:
    assert is_stream_read(OPTS) and not is_stream_read({"scope": "kafka", "stream": "t"})
    batch = stream_read_options(OPTS, streaming=False)
    assert (batch.controller, batch.start, batch.end) == ("127.0.0.1:9090", "earliest", "latest")
    streaming = stream_read_options(OPTS, streaming=True)
    assert (streaming.start, streaming.end) == ("latest", None)  # follows the tail
    text = stream_cut.to_text("sensors", "temps", {0: 10, 1 << 32: 0})
    cut = stream_read_options({**OPTS, "start_stream_cut": text}, streaming=True).start
    assert cut == {0: 10, 1 << 32: 0}


@pytest.mark.parametrize(("extra", "message"), [
    ({"controller": ""}, "option controller"),
    ({"start_stream_cut": "{0: 1}"}, "serialized stream cut"),
    ({"start_stream_cut": "tgcut1:%%%"}, "damaged"),
    ({"end_stream_cut": stream_cut.to_text("other", "temps", {0: 1})}, "a cut of other/temps"),
    ({"end_stream_cut": "earliest"}, "end_stream_cut must be latest"),
    ({"start_stream_cut": "latest"}, "reads nothing in a batch query"),
    ({"subscribe": "x"}, "option subscribe is for Kafka topics"),
])
def test_stream_option_errors(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        stream_read_options({**OPTS, **extra}, streaming=False)


E1 = 1 << 32
E2 = 2 << 32
# Epoch 0: 0 [0, .5), 1 [.5, 1); epoch 1 splits 0 into E1|2 [0, .25), E1|3 [.25, .5);
# epoch 2 merges E1|3 and 1 into E2|4 [.25, 1).
META = {s.id: s for s in (
    SegmentMeta(0, 0, .5), SegmentMeta(1, .5, 1), SegmentMeta(E1 | 2, 0, .25),
    SegmentMeta(E1 | 3, .25, .5), SegmentMeta(E2 | 4, .25, 1),
)}
SUCC = {0: [E1 | 2, E1 | 3], 1: [E2 | 4], E1 | 3: [E2 | 4], E1 | 2: [], E2 | 4: []}
LENGTH = {0: 100, 1: 50, E1 | 2: 30, E1 | 3: 20, E2 | 4: 70}


def _state(truncated: dict[int, int] | None = None) -> object:
    def state(seg: int) -> SegmentState | None:
        return SegmentState((truncated or {}).get(seg, 0), LENGTH[seg], seg != E1 | 2 and seg != E2 | 4)
    return state


def _plan(start: dict[int, int], end: dict[int, int], **kw: object) -> list[tuple[int, int, int]]:
    got = plan(start, end, META, _state(kw.get("truncated")), SUCC.__getitem__,  # type: ignore[arg-type]
               bool(kw.get("fail", True)))
    return sorted((r.segment_id, r.start, r.end) for r in got)


def test_ranges_follow_successors_across_a_split_and_a_merge() -> None:
    tail = {E1 | 2: 30, E2 | 4: 70}
    assert _plan({0: 0, 1: 0}, tail) == [(0, 0, 100), (1, 0, 50), (E1 | 2, 0, 30), (E1 | 3, 0, 20), (E2 | 4, 0, 70)]
    # A cut midway (after the split, before the merge) to the tail.
    mid = {E1 | 2: 10, E1 | 3: 20, 1: 40}
    assert _plan(mid, tail) == [(1, 40, 50), (E1 | 2, 10, 30), (E2 | 4, 0, 70)]
    # From the start to the mid cut: nothing of the merged segment.
    assert _plan({0: 0, 1: 0}, mid) == [(0, 0, 100), (1, 0, 40), (E1 | 2, 0, 10), (E1 | 3, 0, 20)]
    assert _plan(tail, tail) == []


def test_truncated_ranges_fail_or_shrink() -> None:
    with pytest.raises(StreamSourceError, match="were truncated before they were read"):
        _plan({0: 0, 1: 0}, {0: 100, 1: 50}, truncated={0: 60})
    assert _plan({0: 0, 1: 0}, {0: 100, 1: 50}, truncated={0: 60}, fail=False) == [(0, 60, 100), (1, 0, 50)]
    with pytest.raises(StreamSourceError, match="before the start"):
        _plan({0: 50, 1: 0}, {0: 10, 1: 50})
    assert SegmentRange(3, 1, 2).segment_id == 3


def test_stream_write_options() -> None:
    from tidegate.spark.stream_options import stream_write_options

    w = stream_write_options({**OPTS, "exactly_once": "true", "transactionalIdPrefix": "job-1"})
    assert (w.exactly_once, w.prefix, w.transaction_timeout_ms, w.read.stream) == (True, "job-1", 600_000, "temps")
    with pytest.raises(OptionError, match="option topic is for Kafka topics"):
        stream_write_options({**OPTS, "topic": "t"})
    with pytest.raises(OptionError, match="transactionalIdPrefix must be of"):
        stream_write_options({**OPTS, "transactionalIdPrefix": "a/b"})
