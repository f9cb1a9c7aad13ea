"""``tidegate serve`` with its Tier-1 on plog servers (``store.tier1_plog_zookeeper``):
acknowledged records survive ``kill -9`` of the node, recovered from the replicated
log (the node's data directory holds no Tier-1 files)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.server import Tidegate
from tests.cluster.plog import PlogCluster

TOPIC = "replicated"
RECORDS = 3000


def test_serve_on_replicated_tier1_survives_kill9(plog_cluster: PlogCluster, tmp_path: Path) -> None:
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[store]\n"
        f'tier1_plog_zookeeper = "{plog_cluster.zookeeper.hosts}"\n'
        f'tier1_plog_zookeeper_root = "{plog_cluster.root}"\n'
        f'tier1_plog_log_prefix = "gw-{uuid.uuid4().hex[:8]}-"\n'
        "tier1_plog_bytes_max = 1048576\n"
    )
    node = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    node.start()
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=2)]).values():
            f.result(timeout=30)
        acked: list[bytes] = []
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 2})
        for n in range(RECORDS):
            producer.produce(TOPIC, value=b"rec-%06d" % n, partition=n % 2,
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
            if n % 200 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        assert len(acked) == RECORDS
        node.kill9()
        assert not (tmp_path / "data" / "segmentstore" / "tier1").exists()
        node.start()
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(2)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert sorted(got) == sorted(acked)
    finally:
        if node.proc is not None:
            node.stop()


async def test_serve_embeds_a_plog_server(plog_cluster: PlogCluster, tmp_path: Path) -> None:
    """``tier1_plog_server_listen``: the node runs a plog server of its own, registered
    beside the others (its plogs under the node's data directory)."""
    from tidegate.core.cluster.zookeeper import ZooKeeper

    from tests.conftest import free_port

    root = f"/embedded-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[store]\n"
        f'tier1_plog_zookeeper = "{plog_cluster.zookeeper.hosts}"\n'
        f'tier1_plog_zookeeper_root = "{root}"\n'
        f'tier1_plog_server_listen = "127.0.0.1:{free_port()}"\n'
        "tier1_replication_factor = 1\n"
    )
    node = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    node.start()
    zk = ZooKeeper(plog_cluster.zookeeper.hosts)
    try:
        await zk.start()
        assert len(await zk.children(f"{root}/servers")) == 1
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
        acked: list[bytes] = []
        for n in range(100):
            producer.produce(TOPIC, value=b"e-%d" % n,
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        assert producer.flush(60) == 0 and len(acked) == 100
        assert any((tmp_path / "data" / "segmentstore" / "plog" / "plogs").iterdir())
    finally:
        await zk.stop()
        node.stop()


def test_produce_through_a_plog_server_kill9(zookeeper, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A plog server ``kill -9``ed while an idempotent producer runs: the containers'
    logs fail over to new plogs, every acknowledged record is stored once, and a
    ``kill -9`` of the node then recovers them all from the remaining servers."""
    import threading

    cluster = PlogCluster(tmp_path / "plog", 4, zookeeper, f"/gwkill-{uuid.uuid4().hex[:8]}")
    cluster.start()
    config = tmp_path / "tidegate.toml"
    config.write_text(
        "[store]\n"
        f'tier1_plog_zookeeper = "{zookeeper.hosts}"\n'
        f'tier1_plog_zookeeper_root = "{cluster.root}"\n'
        "tier1_plog_timeout_ms = 1000\n"
    )
    node = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    try:
        node.start()
        acked: list[bytes] = []
        failed: list[str] = []
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 2,
                             "message.timeout.ms": 60_000})

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                acked.append(msg.value())  # type: ignore[attr-defined]

        stop = threading.Event()

        def produce() -> None:
            n = 0
            while not stop.is_set():
                try:
                    producer.produce(TOPIC, value=b"k-%07d" % n, partition=n % 2, on_delivery=on_delivery)
                    n += 1
                except BufferError:
                    producer.poll(0.05)
                if n % 100 == 0:
                    producer.poll(0.005)

        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=2)])[TOPIC].result(timeout=30)
        thread = threading.Thread(target=produce)
        thread.start()
        try:
            time.sleep(1.5)
            before = len(acked)
            victim = asyncio.run(_active_group(zookeeper.hosts, cluster.root, "tidegate-container-0"))[0]
            next(s for s in cluster.servers if s.server_id == victim).kill9()
            time.sleep(4)
        finally:
            stop.set()
            thread.join()
        assert producer.flush(60) == 0
        assert not failed, failed[:3]
        assert len(acked) > before > 0
        # Container 0's log had the killed server in its group and moved on.
        assert b"failover sealed" in node.log_path.read_bytes()
        node.kill9()
        node.start()
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(2)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(acked) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.close()
        assert len(got) == len(set(got)) and set(got) == set(acked)
    finally:
        if node.proc is not None:
            node.stop()
        cluster.stop()


async def _active_group(hosts: str, root: str, log_name: str) -> list[str]:
    from tidegate.core.cluster.zookeeper import ZooKeeper

    zk = ZooKeeper(hosts)
    try:
        await zk.start()
        raw, _ = await zk.get(f"{root}/logs/{log_name}")
        servers: list[str] = json.loads(raw)["plogs"][-1]["servers"]
        return servers
    finally:
        await zk.stop()
