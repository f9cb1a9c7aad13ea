"""A Kafka Metadata round trip over a plain socket: the readiness check for a broker.

Metadata v0 is hand-encoded here (not with any client library) so that readiness means
"answered a real Kafka request on this port", with no client-side retries or caching.
Request: size INT32, api_key INT16 = 3, api_version INT16 = 0, correlation_id INT32,
client_id STRING (INT16 length + bytes), topics ARRAY (INT32 count; 0 = all topics in v0).
Response: size INT32, correlation_id INT32, then the body, which is not decoded.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

_METADATA_API_KEY = 3


def metadata_round_trip(host: str, port: int, timeout_s: float) -> bool:
    """True if the broker answered one Metadata v0 request with a matching correlation id."""
    client_id = b"tidegate-bench"
    correlation_id = 0x7B1D
    body = struct.pack(">hhih", _METADATA_API_KEY, 0, correlation_id, len(client_id))
    body += client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(s, 8)
            size, got_id = struct.unpack(">ii", header)
            _recv_exactly(s, size - 4)
            return bool(got_id == correlation_id)
    except (OSError, ValueError):
        return False


def wait_until_ready(
    host: str, port: int, deadline_s: float, alive: Callable[[], bool] | None = None
) -> None:
    """Poll `metadata_round_trip` until it succeeds or `deadline_s` (monotonic) passes.

    `alive` returns False once the server process has died,
    which ends the wait early. Raises TimeoutError / RuntimeError on failure.
    """
    while time.monotonic() < deadline_s:
        if alive is not None and not alive():
            raise RuntimeError(f"server on {host}:{port} exited before it was ready")
        if metadata_round_trip(host, port, timeout_s=1.0):
            return
        time.sleep(0.05)
    raise TimeoutError(f"no Kafka Metadata answer from {host}:{port} in time")


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    if n < 0:
        raise ValueError("negative frame size")
    chunks = bytearray()
    while len(chunks) < n:
        chunk = s.recv(n - len(chunks))
        if not chunk:
            raise ValueError("connection closed mid-frame")
        chunks += chunk
    return bytes(chunks)
