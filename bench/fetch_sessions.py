"""Request bytes and server CPU per fetch of a consumer of many partitions, with full
fetches (what every fetch was before tidegate kept fetch sessions, and what librdkafka
still sends) and with an incremental fetch session (KIP-227).

A real ``tidegate serve``; one topic of ``--partitions`` partitions, ``--active`` of
them receiving one record before each fetch; the consumer is at the tail of all. Each
mode sends ``--fetches`` fetches (max_wait 0) on one connection and reports the bytes of
the request and the answer, the server's CPU time per fetch (``/proc``) and the round
trip. Run: ``python -m bench.fetch_sessions --partitions 1000 --fetches 500``; the
same with ``PYTHONPATH`` pointing at an older tree and ``--modes full`` measures it.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tidegate.protocol  # noqa: F401  (loads kafka-python's schemas, warning silenced)
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from bench.ports import free_port
from bench.procstat import cpu_seconds

FETCH_VERSION = 12


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.correlation = 0
        self.sent_bytes = 0
        self.received_bytes = 0

    def call(self, request: Any, version: int, response: Any) -> Any:
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="bench")
        data = bytes(request.encode(version=version, header=True, framed=True))
        self.sent_bytes = len(data)
        self.sock.sendall(data)
        (size,) = struct.unpack(">i", self._read(4))
        body = self._read(size)
        self.received_bytes = 4 + size
        return response.decode(struct.pack(">i", size) + body, version=version, header=True,
                               framed=True)

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise RuntimeError("connection closed")
            out += chunk
        return bytes(out)


def _start(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    log = open(root / "tidegate.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate.gateway.cli", "serve", "--data-dir", str(root / "data"),
         "--listen", f"127.0.0.1:{port}", "--rest", "off", "--grpc", "off"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b"tidegate ready" in (root / "tidegate.log").read_bytes():
            return proc, port
        if proc.poll() is not None:
            raise RuntimeError((root / "tidegate.log").read_text()[-2000:])
        time.sleep(0.1)
    raise RuntimeError("tidegate did not start")


def _batch() -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"x" * 100, headers=[])
    return bytes(b.build())


def _produce(c: Conn, topic: str, partitions: list[int]) -> None:
    data = [ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=_batch())
            for p in partitions]
    c.call(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=data)]), 9, ProduceResponse)


def _fetch(session_id: int, epoch: int, topic: str, offsets: dict[int, int]) -> FetchRequest:
    parts = [FetchRequest.FetchTopic.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in offsets.items()]
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts)] if parts else [],
        forgotten_topics_data=[], rack_id="",
    )


def _run_mode(port: int, pid: int, topic: str, partitions: int, active: int, fetches: int,
              incremental: bool) -> dict[str, float]:
    c = Conn(port)
    producer = Conn(port)
    offsets = {p: 0 for p in range(partitions)}
    # Catch up to the tail first (both modes start from the same state).
    resp = c.call(_fetch(0, -1, topic, offsets), FETCH_VERSION, FetchResponse)
    for t in resp.responses:
        for p in t.partitions:
            offsets[p.partition_index] = p.high_watermark
    session, epoch = 0, 0
    if incremental:
        resp = c.call(_fetch(0, 0, topic, offsets), FETCH_VERSION, FetchResponse)
        session, epoch = resp.session_id, 1
        assert session != 0, "no fetch session was opened"
    sent = received = 0
    rtt_s = 0.0
    moved: list[int] = []
    cpu0 = cpu_seconds(pid)
    for i in range(fetches):
        busy = [(i * active + k) % partitions for k in range(active)]
        if busy:
            _produce(producer, topic, busy)
        if incremental:
            changed = {p: offsets[p] for p in moved}
            request = _fetch(session, epoch, topic, changed)
            epoch += 1
        else:
            request = _fetch(0, -1, topic, offsets)
        t0 = time.perf_counter()
        resp = c.call(request, FETCH_VERSION, FetchResponse)
        rtt_s += time.perf_counter() - t0
        assert resp.error_code == 0, resp.error_code
        sent += c.sent_bytes
        received += c.received_bytes
        moved = []
        for t in resp.responses:
            for p in t.partitions:
                if p.records:
                    offsets[p.partition_index] = p.high_watermark
                    moved.append(p.partition_index)
    cpu_s = cpu_seconds(pid) - cpu0
    # The producer's requests cost server CPU too: the same in both modes.
    return {
        "request_bytes": round(sent / fetches),
        "response_bytes": round(received / fetches),
        "server_cpu_ms_per_fetch": round(cpu_s * 1000 / fetches, 3),
        "round_trip_ms": round(rtt_s * 1000 / fetches, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=0,
                        help="partitions receiving a record before each fetch")
    parser.add_argument("--fetches", type=int, default=500)
    parser.add_argument("--modes", default="full,incremental",
                        help="full (sessionless), incremental, or both; a build without "
                             "sessions (PYTHONPATH to its tree) runs only full")
    args = parser.parse_args()
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = _start(Path(tmp))
        try:
            admin = Conn(port)
            admin.call(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="fs", num_partitions=args.partitions, replication_factor=1, assignments=[],
                configs=[])], timeout_ms=60_000, validate_only=False), 5, CreateTopicsResponse)
            out = {}
            for name, incremental in (("full", False), ("incremental", True)):
                if name not in modes:
                    continue
                out[name] = _run_mode(port, proc.pid, "fs", args.partitions, args.active,
                                      args.fetches, incremental)
            print(json.dumps({"partitions": args.partitions, "active": args.active,
                              "fetches": args.fetches, **out}, indent=2))
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
