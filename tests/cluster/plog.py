"""Plog servers (``tidegate plog-server``) as real processes for tests, each on a free
loopback port, stopped, killed (-9), paused (SIGSTOP) and restarted on demand, over the
ZooKeeper of ``tests.cluster.zk``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cluster.zk import ZooKeeperServer
from tests.conftest import free_port

READY_TIMEOUT_S = 30.0

__all__ = ["PlogCluster", "PlogServerProcess", "ZooKeeperServer"]


class PlogServerProcess:
    """``tidegate plog-server`` registered in ``zookeeper``."""

    def __init__(self, directory: Path, zookeeper: str, server_id: str, root: str) -> None:
        self.directory = directory
        self.data_dir = directory / "data"
        self.zookeeper = zookeeper
        self.server_id = server_id
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        #: ``--disk-bytes-max`` at the next start (None: the disk's free space).
        self.disk_bytes_max: int | None = None
        self.sweep_interval_ms: int | None = None

    def start(self) -> None:
        assert self.proc is None
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / "server.log"
        log = open(log_path, "ab")
        offset = log.tell()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.gateway.cli", "plog-server",
             "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
             "--zookeeper", self.zookeeper, "--zookeeper-root", self.root,
             "--server-id", self.server_id,
             *([] if self.disk_bytes_max is None else ["--disk-bytes-max", str(self.disk_bytes_max)]),
             *([] if self.sweep_interval_ms is None else ["--sweep-interval-ms", str(self.sweep_interval_ms)])],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(log_path, "rb") as f:
                f.seek(offset)
                if b"plog server ready" in f.read():
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"plog server exited with {self.proc.returncode}: {self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"plog server not ready in {READY_TIMEOUT_S}s: {self.tail()}")

    def tail(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class PlogCluster:
    """ZooKeeper plus ``servers`` plog servers under a ZooKeeper root of their own."""

    def __init__(self, directory: Path, servers: int, zookeeper: ZooKeeperServer, root: str) -> None:
        self.zookeeper = zookeeper
        self.root = root
        self.servers = [
            PlogServerProcess(directory / f"plog-{i}", zookeeper.hosts, f"s{i}", root)
            for i in range(servers)
        ]

    def start(self) -> None:
        procs = self.servers
        for s in procs:
            s.start()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
