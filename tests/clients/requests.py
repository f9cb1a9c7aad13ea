"""Real requests as a client puts them on the wire (encoded by kafka-python's own message
classes with headers and size prefixes), used as the fuzz corpus and by raw tests."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder


def frame(request: Any, version: int, correlation_id: int = 1, client_id: str = "fuzz") -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def record_batch(values: list[bytes], producer_id: int = -1, epoch: int = -1,
                 base_sequence: int = -1, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value,
                       headers=[("h", b"v")])
    return bytes(builder.build())


def produce(topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9,
            correlation_id: int = 1) -> bytes:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    req = ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[part])],
    )
    return frame(req, version, correlation_id)


def fetch(topic: str, partition: int, offset: int, version: int = 11, max_wait_ms: int = 100,
          min_bytes: int = 1, partition_max_bytes: int = 1 << 20) -> bytes:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=partition, fetch_offset=offset, log_start_offset=-1,
        partition_max_bytes=partition_max_bytes,
    )
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 24,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[], rack_id="",
    )
    return frame(req, version)


def corpus(topic: str) -> list[bytes]:
    """One real request per implemented API, in several versions."""
    batch = record_batch([b"fuzz-value-%d" % i for i in range(3)])
    lo_part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=-1
    )
    out = [
        frame(ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), 3),
        frame(ApiVersionsRequest(), 0),
        frame(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False), 9),
        frame(MetadataRequest(topics=None), 4),
        produce(topic, 0, batch, version=3),
        produce(topic, 1, batch, version=9),
        fetch(topic, 0, 0, version=4),
        fetch(topic, 1, 0, version=12),
        frame(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[lo_part])]), 5),
        frame(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4),
        frame(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=topic + "-new", num_partitions=1, replication_factor=1, assignments=[],
            configs=[])], timeout_ms=1000, validate_only=True), 5),
    ]
    return out


def exchange(port: int, data: bytes, timeout_s: float = 30.0) -> bytes:
    """Send ``data``, half-close, and read until the server closes or ``timeout_s``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(1 << 16)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


class Conn:
    """One connection of raw request-and-answer exchanges, decoded with kafka-python."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def call(self, request: Any, version: int, response: Any) -> Any:
        self.correlation += 1
        self.sock.sendall(frame(request, version, self.correlation))
        (size,) = struct.unpack(">i", self._read(4))
        return response.decode(struct.pack(">i", size) + self._read(size), version=version,
                               header=True, framed=True)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def split_frames(data: bytes) -> list[bytes]:
    frames = []
    while len(data) >= 4:
        (size,) = struct.unpack_from(">i", data)
        frames.append(data[4 : 4 + size])
        data = data[4 + size :]
    return frames


class CaptureProxy:
    """A TCP proxy in front of the server that records every byte clients send, so real
    client requests (librdkafka's, kafka-python's) can be replayed and mutated."""

    def __init__(self, target_port: int) -> None:
        import threading

        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._streams: list[bytearray] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            recorded = bytearray()
            with self._lock:
                self._streams.append(recorded)
            threading.Thread(target=self._pump, args=(client, upstream, recorded), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, recorded: bytearray | None) -> None:
        try:
            while chunk := src.recv(1 << 16):
                if recorded is not None:
                    recorded += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def frames(self) -> list[bytes]:
        """Every complete request frame seen so far, size prefix included."""
        out = []
        with self._lock:
            streams = [bytes(s) for s in self._streams]
        for data in streams:
            while len(data) >= 4:
                (size,) = struct.unpack_from(">i", data)
                if len(data) < 4 + size:
                    break
                out.append(data[: 4 + size])
                data = data[4 + size :]
        return out

    def close(self) -> None:
        self._closed = True
        self._listener.close()
