"""What this machine can do without us: the yardsticks other benchmarks are judged by.

- ``disk_fdatasync_bandwidth``: a fresh file, each ``write_bytes`` write followed by
  ``fdatasync`` — the durable append rate of the disk at that write size, which bounds
  (and judges) the Tier-1 log.
- ``loopback_tcp_bandwidth``: one TCP connection over 127.0.0.1, a thread on each end,
  1 MiB ``sendall``s into ``recv_into`` — the ceiling for a gateway on loopback.

``python -m bench.baselines [--path DIR] [--disk-mb N] [--loopback-mb N]`` prints both.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

MIB = 1024 * 1024


def disk_fdatasync_bandwidth(path: Path, total_bytes: int, write_bytes: int = MIB) -> float:
    """Bytes/s of ``write_bytes`` writes each followed by ``fdatasync``, in a fresh file."""
    buf = os.urandom(write_bytes)
    fd, name = tempfile.mkstemp(prefix="disk-baseline-", dir=path)
    try:
        written = 0
        t0 = time.perf_counter()
        while written < total_bytes:
            view = memoryview(buf)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
            written += write_bytes
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(name)
    return written / elapsed


def loopback_tcp_bandwidth(total_bytes: int, chunk_bytes: int = MIB) -> float:
    """Bytes/s through one loopback TCP connection (sender and receiver threads)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = 0
    done = threading.Event()

    def receive() -> None:
        nonlocal received
        conn, _ = server.accept()
        with conn:
            buf = bytearray(chunk_bytes)
            view = memoryview(buf)
            while received < total_bytes:
                n = conn.recv_into(view)
                if n == 0:
                    break
                received += n
        done.set()

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    payload = os.urandom(chunk_bytes)
    try:
        with socket.create_connection(server.getsockname()) as client:
            t0 = time.perf_counter()
            sent = 0
            while sent < total_bytes:
                client.sendall(payload)
                sent += chunk_bytes
            done.wait(timeout=300)
            elapsed = time.perf_counter() - t0
    finally:
        server.close()
        receiver.join(timeout=5)
    if received < total_bytes:
        raise RuntimeError(f"loopback receiver got {received} of {total_bytes} bytes")
    return received / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--disk-mb", type=float, default=256)
    parser.add_argument("--loopback-mb", type=float, default=2048)
    args = parser.parse_args()
    disk = disk_fdatasync_bandwidth(args.path, int(args.disk_mb * MIB))
    tcp = loopback_tcp_bandwidth(int(args.loopback_mb * MIB))
    print(f"disk 1 MiB write+fdatasync: {disk / 1e6:.1f} MB/s ({args.path})")
    print(f"loopback TCP:               {tcp / 1e6:.1f} MB/s")


if __name__ == "__main__":
    main()
