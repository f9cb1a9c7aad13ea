"""The REST and gRPC APIs of a running ``tidegate serve`` (a real process over the real
segment store on disk): schemathesis fuzzes ``/openapi.json`` over HTTP, a scenario runs
through httpx and a gRPC channel, and SIGTERM stops the process cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

START_TIMEOUT_S = 30.0
#: Schemathesis budget: examples per operation and phase, and a wall-time cap.
FUZZ_EXAMPLES = int(os.environ.get("TIDEGATE_FUZZ_EXAMPLES", "40"))
FUZZ_MAX_TIME_S = int(os.environ.get("TIDEGATE_FUZZ_MAX_TIME_S", "40"))


@dataclass
class Served:
    process: subprocess.Popen[str]
    rest_port: int
    grpc_port: int
    kafka_port: int


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rest_port, grpc_port, kafka_port = free_port(), free_port(), free_port()
    tidegate = Path(sys.executable).parent / "tidegate"
    process = subprocess.Popen(
        [
            str(tidegate),
            "serve",
            f"--data-dir={tmp_path / 'data'}",
            f"--listen=127.0.0.1:{kafka_port}",
            f"--rest=127.0.0.1:{rest_port}",
            f"--grpc=127.0.0.1:{grpc_port}",
            "--log-level=WARNING",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_ready(process, rest_port)
        yield Served(process, rest_port, grpc_port, kafka_port)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def _wait_ready(process: subprocess.Popen[str], rest_port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"tidegate serve exited with {process.returncode}:\n{err}")
        try:
            if httpx.get(f"http://127.0.0.1:{rest_port}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"tidegate serve answered no /health within {START_TIMEOUT_S} s")


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


def test_scenario_over_rest_and_grpc(served: Served) -> None:
    streams = "/v1/scopes/ops/streams"
    with httpx.Client(base_url=f"http://127.0.0.1:{served.rest_port}", timeout=10) as c:
        assert c.get("/health").json() == {"status": "ready"}
        # The topics' scope, as the README shows it.
        assert c.get("/v1/scopes/kafka").json() == {"scopeName": "kafka"}
        assert c.post("/v1/scopes", json={"scopeName": "ops"}).status_code == 201
        assert c.get("/v1/scopes/ops").json() == {"scopeName": "ops"}
        policy = {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}
        r = c.post(streams, json={"streamName": "s", "scalingPolicy": policy, "tags": ["t"]})
        assert r.status_code == 201, r.text
        segments = c.get(f"{streams}/s/segments").json()["segments"]
        assert [(s["keyStart"], s["keyEnd"]) for s in segments] == [(0.0, 0.5), (0.5, 1.0)]
        scale = {"sealedSegments": [1], "newKeyRanges": [[0.5, 0.75], [0.75, 1.0]]}
        r = c.post(f"{streams}/s/scale", json=scale)
        assert r.status_code == 200 and r.json()["epoch"] == 1, r.text
        succ = c.get(f"{streams}/s/segments/1/successors").json()["successors"]
        assert [e["predecessors"] for e in succ] == [[1], [1]]
        events = c.get(f"{streams}/s/scaling-events").json()["scalingEvents"]
        assert [e["epoch"] for e in events] == [0, 1]
        cut = {str(s["id"]): 0 for s in r.json()["segmentList"]}
        r = c.post(f"{streams}/s/truncate", json={"streamCut": cut})
        assert r.status_code == 200 and r.json() == {"streamCut": cut}, r.text
        assert c.delete(f"{streams}/s").status_code == 409
        assert c.put(f"{streams}/s/state", json={"streamState": "SEALED"}).status_code == 200
        assert c.get(streams, params={"tag": "t"}).json()["streams"][0]["streamState"] == "SEALED"
        assert c.delete(f"{streams}/s").status_code == 204
        assert c.get(f"{streams}/s").status_code == 404

    import grpc
    from tidegate.protocol.controller_grpc import pb2, pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = pb2_grpc.ControllerServiceStub(channel)
        assert "ops" in stub.ListScopes(pb2.ListScopesRequest(), timeout=10).scopes
        info = stub.CreateStream(pb2.CreateStreamRequest(scope="ops", stream="g"), timeout=10)
        assert info.state == pb2.ACTIVE
    with httpx.Client(base_url=f"http://127.0.0.1:{served.rest_port}", timeout=10) as c:
        assert c.get(f"{streams}/g").json()["streamState"] == "ACTIVE"
    _stop(served)


def test_metrics_count_produce_requests_and_tier1_syncs(served: Served) -> None:
    """``/metrics``: acknowledged produces show up as Produce requests and as Tier-1
    write+sync batches, in histograms whose buckets only grow; store gauges are there."""
    from confluent_kafka import Producer
    from prometheus_client.parser import text_string_to_metric_families

    producer = Producer(
        {"bootstrap.servers": f"127.0.0.1:{served.kafka_port}", "acks": "all", "linger.ms": 0}
    )
    for i in range(50):
        producer.produce("metered", b"%d" % i)
        producer.flush(10)  # one request each
    assert producer.flush(10) == 0

    answer = httpx.get(f"http://127.0.0.1:{served.rest_port}/metrics", timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}

    def histogram(name: str, **labels: str) -> tuple[list[float], float]:
        samples = [s for s in families[name].samples if labels.items() <= s.labels.items()]
        buckets = [s.value for s in samples if s.name == f"{name}_bucket"]
        (count,) = [s.value for s in samples if s.name == f"{name}_count"]
        return buckets, count

    buckets, produced = histogram("tidegate_request_seconds", api="Produce")
    assert produced >= 50
    assert buckets == sorted(buckets) and buckets[-1] == produced
    syncs = 0.0
    for sample in families["tidegate_tier1_write_sync_seconds"].samples:
        if sample.name.endswith("_count"):
            syncs += sample.value
    assert syncs >= 50  # each produce waited for its own sync
    assert families["tidegate_cache_bytes_max"].samples[0].value > 0
    assert {s.labels["container"] for s in families["tidegate_writer_lag_bytes"].samples}
