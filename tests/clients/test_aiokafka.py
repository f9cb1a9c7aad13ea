"""Conformance: aiokafka against a real ``tidegate serve``."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.clients import scenario
from tests.clients.scenario import Rec
from tests.clients.server import Tidegate

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _topic(codec: str | None) -> str:
    return f"aio-{codec or 'none'}"


async def _produce(bootstrap: str) -> dict[str | None, list[Rec]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(_topic(c), num_partitions=scenario.PARTITIONS, replication_factor=1)
             for c in CODECS]
        )
    finally:
        await admin.close()
    sent: dict[str | None, list[Rec]] = {}
    for seed, codec in enumerate(CODECS):
        recs = scenario.records(100 + seed)
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type=codec, acks="all",
            enable_idempotence=True, max_request_size=2_000_000,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    _topic(codec), key=r.key, value=r.value, partition=r.partition,
                    headers=list(r.headers), timestamp_ms=r.timestamp_ms,
                )
                for r in recs
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        sent[codec] = recs
    return sent


async def _consume(bootstrap: str, sent: dict[str | None, list[Rec]]) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        for codec, recs in sent.items():
            tps = [TopicPartition(_topic(codec), p) for p in range(scenario.PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: dict[int, list[tuple[int, Rec]]] = {}
            seen = 0
            async with asyncio.timeout(30):
                while seen < len(recs):
                    batches = await consumer.getmany(timeout_ms=500)
                    for tp, msgs in batches.items():
                        for m in msgs:
                            rec = Rec(m.partition, m.key, m.value, tuple(m.headers), m.timestamp)
                            got.setdefault(tp.partition, []).append((m.offset, rec))
                            seen += 1
            scenario.check(recs, got)
        recs = sent["lz4"]
        for p in range(scenario.PARTITIONS):
            tp = TopicPartition(_topic("lz4"), p)
            for ts in (0, scenario.T0_MS + 7_001, scenario.T0_MS + 10**9):
                want = scenario.expected_offset_for_time(recs, p, ts)
                answer = (await consumer.offsets_for_times({tp: ts}))[tp]
                assert (answer.offset if answer is not None else -1) == want, (p, ts)
            assert (await consumer.end_offsets([tp]))[tp] == len(scenario.by_partition(recs)[p])
    finally:
        await consumer.stop()


def test_aiokafka_conformance(tidegate: Tidegate) -> None:
    sent = asyncio.run(_produce(tidegate.bootstrap))
    tidegate.restart()
    asyncio.run(_consume(tidegate.bootstrap, sent))
