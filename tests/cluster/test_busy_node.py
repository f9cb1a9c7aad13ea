"""A node whose event loop is held up by a long CPU-bound step (in the fault campaign: a
node back with an empty disk indexing its containers' segments for 16 s) still answers
the other nodes' Tier-1 writes: its plog server runs on a thread and loop of its own, so
the others neither wait for it nor give it up (before, their writes stalled for
``tier1_plog_timeout_ms`` and every log with a plog there sealed and switched).

ZooKeeper and three ``tidegate serve`` nodes on the replicated Tier-1; node 2's loop is
held with the ``loop.hold`` failpoint (``gateway/failpoints.py``) while an idempotent
producer writes to every partition."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, Producing, leaders, read_back, wait_for
from tests.cluster.nodes import Node, start_together
from tests.cluster.zk import ZooKeeperServer

pytestmark = pytest.mark.timeout(300)

TOPIC, PARTITIONS = "busy", 6
PLOG_TIMEOUT_MS = 3_000
#: Several plog timeouts: every write to a server that did not answer would be given up.
HOLD_MS = 12_000


def _since(node: Node, offset: int) -> str:
    with open(node.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_a_node_whose_loop_is_held_still_answers_the_others_tier1_writes(
    zookeeper: ZooKeeperServer, tmp_path: Path,
) -> None:
    config = tmp_path / "tidegate.toml"
    config.write_text(f"[store]\ntier1_plog_timeout_ms = {PLOG_TIMEOUT_MS}\n")
    nodes = [Node(tmp_path, i, zookeeper.hosts, 6, extra_args=("--config", str(config)))
             for i in (1, 2, 3)]
    busy = nodes[1]
    busy.env["TIDEGATE_FAILPOINTS"] = f"loop.hold={HOLD_MS}"
    start_together(nodes)
    producing: Producing | None = None
    try:
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        producing = Producing(bootstrap, TOPIC, PARTITIONS, rate_per_s=200)
        producing.start()
        wait_for("acks from every partition",
                 lambda: len({p for p, _, _ in producing.acked}) == PARTITIONS, 90)
        led = leaders(bootstrap, TOPIC)
        elsewhere = {p for p, n in led.items() if n != busy.node_id}
        assert elsewhere, f"every partition led by the busy node: {led}"

        others = [nodes[0], nodes[2]]
        marks = [os.path.getsize(n.log_path) for n in others]
        assert busy.proc is not None
        os.kill(busy.proc.pid, signal.SIGUSR2)
        wait_for("the loop held", lambda: "loop.hold: the event loop held" in _since(busy, 0), 30)
        held_at = time.monotonic()

        def acked_elsewhere() -> int:
            return sum(1 for p, _, _ in list(producing.acked) if p in elsewhere)

        # Partitions led by the other nodes keep being acknowledged while node 2 is held.
        time.sleep(1)
        before = acked_elsewhere()
        time.sleep(max(0.0, HOLD_MS / 1000 - 2 - (time.monotonic() - held_at)))
        during = acked_elsewhere() - before
        wait_for("the loop released", lambda: "loop.hold: released" in _since(busy, 0), 60)
        time.sleep(2)
        producing.stopping.set()
        producing.join(180)

        for node, mark in zip(others, marks, strict=True):
            text = _since(node, mark)
            given_up = [line for line in text.splitlines()
                        if "given up on" in line or "failover sealed" in line]
            assert not given_up, f"node {node.node_id} gave a plog server up:\n" + "\n".join(given_up)
        assert during > 0, "the other nodes' partitions stopped while node 2's loop was held"
        assert producing.errors == [], producing.errors[:5]

        stored = read_back(bootstrap, TOPIC, PARTITIONS)
        values = [v for _, _, v in stored]
        assert len(values) == len(set(values)), "a record stored twice"
        missing = {v for _, _, v in producing.acked} - set(values)
        assert not missing, f"{len(missing)} acknowledged records not read back"
    finally:
        if producing is not None:
            producing.stopping.set()
        for node in nodes:
            node.close()
