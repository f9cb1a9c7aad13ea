"""Schema-driven request fuzzer (``make fuzz``): every API and version kafka-python has a
schema for, with values chosen to hurt (nulls where lists are expected, empty and long
arrays, extreme integers, odd strings), then sometimes cut at the wire level (a huge
array length, wrong tagged fields, a truncated body), sent to a ``tidegate serve`` it
starts (or ``--bootstrap``, with ``--server-log`` naming that server's log file: the
part written during the run is checked as for a server it starts; without it the
result says the log went unchecked).

Each frame must be answered or get its connection closed; a frame neither answered nor
closed within ``--answer-timeout-s`` is a hang. At the end the server must still be
running, answer ApiVersions, and its log must hold no traceback and no handler failure
(a line "failed (" written where a handler raised). The last line says how many frames
were sent and the result; the exit status is 0 only if nothing failed.

    python scripts/fuzz.py --frames 1000000 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer  # noqa: F401  (registers the request classes)
from kafka.protocol.api_message import ApiMessage

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
}
TOPICS = ["fuzz-a", "fuzz-b", "__consumer_offsets", "", "x" * 300]


def request_classes() -> list[Any]:
    def subclasses(cls: Any) -> Any:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    found = {
        (c.API_KEY, c.__name__): c for c in subclasses(ApiMessage)
        if c.__name__.endswith("Request") and getattr(c, "API_KEY", None) is not None
    }
    return [found[k] for k in sorted(found)]


class Values:
    """Random field values for a schema, biased to the edges."""

    def __init__(self, rng: random.Random, nulls: bool) -> None:
        self.rng = rng
        self.nulls = nulls  # also where the schema allows none (else such frames close)

    def scalar(self, field: Any, version: int) -> Any:
        rng, kind = self.rng, field.type_str
        if kind in INT_RANGES:
            lo, hi = INT_RANGES[kind]
            return rng.choice([0, 1, -1, lo, hi, rng.randint(lo, hi), rng.randint(-2, 100)])
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "float64":
            return rng.choice([0.0, -1.0, 1e308, float("nan")])
        if kind == "uuid":
            return rng.choice([None, uuid.UUID(int=rng.getrandbits(128))])
        null = None if self.nulls or field.nullable_for_version_q(version) else ""
        if kind == "string":
            return rng.choice([null, "", rng.choice(TOPICS), "\u00e9" * rng.randint(1, 50),
                               "k" * rng.choice([1, 249, 250, 40_000])])
        # bytes, records
        return rng.choice([None if null is None else b"", b"", rng.randbytes(rng.randint(1, 200))])

    def message(self, struct_field: Any, version: int, depth: int = 0) -> dict[str, Any]:
        values = {}
        for field in struct_field.untagged_fields(version):
            values[field.name] = self.field(field, version, depth)
        return values

    def field(self, field: Any, version: int, depth: int) -> Any:
        rng = self.rng
        roll = rng.random()
        if not self.nulls and not field.nullable_for_version_q(version):
            roll = 0.15 + roll * 0.85
        if field.is_array() or field.is_struct_array():
            if roll < 0.15:
                return None
            n = rng.choice([0, 0, 1, 2, 3]) if roll < 0.97 or depth else rng.choice([200, 2000])
            if field.is_struct_array():
                return [field.data_class(**self.message(field, version, depth + 1)) for _ in range(n)]
            return [self.scalar(field.array_of, version) for _ in range(n)]
        if field.is_struct():
            if roll < 0.15:
                return None
            return field.data_class(**self.message(field, version, depth + 1))
        return self.scalar(field, version)


def _wire_cut(body: bytearray, rng: random.Random, flexible: bool) -> bytes:
    """Sometimes damage the encoded body where decoders are weakest."""
    roll = rng.random()
    if roll < 0.7 or not body:
        return bytes(body)
    if roll < 0.8:  # a huge length (int32 or unsigned varint) somewhere
        at = rng.randrange(len(body))
        huge = rng.choice([b"\x7f\xff\xff\xff", b"\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"])
        return bytes(body[:at] + huge + body[at + len(huge):])
    if roll < 0.9 and flexible:  # top-level tagged fields: count, then tag, size, bytes
        tags = rng.choice([b"\x01\x00\x7f", b"\x02\x05\x01x\x05\x01y", b"\x01\xff\xff\xff\xff\x0f\x00",
                           b"\x7f", b"\x01\x00\x03ab"])
        return bytes(body[:-1] + tags)
    return bytes(body[: rng.randrange(len(body))])  # truncated


def frame(cls: Any, version: int, correlation_id: int, rng: random.Random) -> bytes:
    values = Values(rng, nulls=rng.random() < 0.2)
    try:
        request = cls[version](**values.message(cls._struct, version))
        body = bytearray(request.encode(version=version))
    except Exception:
        body = bytearray(rng.randbytes(rng.randint(0, 64)))  # values its encoder refused
    flexible = bool(cls.flexible_version_q(version))
    client_id = rng.choice([b"\xff\xff", b"\x00\x04fuzz", b"\x00\x00"])
    header = struct.pack(">hhi", cls.API_KEY, version, correlation_id) + client_id
    if flexible:
        header += b"\x00"
    payload = header + _wire_cut(body, rng, flexible)
    return struct.pack(">i", len(payload)) + payload


class Stats:
    def __init__(self) -> None:
        self.sent = self.answered = self.closed = 0
        self.failures: list[str] = []
        self.slowest: dict[str, float] = {}  # seconds to the answer or close, by API


async def worker(host: str, port: int, plan: list[tuple[Any, int]], count: int, seed: int,
                 stats: Stats, timeout_s: float) -> None:
    rng = random.Random(seed)
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    for i in range(count):
        cls, version = rng.choice(plan)
        if conn is None:
            conn = await asyncio.open_connection(host, port)
        reader, writer = conn
        data = frame(cls, version, i & 0x7FFFFFFF, rng)
        acks0 = cls.API_KEY == 0  # an acks=0 Produce has no answer
        stats.sent += 1
        sent_at = time.monotonic()
        try:
            writer.write(data)
            if acks0:
                # A closing ApiVersions v0 marks where the Produce's answer would be.
                writer.write(struct.pack(">ihhih", 10, 18, 0, -1, -1))
            head = await asyncio.wait_for(reader.readexactly(4), timeout_s)
            size = struct.unpack(">i", head)[0]
            answer = await asyncio.wait_for(reader.readexactly(size), timeout_s)
            if acks0 and struct.unpack_from(">i", answer)[0] != -1:
                head = await asyncio.wait_for(reader.readexactly(4), timeout_s)
                await reader.readexactly(struct.unpack(">i", head)[0])
            stats.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            stats.closed += 1
            writer.close()
            conn = None
        except TimeoutError:
            stats.failures.append(f"no answer in {timeout_s}s: {cls.__name__} v{version}")
            writer.close()
            conn = None
        name = f"{cls.__name__.removesuffix('Request')} v{version}"
        took = time.monotonic() - sent_at
        if took > stats.slowest.get(name, 0.0):
            stats.slowest[name] = took
    if conn is not None:
        conn[1].close()


async def api_versions_answered(host: str, port: int) -> bool:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(struct.pack(">ihhih", 10, 18, 0, 7, -1))
    head = await asyncio.wait_for(reader.readexactly(4), 10)
    answer = await reader.readexactly(struct.unpack(">i", head)[0])
    writer.close()
    return struct.unpack_from(">i", answer)[0] == 7


async def run(args: argparse.Namespace, host: str, port: int) -> Stats:
    plan = [(cls, v) for cls in request_classes() for v in range(cls.min_version, cls.max_version + 1)]
    stats = Stats()
    per = [args.frames // args.connections + (i < args.frames % args.connections)
           for i in range(args.connections)]
    await asyncio.gather(*(
        worker(host, port, plan, n, args.seed * 1000 + i, stats, args.answer_timeout_s)
        for i, n in enumerate(per)
    ))
    if not await api_versions_answered(host, port):
        stats.failures.append("ApiVersions not answered after the run")
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--answer-timeout-s", type=float, default=40.0)
    parser.add_argument("--keep-log", help="copy the server's log here")
    parser.add_argument("--bootstrap", help="HOST:PORT of a running server")
    parser.add_argument("--server-log", help="with --bootstrap: that server's log file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    proc = None
    with tempfile.TemporaryDirectory(prefix="tidegate-fuzz-") as tmp:
        log_path = Path(tmp) / "tidegate.log"
        log_from = 0  # where the part of the log written during the run starts
        if args.bootstrap:
            host, _, port_s = args.bootstrap.rpartition(":")
            port = int(port_s)
            if args.server_log:
                log_path = Path(args.server_log)
                log_from = log_path.stat().st_size
        else:
            host, port = "127.0.0.1", _free_port()
            proc = _start(Path(tmp) / "data", log_path, port)
        try:
            stats = asyncio.run(run(args, host, port))
        finally:
            if proc is not None:
                alive = proc.poll() is None
                proc.terminate()
                proc.wait(30)
        if proc is not None and not alive:
            stats.failures.append(f"server exited with {proc.returncode}")
        log_checked = proc is not None or bool(args.server_log)
        if log_checked:
            with open(log_path, "rb") as f:
                f.seek(log_from)
                text = f.read().decode(errors="replace")
            if args.keep_log:
                Path(args.keep_log).write_text(text)
            bad = _bad_log_records(text)
            stats.failures += [f"server log: {record}" for record in bad[:20]]
            if len(bad) > 20:
                stats.failures.append(f"... and {len(bad) - 20} more such log records")
    slow = sorted(stats.slowest.items(), key=lambda kv: -kv[1])[:5]
    print("slowest: " + ", ".join(f"{name} {took:.2f} s" for name, took in slow))
    for failure in stats.failures[:50]:
        print(failure)
    result = "OK" if not stats.failures else f"FAILED ({len(stats.failures)} failures)"
    if not log_checked:
        result += " (server log unchecked: give --server-log)"
    print(f"fuzz: {stats.sent} frames (seed {args.seed}), {stats.answered} answered, "
          f"{stats.closed} closed, {time.monotonic() - started:.0f} s: {result}")
    return 0 if not stats.failures else 1


def _bad_log_records(text: str) -> list[str]:
    """Log records (a timestamped line and the lines after it) with a traceback or a
    handler failure, each as its first and last line."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line[:2].isdigit() or not records:
            records.append([line])
        else:
            records[-1].append(line)
    bad = [r for r in records if any("Traceback" in x or "failed (" in x for x in r)]
    return [r[0] if len(r) == 1 else f"{r[0]} ... {r[-1]}" for r in bad]


def _free_port() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench/ is beside
    from bench.ports import free_port

    return free_port()


def _start(data_dir: Path, log_path: Path, port: int) -> subprocess.Popen[bytes]:
    # Long polls capped at 1 s: a run is not a series of 30 s waits (the cap is still hit).
    config = log_path.with_name("tidegate.toml")
    config.write_text('"fetch.max.wait.ms.max" = 1000\n')
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.gateway.cli", "serve", "--data-dir", str(data_dir),
             "--listen", f"127.0.0.1:{port}", "--rest", "off", "--grpc", "off",
             "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while b"tidegate ready" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"tidegate did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    return proc


if __name__ == "__main__":
    sys.exit(main())
