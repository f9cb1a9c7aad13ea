"""Tier-2 writes are fenced by the container's epoch: a node frozen (SIGSTOP) with
appends its storage writer has not yet moved to Tier-2 loses its container to another
node; once thawed (SIGCONT) it gives every container up in its first round awake (it
stood still as long as its session lasts), or its writer, if it acts first, finds the new
owner's epoch in the container's Tier-2 fence and stops without writing; the node, its
ZooKeeper session lost, stops every container it ran and starts afresh what the map gives it; appends it held for
the partition are never re-sent from there (the idempotent producer sent them to the new
leader). Every acknowledged record reads back once, at dense offsets."""

from __future__ import annotations

import json
import os
import signal
import struct
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from tidegate.core.segmentstore.service import container_of

from tests.cluster.clients import QUIET, Producing, leaders, read_back
from tests.cluster.nodes import start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _produce, _zk_state
from tests.cluster.zk import ZooKeeperServer

# Appends wait in the storage writer for seconds: the frozen owner surely holds some.
SLOW_FLUSH = "[store]\nflush_interval_ms = 4000\nflush_trickle_bytes = 1073741824\n"


def _owner(hosts: str, cid: int) -> int:
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        return int(json.loads(zk.get("/containers/map")[0])["owners"][str(cid)])
    finally:
        zk.stop()
        zk.close()


def _leader(bootstrap: str, topic: str) -> int | None:
    try:
        return leaders(bootstrap, topic).get(0)
    except KafkaException:  # Metadata waits on containers still moving
        return None


def test_a_thawed_stale_owner_writes_nothing_to_tier2(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    config = tmp_path / "slow-flush.toml"
    config.write_text(SLOW_FLUSH)
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS,
                        extra_args=("--config", str(config)))
    frozen = None
    try:
        owners, leader_id = _zk_state(zookeeper.hosts)
        topic = next(
            f"fenced-{i}" for i in range(1000)
            if owners[container_of(f"kafka/fenced-{i}/0", CONTAINERS)] != leader_id
        )
        cid = container_of(f"kafka/{topic}/0", CONTAINERS)
        frozen = next(n for n in nodes if n.node_id == owners[cid])
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producing = Producing(bootstrap, topic, 1)
        producing.start()
        while len(producing.acked) < 400:
            time.sleep(0.05)

        # Frozen with the acknowledged tail still in the owner's storage writer (its next
        # flush to Tier-2 due within seconds) and produce requests in flight.
        assert frozen.proc is not None
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        producing.stopping.set()
        survivors = ",".join(n.bootstrap for n in nodes if n is not frozen)
        deadline = time.monotonic() + 60
        while _owner(zookeeper.hosts, cid) == frozen.node_id and time.monotonic() < deadline:
            time.sleep(0.2)
        new_owner = _owner(zookeeper.hosts, cid)
        assert new_owner != frozen.node_id, "the frozen node kept its container"
        while _leader(survivors, topic) != new_owner and time.monotonic() < deadline:
            time.sleep(0.2)
        after = _produce(survivors, topic, range(100_000, 100_300))

        log_start = frozen.log_path.stat().st_size
        os.kill(frozen.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        thawed = b""
        # Either it gives its containers up in its first round awake (it stood still as
        # long as its session lasts), or its storage writer, first to act, is fenced.
        stopped_at_once, fenced = b"as long as its ZooKeeper session lasts", b"StorageFencedError"

        def settled() -> bool:
            return b"the ZooKeeper session was lost" in thawed and (
                stopped_at_once in thawed or fenced in thawed)

        while not settled() and time.monotonic() < deadline:
            time.sleep(0.2)
            with open(frozen.log_path, "rb") as f:
                f.seek(log_start)
                thawed = f.read()
        assert settled(), ("the thawed stale owner neither gave its containers up at once nor "
                           "had its storage writer fenced:\n" + thawed.decode()[-3000:])
        fence = tmp_path / "shared" / "tier2" / ".fence" / f"container-{cid}"
        (epoch,) = struct.unpack(">q", fence.read_bytes())
        assert epoch > 0

        producing.join(150)
        assert producing.unflushed == 0 and not producing.errors, producing.errors[:5]
        # The thawed node started again from the map, whatever it gets back: offsets
        # go on after the new owner's, through any node.
        final = _produce(bootstrap, topic, range(200_000, 200_200))
        stored = read_back(bootstrap, topic, 1)
        assert [o for _, o, _ in stored] == list(range(len(stored)))
        assert max(Counter(v for _, _, v in stored).values()) == 1
        where = {o: v for _, o, v in stored}
        missing = [a for a in producing.acked + after + final if where.get(a[1]) != a[2]]
        assert not missing, f"{len(missing)} acknowledged records not read back: {missing[:5]}"
    finally:
        if frozen is not None and frozen.proc is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        for node in nodes:
            node.close()
