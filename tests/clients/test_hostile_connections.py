"""Hostile connections against a real ``tidegate serve``: memory grows with the bytes a
client sends, not with the sizes it announces, and closed connections give theirs back
(issue 22, findings 1 and 2)."""

from __future__ import annotations

import socket
import struct
import time

from tests.clients.server import Tidegate

MiB = 1024 * 1024


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _settled_rss(pid: int, wait_s: float = 1.0) -> int:
    """RSS once it stopped growing (the server handles what was sent within ``wait_s``)."""
    time.sleep(wait_s)
    return _rss_bytes(pid)


def test_announced_sizes_cost_nothing_until_sent(tidegate: Tidegate) -> None:
    assert tidegate.proc is not None
    pid = tidegate.proc.pid
    base = _settled_rss(pid)
    socks = []
    try:
        # In steps, so that a server that allocates what is announced fails the test
        # after a few hundred MB rather than after 10 GB.
        for _step in range(10):
            for _ in range(10):
                s = socket.create_connection(("127.0.0.1", tidegate.port))
                # A size of 100 MB and the first 10 bytes of a request header.
                s.sendall(struct.pack(">i", 100 * 1000 * 1000) + b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff")
                socks.append(s)
            grown = _settled_rss(pid, 0.3) - base
            assert grown < 50 * MiB, f"{len(socks)} connections added {grown / MiB:.0f} MiB"
        grown = _settled_rss(pid) - base
        assert grown < 50 * MiB, f"100 connections added {grown / MiB:.0f} MiB"
    finally:
        for s in socks:
            s.close()
