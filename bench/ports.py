"""Loopback ports for the servers that tests and benchmarks start, free of races.

A port the kernel gave to ``bind(0)`` and then released lies in the ephemeral range, so
until the server binds it, any outgoing connection on the machine may take it as its
local port. Ports here come from below that range, which the kernel never hands out by
itself, and each is reserved by a lock file held until this process exits, so that
test runs side by side (and a server restarted on its port) never collide.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
from pathlib import Path

#: Lock files naming reserved ports, shared by every process on the machine (not under
#: $TMPDIR, which tox sets per environment).
LOCK_DIR = Path("/tmp/tidegate-ports")
#: The lowest port handed out: above the usual fixed service ports.
LOWEST_PORT = 10000
#: Descriptors whose locks reserve the ports this process handed out.
_held: list[int] = []
_random = random.Random(os.urandom(16))


def _candidates() -> range:
    """Ports the kernel does not pick for ``bind(0)`` or outgoing connections."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - LOWEST_PORT >= 1000:
        return range(LOWEST_PORT, low)
    return range(high + 1, 65536)


def _reserve(port: int) -> int | None:
    """An open descriptor holding ``port``'s lock, or None if another holds it."""
    fd = os.open(LOCK_DIR / str(port), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1, free now and reserved for this process until it exits."""
    LOCK_DIR.mkdir(mode=0o777, exist_ok=True)
    ports = _candidates()
    for _ in range(1000):
        port = _random.choice(ports)
        fd = _reserve(port)
        if fd is None:
            continue
        if _bindable(port):
            _held.append(fd)
            return port
        os.close(fd)  # bound by something outside this scheme: leave it
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} after 1000 tries")
