"""Kafka clients running beside a cluster test: an idempotent acks=all producer and a
consumer-group member, each on its own thread, and a read-back of whole partitions."""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from tests.clients.requests import frame

QUIET = {"log_level": 3}


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: pm.leader for p, pm in t.partitions.items() if pm.error is None}


def wait_for(what: str, check: Any, timeout_s: float = 60) -> Any:
    """``check()``'s first truthy answer, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def coordinator(port: int, key: str, key_type: int) -> int:
    """The node this node names as the coordinator of ``key`` (-1: none, or no answer)."""
    try:
        found = ask(port, FindCoordinatorRequest(key=key, key_type=key_type), 1,
                    FindCoordinatorResponse)
    except OSError:
        return -1
    return int(found.node_id) if found.error_code == 0 else -1


def ask(port: int, request: Any, version: int, response: Any, timeout_s: float = 10) -> Any:
    """One request to exactly this node (a client library may send Metadata to any
    broker it has learnt of), its answer awaited up to ``timeout_s``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(frame(request, version))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(1 << 16)
            assert chunk, "connection closed"
            data += chunk
    return response.decode(data, version=version, header=True, framed=True)


def node_leaders(port: int, topic: str) -> dict[int, int]:
    """``leaders`` as this one node answers them."""
    md = ask(port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                   allow_auto_topic_creation=False), 12, MetadataResponse)
    return {p.partition_index: p.leader_id for t in md.topics if t.error_code == 0
            for p in t.partitions if p.error_code == 0}


def _client_debug(tag: str) -> dict[str, Any]:
    """With ``TIDEGATE_TEST_RDKAFKA_DEBUG=DIR``, librdkafka's view of idempotence (epochs,
    sequences, each produce and its answer) goes to ``DIR/rdkafka-TAG.log``: how issue 36's
    duplicates were traced to the answers that made it bump its epoch."""
    directory = os.environ.get("TIDEGATE_TEST_RDKAFKA_DEBUG")
    if not directory:
        return {}
    logger = logging.getLogger(f"tests.rdkafka.{tag or 'producer'}")
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    handler = logging.FileHandler(Path(directory) / f"rdkafka-{tag.strip('-') or 'producer'}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return {"debug": "eos,msg,protocol", "log_level": 7, "logger": logger}


class Producing(threading.Thread):
    """Sends value ``i`` to partition ``i % partitions`` until stopped; keeps every
    acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_per_s: int = 400,
                 tag: str = "", message_timeout_ms: int = 120_000) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions, self.rate_per_s = topic, partitions, rate_per_s
        #: Prefix of the values (several producers' values stay unique).
        self.tag = tag
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": message_timeout_ms, "error_cb": self._error,
            **QUIET, **_client_debug(tag),
        })
        self.acked: list[tuple[int, int, bytes]] = []
        #: Delivery errors and fatal errors (OUT_OF_ORDER_SEQUENCE_NUMBER, ...).
        self.errors: list[str] = []
        self.stopping = threading.Event()
        #: The longest time from ``produce`` to an acknowledgement, in seconds.
        self.latency_max_s = 0.0

    def _error(self, err: KafkaError) -> None:
        if err.fatal():
            self.errors.append(f"fatal: {err}")

    def _done(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self.errors.append(f"{msg.partition()}: {err}")  # type: ignore[attr-defined]
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]
            self.latency_max_s = max(self.latency_max_s, msg.latency() or 0.0)  # type: ignore[attr-defined]

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            for _ in range(self.rate_per_s // 20):
                try:
                    self.producer.produce(
                        self.topic, value=f"{self.tag}{i}".encode(), partition=i % self.partitions,
                        on_delivery=self._done,
                    )
                except BufferError:
                    break  # the queue is full while a leader is away: send later
                except KafkaException as e:  # fatal: reported by ``_error`` too
                    self.errors.append(f"produce: {e.args[0]}")
                    self.stopping.set()
                    break
                i += 1
            try:
                self.producer.poll(0.05)
            except KafkaException as e:  # a fatal error is raised here as well as reported
                self.errors.append(f"poll: {e.args[0]}")
                self.stopping.set()
        try:
            self.unflushed = self.producer.flush(120)
        except KafkaException as e:
            self.errors.append(f"flush: {e.args[0]}")
            self.unflushed = len(self.producer)


class Consuming(threading.Thread):
    """One member of a consumer group, polling until stopped."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000, **QUIET,
        })
        self.consumer.subscribe([topic])
        self.got: list[tuple[int, int, bytes, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                self.got.append((msg.partition(), msg.offset(), msg.value(), time.monotonic()))
        self.consumer.close()


def carry_on_then_drain(producing: Producing, consuming: Consuming, acked_at_least: int,
                        deadline: float) -> None:
    """Let the producer reach ``acked_at_least`` acknowledgements (by ``deadline`` + 30 s),
    stop it, give the consumer up to 60 s to read everything acknowledged, stop it, and
    check the producer carried on with nothing unflushed and no error."""
    while len(producing.acked) < acked_at_least and time.monotonic() < deadline + 30:
        time.sleep(0.1)
    producing.stopping.set()
    producing.join(150)
    drained = time.monotonic() + 60
    while len({g[:3] for g in consuming.got}) < len(producing.acked) and time.monotonic() < drained:
        time.sleep(0.1)
    consuming.stopping.set()
    consuming.join(30)
    assert producing.unflushed == 0 and not producing.errors, producing.errors[:5]
    assert len(producing.acked) >= acked_at_least, "the producer did not carry on"


def read_back(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> list[tuple[int, int, bytes]]:
    """Every record of every partition, from offset 0 to the high watermark."""
    def connect() -> Consumer:
        return Consumer({
            "bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000, **QUIET,
        })

    consumer = connect()
    ends = {}
    deadline = time.monotonic() + timeout_s
    for p in range(partitions):
        while True:  # a partition whose leader just died answers once its new owner serves it
            try:
                _, ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                # librdkafka keeps asking the leader it knows; a new client asks who leads now
                consumer.close()
                consumer = connect()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, bytes]] = []
    seen = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        out.append((msg.partition(), msg.offset(), msg.value()))
        seen[msg.partition()] = msg.offset() + 1
    consumer.close()
    return out
