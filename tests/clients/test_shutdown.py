"""SIGTERM: requests already read are answered (a long poll ends early), the process
exits 0, and a restart serves what was acknowledged."""

from __future__ import annotations

import signal
import socket
import struct
import time

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataRequest

from tests.clients import requests as kreq
from tests.clients.server import Tidegate


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed before the answer"
            out += chunk
        return out

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _wait_read_by_server(sock: socket.socket, server_port: int, timeout_s: float = 30.0) -> None:
    """Until the server's end of ``sock`` has nothing left unread in its receive queue
    (/proc/net/tcp), so what was sent is a request the server has read."""
    client_port = sock.getsockname()[1]
    local, remote = f"0100007F:{server_port:04X}", f"0100007F:{client_port:04X}"
    deadline = time.monotonic() + timeout_s
    while True:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[1] == local and fields[2] == remote and int(fields[4].split(":")[1], 16) == 0:
                    return
        assert time.monotonic() < deadline, "the server did not read the request"
        time.sleep(0.05)


def test_sigterm_answers_in_flight_long_poll(tidegate: Tidegate) -> None:
    with socket.create_connection(("127.0.0.1", tidegate.port), timeout=10) as sock:
        sock.sendall(kreq.frame(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="t")],
            allow_auto_topic_creation=True), 9))
        _read_frame(sock)
        sock.sendall(kreq.produce("t", 0, kreq.record_batch([b"kept"]), version=9))
        _read_frame(sock)
        sock.sendall(kreq.fetch("t", 0, 1, max_wait_ms=20_000))
        _wait_read_by_server(sock, tidegate.port)
        assert tidegate.proc is not None
        started = time.monotonic()
        tidegate.proc.send_signal(signal.SIGTERM)
        answer = FetchResponse.decode(_read_frame(sock), version=11, header=True)
        assert time.monotonic() - started < 10
        part = answer.responses[0].partitions[0]
        assert (part.error_code, part.high_watermark) == (0, 1)
    assert tidegate.proc.wait(30) == 0
    tidegate.proc = None
    tidegate.start()
    with socket.create_connection(("127.0.0.1", tidegate.port), timeout=10) as sock:
        sock.sendall(kreq.fetch("t", 0, 0, max_wait_ms=0))
        part = FetchResponse.decode(_read_frame(sock), version=11, header=True).responses[0].partitions[0]
        assert part.high_watermark == 1 and b"kept" in part.records
