"""An idempotent producer's batch refused with KAFKA_STORAGE_ERROR (its partition's storage
unavailable: here a full disk, in issue 36 a container whose Tier-1 log failed over), then
the producer's next batch once the storage is back: that batch's sequence follows the
refused one, a gap that is the node's, not the producer's. It is answered
NOT_LEADER_OR_FOLLOWER (retriable: the producer sends the refused batch first), not
OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch and re-sends every batch
whose fate it does not know as new records: test_idempotence_failover stored a batch
twice so (offsets 125-129, then acknowledged at 4008-4012, after an epoch bump).

A real ``tidegate serve`` on a small tmpfs (root needed, as in CI), the producer's
requests on one connection as librdkafka pipelines them, every record read back once
with confluent-kafka."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceResponse
from tidegate.protocol.errors import ErrorCode

from tests.clients import requests as kreq
from tests.clients.server import Tidegate
from tests.clients.test_disk_full import _fill, small_fs  # noqa: F401 - the fixture
from tests.cluster.clients import wait_for

TOPIC = "full"
KAFKA_STORAGE_ERROR = ErrorCode.KAFKA_STORAGE_ERROR
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER
PRODUCER_ID = 4242


class _Connection:
    """One Kafka connection, a request and its answer at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation_id = 0

    def produce(self, records: bytes) -> tuple[int, int, str | None]:
        self.correlation_id += 1
        self.sock.sendall(kreq.produce(TOPIC, 0, records, version=8,
                                       correlation_id=self.correlation_id))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "connection closed"
            data += chunk
        part = ProduceResponse.decode(data[8:], version=8).responses[0].partition_responses[0]
        return part.error_code, part.base_offset, part.error_message

    def close(self) -> None:
        self.sock.close()


def _batch(seq: int) -> bytes:
    return kreq.record_batch([b"seq-%d" % seq], producer_id=PRODUCER_ID, epoch=0,
                             base_sequence=seq)


def test_the_batch_after_one_refused_for_storage_is_refused_not_out_of_order(
    small_fs: Path, tmp_path: Path,  # noqa: F811 - the fixture
) -> None:
    server = Tidegate(small_fs / "data", tmp_path / "tidegate.log")
    server.start()
    producer = filler = None
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1)])[TOPIC].result(timeout=30)
        producer, filler = _Connection(server.port), _Connection(server.port)
        assert producer.produce(_batch(0)) == (0, 0, None)

        _fill(small_fs / "filler", 4 * 1024 * 1024)
        big = kreq.record_batch([b"x" * 200_000])
        # Appends fail until the partition is unavailable: new ones are refused.
        wait_for("the partition's storage to be unavailable",
                 lambda: filler.produce(big)[0] == KAFKA_STORAGE_ERROR, timeout_s=90)
        code, _, message = producer.produce(_batch(1))
        assert code == KAFKA_STORAGE_ERROR and message, message

        (small_fs / "filler").unlink()
        wait_for("the partition to take appends again", lambda: filler.produce(
            kreq.record_batch([b"probe"]))[0] == 0, timeout_s=90)
        # The producer's next pipelined batch: its gap is the node's refusal.
        code, _, message = producer.produce(_batch(2))
        assert code == NOT_LEADER_OR_FOLLOWER, (code, message)
        assert message and "send it first" in message
        # Sent again in order, as librdkafka does after that answer: both stored once.
        first = producer.produce(_batch(1))
        assert first[0] == 0, first
        assert producer.produce(_batch(2)) == (0, first[1] + 1, None)
        # A gap of the producer's own is still one.
        assert producer.produce(_batch(9))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "seq",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while b"seq-2" not in got and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value().startswith(b"seq-"):
                got.append(msg.value())
        consumer.close()
        assert got == [b"seq-0", b"seq-1", b"seq-2"], got
    finally:
        for conn in (producer, filler):
            if conn is not None:
                conn.close()
        server.close()
