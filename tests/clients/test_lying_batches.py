"""Batches that lie (issue 22, finding 5; a control batch: issue 35), with a recomputed CRC so that only the
record-level checks can catch them: each is refused with CORRUPT_MESSAGE or
INVALID_RECORD and a message, nothing of it is stored, and a real consumer then reads
the partition whole with dense offsets."""

from __future__ import annotations

import gzip
import random
import struct
from collections.abc import Callable

import crc32c
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceResponse

from tests.clients import requests as kreq
from tests.clients.server import Tidegate

TOPIC = "lies"
CORRUPT_MESSAGE, INVALID_RECORD = 2, 87


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def _codec(codec: int) -> Callable[[bytearray], None]:
    def lie(b: bytearray) -> None:
        b[22] = (b[22] & ~0x07) | codec
    return lie


def _random_records(b: bytearray) -> None:
    b[61:] = random.Random(5).randbytes(len(b) - 61)


def _count(count: int, last_delta: int) -> Callable[[bytearray], None]:
    def lie(b: bytearray) -> None:
        struct.pack_into(">i", b, 23, last_delta)
        struct.pack_into(">i", b, 57, count)
    return lie


def _gzip_of(payload: bytes) -> Callable[[bytearray], None]:
    def lie(b: bytearray) -> None:
        b[22] = (b[22] & ~0x07) | 1
        b[61:] = gzip.compress(payload)
        struct.pack_into(">i", b, 8, len(b) - 12)
    return lie


def _plain_records(b: bytearray) -> bytes:
    return bytes(b[61:])


def _offset_delta_twice(b: bytearray) -> None:
    # The second record's offset delta (after its length varint and attributes and
    # timestamp delta) made 0 again: found by walking the first record's length.
    first_len = b[61] >> 1  # zigzag varint, a single byte for these small records
    second = 61 + 1 + first_len
    assert b[second + 1] == 0 and b[second + 2] == 2  # attributes 0, timestamp delta 1
    b[second + 3] = 0  # offset delta 1 -> 0


def _control(b: bytearray) -> None:
    b[22] |= 0x20  # the control bit of the attributes: only brokers write markers


def _bomb(b: bytearray) -> None:
    b[22] = (b[22] & ~0x07) | 1
    b[61:] = gzip.compress(b"\0" * (65 * 1024 * 1024), compresslevel=1)
    struct.pack_into(">i", b, 8, len(b) - 12)


def _message_set_v1() -> bytes:
    # offset, size, crc, magic 1, attributes, timestamp, key -1, value "v1"
    body = struct.pack(">bbqi", 1, 0, 1_700_000_000_000, -1) + struct.pack(">i", 2) + b"v1"
    message = struct.pack(">I", crc32c.crc32c(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


LIES: list[tuple[str, Callable[[bytearray], None] | bytes, int, str]] = [
    ("codec 7", _codec(7), CORRUPT_MESSAGE, "unknown compression codec 7"),
    ("codec 5", _codec(5), CORRUPT_MESSAGE, "unknown compression codec 5"),
    ("random records", _random_records, CORRUPT_MESSAGE, "malformed"),
    ("count 2^31-1", _count(2**31 - 1, 2**31 - 2), CORRUPT_MESSAGE, "malformed"),
    ("count 2^31-1, delta 2", _count(2**31 - 1, 2), INVALID_RECORD, "record count"),
    ("count 2 of 3", _count(2, 1), CORRUPT_MESSAGE, "malformed"),
    ("gzip of garbage", _gzip_of(b"\x07garbage-not-records"), CORRUPT_MESSAGE, "malformed"),
    ("not gzip", _codec(1), CORRUPT_MESSAGE, "gzip records do not decompress"),
    ("not snappy", _codec(2), CORRUPT_MESSAGE, "snappy"),
    ("not lz4", _codec(3), CORRUPT_MESSAGE, "lz4 records do not decompress"),
    ("not zstd", _codec(4), CORRUPT_MESSAGE, "zstd records do not decompress"),
    ("offset deltas", _offset_delta_twice, INVALID_RECORD, "offset delta"),
    ("gzip bomb", _bomb, INVALID_RECORD, "decompress to more than"),
    ("control batch", _control, INVALID_RECORD, "not allowed to write control records"),
    ("message set v1", _message_set_v1(), INVALID_RECORD, "message format v1"),
]


def _produce(port: int, records: bytes) -> tuple[int, str | None, int]:
    answer = kreq.split_frames(kreq.exchange(port, kreq.produce(TOPIC, 0, records, version=8),
                                             timeout_s=20))
    assert answer, "no answer"
    response = ProduceResponse.decode(answer[0][4:], version=8)
    part = response.responses[0].partition_responses[0]
    return part.error_code, part.error_message, part.base_offset


@pytest.fixture
def server(tidegate: Tidegate) -> Tidegate:
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1)]).values():
        f.result(timeout=30)
    return tidegate


def test_lying_batches_are_refused_and_the_partition_stays_readable(server: Tidegate) -> None:
    stored = 0
    values = [b"value-%d" % i for i in range(3)]
    for codec in range(5):  # every codec Kafka has, told the truth
        error, message, base = _produce(server.port, kreq.record_batch(values, compression=codec))
        assert (error, base) == (0, stored), (codec, message)
        stored += 3
    for name, lie, code, text in LIES:
        if isinstance(lie, bytes):
            records = lie
        else:
            batch = bytearray(kreq.record_batch(values))
            lie(batch)
            records = _with_crc(batch)
        error, message, _ = _produce(server.port, records)
        assert error == code and message is not None and text in message, (name, error, message)
    error, message, base = _produce(server.port, kreq.record_batch(values))
    assert (error, base) == (0, stored), message
    stored += 3
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lies",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    offsets = []
    while len(offsets) < stored:
        msg = consumer.poll(10)
        assert msg is not None and not msg.error(), msg and msg.error()
        assert msg.value() == values[msg.offset() % 3]
        offsets.append(msg.offset())
    consumer.close()
    assert offsets == list(range(stored))
