"""A container that comes back to a node after another node owned it reads its Tier-2
segments afresh: the node's Tier-2 cache of segment lengths, filled while it last owned
the container, is behind what the other owner wrote meanwhile (a stale length failed the
storage writer at every restart, and fetches of what was only in Tier-2 with it)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from tidegate.core.cluster.assignment import assign

from tests.cluster.clients import QUIET, Producing, read_back
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.test_leader_scale import CONTAINERS, _zk_state
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 12
BROKEN = (b"WriterError", b"DataCorruptionError")
# Frequent checkpoints: Tier-1 is truncated behind each Tier-2 flush, so what the other
# owner flushed is in Tier-2 only.
OFTEN = "[store]\ncheckpoint_interval_ops = 200\n"


def _map(hosts: str) -> dict[int, int]:
    zk = KazooClient(hosts=hosts)
    zk.start(10)
    try:
        owners = json.loads(zk.get("/containers/map")[0])["owners"]
        return {int(c): int(n) for c, n in owners.items()}
    finally:
        zk.stop()
        zk.close()


def _wait(what: str, done: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.2)
    assert done(), f"not {what} within {timeout_s}s"  # type: ignore[operator]


def _returning(owners: dict[int, int], node_id: int) -> set[int]:
    """The containers of ``node_id`` that the map gives back to it once it leaves and
    joins again (the assignment is deterministic)."""
    nodes = set(owners.values())
    away = assign(owners, CONTAINERS, nodes - {node_id})
    back = assign(away, CONTAINERS, nodes)
    return {cid for cid, n in owners.items() if n == node_id and back[cid] == node_id}


def test_a_container_back_on_its_old_node_serves_every_acked_record(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    config = tmp_path / "often.toml"
    config.write_text(OFTEN)
    nodes = start_nodes(tmp_path, zookeeper.hosts, 3, container_count=CONTAINERS,
                        extra_args=("--config", str(config)))
    frozen: Node | None = None
    try:
        owners, leader_id = _zk_state(zookeeper.hosts)
        # Not the controller leader, if another node also gets a container back.
        frozen = max(
            (n for n in nodes if _returning(owners, n.node_id)),
            key=lambda n: n.node_id != leader_id,
        )
        returning = _returning(owners, frozen.node_id)
        bootstrap = ",".join(n.bootstrap for n in nodes)
        topic = "returns"
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        producing = Producing(bootstrap, topic, PARTITIONS)
        producing.start()
        # Several storage-writer flushes (one a second) land in Tier-2 on every node.
        _wait("acked 2000", lambda: len(producing.acked) >= 2000, 90)

        assert frozen.proc is not None
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        _wait(
            "the frozen node's containers moved",
            lambda: frozen.node_id not in _map(zookeeper.hosts).values(), 60,
        )
        # The new owners write the moved containers' segments to Tier-2.
        moved_at = len(producing.acked)
        _wait("acked 4000 more", lambda: len(producing.acked) >= moved_at + 4000, 120)

        os.kill(frozen.proc.pid, signal.SIGCONT)
        _wait(
            f"containers {sorted(returning)} back on node {frozen.node_id}",
            lambda: all(_map(zookeeper.hosts).get(c) == frozen.node_id for c in returning), 60,
        )
        back_at = len(producing.acked)
        _wait("acked 2000 more", lambda: len(producing.acked) >= back_at + 2000, 120)
        producing.stopping.set()
        producing.join(150)
        for node in nodes:
            text = node.log_path.read_bytes()
            counts = {w.decode(): text.count(w) for w in BROKEN}
            assert not any(counts.values()), f"node {node.node_id}: {counts}\n{node.tail(30)}"
        assert producing.unflushed == 0 and not producing.errors, producing.errors[:5]

        stored = read_back(bootstrap, topic, PARTITIONS, timeout_s=60)
        where = {(p, o): v for p, o, v in stored}
        missing = [a for a in producing.acked if where.get(a[:2]) != a[2]]
        assert not missing, f"{len(missing)} of {len(producing.acked)} acked not read: {missing[:5]}"
    finally:
        if frozen is not None and frozen.proc is not None:
            os.kill(frozen.proc.pid, signal.SIGCONT)
        for node in nodes:
            node.close()
