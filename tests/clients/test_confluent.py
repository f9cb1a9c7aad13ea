"""Conformance: confluent-kafka (librdkafka) against a real ``tidegate serve``."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients import scenario
from tests.clients.scenario import Rec
from tests.clients.server import Tidegate

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _topic(codec: str) -> str:
    return f"ck-{codec}"


def _produce(bootstrap: str) -> dict[str, list[Rec]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(_topic(c), num_partitions=scenario.PARTITIONS, replication_factor=1)
         for c in CODECS]
    )
    for f in futures.values():
        f.result(timeout=30)
    sent: dict[str, list[Rec]] = {}
    for seed, codec in enumerate(CODECS):
        recs = scenario.records(200 + seed)
        errors: list[object] = []
        producer = Producer({
            "bootstrap.servers": bootstrap, "compression.codec": codec, "acks": "all",
            "enable.idempotence": True, "message.max.bytes": 1_048_576, "linger.ms": 5,
        })
        for r in recs:
            producer.produce(
                _topic(codec), key=r.key, value=r.value, partition=r.partition,
                headers=list(r.headers), timestamp=r.timestamp_ms,
                on_delivery=lambda err, msg, errors=errors: errors.append(err) if err else None,
            )
        assert producer.flush(30) == 0
        assert not errors, errors
        sent[codec] = recs
    return sent


def _consume(bootstrap: str, sent: dict[str, list[Rec]]) -> None:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "conformance",
        "enable.auto.commit": False, "enable.partition.eof": False,
    })
    try:
        for codec, recs in sent.items():
            tps = [TopicPartition(_topic(codec), p, OFFSET_BEGINNING)
                   for p in range(scenario.PARTITIONS)]
            consumer.assign(tps)
            got: dict[int, list[tuple[int, Rec]]] = {}
            seen = 0
            deadline = time.monotonic() + 30
            while seen < len(recs) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    raise KafkaException(msg.error())
                headers = tuple((k, v if v is not None else b"") for k, v in msg.headers() or [])
                rec = Rec(msg.partition(), msg.key(), msg.value(), headers, msg.timestamp()[1])
                got.setdefault(msg.partition(), []).append((msg.offset(), rec))
                seen += 1
            consumer.unassign()
            scenario.check(recs, got)
        recs = sent["snappy"]
        for p in range(scenario.PARTITIONS):
            for ts in (0, scenario.T0_MS + 3_500, scenario.T0_MS + 10**9):
                want = scenario.expected_offset_for_time(recs, p, ts)
                (answer,) = consumer.offsets_for_times(
                    [TopicPartition(_topic("snappy"), p, ts)], timeout=10
                )
                assert answer.offset == want, (p, ts, answer)
            low, high = consumer.get_watermark_offsets(
                TopicPartition(_topic("snappy"), p), timeout=10
            )
            assert (low, high) == (0, len(scenario.by_partition(recs)[p]))
    finally:
        consumer.close()


def test_confluent_kafka_conformance(tidegate: Tidegate) -> None:
    sent = _produce(tidegate.bootstrap)
    tidegate.restart()
    _consume(tidegate.bootstrap, sent)
