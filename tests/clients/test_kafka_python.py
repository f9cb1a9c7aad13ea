"""Conformance: kafka-python against a real ``tidegate serve``."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.clients import scenario
from tests.clients.scenario import Rec
from tests.clients.server import Tidegate

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _topic(codec: str | None) -> str:
    return f"kp-{codec or 'none'}"


def _consume(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple[int, Rec]]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tps = [TopicPartition(topic, p) for p in range(scenario.PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    got: dict[int, list[tuple[int, Rec]]] = {}
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=500).items():
            for m in msgs:
                rec = Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp)
                got.setdefault(tp.partition, []).append((m.offset, rec))
                seen += 1
    consumer.close()
    return got


def test_kafka_python_conformance(tidegate: Tidegate) -> None:
    admin = KafkaAdminClient(bootstrap_servers=tidegate.bootstrap)
    admin.create_topics(
        [NewTopic(_topic(c), num_partitions=scenario.PARTITIONS, replication_factor=1)
         for c in CODECS]
    )
    admin.close()
    sent: dict[str | None, list[Rec]] = {}
    for seed, codec in enumerate(CODECS):
        recs = scenario.records(seed)
        producer = KafkaProducer(
            bootstrap_servers=tidegate.bootstrap, compression_type=codec, acks="all",
            max_request_size=2_000_000,
        )
        futures = [
            producer.send(
                _topic(codec), key=r.key, value=r.value, partition=r.partition,
                headers=list(r.headers), timestamp_ms=r.timestamp_ms,
            )
            for r in recs
        ]
        producer.flush()
        for f in futures:
            f.get(timeout=10)
        producer.close()
        sent[codec] = recs

    tidegate.restart()

    for codec in CODECS:
        recs = sent[codec]
        scenario.check(recs, _consume(tidegate.bootstrap, _topic(codec), len(recs)))

    consumer = KafkaConsumer(bootstrap_servers=tidegate.bootstrap, group_id=None)
    recs = sent["zstd"]
    for p in range(scenario.PARTITIONS):
        tp = TopicPartition(_topic("zstd"), p)
        for ts in (0, scenario.T0_MS + 5_500, scenario.T0_MS + 10**9):
            want = scenario.expected_offset_for_time(recs, p, ts)
            answer = consumer.offsets_for_times({tp: ts})[tp]
            assert (answer.offset if answer is not None else -1) == want, (p, ts)
        end = consumer.end_offsets([tp])[tp]
        assert end == len(scenario.by_partition(recs)[p])
        assert consumer.beginning_offsets([tp])[tp] == 0
    consumer.close()
