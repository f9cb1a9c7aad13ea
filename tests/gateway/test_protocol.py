"""protocol/: the record-batch header view, framing, topic mapping."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tidegate.gateway.log.topics import initial_key_ranges, partition_point, topic_name_error
from tidegate.protocol.errors import KafkaProtocolError
from tidegate.protocol.framing import (
    encode_response_header,
    frame_size,
    parse_request_header,
    peek_request_header,
)
from tidegate.protocol.record_batch import InvalidBatchError, iter_batches, set_base_offset

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
    assert frame_size(b"xx" + data, 2) == len(data) - 4
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
    from tidegate.gateway.log.offset_index import OffsetIndex
    from tidegate.gateway.log.partitions import PartitionLogs

    index = OffsetIndex(tmp_path / "index")
    logs = PartitionLogs(None, None, index, None)  # type: ignore[arg-type]
    assert logs.mark_indexed("s", 0, 10) == 10
    assert logs.mark_indexed("s", 20, 30) is None  # [10, 20) not indexed yet
    assert logs.mark_indexed("s", 30, 35) is None
    assert logs.mark_indexed("s", 10, 20) == 35
    index.close()


@settings(max_examples=300, deadline=None)
@given(
    key=st.integers(0, 80),
    version=st.integers(0, 20),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | st.text(max_size=300),
    flexible=st.booleans(),
    tags=st.lists(st.tuples(st.integers(0, 2**20), st.binary(max_size=200)), max_size=3),
    body=st.binary(max_size=50),
)
def test_headers_match_kafka_python(
    key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool,
    tags: list[tuple[int, bytes]], body: bytes,
) -> None:
    """Our request-header parser and response-header encoder against kafka-python's
    ``RequestHeader``/``ResponseHeader`` (header v1 and v2, with unknown tagged fields)."""
    from kafka.protocol.api_header import RequestHeader, ResponseHeader

    raw = bytes(
        RequestHeader(
            request_api_key=key, request_api_version=version, correlation_id=correlation_id,
            client_id=client_id,
        ).encode(flexible=False)
    )
    if flexible:  # tagged fields: count, then (tag, size, bytes) in ascending tag order
        uniq = sorted(dict(tags).items())
        raw += _uvarint(len(uniq)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in uniq)
    parsed = parse_request_header(bytearray(raw + body), flexible=flexible)
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id, parsed.client_id) == (
        key, version, correlation_id, client_id,
    )
    assert parsed.body_offset == len(raw)
    expect = bytes(ResponseHeader(correlation_id=correlation_id).encode(flexible=flexible))
    assert encode_response_header(correlation_id, flexible) == expect


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@pytest.mark.parametrize(
    "raw",
    [b"\x00\x03\x00\x0c\x00\x00", b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x09abc",
     b"\x00\x03\x00\x0c\x00\x00\x00\x07\xff\xfe", b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x02\xff\xff"],
)
def test_bad_request_headers_are_protocol_errors(raw: bytes) -> None:
    with pytest.raises(KafkaProtocolError):
        parse_request_header(raw, flexible=False)
    with pytest.raises(KafkaProtocolError):  # and a flexible header cut in its tags
        parse_request_header(b"\x00\x03\x00\x0c\x00\x00\x00\x07\x00\x00\x02\x05", flexible=True)
