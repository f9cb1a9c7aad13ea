"""ZooKeeper and three ``tidegate serve`` nodes on loopback, Tier-1 replicated on the
plog server each node runs (cluster mode's default): partition leaders spread over
the nodes; an idempotent acks=all producer and a consumer group keep running while one
node is ``kill -9``ed, and again while a second node rejoins with its data directory
deleted; every acknowledged record is then read back once, at dense offsets."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, Consuming, Producing, leaders, read_back, wait_for
from tests.cluster.nodes import start_nodes
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 6



def test_kill9_and_empty_rejoin_under_load_lose_nothing(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    nodes = start_nodes(tmp_path, zookeeper.hosts + "/tidegate/east", 3, container_count=6)
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("orders", PARTITIONS, 1)])["orders"].result(30)
        before = wait_for(
            "every partition to have a leader",
            lambda: (lead := leaders(bootstrap, "orders")) and len(lead) == PARTITIONS and lead,
        )
        assert len(set(before.values())) >= 2, f"leaders not spread: {before}"

        producing = Producing(bootstrap, "orders", PARTITIONS)
        consuming = Consuming(bootstrap, "orders", "orders-group")
        producing.start()
        consuming.start()
        wait_for("records acknowledged", lambda: len(producing.acked) > 300)

        victim = next(n for n in nodes if n.node_id in before.values() and n.node_id != 1)
        victim.kill9()
        acked_at_kill = len(producing.acked)
        survivors = ",".join(n.bootstrap for n in nodes if n is not victim)
        after = wait_for(
            "the victim's partitions to move",
            lambda: (lead := leaders(survivors, "orders")) and len(lead) == PARTITIONS
            and victim.node_id not in lead.values() and lead,
        )
        killed_at = time.monotonic()
        wait_for("acknowledgements after the kill", lambda: len(producing.acked) > acked_at_kill + 600)
        wait_for(
            "the group to consume after the kill",
            lambda: sum(1 for *_, t in consuming.got if t > killed_at) > 300,
        )
        # A second node loses its data directory and rejoins empty: containers come back
        # to it (the map rebalances) and it rebuilds its index from the shared segments.
        emptied = next(n for n in nodes if n is not victim and n.node_id != 1)
        emptied.kill9()
        shutil.rmtree(emptied.data_dir)
        emptied.start()
        rejoined_at = len(producing.acked)
        wait_for(
            "the emptied node to lead partitions again",
            lambda: emptied.node_id in leaders(survivors, "orders").values(),
        )
        wait_for("acknowledgements after the rejoin", lambda: len(producing.acked) > rejoined_at + 600)
        producing.stopping.set()
        producing.join(150)
        consuming.stopping.set()
        consuming.join(30)
        assert producing.unflushed == 0
        assert not producing.errors, producing.errors[:5]
        assert set(after.values()) <= {n.node_id for n in nodes if n is not victim}

        # Tier-1 was cluster mode's default: replicated on the nodes' own plog servers.
        assert not (tmp_path / "shared" / "tier1").exists()
        assert all(any((n.data_dir / "segmentstore" / "plog" / "plogs").iterdir()) for n in nodes if n is not victim)
        stored = read_back(survivors, "orders", PARTITIONS)
        counts = Counter(value for _, _, value in stored)
        duplicates = [v for v, c in counts.items() if c > 1]
        assert not duplicates, f"{len(duplicates)} values stored twice, e.g. {duplicates[:5]}"
        by_partition: dict[int, list[int]] = {}
        for p, offset, _ in stored:
            by_partition.setdefault(p, []).append(offset)
        for p, offsets in by_partition.items():
            assert offsets == list(range(len(offsets))), f"partition {p} offsets not dense"
        where = {(p, o): v for p, o, v in stored}
        missing = [a for a in producing.acked if where.get((a[0], a[1])) != a[2]]
        assert not missing, (
            f"{len(missing)} acknowledged records not read back, e.g. {missing[:5]}; stored there: "
            f"{[where.get((p, o)) for p, o, _ in missing[:5]]}; leaders {before} then {after}"
        )
    finally:
        for node in nodes:
            node.close()
