"""Two nodes lose their disks one after the other (``kill -9``, data directory deleted,
started again) under an idempotent producer: the first plogs of the containers' Tier-1
logs went on the first two plog servers to register, so without re-replication the
second loss took their last copy (``NoReplicaError``, partitions unreadable for good).
Each time, once the node is back, every plog of every log is on three live servers
again; then every partition acknowledges again and everything acknowledged reads back."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.cluster.clients import QUIET, Producing, read_back
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 12
FACTOR = 3
PLOGS = "/tidegate/plog"
# Re-replication looks every second; small plogs, so some are sealed before a failure.
CONFIG = "[store]\ntier1_plog_repair_interval_ms = 1000\ntier1_plog_bytes_max = 1048576\n"


def _short_plogs(hosts: str) -> list[tuple[str, str, list[str]]]:
    """(log, plog, servers) of every plog on fewer than ``FACTOR`` registered servers."""
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        live = set(zk.get_children(f"{PLOGS}/servers"))
        short = []
        for name in zk.get_children(f"{PLOGS}/logs"):
            record = json.loads(zk.get(f"{PLOGS}/logs/{name}")[0])
            for p in record["plogs"]:
                if len(set(p["servers"]) & live) < FACTOR:
                    short.append((name, p["id"], p["servers"]))
        return short
    finally:
        zk.stop()
        zk.close()


def _wait(what: str, done, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"not {what} within {timeout_s}s"
        time.sleep(0.5)


def _repaired(hosts: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while short := _short_plogs(hosts):
        assert time.monotonic() < deadline, f"plogs short of {FACTOR} live servers: {short}"
        time.sleep(0.5)


def _every_partition_acks(bootstrap: str) -> list[tuple[int, int, bytes]]:
    acked: list[tuple[int, int, bytes]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": 240_000, **QUIET})
    for p in range(PARTITIONS):
        producer.produce("wiped", value=f"again-{p}".encode(), partition=p, on_delivery=lambda err, msg:
                         acked.append((msg.partition(), msg.offset(), msg.value())) if err is None else None)
    assert producer.flush(250) == 0
    assert sorted(p for p, _, _ in acked) == list(range(PARTITIONS)), acked
    return acked


def _wipe_and_restart(node: Node) -> None:
    node.kill9()
    shutil.rmtree(node.data_dir)
    node.spawn()
    # A node rebuilding its state from the shared segments may take longer than a
    # plain start on a loaded machine; its plog server registers long before.
    log_start = node.log_path.stat().st_size
    deadline = time.monotonic() + 240
    while b"tidegate ready" not in node.log_path.read_bytes()[log_start:]:
        assert node.proc is not None and node.proc.poll() is None, node.tail()
        assert time.monotonic() < deadline, f"node {node.node_id} not ready:\n{node.tail()}"
        time.sleep(0.5)


@pytest.mark.timeout(600)  # two rebuilds from the shared segments on a loaded machine
def test_two_wiped_disks_in_a_row_lose_nothing(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    config = tmp_path / "repair.toml"
    config.write_text(CONFIG)
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=6,
                        extra_args=("--config", str(config)))
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("wiped", PARTITIONS, 1)])["wiped"].result(30)
        producing = Producing(bootstrap, "wiped", PARTITIONS)
        producing.start()
        _wait("acked 1000", lambda: len(producing.acked) >= 1000, 90)
        for node in nodes[:2]:  # the first two plog servers to register
            _wipe_and_restart(node)
            at = len(producing.acked)
            _wait("acked 1000 more", lambda at=at: len(producing.acked) >= at + 1000, 180)
            _repaired(zookeeper.hosts, 120)
        at = len(producing.acked)
        _wait("acked 1000 more", lambda: len(producing.acked) >= at + 1000, 180)
        producing.stopping.set()
        producing.join(150)
        # A rejoining node may take minutes to rebuild its offset index on a loaded
        # machine (its partitions wait meanwhile, and some sends time out): not lost,
        # never acknowledged. What counts: every partition acknowledges again.
        assert producing.unflushed == 0
        assert all("MSG_TIMED_OUT" in e for e in producing.errors), producing.errors[:5]
        again = _every_partition_acks(bootstrap)
        stored = read_back(bootstrap, "wiped", PARTITIONS, timeout_s=90)
        where = {(p, o): v for p, o, v in stored}
        missing = [a for a in producing.acked + again if where.get(a[:2]) != a[2]]
        assert not missing, f"{len(missing)} of {len(producing.acked)} acked not read: {missing[:5]}"
    finally:
        for node in nodes:
            node.close()
