"""RSS of `tidegate serve` under hostile clients (issue 35, DESIGN invariant 6), default
configuration (`queued.max.request.bytes` 128 MiB):

- 8 connections each announce a 99 MiB frame and send it one byte short (as far as the
  server reads: a send blocked for 3 s ends it);
- 8 JoinGroups with 50 MiB of protocol metadata each, at once.

RSS is sampled from /proc; the peak growth over the idle server is printed per phase,
with the budget, as one JSON line.

    .venv/bin/python -m bench.hostile [--source DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.kafka_probe import wait_until_ready
from bench.memory import RssSampler, rss_bytes
from bench.systems import free_port

MiB = 1024 * 1024
BUDGET_BYTES = 128 * MiB


def _half_send(port: int, size: int, block_s: float) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(block_s)
        chunk = b"x" * MiB
        try:
            sock.sendall(struct.pack(">i", size))
            left = size - 1
            while left:
                n = min(left, MiB)
                sock.sendall(chunk[:n])
                left -= n
            time.sleep(block_s)  # held half-sent while the others arrive
        except OSError:
            pass


def _join(port: int, metadata_bytes: int, answers: list[int]) -> None:
    import tidegate.protocol  # noqa: F401  (kafka-python's schemas, warning silenced)
    from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

    request = JoinGroupRequest(
        group_id="hostile", session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=b"m" * metadata_bytes)],
    )
    request.API_VERSION = 5
    request.with_header(correlation_id=1, client_id="bench")
    data = bytes(request.encode(version=5, header=True, framed=True))
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(data)
        head = sock.recv(4, socket.MSG_WAITALL)
        (size,) = struct.unpack(">i", head)
        body = sock.recv(size, socket.MSG_WAITALL)
    answers.append(JoinGroupResponse.decode(body[4:], version=5).error_code)


def _phase(pid: int, threads: list[threading.Thread]) -> int:
    base = rss_bytes(pid)
    with RssSampler(pid, 20) as sampler:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    return sampler.peak - base


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        port = free_port()
        argv = [
            sys.executable, "-m", "tidegate.gateway.cli", "serve",
            "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
            "--rest", "off", "--grpc", "off",
        ]  # fmt: skip
        cwd = args.source if args.source is not None else Path(__file__).resolve().parent.parent
        log = open(work / "server.log", "wb")
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_ready("127.0.0.1", port, time.monotonic() + 60.0, lambda: proc.poll() is None)
            idle = rss_bytes(proc.pid)
            frames = _phase(proc.pid, [
                threading.Thread(target=_half_send, args=(port, 99 * MiB, 3.0)) for _ in range(8)
            ])
            time.sleep(1.0)  # the closes handled
            answers: list[int] = []
            joins = _phase(proc.pid, [
                threading.Thread(target=_join, args=(port, 50 * MiB, answers)) for _ in range(8)
            ])
            out = {
                "source": str(cwd),
                "budget_mib": BUDGET_BYTES >> 20,
                "rss_idle_mib": idle >> 20,
                "half_sent_99mib_frames_x8_growth_mib": frames >> 20,
                "join_50mib_metadata_x8_growth_mib": joins >> 20,
                "join_errors": sorted(answers),
                "rss_end_mib": rss_bytes(proc.pid) >> 20,
                "loadavg": os.getloadavg(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            print(json.dumps(out))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


if __name__ == "__main__":
    main()
