"""A real ``tidegate serve`` subprocess for client tests: start, SIGTERM, ``kill -9``,
restart on the same data directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

READY_TIMEOUT_S = 60.0


class Tidegate:
    def __init__(
        self, data_dir: Path, log_path: Path, config: Path | None = None,
        advertised: str | None = None, rest: bool = False, grpc: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.config = config
        self.advertised = advertised
        self.port = free_port()
        #: The admin REST port, when ``rest`` asked for it.
        self.rest_port = free_port() if rest else None
        #: The controller gRPC port, when ``grpc`` asked for it.
        self.grpc_port = free_port() if grpc else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.proc is None
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"---- start {self.starts}\n".encode())
        log.flush()
        offset = log.tell()
        cmd = [
            sys.executable, "-m", "tidegate.gateway.cli", "serve",
            "--data-dir", str(self.data_dir), "--listen", self.bootstrap,
            "--rest", f"127.0.0.1:{self.rest_port}" if self.rest_port else "off",
            "--grpc", f"127.0.0.1:{self.grpc_port}" if self.grpc_port else "off",
        ]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        if self.advertised is not None:
            cmd += ["--advertised-listener", self.advertised]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if b"tidegate ready" in f.read():
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"tidegate exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"tidegate not ready in {READY_TIMEOUT_S}s:\n{self.tail()}")

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait; the exit code (0 for a clean shutdown)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"tidegate ignored SIGTERM:\n{self.tail()}") from None
        self.proc = None
        return code

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        assert self.stop() == 0, self.tail()
        self.start()

    def tail(self, lines: int = 40) -> str:
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@contextmanager
def serving(tmp_path: Path, config_toml: str) -> Iterator[Tidegate]:
    """A started ``tidegate serve`` with ``config_toml`` as its config file, closed after."""
    config = tmp_path / "tidegate.toml"
    config.write_text(config_toml)
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    server.start()
    try:
        yield server
    finally:
        server.close()
