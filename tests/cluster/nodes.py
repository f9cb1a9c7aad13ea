"""Cluster test helpers: ``tidegate serve --zookeeper`` nodes sharing Tier-1 and Tier-2
directories, as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.clients.server import READY_TIMEOUT_S, Tidegate
from tests.conftest import free_port


class Node(Tidegate):
    def __init__(self, root: Path, node_id: int, zookeeper: str, container_count: int,
                 extra_args: tuple[str, ...] = ()) -> None:
        super().__init__(root / f"node-{node_id}", root / f"node-{node_id}.log")
        self.extra_args = extra_args
        self.node_id = node_id
        self.zookeeper = zookeeper
        self.shared = root / "shared"
        self.container_count = container_count
        self.grpc_port = free_port()
        #: More ``tidegate serve`` flags (a repeated flag's last value wins).
        self.extra_args: list[str] = []

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> None:
        assert self.proc is None
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"---- start {self.starts}\n".encode())
            offset = log.tell()
            cmd = [
                sys.executable, "-m", "tidegate.gateway.cli", "serve",
                "--data-dir", str(self.data_dir), "--listen", self.bootstrap,
                "--rest", "off", "--grpc", self.grpc, "--zookeeper", self.zookeeper,
                "--node-id", str(self.node_id), "--container-count", str(self.container_count),
                "--tier1-dir", str(self.shared / "tier1"), "--tier2-dir", str(self.shared / "tier2"),
                *self.extra_args,
            ]
            cmd += self.extra_args
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if b"tidegate ready" in f.read():
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"node {self.node_id} exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"node {self.node_id} not ready in {READY_TIMEOUT_S}s:\n{self.tail()}")


def start_nodes(root: Path, zookeeper: str, count: int, container_count: int,
                extra_args: tuple[str, ...] = ()) -> list[Node]:
    nodes = [Node(root, i + 1, zookeeper, container_count, extra_args) for i in range(count)]
    for node in nodes:
        node.start()
    return nodes
