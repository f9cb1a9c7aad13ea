"""One campaign: ZooKeeper and three nodes (replicated plogs, shared Tier-2), the
workloads of ``workloads.py`` running throughout, ``faults`` faults drawn from ``seed``
every ``gap_s`` seconds, then the workloads stopped and drained and the checker's
verdict. Every process and thread it starts is stopped before ``run`` returns."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from tidegate.core.segmentstore.service import container_of

from tests.cluster.chaos import checker
from tests.cluster.chaos.faults import KINDS, Bounds, Fault, Injector, draw
from tests.cluster.chaos.workloads import (
    QUIET,
    GroupMember,
    GroupOffsetsWatcher,
    IdempotentProducer,
    TransactionalProducer,
)
from tests.cluster.clients import leaders
from tests.cluster.nodes import Node, start_nodes
from tests.cluster.zk import ZooKeeperServer

IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS = "chaos-idem", 6
TXN_TOPIC, TXN_PARTITIONS = "chaos-txn", 3
HOT_PARTITIONS = 4
#: One segment for the hot topic's partitions, split once it carries more than the target.
HOT_CONFIG = {
    "tidegate.scaling.type": "BY_RATE_IN_EVENTS_PER_SEC",
    "tidegate.scaling.target.rate": "100",
    "tidegate.scaling.scale.factor": "2",
    "tidegate.scaling.min.segments": "1",
}
GROUP = "chaos-group"
CHROOT = "/chaos"
CONTAINERS = 6


@dataclass
class Config:
    seed: int
    faults: int
    work_dir: Path
    kinds: tuple[str, ...] = KINDS
    bounds: Bounds = field(default_factory=Bounds)
    #: Seconds between one fault's end and the next one's start.
    gap_s: tuple[float, float] = (20.0, 30.0)
    rate_per_s: int = 150
    #: Longest a partition may go without acknowledging after a fault (None: report only).
    unavailable_max_s: float | None = 10.0
    drain_timeout_s: float = 120.0
    #: A topic whose one segment, owned by a node other than the controller leader, gets
    #: more than its scaling target: auto-scaling must split it (the cooldown is a minute).
    hot_topic: bool = True


def _wait(what: str, check, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Campaign:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.zookeeper = ZooKeeperServer(config.work_dir / "zk")
        self.nodes: list[Node] = []
        self.injector: Injector | None = None
        self.faults: list[Fault] = []
        self.producers: list[IdempotentProducer] = []
        self.txn: TransactionalProducer | None = None
        self.members: list[GroupMember] = []
        self.watcher: GroupOffsetsWatcher | None = None
        self.hot: str | None = None
        self.hot_owner_leader: tuple[int, int] = (0, 0)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def run(self) -> checker.Report:
        cfg = self.config
        report = checker.Report()
        report.notes.append(f"seed {cfg.seed}, {cfg.faults} faults of {', '.join(cfg.kinds)}, "
                            f"work dir {cfg.work_dir}")
        begun = time.monotonic()
        try:
            self._start_cluster()
            self._start_workloads()
            _wait("the first acknowledgements",
                  lambda: sum(len(p.acks) for p in self.producers) > cfg.rate_per_s, 60)
            assert self.injector is not None
            for i in range(cfg.faults):
                self.rng_sleep(cfg.gap_s)
                fault = draw(self.rng, cfg.kinds, cfg.bounds)
                print(f"chaos: fault {i + 1}/{cfg.faults}: {fault.kind} ...", flush=True)
                self.faults.append(self.injector.inject(fault))
                print(f"chaos: fault {i + 1}/{cfg.faults}: {fault.describe()} done"
                      f"{' with problems' if fault.problems else ''}", flush=True)
                down = [n.node_id for n in self.nodes if n.proc is None]
                if down:  # a second fault on top would go past what three nodes survive
                    report.notes.append(f"faults stopped after fault {i + 1}: node(s) {down} "
                                        "could not be started again")
                    break
            self.rng_sleep(cfg.gap_s)  # the last fault's recovery, under load
            self._stop_and_drain()
            ended = time.monotonic()
            self._check(report, ended)
            report.notes.insert(1, f"campaign took {ended - begun:.0f}s")
        finally:
            self._cleanup()
        checker.check_logs(report, [n.log_path for n in self.nodes])
        return report

    def rng_sleep(self, span: tuple[float, float]) -> None:
        time.sleep(self.rng.uniform(*span))

    def _start_cluster(self) -> None:
        self.zookeeper.start()
        self.nodes = start_nodes(self.config.work_dir, self.zookeeper.hosts + CHROOT, 3,
                                 container_count=CONTAINERS)
        self.injector = Injector(self.zookeeper, CHROOT, self.nodes)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        for topic, partitions in ((IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS), (TXN_TOPIC, TXN_PARTITIONS)):
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
            _wait(f"every partition of {topic} led",
                  lambda t=topic, n=partitions: len(leaders(self.bootstrap, t)) == n, 60)
        if self.config.hot_topic:
            self._create_hot_topic(admin)

    def _create_hot_topic(self, admin: AdminClient) -> None:
        """A name whose first segment's container a node other than the leader owns."""
        owners, leader = zk_state(self.zookeeper.hosts + CHROOT)
        self.hot = next(
            f"chaos-hot-{i}" for i in range(1000)
            if owners.get(container_of(f"kafka/chaos-hot-{i}/0", CONTAINERS), leader) != leader
        )
        self.hot_owner_leader = (owners[container_of(f"kafka/{self.hot}/0", CONTAINERS)], leader)
        admin.create_topics([NewTopic(self.hot, HOT_PARTITIONS, 1, config=HOT_CONFIG)])[self.hot].result(30)
        _wait(f"every partition of {self.hot} led",
              lambda: len(leaders(self.bootstrap, self.hot or "")) == HOT_PARTITIONS, 60)

    def _start_workloads(self) -> None:
        cfg, bootstrap = self.config, self.bootstrap
        self.producers = [
            IdempotentProducer(name, bootstrap, IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS, cfg.rate_per_s)
            for name in ("p1", "p2")
        ]
        if self.hot is not None:
            self.producers.append(IdempotentProducer("hot", bootstrap, self.hot, HOT_PARTITIONS, cfg.rate_per_s))
        self.txn = TransactionalProducer(bootstrap, TXN_TOPIC, TXN_PARTITIONS, "chaos-txn")
        self.members = [GroupMember(bootstrap, [IDEMPOTENT_TOPIC, TXN_TOPIC], GROUP, f"member-{i}")
                        for i in range(2)]
        self.watcher = GroupOffsetsWatcher(bootstrap, GROUP)
        for thread in (*self.producers, self.txn, *self.members, self.watcher):
            thread.start()

    def _expected(self) -> dict[str, set[bytes]]:
        assert self.txn is not None
        return {
            IDEMPOTENT_TOPIC: {a.value for p in self.producers[:2] for a in p.acks},
            TXN_TOPIC: {v for t in self.txn.transactions if t.outcome == "committed" for _, v in t.values},
        }

    def _stop_and_drain(self) -> None:
        """Producers stop and flush; the group reads until it saw everything acknowledged or
        committed, or ``drain_timeout_s`` passed."""
        assert self.txn is not None
        for thread in (*self.producers, self.txn):
            thread.stopping.set()
        for thread in (*self.producers, self.txn):
            thread.join(checker_join_s(thread))
        expected = self._expected()
        deadline = time.monotonic() + self.config.drain_timeout_s
        while time.monotonic() < deadline:
            got = {(s.topic, s.value) for m in self.members for s in list(m.seen)}
            if all((t, v) in got for t, values in expected.items() for v in values):
                break
            time.sleep(0.5)
        time.sleep(3)  # the last automatic commits
        for member in self.members:
            member.stopping.set()
            member.join(30)
        assert self.watcher is not None
        self.watcher.stopping.set()
        self.watcher.join(30)
        self.watcher.read_once()  # the offsets the members committed as they left
        self.watcher.close()

    def _check(self, report: checker.Report, ended: float) -> None:
        assert self.txn is not None and self.watcher is not None
        acks = [a for p in self.producers[:2] for a in p.acks]
        stored = {
            isolation: {
                topic: checker.read_partitions(self.bootstrap, topic, partitions, isolation)
                for topic, partitions in ((IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS), (TXN_TOPIC, TXN_PARTITIONS))
            }
            for isolation in ("read_uncommitted", "read_committed")
        }
        checker.check_idempotent(report, IDEMPOTENT_TOPIC, acks,
                                 {i: s[IDEMPOTENT_TOPIC] for i, s in stored.items()})
        checker.check_transactions(report, TXN_TOPIC, self.txn.transactions,
                                   {i: s[TXN_TOPIC] for i, s in stored.items()})
        if self.hot is not None:
            self._check_hot(report)
        aborted = {v for t in self.txn.transactions if t.outcome == "aborted" for _, v in t.values}
        checker.check_group(report, [s for m in self.members for s in m.seen], self._expected(),
                            aborted, self.watcher.watch, [c for m in self.members for c in m.commits])
        for p in self.producers:
            report.violation(f"producer {p.tag}: fatal errors", len(p.fatal_errors), p.fatal_errors[:3])
            report.violation(f"producer {p.tag}: deliveries failed", len(p.delivery_errors),
                             p.delivery_errors[:3])
            report.violation(f"producer {p.tag}: records never acknowledged", p.unflushed, "")
        if self.txn.errors:
            report.notes.append(f"transactional producer: {len(self.txn.errors)} errors, e.g. "
                                f"{self.txn.errors[:3]}")
        gaps = checker.unavailability(self.faults, acks, IDEMPOTENT_PARTITIONS, ended)
        checker.check_faults(report, self.faults, gaps, self.config.unavailable_max_s)

    def _check_hot(self, report: checker.Report) -> None:
        assert self.hot is not None
        hot_acks = self.producers[2].acks
        checker.check_idempotent(report, self.hot, hot_acks, {
            isolation: checker.read_partitions(self.bootstrap, self.hot, HOT_PARTITIONS, isolation)
            for isolation in ("read_uncommitted", "read_committed")
        })
        split = f"scaled kafka/{self.hot} (split)".encode()
        splits = sum(n.log_path.read_bytes().count(split) for n in self.nodes if n.log_path.exists())
        owner, leader = self.hot_owner_leader
        spread = leaders(self.bootstrap, self.hot)
        report.notes.append(f"{self.hot}: one segment on node {owner} (controller leader {leader}) "
                            f"split {splits} times; partition leaders now {spread}")
        if not splits:
            report.violations.append(
                f"{self.hot}: auto-scaling never split its hot segment (owner node {owner}, "
                f"controller leader {leader}; {HOT_CONFIG['tidegate.scaling.target.rate']} "
                f"records/s target, {self.config.rate_per_s} sent)"
            )

    def _cleanup(self) -> None:
        if self.injector is not None:
            self.injector.thaw()
        threads = [*self.producers, *self.members, *(t for t in (self.txn, self.watcher) if t)]
        for thread in threads:
            if isinstance(thread, IdempotentProducer):
                thread.flush_timeout_s = 1.0  # nothing more counts once the check is done or failed
            thread.stopping.set()
        for node in self.nodes:
            node.close()
        for thread in threads:
            thread.join(checker_join_s(thread))
        if self.watcher is not None:
            self.watcher.close()
        self.zookeeper.close()


def zk_state(hosts: str) -> tuple[dict[int, int], int]:
    """The container map (container -> node) and the controller leader."""
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(10)
    try:
        owners = json.loads(zk.get("/containers/map")[0])["owners"]
        leader = json.loads(zk.get("/controller/leader")[0])["node"]
    finally:
        zk.stop()
        zk.close()
    return {int(c): int(n) for c, n in owners.items()}, int(leader)


def checker_join_s(thread: object) -> float:
    """Producers flush for up to two minutes; everything else stops within seconds."""
    return 150.0 if isinstance(thread, IdempotentProducer | TransactionalProducer) else 30.0
