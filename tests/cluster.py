"""Real cluster processes for tests: a standalone ZooKeeper (Debian's) and plog servers
(``tidegate plog-server``), each on a free loopback port, stopped, killed (-9),
paused (SIGSTOP) and restarted on demand. Reused by any test that needs ZooKeeper."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import free_port

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
READY_TIMEOUT_S = 30.0


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    """Standalone ZooKeeper 3.8 (Debian ``zookeeper``) in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if not Path("/usr/share/java/zookeeper.jar").exists() or shutil.which("java") is None:
            raise AssertionError("ZooKeeper tests need Debian's zookeeper package and java")
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(
            f"tickTime=250\ndataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok\nmaxSessionTimeout=60000\n"
        )
        log = open(self.directory / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", ZK_CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if _ruok(self.port):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"ZooKeeper exited with {self.proc.returncode}")
            time.sleep(0.1)
        raise AssertionError(f"ZooKeeper not ready in {READY_TIMEOUT_S}s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


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
             "--server-id", self.server_id],
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
