"""protocol/: the record-batch header view, framing, topic mapping."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gateway.topics import initial_key_ranges, partition_point, topic_name_error
from protocol.framing import frame_size, parse_request_header, peek_request_header
from protocol.record_batch import InvalidBatchError, iter_batches, set_base_offset
from tests.clients.requests import frame, record_batch


def test_batch_header_fields_and_crc() -> None:
    raw = record_batch([b"a", b"bb", b"ccc"], producer_id=7, epoch=2, base_sequence=40)
    (b,) = list(iter_batches(raw))
    assert (b.magic, b.record_count, b.last_offset_delta) == (2, 3, 2)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (7, 2, 40, 42)
    assert b.size == len(raw) and b.base_timestamp == 1_700_000_000_000
    assert b.max_timestamp == 1_700_000_000_002
    assert not b.is_transactional and not b.is_control


def test_base_offset_rewrite_keeps_crc_valid() -> None:
    raw = bytearray(record_batch([b"x"]) + record_batch([b"y", b"z"]))
    first, second = list(iter_batches(raw))
    set_base_offset(raw, second.position, 12345)
    assert [b.base_offset for b in iter_batches(raw)] == [0, 12345]


@pytest.mark.parametrize("where", [21, 30, 70])
def test_crc_mismatch_detected(where: int) -> None:
    raw = bytearray(record_batch([b"hello world"]))
    raw[where] ^= 0x01
    with pytest.raises(InvalidBatchError, match="CRC"):
        list(iter_batches(raw))


def test_bad_magic_and_lengths() -> None:
    raw = bytearray(record_batch([b"v"]))
    bad = bytearray(raw)
    bad[16] = 1
    with pytest.raises(InvalidBatchError, match="magic"):
        list(iter_batches(bad))
    with pytest.raises(InvalidBatchError):
        list(iter_batches(raw[:-1]))
    with pytest.raises(InvalidBatchError):
        list(iter_batches(raw + b"\x00"))
    short = bytearray(raw)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(InvalidBatchError):
        list(iter_batches(short))


def test_request_header_parse() -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

    data = frame(MetadataRequest(topics=None), 12, correlation_id=99)
    assert frame_size(data[:4]) == len(data) - 4
    body = data[4:]
    assert peek_request_header(body) == (3, 12, 99)
    header = parse_request_header(body, flexible=True)
    assert (header.client_id, header.correlation_id) == ("fuzz", 99)
    assert MetadataRequest.decode(body[header.body_offset :], version=12).topics is None
    v0 = frame(ApiVersionsRequest(), 0)[4:]
    assert parse_request_header(v0, flexible=False).body_offset == len(v0)


def test_partition_points_and_initial_ranges() -> None:
    assert [partition_point(p) for p in range(8)] == [
        0.0, 0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875,
    ]
    for n in (1, 2, 3, 5, 8, 13):
        ranges = initial_key_ranges(n)
        assert ranges[0].start == 0.0 and ranges[-1].end == 1.0
        assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
        for p in range(n):
            holders = [r for r in ranges if r.contains(partition_point(p))]
            assert len(holders) == 1
        assert sorted(
            next(i for i, r in enumerate(ranges) if r.contains(partition_point(p)))
            for p in range(n)
        ) == list(range(n))


def test_topic_names() -> None:
    assert topic_name_error("ok.topic_1-x") is None
    for bad in ("", ".", "..", "a b", "x" * 250, "t\x00", "ü"):
        assert topic_name_error(bad) is not None


def test_segment_marker_covers_only_a_gap_free_prefix(tmp_path: Path) -> None:
    from gateway.offset_index import OffsetIndex
    from gateway.partitions import PartitionLogs

    index = OffsetIndex(tmp_path / "index")
    logs = PartitionLogs(None, None, index, None)  # type: ignore[arg-type]
    assert logs.mark_indexed("s", 0, 10) == 10
    assert logs.mark_indexed("s", 20, 30) is None  # [10, 20) not indexed yet
    assert logs.mark_indexed("s", 30, 35) is None
    assert logs.mark_indexed("s", 10, 20) == 35
    index.close()
