"""compose/docker-compose.yml brings up ZooKeeper, three tidegate nodes and Prometheus
in Docker (docker-compose v1, Debian's; images built here with no registry): Metadata
lists three brokers, a 6-partition topic's leaders spread over them, records
round-trip through every leader, each node's REST API is published on the host, and
Prometheus, scraping every node's /metrics, sums kafka_exporter's series to the true
cluster (each series once, a group's lag on all partitions)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
KCAT = shutil.which("kcat") or "kcat"
UP_TIMEOUT_S = 600  # the first run builds the ZooKeeper and Prometheus images


@pytest.fixture
def cluster(image: str) -> Iterator[dict[str, object]]:
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is missing (Debian's docker-compose; make test installs it)")
    ports = [free_port() for _ in range(3)]
    rest_ports = [free_port() for _ in range(3)]
    prometheus = free_port()
    env = {
        **os.environ,
        "TIDEGATE_IMAGE": image,
        "TIDEGATE_BASE_IMAGE": os.environ.get("TIDEGATE_BASE_IMAGE", "tidegate-base:bookworm"),
        "TIDEGATE_PORT_1": str(ports[0]),
        "TIDEGATE_PORT_2": str(ports[1]),
        "TIDEGATE_PORT_3": str(ports[2]),
        "TIDEGATE_PROMETHEUS_PORT": str(prometheus),
        **{f"TIDEGATE_REST_PORT_{i + 1}": str(p) for i, p in enumerate(rest_ports)},
    }
    compose = ["docker-compose", "-f", str(COMPOSE_FILE), "-p", f"tg{uuid.uuid4().hex[:8]}"]
    up = subprocess.run([*compose, "up", "-d", "--build"], env=env, capture_output=True,
                        text=True, timeout=UP_TIMEOUT_S)
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        yield {"ports": ports, "rest_ports": rest_ports, "prometheus": prometheus,
               "compose": compose, "env": env}
    finally:
        logs = subprocess.run([*compose, "logs", "--tail", "40"], env=env, capture_output=True,
                              text=True, timeout=120)
        print(logs.stdout[-8000:])
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=300)


def _brokers(bootstrap: str) -> int:
    done = subprocess.run([KCAT, "-b", bootstrap, "-L", "-J"], capture_output=True, timeout=30)
    if done.returncode != 0:
        return 0
    return len(json.loads(done.stdout).get("brokers", []))


def _query(prometheus: object, expression: str) -> float | None:
    """The value of a Prometheus instant query with one result (None: no result yet)."""
    url = (f"http://127.0.0.1:{prometheus}/api/v1/query?"
           + urllib.parse.urlencode({"query": expression}))
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            result = json.load(answer)["data"]["result"]
    except OSError:
        return None
    return float(result[0]["value"][1]) if result else None


def _until(prometheus: object, expression: str, expected: float) -> None:
    deadline = time.monotonic() + 120
    while (value := _query(prometheus, expression)) != expected:
        assert time.monotonic() < deadline, f"{expression} = {value}, expected {expected}"
        time.sleep(2)


def test_three_nodes_in_docker(cluster: dict[str, object]) -> None:
    ports = cluster["ports"]
    assert isinstance(ports, list)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    deadline = time.monotonic() + 180
    while _brokers(bootstrap) < 3:
        assert time.monotonic() < deadline, "the three nodes did not all join"
        time.sleep(1)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 6, 1)])["orders"].result(60)
    deadline = time.monotonic() + 120
    while True:
        parts = admin.list_topics("orders", timeout=30).topics["orders"].partitions
        leaders = {p.leader for p in parts.values()}
        if len(parts) == 6 and -1 not in leaders and len(leaders) >= 2:
            break
        assert time.monotonic() < deadline, f"leaders did not spread: {leaders}"
        time.sleep(1)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent = {(p, i): f"{p}-{i}".encode() for p in range(6) for i in range(50)}
    for (p, _i), value in sent.items():
        producer.produce("orders", value=value, partition=p)
    assert producer.flush(120) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", p, 0) for p in range(6)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(6)}
    deadline = time.monotonic() + 120
    while sum(len(v) for v in got.values()) < len(sent):
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got[msg.partition()].append((msg.offset(), msg.value()))
    consumer.commit(offsets=[TopicPartition("orders", p, 10) for p in range(6)],
                    asynchronous=False)
    consumer.close()
    for p in range(6):
        assert [o for o, _ in got[p]] == list(range(50))  # dense offsets, each record once
        assert [v for _, v in got[p]] == [sent[(p, i)] for i in range(50)]

    url = f"http://127.0.0.1:{cluster['prometheus']}/api/v1/targets"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                targets = json.load(answer)["data"]["activeTargets"]
            if sum(t["health"] == "up" for t in targets) == 3:
                break
        except OSError:
            targets = []
        assert time.monotonic() < deadline, f"Prometheus targets: {targets}"
        time.sleep(2)
    # Summed over every node's scrape, as Grafana's kafka_exporter dashboard does.
    prometheus = cluster["prometheus"]
    _until(prometheus, "sum(kafka_brokers)", 3)
    _until(prometheus, 'sum(kafka_topic_partitions{topic="orders"})', 6)
    _until(prometheus, 'count(kafka_consumergroup_lag{consumergroup="compose-check"})', 6)
    _until(prometheus, 'sum(kafka_consumergroup_lag{consumergroup="compose-check"})', 6 * 40)
    # Each node's REST API (and /ui) is published on the host's loopback.
    rest_ports = cluster["rest_ports"]
    assert isinstance(rest_ports, list)
    for port in rest_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            assert answer.status == 200
