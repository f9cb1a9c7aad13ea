"""The REST and gRPC APIs of a separate controller process (``tests.rest.harness``):
schemathesis fuzzes ``/openapi.json`` over HTTP, and a clean SIGTERM stop is checked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
#: Schemathesis budget: examples per operation and phase, and a wall-time cap.
FUZZ_EXAMPLES = int(os.environ.get("TIDEGATE_FUZZ_EXAMPLES", "40"))
FUZZ_MAX_TIME_S = int(os.environ.get("TIDEGATE_FUZZ_MAX_TIME_S", "40"))


@dataclass
class Served:
    process: subprocess.Popen[str]
    rest_port: int
    grpc_port: int


@pytest.fixture
def served() -> Iterator[Served]:
    rest_port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.rest.harness",
            "--rest",
            f"127.0.0.1:{rest_port}",
            "--grpc",
            f"127.0.0.1:{grpc_port}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # bounded by the test timeout
        if line.strip() != "READY":
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"controller process did not start: {line!r}\n{err}")
        yield Served(process, rest_port, grpc_port)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def _stop(served: Served) -> str:
    served.process.send_signal(signal.SIGTERM)
    _, err = served.process.communicate(timeout=20)
    assert served.process.returncode == 0, err
    return err


def test_schemathesis_finds_no_server_errors(served: Served, tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{served.rest_port}"
    # Something to find: a scope with a stream, so fuzzed calls reach deeper than 404.
    with httpx.Client(base_url=base, timeout=10) as client:
        assert client.post("/v1/scopes", json={"scopeName": "sc"}).status_code == 201
        r = client.post("/v1/scopes/sc/streams", json={"streamName": "s"})
        assert r.status_code == 201, r.text
    st = Path(sys.executable).parent / "schemathesis"
    checks = ",".join(
        [
            "not_a_server_error",
            "status_code_conformance",
            "content_type_conformance",
            "response_schema_conformance",
            "negative_data_rejection",
        ]
    )
    result = subprocess.run(
        [
            str(st),
            "run",
            f"{base}/openapi.json",
            f"--checks={checks}",
            f"--max-examples={FUZZ_EXAMPLES}",
            f"--max-time={FUZZ_MAX_TIME_S}",
            "--workers=1",
            "--seed=1",
            "--request-timeout=10",
            "--no-color",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=FUZZ_MAX_TIME_S * 3,
    )
    report = result.stdout[-20000:] + result.stderr[-5000:]
    assert result.returncode == 0, report
    err = _stop(served)
    assert "Traceback" not in err, err


def test_process_serves_both_apis_and_stops_on_sigterm(served: Served) -> None:
    import grpc

    from protocol.controller_grpc import pb2, pb2_grpc

    with httpx.Client(base_url=f"http://127.0.0.1:{served.rest_port}", timeout=10) as client:
        assert client.get("/health").json() == {"status": "ready"}
        assert client.post("/v1/scopes", json={"scopeName": "both"}).status_code == 201
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = pb2_grpc.ControllerServiceStub(channel)
        assert list(stub.ListScopes(pb2.ListScopesRequest(), timeout=10).scopes) == ["both"]
    _stop(served)
