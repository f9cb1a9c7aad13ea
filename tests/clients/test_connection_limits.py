"""Kafka's connection limits on a real ``tidegate serve`` (issue 22, finding 3): idle
connections close after ``connections.max.idle.ms``, ``max.connections.per.ip`` and its
overrides refuse the connections over them, refusals are logged at most once a second,
and ``max.connections`` follows the file-descriptor limit, raised to the hard one."""

from __future__ import annotations

import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tidegate.gateway.net.limits import (
    ConnectionLimits,
    max_connections_for_fd_limit,
    parse_ip_overrides,
)

from tests.clients.server import Tidegate

_API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, -1)


def _answered(s: socket.socket) -> bool:
    """Whether the server answers an ApiVersions request on ``s`` (else it closed it)."""
    try:
        s.sendall(struct.pack(">i", len(_API_VERSIONS_V0)) + _API_VERSIONS_V0)
        s.settimeout(10)
        return len(s.recv(4)) == 4
    except (ConnectionError, OSError):
        return False


def _closed_by_server(s: socket.socket, timeout_s: float) -> bool:
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Tidegate]:
    config = tmp_path / "tidegate.toml"
    config.write_text(
        '"max.connections.per.ip" = 3\n'
        '"max.connections.per.ip.overrides" = "127.0.0.2:5"\n'
        '"connections.max.idle.ms" = 1000\n'
    )
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_idle_connections_close(limited: Tidegate) -> None:
    busy = socket.create_connection(("127.0.0.1", limited.port))
    idle = socket.create_connection(("127.0.0.1", limited.port))
    # Past the idle limit for ``idle``; ``busy``, used every 0.1 s, is never idle that long.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert _answered(busy)
        time.sleep(0.1)
    assert _closed_by_server(idle, 5.0)
    assert _answered(busy)
    busy.close()
    idle.close()


def test_per_ip_limit_and_its_overrides(limited: Tidegate) -> None:
    started = time.monotonic()
    for ip, allowed in (("127.0.0.1", 3), ("127.0.0.2", 5)):
        socks = []
        for _ in range(allowed):
            s = socket.create_connection(("127.0.0.1", limited.port), source_address=(ip, 0))
            assert _answered(s)
            socks.append(s)
        extra = [socket.create_connection(("127.0.0.1", limited.port), source_address=(ip, 0))
                 for _ in range(30)]
        assert not any(_answered(s) for s in extra)
        socks[0].close()
        time.sleep(0.2)
        again = socket.create_connection(("127.0.0.1", limited.port), source_address=(ip, 0))
        assert _answered(again)  # a closed connection frees its place
        for s in [*socks, *extra, again]:
            s.close()
    lines = [x for x in limited.tail(200).splitlines() if "refused" in x]
    # 60 refusals, logged at most once a second however long the loaded machine took.
    assert 1 <= len(lines) <= time.monotonic() - started + 1, lines


def test_max_connections_follow_the_raised_fd_limit(tidegate: Tidegate) -> None:
    assert tidegate.proc is not None
    with open(f"/proc/{tidegate.proc.pid}/limits") as f:
        row = next(line for line in f if line.startswith("Max open files"))
    soft, hard = row.split()[3:5]
    assert soft == hard == str(resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    assert max_connections_for_fd_limit(1024) == 768
    assert max_connections_for_fd_limit(1 << 20) == 3 << 18


def test_limits_count_and_release() -> None:
    clock = [0.0]
    limits = ConnectionLimits(4, 2, parse_ip_overrides("10.0.0.9:3, [::1]:1"), lambda: clock[0])
    assert [limits.admit("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert [limits.admit("10.0.0.9") for _ in range(3)] == [True, True, False]  # total 4
    limits.release("10.0.0.1")
    assert limits.admit("10.0.0.9") and limits.admit("::1") is False
    assert limits.refused == 3
    with pytest.raises(ValueError, match="HOST:COUNT"):
        parse_ip_overrides("10.0.0.1")


def test_soft_fd_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from tidegate.gateway.net.limits import raise_fd_limit\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "assert raise_fd_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
