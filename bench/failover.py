"""How long a 3-node cluster's partitions stop acknowledging when one node fails
(issue 36, item 6): ZooKeeper and three ``tidegate serve`` nodes (the test helpers of
``tests/cluster``), an acks=all idempotent producer into 6 partitions, then ``kill -9``
or ``SIGSTOP`` of a node that leads some partitions (not the controller leader, unless
``--leader``). Reported: per partition, the time from the fault to the first
acknowledgement of a record sent after it, and the survivors' log lines of the failover with their times.

    python -m bench.failover [--fault kill9|sigstop] [--leader] [--runs N] [--extra-config TOML]
        [--producer JSON] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.clients import QUIET, leaders
from tests.cluster.nodes import Node, start_together
from tests.cluster.test_leader_scale import _zk_state
from tests.cluster.zk import ZooKeeperServer

PARTITIONS = 6
#: Survivors' log lines that show where a failover spends its time.
EVENTS = re.compile(
    r"session|members|containers gained|rebalanc|claim|stall|timed out|sealed|failover|"
    r"plog|controller leader|did not start|map", re.I,
)


class Acks(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, extra: dict[str, object]) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 300_000, **QUIET, **extra,
        })
        self.first_after: dict[int, float] = {}
        self.acked = 0
        self.errors: list[str] = []
        self.fault_at: float | None = None
        self.stopping = threading.Event()

    def _done(self, sent_at: float, err: KafkaError | None, msg: object) -> None:
        now = time.monotonic()
        if err is not None:
            self.errors.append(str(err))
            return
        self.acked += 1
        p = msg.partition()  # type: ignore[attr-defined]
        # Only records sent after the fault count: those in flight then may ack at once.
        if self.fault_at is not None and p not in self.first_after and sent_at >= self.fault_at:
            self.first_after[p] = now - self.fault_at

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            for p in range(PARTITIONS):
                sent_at = time.monotonic()
                self.producer.produce(
                    self.topic, value=str(i).encode(), partition=p,
                    on_delivery=lambda err, msg, t=sent_at: self._done(t, err, msg),
                )
                i += 1
            self.producer.poll(0.02)
        self.producer.flush(60)


def _log_events(node: Node, since_wall: float) -> list[str]:
    out = []
    for line in node.log_path.read_text(errors="replace").splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if t >= since_wall - 0.5 and EVENTS.search(line):
            out.append(f"  node {node.node_id} +{t - since_wall:6.2f}s {line[24:200]}")
    return out


def run_once(root: Path, fault: str, leader_too: bool, extra_config: str, producer_extra: dict[str, object]) -> dict[str, object]:
    zk = ZooKeeperServer(root / "zk")
    zk.start()
    nodes: list[Node] = []
    try:
        config = root / "tidegate.toml"
        config.write_text(extra_config)
        nodes = [Node(root, i + 1, zk.hosts, 6, extra_args=("--config", str(config))) for i in range(3)]
        start_together(nodes)
        _, controller = _zk_state(zk.hosts)
        bootstrap = ",".join(n.bootstrap for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        admin.create_topics([NewTopic("failover", PARTITIONS, 1)])["failover"].result(30)
        deadline = time.monotonic() + 60
        while len(lead := leaders(bootstrap, "failover")) < PARTITIONS:
            assert time.monotonic() < deadline, lead
            time.sleep(0.2)
        acks = Acks(bootstrap, "failover", producer_extra)
        acks.start()
        while acks.acked < 600:
            time.sleep(0.05)
        led: dict[int, list[int]] = {}
        for p, n in leaders(bootstrap, "failover").items():
            led.setdefault(n, []).append(p)
        candidates = [n for n in nodes if n.node_id in led and (leader_too or n.node_id != controller)]
        victim = max(candidates, key=lambda n: len(led[n.node_id]))
        assert victim.proc is not None
        wall = time.time()
        acks.fault_at = time.monotonic()
        if fault == "kill9":
            victim.kill9()
        else:
            os.kill(victim.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 180
        while len(acks.first_after) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.1)
        result = {
            "fault": fault, "victim": victim.node_id, "controller": controller,
            "victim_partitions": led[victim.node_id],
            "per_partition_s": {p: round(t, 2) for p, t in sorted(acks.first_after.items())},
            "all_acked_again_s": round(max(acks.first_after.values()), 2)
            if len(acks.first_after) == PARTITIONS else None,
            "errors": acks.errors[:3],
        }
        acks.stopping.set()
        if fault == "sigstop":
            os.kill(victim.proc.pid, signal.SIGCONT)
        acks.join(90)
        events = [e for n in nodes if n is not victim for e in _log_events(n, wall)]
        result["events"] = sorted(events, key=lambda e: float(e.split("+")[1].split("s")[0]))[:60]
        return result
    finally:
        for n in nodes:
            if n.proc is not None:
                n.kill9()
        zk.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fault", choices=("kill9", "sigstop"), default="kill9")
    ap.add_argument("--leader", action="store_true", help="the victim may be the controller leader")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--extra-config", default="", help="TOML text for every node")
    ap.add_argument("--producer", default="{}", help="JSON of producer settings")
    ap.add_argument("--work-dir", type=Path, help="keep the nodes' data and logs here")
    args = ap.parse_args()
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="tidegate-failover-") as tmp:
            where = Path(tmp) if args.work_dir is None else args.work_dir / f"run-{i}"
            where.mkdir(parents=True, exist_ok=True)
            r = run_once(where, args.fault, args.leader, args.extra_config, json.loads(args.producer))
        events = r.pop("events")
        print(json.dumps(r))
        print("\n".join(events))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
