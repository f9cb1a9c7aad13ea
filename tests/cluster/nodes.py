"""Cluster test helpers: ``tidegate serve --zookeeper`` nodes sharing a Tier-2
directory, as real subprocesses. Tier-1 is cluster mode's default, replicated on the
plog server each node embeds (``tier1="replicated"``), or the file log in a shared
directory (``tier1="file"``: clusters of fewer than three nodes, which the replicated
Tier-1 cannot keep writing through a node's loss)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.clients.server import READY_TIMEOUT_S, Tidegate
from tests.conftest import free_port


class Node(Tidegate):
    def __init__(
        self, root: Path, node_id: int, zookeeper: str, container_count: int,
        tier1: str = "replicated", extra_args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(root / f"node-{node_id}", root / f"node-{node_id}.log")
        assert tier1 in ("replicated", "file"), tier1
        self.node_id = node_id
        self.zookeeper = zookeeper
        self.shared = root / "shared"
        self.container_count = container_count
        self.tier1 = tier1
        self.grpc_port = free_port()
        self._offset = 0
        #: More ``tidegate serve`` flags (a repeated flag's last value wins).
        self.extra_args: list[str] = list(extra_args)
        #: More environment for the process (``TIDEGATE_FAILPOINTS``).
        self.env: dict[str, str] = {}

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the process; ``wait_ready`` waits for it."""
        assert self.proc is None
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts}\n".encode())
            self._offset = log.tell()
            cmd = [
                sys.executable, "-m", "tidegate.gateway.cli", "serve",
                "--data-dir", str(self.data_dir), "--listen", self.bootstrap,
                "--rest", "off", "--grpc", self.grpc, "--zookeeper", self.zookeeper,
                "--node-id", str(self.node_id), "--container-count", str(self.container_count),
                "--tier2-dir", str(self.shared / "tier2"),
            ]
            if self.tier1 == "file":
                cmd += ["--tier1-dir", str(self.shared / "tier1")]
            cmd += self.extra_args
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env})

    def wait_ready(self, line: bytes = b"tidegate ready") -> None:
        """Until the log of this start shows ``line``."""
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                if line in f.read():
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.node_id} exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"node {self.node_id} not {line.decode()} in {READY_TIMEOUT_S}s:\n{self.tail()}")


def start_nodes(
    root: Path, zookeeper: str, count: int, container_count: int, tier1: str = "replicated",
    extra_args: tuple[str, ...] = (),
) -> list[Node]:
    """``count`` nodes started together: on the replicated Tier-1 a lone first node has
    too few plog servers for its containers' logs until the others register. They join
    in order of their ids (each once the one before joined), so the container map comes
    out as when each started after the last was ready."""
    return start_together([
        Node(root, i + 1, zookeeper, container_count, tier1, extra_args) for i in range(count)
    ])


def start_together(nodes: list[Node]) -> list[Node]:
    """``start_nodes`` for nodes made by the caller."""
    try:
        for node in nodes:
            node.spawn()
            node.wait_ready(b"cluster: node %d joined" % node.node_id)
        for node in nodes:
            node.wait_ready()
        # A node takes its share of containers only once it has read the others' segments
        # (core/cluster/node.py): wait for that, so a test begins on a balanced cluster.
        if nodes and nodes[0].container_count >= len(nodes):
            for node in nodes:
                node.wait_ready(b" started here")  # "container N started here"
    except BaseException:
        for node in nodes:
            if node.proc is not None:
                node.kill9()
        raise
    return nodes

