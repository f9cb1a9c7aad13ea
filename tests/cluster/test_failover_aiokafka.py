"""aiokafka follows leader moves: an idempotent aiokafka producer and an aiokafka group
member keep working while a node of three is ``kill -9``ed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 3


async def test_aiokafka_clients_follow_a_killed_nodes_partitions(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6)
    producer = consumer = None
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("aio", PARTITIONS, 1)])["aio"].result(30)
        lead: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(lead) < PARTITIONS and time.monotonic() < deadline:
            lead = leaders(bootstrap, "aio")
            await asyncio.sleep(0.2)
        victim = next(n for n in nodes if n.node_id in lead.values() and n.node_id != 1)

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
        consumer = AIOKafkaConsumer(
            "aio", bootstrap_servers=bootstrap, group_id="aio-group", auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
        )
        await producer.start()
        await consumer.start()
        acked: list[tuple[int, int, bytes]] = []
        consumed: list[tuple[int, int, bytes]] = []
        stop = asyncio.Event()
        stop_producing = asyncio.Event()

        async def produce() -> None:
            i = 0
            while not stop_producing.is_set():
                value = str(i).encode()
                meta = await producer.send_and_wait("aio", value, partition=i % PARTITIONS)
                acked.append((meta.partition, meta.offset, value))
                i += 1

        async def consume() -> None:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    consumed.extend((r.partition, r.offset, r.value) for r in records)

        tasks = [asyncio.create_task(produce()), asyncio.create_task(consume())]
        while len(acked) < 150:
            await asyncio.sleep(0.05)
        victim.kill9()
        at_kill = len(acked)
        deadline = time.monotonic() + 90
        while len(acked) < at_kill + 300 and time.monotonic() < deadline:
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.1)
        assert len(acked) >= at_kill + 300, "the producer did not carry on after the kill"
        # Production ends first: a consumer slower than the producer would never catch up.
        stop_producing.set()
        await tasks[0]
        deadline = time.monotonic() + 90
        while len(set(consumed)) < len(acked) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert set(acked) <= set(consumed)
        survivors = ",".join(n.bootstrap for n in nodes if n is not victim)
        stored = await asyncio.to_thread(read_back, survivors, "aio", PARTITIONS)
        assert sorted(stored) == sorted(acked)
    finally:
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()
        for node in nodes:
            node.close()
