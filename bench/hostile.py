"""RSS of `tidegate serve` under hostile clients (issue 35, DESIGN invariant 6), default
configuration (`queued.max.request.bytes` 128 MiB):

- 8 connections each announce a 99 MiB frame and send it one byte short (as far as the
  server reads: a send blocked for 3 s ends it);
- 8 JoinGroups with 50 MiB of protocol metadata each, at once;
- 8 SyncGroups with 50 MiB of assignment each, at once, from a member no group has;
- PLAIN password guesses from 8 connections in parallel for 20 s (on a SASL listener):
  how many were checked, and how many refused unchecked past the per-address limit.

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


def _sync(port: int, assignment_bytes: int, answers: list[int]) -> None:
    """A SyncGroup as a group's leader would send it, with ``assignment_bytes`` of
    assignment, from a member the coordinator does not know."""
    import tidegate.protocol  # noqa: F401  (kafka-python's schemas, warning silenced)
    from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

    request = SyncGroupRequest(
        group_id="hostile-sync", generation_id=1, member_id="leader", group_instance_id=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id="leader", assignment=b"a" * assignment_bytes)],
    )
    request.API_VERSION = 3
    request.with_header(correlation_id=1, client_id="bench")
    data = bytes(request.encode(version=3, header=True, framed=True))
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(data)
        head = sock.recv(4, socket.MSG_WAITALL)
        (size,) = struct.unpack(">i", head)
        body = sock.recv(size, socket.MSG_WAITALL)
    answers.append(SyncGroupResponse.decode(body[4:], version=3).error_code)


def _guess(port: int, until: float, counts: dict[str, int], lock: threading.Lock) -> None:
    import tidegate.protocol  # noqa: F401  (kafka-python's schemas, warning silenced)
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
    )

    def framed(request: object, version: int, correlation_id: int) -> bytes:
        request.API_VERSION = version  # type: ignore[attr-defined]
        request.with_header(correlation_id=correlation_id, client_id="bench")  # type: ignore[attr-defined]
        return bytes(request.encode(version=version, header=True, framed=True))  # type: ignore[attr-defined]

    def answer(sock: socket.socket) -> bytes:
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        return sock.recv(size, socket.MSG_WAITALL)

    n = 0
    while time.monotonic() < until:
        n += 1
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(framed(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1))
            answer(sock)
            token = f"\0bench\0guess-{n}".encode()
            sock.sendall(framed(SaslAuthenticateRequest(auth_bytes=token), 2, 2))
            reply = SaslAuthenticateResponse.decode(answer(sock)[5:], version=2)
        key = "refused_unchecked" if "too many" in (reply.error_message or "") else "checked"
        with lock:
            counts[key] += 1


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
        port, sasl_port = free_port(), free_port()
        config = work / "tidegate.toml"
        config.write_text(
            f'listeners = "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"\n'
            '[sasl.users]\nbench = "bench-secret"\n'
        )
        argv = [
            sys.executable, "-m", "tidegate.gateway.cli", "serve",
            "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
            "--rest", "off", "--grpc", "off", "--config", str(config),
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
            synced: list[int] = []
            syncs = _phase(proc.pid, [
                threading.Thread(target=_sync, args=(port, 50 * MiB, synced)) for _ in range(8)
            ])
            counts = {"checked": 0, "refused_unchecked": 0}
            lock, until = threading.Lock(), time.monotonic() + 20.0
            guessers = [threading.Thread(target=_guess, args=(sasl_port, until, counts, lock))
                        for _ in range(8)]
            for t in guessers:
                t.start()
            for t in guessers:
                t.join(120)
            out = {
                "source": str(cwd),
                "budget_mib": BUDGET_BYTES >> 20,
                "rss_idle_mib": idle >> 20,
                "half_sent_99mib_frames_x8_growth_mib": frames >> 20,
                "join_50mib_metadata_x8_growth_mib": joins >> 20,
                "join_errors": sorted(answers),
                "sync_50mib_assignment_x8_growth_mib": syncs >> 20,
                "sync_errors": sorted(synced),
                "plain_guesses_20s_x8": counts,
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
