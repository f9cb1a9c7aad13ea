"""The fault kinds of the campaign, drawn from a seeded ``random.Random`` with bounded
durations, and their injection into a running cluster: each fault is applied and undone
(the node restarted, thawed, ZooKeeper started again) before ``inject`` returns, so the
cluster loses at most one node at a time, which three replicated nodes must survive."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass, field

from kazoo.client import KazooClient

from tests.cluster.nodes import Node
from tests.cluster.zk import ZooKeeperServer

#: kill -9 of a random node, of the controller leader, of a random node whose data
#: directory is then wiped; SIGSTOP of a random node; ZooKeeper stopped and started.
KINDS = ("kill9", "kill9-leader", "kill9-wipe", "sigstop", "zookeeper")
RESTART_ATTEMPTS = 2
#: How long a hung node gets to write its stacks (SIGUSR1) into its log before it is killed.
STACK_DUMP_S = 3.0


@dataclass(frozen=True)
class Bounds:
    """The ranges faults draw their durations from, in seconds."""

    down_s: tuple[float, float] = (0.0, 5.0)
    pause_s: tuple[float, float] = (10.0, 30.0)
    zookeeper_down_s: tuple[float, float] = (3.0, 10.0)


@dataclass
class Fault:
    kind: str
    #: How long the node stays down or frozen, or ZooKeeper stopped.
    duration_s: float
    #: Which of the live nodes (an index into them, drawn now so the seed fixes it).
    pick: int
    node_id: int | None = None
    started_at: float = 0.0
    #: The wall clock at the start, as the nodes' logs write it.
    started_wall: str = ""
    ended_at: float = 0.0
    #: What went wrong undoing the fault (a node that would not start again).
    problems: list[str] = field(default_factory=list)
    #: What the harness itself had to retry (its ZooKeeper slow to start again).
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        who = "" if self.node_id is None else f" node {self.node_id}"
        return f"{self.kind}{who} for {self.duration_s:.1f}s at {self.started_wall}"


def draw(rng: random.Random, kinds: tuple[str, ...], bounds: Bounds) -> Fault:
    kind = rng.choice(kinds)
    span = {"sigstop": bounds.pause_s, "zookeeper": bounds.zookeeper_down_s}.get(kind, bounds.down_s)
    return Fault(kind, round(rng.uniform(*span), 1), rng.randrange(1 << 16))


def controller_leader(hosts: str) -> int | None:
    """The node id in ``/controller/leader`` (None when there is none or ZooKeeper is away)."""
    zk = KazooClient(hosts=hosts, timeout=5)
    try:
        zk.start(10)
        data, _ = zk.get("/controller/leader")
        return int(json.loads(data)["node"])
    except Exception:
        return None
    finally:
        zk.stop()
        zk.close()


class Injector:
    def __init__(self, zookeeper: ZooKeeperServer, chroot: str, nodes: list[Node]) -> None:
        self.zookeeper, self.chroot, self.nodes = zookeeper, chroot, nodes
        #: The node paused now, so cleanup can thaw it whatever happens.
        self.paused: Node | None = None

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.proc is not None]

    def inject(self, fault: Fault) -> Fault:
        live = self.live()
        node = live[fault.pick % len(live)] if live else None
        if fault.kind == "kill9-leader":
            leader = controller_leader(self.zookeeper.hosts + self.chroot)
            node = next((n for n in live if n.node_id == leader), node)
        fault.started_at = time.monotonic()
        fault.started_wall = time.strftime("%H:%M:%S")
        if fault.kind == "zookeeper":
            self.zookeeper.close()
            time.sleep(fault.duration_s)
            self._start_zookeeper(fault)
        elif node is None:
            fault.problems.append("no live node to fault")
        elif fault.kind == "sigstop":
            fault.node_id = node.node_id
            assert node.proc is not None
            self.paused = node
            os.kill(node.proc.pid, signal.SIGSTOP)
            time.sleep(fault.duration_s)
            os.kill(node.proc.pid, signal.SIGCONT)
            self.paused = None
        else:
            fault.node_id = node.node_id
            node.kill9()
            time.sleep(fault.duration_s)
            if fault.kind == "kill9-wipe":
                shutil.rmtree(node.data_dir)
            self._restart(node, fault)
        fault.ended_at = time.monotonic()
        return fault

    def _start_zookeeper(self, fault: Fault) -> None:
        """ZooKeeper on its port and data again; a start that does not answer in time is
        tried again (seen once on this loaded machine), and reported."""
        for _ in range(RESTART_ATTEMPTS + 1):
            try:
                self.zookeeper.start()
                return
            except AssertionError as e:
                fault.notes.append(f"ZooKeeper did not start again in time: {str(e)[-200:]}")
                self.zookeeper.close()
        raise AssertionError("ZooKeeper could not be started again: " + "; ".join(fault.notes))

    def _restart(self, node: Node, fault: Fault) -> None:
        for _ in range(RESTART_ATTEMPTS):
            try:
                node.start()
                return
            except AssertionError as e:
                tail = "\n      ".join(str(e).splitlines()[-6:])
                fault.problems.append(f"node {node.node_id} did not start again (its log: "
                                      f"{node.log_path}, stacks dumped there and in the "
                                      f"other nodes' logs):\n      {tail}")
                # Every thread's and task's stack, of the other nodes too: it may wait on them.
                for n in self.nodes:
                    if n.proc is not None and n.proc.poll() is None:
                        os.kill(n.proc.pid, signal.SIGUSR1)
                time.sleep(STACK_DUMP_S)
                node.close()

    def thaw(self) -> None:
        if self.paused is not None and self.paused.proc is not None:
            os.kill(self.paused.proc.pid, signal.SIGCONT)
        self.paused = None
