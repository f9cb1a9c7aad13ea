"""Start-up mistakes (issue 22, finding 11): one line naming what is wrong, exit
status 2, and nothing started."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.conftest import free_port


def _serve(*args: str) -> tuple[int, list[str]]:
    run = subprocess.run(
        [sys.executable, "-m", "tidegate.gateway.cli", "serve", *args],
        capture_output=True, text=True, timeout=60,
    )
    return run.returncode, (run.stdout + run.stderr).splitlines()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_second_server_on_the_same_data_dir(tidegate: Tidegate) -> None:
    assert tidegate.proc is not None
    code, lines = _serve("--data-dir", str(tidegate.data_dir), "--listen",
                         f"127.0.0.1:{free_port()}", "--rest", "off", "--grpc", "off")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (f"tidegate: data dir {tidegate.data_dir} is in use by another "
                        f"tidegate process (pid {tidegate.proc.pid})")


@pytest.mark.parametrize("flag", ["--rest", "--grpc", "--listen"])
def test_busy_port(tmp_path: Path, busy_port: int, flag: str) -> None:
    args = {"--listen": f"127.0.0.1:{free_port()}", "--rest": "off", "--grpc": "off"}
    args[flag] = f"127.0.0.1:{busy_port}"
    code, lines = _serve("--data-dir", str(tmp_path / "data"),
                         *(x for kv in args.items() for x in kv))
    what = {"--rest": "REST", "--grpc": "gRPC", "--listen": "Kafka listener"}[flag]
    assert code == 2 and lines == [
        f"tidegate: {what} address 127.0.0.1:{busy_port} is already in use"
    ], lines


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--log-level", "verbose"], "tidegate: argument --log-level: invalid choice: 'VERBOSE'"),
        (["--listen", "nowhere"], "tidegate: listen: expected HOST:PORT, got 'nowhere'"),
        (["--no-such-flag"], "tidegate: unrecognized arguments: --no-such-flag"),
    ],
)
def test_bad_arguments(tmp_path: Path, args: list[str], expected: str) -> None:
    code, lines = _serve("--data-dir", str(tmp_path / "data"), *args)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(expected), lines
