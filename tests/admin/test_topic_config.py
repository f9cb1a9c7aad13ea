"""Topic config validation and mapping, and the segment split of CreatePartitions, as
pure functions (properties over partition counts)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tidegate.core.controller.api import (
    RetentionPolicy,
    RetentionType,
    ScalingType,
    SegmentRecord,
    StreamConfig,
)
from tidegate.gateway.handlers.create_partitions import split_ranges
from tidegate.gateway.log import topic_config
from tidegate.gateway.log.topic_config import InvalidConfig
from tidegate.gateway.log.topics import initial_key_ranges, partition_point


@pytest.mark.parametrize(("name", "value", "stored"), [
    ("retention.ms", " 1000 ", "1000"),
    ("retention.ms", "-1", "-1"),
    ("cleanup.policy", "compact, delete", "compact,delete"),
    ("preallocate", "TRUE", "true"),
    ("min.cleanable.dirty.ratio", "0.25", "0.25"),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
])
def test_valid_values_are_stored_normalised(name: str, value: str, stored: str) -> None:
    assert topic_config.validate({name: value}) == {name: stored}


@pytest.mark.parametrize(("name", "value"), [
    ("retention.ms", "-2"), ("retention.ms", "1.5"), ("retention.ms", None),
    ("segment.bytes", str(1 << 31)), ("cleanup.policy", "archive"), ("cleanup.policy", ""),
    ("preallocate", "yes"), ("min.cleanable.dirty.ratio", "1.5"), ("min.insync.replicas", "0"),
    ("compression.type", "brotli"), ("no.such.config", "1"), ("tidegate.scaling.type", "FAST"),
    # Kafka 4.x: segment.bytes is at least 1 MiB; the names its LogConfig removed are unknown.
    ("segment.bytes", str((1 << 20) - 1)), ("message.format.version", "2.8"),
    ("message.downconversion.enable", "true"), ("message.timestamp.difference.max.ms", "1"),
])
def test_invalid_values_name_the_config(name: str, value: str | None) -> None:
    with pytest.raises(InvalidConfig, match=name.replace(".", r"\.")):
        topic_config.validate({name: value})


def test_stream_policies() -> None:
    assert topic_config.stream_config({}, 4).retention == \
        RetentionPolicy(RetentionType.TIME, 604_800_000)
    assert topic_config.stream_config({"retention.ms": "0"}, 4).retention == \
        RetentionPolicy(RetentionType.TIME, 1)
    assert topic_config.stream_config(
        {"retention.ms": "-1", "retention.bytes": "100"}, 4
    ).retention == RetentionPolicy(RetentionType.SIZE, 400)
    # retention.bytes set, retention.ms left at its default: both apply, as in Kafka.
    assert topic_config.stream_config({"retention.bytes": "100"}, 2).retention == \
        RetentionPolicy(RetentionType.TIME, 604_800_000, 200)
    assert topic_config.stream_config(
        {"retention.ms": "5000", "retention.bytes": "10"}, 3
    ).retention == RetentionPolicy(RetentionType.TIME, 5000, 30)
    assert topic_config.stream_config({"retention.ms": "-1"}, 1) == StreamConfig()
    # Compacted topics: no stream retention; compact,delete's retention.ms/bytes are the
    # cleaner's to apply (log starts first, the stream cut behind them).
    assert topic_config.stream_config({"cleanup.policy": "compact"}, 1).retention is None
    assert topic_config.stream_config(
        {"cleanup.policy": "compact", "retention.ms": "5"}, 1).retention is None
    assert topic_config.stream_config({"cleanup.policy": "compact,delete"}, 1).retention is None
    assert topic_config.stream_config(
        {"cleanup.policy": "compact,delete", "retention.ms": "5", "retention.bytes": "9"}, 1
    ).retention is None
    scaled = topic_config.stream_config({
        "tidegate.scaling.type": "BY_RATE_IN_KBYTES_PER_SEC",
        "tidegate.scaling.target.rate": "512", "tidegate.scaling.scale.factor": "3",
        "tidegate.scaling.min.segments": "2",
    }, 1).scaling
    assert (scaled.type, scaled.target_rate, scaled.scale_factor, scaled.min_segments) == (
        ScalingType.BY_RATE_IN_KBYTES_PER_SEC, 512, 3, 2)
    assert topic_config.validate({"retention.ms": "10", "retention.bytes": "10"}) == {
        "retention.ms": "10", "retention.bytes": "10"}


def test_every_config_has_a_valid_default() -> None:
    for name, d in topic_config.TOPIC_CONFIGS.items():
        assert d.validate(d.default) == d.default, name
        assert d.doc, name
    # What has no effect says so in DescribeConfigs' documentation.
    for name in ("preallocate", "flush.messages", "segment.jitter.ms", "remote.storage.enable"):
        assert "gnored" in topic_config.TOPIC_CONFIGS[name].doc, name


@given(st.integers(1, 64), st.integers(1, 64))
def test_split_gives_each_partition_its_own_segment(old: int, added: int) -> None:
    new = old + added
    segments = [SegmentRecord(i, 0, r.start, r.end) for i, r in enumerate(initial_key_ranges(old))]
    sealed, ranges = split_ranges(segments, old, new)
    kept = [s.key_range for s in segments if s.id not in sealed]
    cover = sorted([*kept, *ranges], key=lambda r: r.start)
    assert cover[0].start == 0.0 and cover[-1].end == 1.0
    assert all(a.end == b.start for a, b in zip(cover, cover[1:], strict=False))
    for r in cover:
        assert sum(r.contains(partition_point(p)) for p in range(new)) == 1
    # Only segments that received a new point are split.
    for s in segments:
        got_new = any(s.key_range.contains(partition_point(p)) for p in range(old, new))
        assert (s.id in sealed) == got_new


def test_split_ranges_scales_with_segments_plus_partitions() -> None:
    """2,000 -> 10,000 partitions took seconds of the event loop when each segment
    scanned every point (issue 22, finding 4)."""
    import time

    from tidegate.core.controller.api import SegmentRecord
    from tidegate.gateway.log.topics import initial_key_ranges

    segments = [SegmentRecord(i, 0, r.start, r.end)
                for i, r in enumerate(initial_key_ranges(2000))]
    started = time.process_time()
    sealed, ranges = split_ranges(segments, 2000, 10_000)
    assert time.process_time() - started < 0.5
    assert len(sealed) == 2000 and len(ranges) == 10_000
