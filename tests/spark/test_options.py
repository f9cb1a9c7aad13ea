"""``tidegate.spark``'s option parsing and micro-batch arithmetic, without Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tidegate.spark.options import EARLIEST, LATEST, OptionError, read_options, write_options
from tidegate.spark.planning import ranges, rate_limit

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_kafka_option_names_and_defaults() -> None:
    batch = read_options({**BASE, "subscribe": "a, b", "kafka.isolation.level": "read_committed"}, streaming=False)
    assert batch.subscribe == ("a", "b") and batch.client == {"isolation.level": "read_committed"}
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = read_options({**BASE, "subscribePattern": "ev.*", "maxOffsetsPerTrigger": "10",
                           "startingOffsets": '{"ev1": {"0": 5, "1": -2}}', "failOnDataLoss": "false"},
                          streaming=True)
    assert stream.starting.default == LATEST and stream.starting.explicit == {"ev1": {"0": 5, "1": -2}}
    assert stream.max_offsets_per_trigger == 10 and not stream.fail_on_data_loss
    assert stream.matches("ev1") and not stream.matches("other")
    assigned = read_options({**BASE, "assign": '{"t": [0, 2]}'}, streaming=False)
    assert assigned.assign == {"t": (0, 2)}


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({}, False, "kafka.bootstrap.servers is required"),
    ({**BASE}, False, "exactly one of the options"),
    ({**BASE, "subscribe": "a", "assign": '{"a":[0]}'}, False, "exactly one of the options"),
    ({**BASE, "subscribePattern": "("}, False, "not a regular expression"),
    ({**BASE, "assign": "[1]"}, False, "option assign must look like"),
    ({**BASE, "subscribe": "a", "startingOffsets": "latest"}, False, "must be earliest or a JSON"),
    ({**BASE, "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, False, "offset -2 of a-0 is not allowed"),
    ({**BASE, "subscribe": "a", "endingOffsets": "latest"}, True, "endingOffsets is for batch"),
    ({**BASE, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "positive integer"),
    ({**BASE, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, False, "for streaming queries only"),
    ({**BASE, "subscribe": "a", "failOnDataLoss": "maybe"}, False, "true or false"),
    ({**BASE, "subscribe": "a", "kafka.group.id": "g"}, False, "kafka.group.id is not supported"),
    ({**BASE, "subscribe": "a", "startingOffsets": "{not json"}, True, "not valid JSON"),
])
def test_option_errors_name_the_option(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        read_options(options, streaming=streaming)


def test_write_options() -> None:
    w = write_options({**BASE, "topic": "out", "exactly_once": "true", "kafka.acks": "all"})
    assert (w.topic, w.exactly_once, w.client) == ("out", True, {"acks": "all"})
    with pytest.raises(OptionError, match="exactly_once must be true or false"):
        write_options({**BASE, "exactly_once": "yes"})


def test_rate_limit_prorates_like_spark() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 100, ("t", 1): 300, ("t", 2): 10}
    assert rate_limit(start, latest, 40) == {("t", 0): 10, ("t", 1): 30, ("t", 2): 10}
    assert rate_limit(start, latest, 1000) == latest
    # A share under one record is rounded up: a partition is never starved.
    assert rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)[("t", 1)] == 1


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 500)), min_size=1, max_size=6),
       st.integers(1, 40))
def test_ranges_cover_each_offset_once(spans: list[tuple[int, int]], min_partitions: int) -> None:
    start = {("t", p): s for p, (s, _n) in enumerate(spans)}
    end = {("t", p): s + n for p, (s, n) in enumerate(spans)}
    got = ranges(start, end, min_partitions)
    covered = sorted((r.partition, o) for r in got for o in range(r.start, r.end))
    assert covered == sorted((p, o) for p, (s, n) in enumerate(spans) for o in range(s, s + n))
    assert all(r.start < r.end for r in got)
    assert len(got) >= len([n for _s, n in spans if n])


def test_kafka_scope_streams_by_name_and_other_scopes_apart() -> None:
    by_stream = read_options({**BASE, "scope": "kafka", "stream": "orders",
                              "start_stream_cut": "earliest", "end_stream_cut": "latest"}, streaming=False)
    assert by_stream.subscribe == ("orders",)
    assert by_stream.starting.default == EARLIEST and by_stream.ending.default == LATEST
    # Spark hands option names lower-cased; plain maps may not be.
    assert read_options({**BASE, "SUBSCRIBEPATTERN": "o.*"}, streaming=True).pattern == "o.*"
    with pytest.raises(OptionError, match="read with the option controller"):
        read_options({**BASE, "scope": "sensors", "stream": "temps"}, streaming=True)
    with pytest.raises(OptionError, match="takes earliest or latest"):
        read_options({**BASE, "scope": "kafka", "stream": "o", "start_stream_cut": "{4294967297: 12}"}, streaming=True)
    with pytest.raises(OptionError, match="leave out subscribe"):
        read_options({**BASE, "scope": "kafka", "stream": "o", "subscribe": "o"}, streaming=True)
    with pytest.raises(OptionError, match="go together"):
        read_options({**BASE, "stream": "o"}, streaming=True)
