"""A real ZooKeeper for cluster tests: Debian's standalone server on a free loopback
port with a temporary data directory. Fails loudly when it cannot start."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.conftest import free_port

READY_TIMEOUT_S = 30.0
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"


class ZooKeeperServer:
    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if not Path("/usr/share/java/zookeeper.jar").exists() or shutil.which("java") is None:
            raise AssertionError("ZooKeeper tests need Debian's zookeeper package and java")
        data = self.work_dir / "zk-data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ndataDir={data}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "maxSessionTimeout=20000\nminSessionTimeout=1000\n"
        )
        log = open(self.work_dir / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-cp", CLASSPATH,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.tail()}")
            if self._ruok():
                return
            time.sleep(0.1)
        raise AssertionError(f"ZooKeeper not ready in {READY_TIMEOUT_S}s:\n{self.tail()}")

    def _ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"srvr")
                return b"Mode" in s.recv(4096)
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        path = self.work_dir / "zookeeper.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
