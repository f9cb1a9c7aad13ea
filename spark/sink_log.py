"""The exactly-once sink's decision log and its topics.

The driver records each batch it is about to commit (batch id and the transactions that
hold its rows) as the only record of the compacted one-partition topic
``<topic>.sink.<prefix>``, then commits the transactions. A batch Spark runs again finds
its decision there: its tasks write nothing and the driver commits the first run's
transactions (committing twice is a no-op). No consumer group is used, so the sink leaves
no group behind and no lag to show.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

#: Bounds every metadata, create, read and write of the log (and of the output topic check).
CALL_TIMEOUT_S = 30.0


class SinkError(RuntimeError):
    pass


@dataclass(frozen=True)
class OpenTransaction:
    """What a task hands the driver: enough to end its transaction (in a commit message)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    rows: int


@dataclass(frozen=True)
class Decision:
    batch_id: int
    txns: tuple[OpenTransaction, ...]

    def to_json(self) -> bytes:
        return json.dumps({"batch": self.batch_id, "txns": [
            [t.transactional_id, t.producer_id, t.producer_epoch, t.rows] for t in self.txns]}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Decision:
        doc = json.loads(raw)
        return cls(int(doc["batch"]), tuple(OpenTransaction(str(t[0]), int(t[1]), int(t[2]), int(t[3]))
                                            for t in doc["txns"]))


def decision_topic(topic: str, prefix: str) -> str:
    return f"{topic}.sink.{prefix}"


def _client_id() -> str:
    return f"tidegate-spark-{uuid.uuid4().hex[:12]}"


def ensure_topic(bootstrap: str, topic: str, client: dict[str, Any], config: dict[str, str] | None = None,
                 partitions: int = -1) -> None:
    """Create ``topic`` when it does not exist (the broker's default partitions unless
    given), as auto-create would; a refusal names the topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": _client_id(), **client})
    meta = admin.list_topics(timeout=CALL_TIMEOUT_S)
    if topic in meta.topics and meta.topics[topic].error is None:
        return
    future = admin.create_topics([NewTopic(topic, partitions, -1, config=config or {})],
                                 request_timeout=CALL_TIMEOUT_S)[topic]
    try:
        future.result(CALL_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise SinkError(f"the sink's topic {topic!r} does not exist and could not be created: {error}") from exc


def read_decision(bootstrap: str, topic: str, client: dict[str, Any]) -> Decision | None:
    """The last decision recorded in ``topic`` (None: no batch was decided yet)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tidegate-spark-sink-unused",
                         "enable.auto.commit": False, "client.id": _client_id(),
                         "allow.auto.create.topics": False, **client})
    try:
        meta = consumer.list_topics(topic, timeout=CALL_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        tp = TopicPartition(topic, 0)
        _low, high = consumer.get_watermark_offsets(tp, timeout=CALL_TIMEOUT_S)
        if high <= 0:
            return None
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                raise SinkError(f"reading the sink's decision log {topic!r}: {msg.error()}")
            return Decision.from_json(msg.value() or b"{}")
        raise SinkError(f"the sink's decision log {topic!r} gave no record in {CALL_TIMEOUT_S}s")
    finally:
        consumer.close()


def record_decision(bootstrap: str, topic: str, decision: Decision, client: dict[str, Any]) -> None:
    """Durably (acks=all) the decision as the log's only record (compaction keeps the last)."""
    ensure_topic(bootstrap, topic, client, {"cleanup.policy": "compact"}, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "client.id": _client_id(), "message.timeout.ms": int(CALL_TIMEOUT_S * 1000), **client})
    errors: list[str] = []
    producer.produce(topic, key=b"decision", value=decision.to_json(), partition=0,
                     on_delivery=lambda err, _msg: errors.append(str(err)) if err is not None else None)
    if producer.flush(CALL_TIMEOUT_S + 5) != 0:
        raise SinkError(f"the decision of batch {decision.batch_id} was not written to {topic!r} in time")
    if errors:
        raise SinkError(f"the decision of batch {decision.batch_id} was not written to {topic!r}: {errors[0]}")
