"""Decodable but malformed requests (issue 22, finding 9): a null where the schema
allows none closes the connection with one log line, as Kafka does, never a handler
traceback; and a short run of the schema-driven fuzzer (``make fuzz`` runs a long one)."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)

from tests.clients.server import Tidegate

ROOT = Path(__file__).resolve().parents[2]

NULL_LISTS = [
    (DeleteTopicsRequest, 6, "topics"),
    (ListOffsetsRequest, 9, "topics"),
    (OffsetFetchRequest, 8, "groups"),
    (JoinGroupRequest, 7, "protocols"),
    (DeleteRecordsRequest, 2, "topics"),
    (OffsetCommitRequest, 8, "topics"),
    (FetchRequest, 12, "topics"),
    (IncrementalAlterConfigsRequest, 1, "resources"),
    (DescribeConfigsRequest, 4, "resources"),
]


def _frame(cls: type, version: int, field: str) -> bytes:
    request = cls[version](**{field: None})  # type: ignore[index]
    header = struct.pack(">hhih", cls.API_KEY, version, 5, -1)  # type: ignore[attr-defined]
    if cls.flexible_version_q(version):  # type: ignore[attr-defined]
        header += b"\x00"
    body = header + bytes(request.encode(version=version))
    return struct.pack(">i", len(body)) + body


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tidegate]:
    tmp = tmp_path_factory.mktemp("nulls")
    node = Tidegate(tmp / "data", tmp / "tidegate.log")
    node.start()
    try:
        yield node
    finally:
        node.close()


@pytest.mark.parametrize(("cls", "version", "field"), NULL_LISTS)
def test_null_list_closes_with_one_line(
    server: Tidegate, cls: type, version: int, field: str
) -> None:
    before = server.log_path.read_text().count("\n")
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(_frame(cls, version, field))
        s.settimeout(10)
        assert s.recv(4) == b""  # closed, as Kafka closes on a non-nullable null
    new = server.log_path.read_text().splitlines()[before:]
    assert len(new) == 1, new
    name = cls.__name__.removesuffix("Request")
    assert f"{name} v{version} body: non-nullable field {field} is null" in new[0], new


def test_schema_fuzzer_short_run() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fuzz.py"), "--frames", "3000", "--seed", "7"],
        capture_output=True, text=True, timeout=240,
    )
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    assert last.startswith("fuzz: 3000 frames") and last.endswith(": OK"), last


def test_string_longer_than_kafka_allows_closes(server: Tidegate) -> None:
    request = JoinGroupRequest[9](group_id="k" * 40_000, session_timeout_ms=10_000,
                                  member_id="", protocol_type="consumer", protocols=[])
    header = struct.pack(">hhih", JoinGroupRequest.API_KEY, 9, 5, -1) + b"\x00"
    body = header + bytes(request.encode(version=9))
    before = server.log_path.read_text().count("\n")
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(10)
        assert s.recv(4) == b""
    new = server.log_path.read_text().splitlines()[before:]
    assert len(new) == 1 and "string field group_id is 40000 bytes, over 32767" in new[0], new


def test_schema_fuzzer_checks_a_running_servers_log(server: Tidegate) -> None:
    """``--bootstrap`` with ``--server-log``: a handler failure logged during the run
    fails it (here one is written into the log once the fuzzer's frames arrive);
    without ``--server-log`` the result says the log went unchecked."""
    fuzz = [sys.executable, str(ROOT / "scripts" / "fuzz.py"), "--frames", "2000", "--seed", "3",
            "--bootstrap", f"127.0.0.1:{server.port}"]
    size = server.log_path.stat().st_size
    proc = subprocess.Popen([*fuzz, "--server-log", str(server.log_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while server.log_path.stat().st_size == size and proc.poll() is None:
            assert time.monotonic() < deadline, "the fuzzer's frames never reached the server"
            time.sleep(0.05)
        with open(server.log_path, "a") as log:
            log.write("2026-01-01 00:00:00,000 ERROR tidegate.gateway.net.server: "
                      "127.0.0.1:1: Produce v9 failed (Boom: planted); closing\n")
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "failed (Boom: planted)" in out, out
    run = subprocess.run([*fuzz, "--frames", "200"], capture_output=True, text=True, timeout=240)
    last = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 0 and "server log unchecked" in last, run.stdout + run.stderr
