"""Helpers of the auto-scaling tests: a ``tidegate serve`` with short policy periods,
steady produce load per partition, the topic's epochs over REST, and a full read-back
that checks nothing was lost or duplicated."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from tidegate.gateway.log.topics import partition_point

from tests.clients.server import Tidegate

#: Short periods so a test sees several policy rounds per second.
FAST_POLICIES = """
[controller]
autoscale_period_ms = 200
autoscale_cooldown_ms = 1000
retention_period_ms = 500
[store]
traffic_window_ms = 1000
"""


def start_server(tmp_path: Path, policies: str = FAST_POLICIES) -> Tidegate:
    config = tmp_path / "tidegate.toml"
    config.write_text(policies)
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config, rest=True)
    server.start()
    return server


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])
    futures[topic].result(30)


def produce(
    bootstrap: str, topic: str, per_second: dict[int, int], seconds: float,
    value_bytes: int = 1000, sent_before: Counter[int] | None = None,
    until: Callable[[], bool] | None = None,
) -> Counter[int]:
    """About ``per_second[p]`` records a second to each partition ``p`` for ``seconds``
    (or until ``until()``, asked every 0.2 s); every record acknowledged (acks=all). Keys
    number the records of each partition, continuing ``sent_before``. Returns the
    records sent per partition, with those."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[str] = []
    before = sent_before or Counter()
    sent: Counter[int] = Counter()
    start = time.monotonic()
    value = b"v" * value_bytes
    asked = start
    while (elapsed := time.monotonic() - start) < seconds:
        if until is not None and time.monotonic() - asked >= 0.2:
            asked = time.monotonic()
            if until():
                break
        for p, rate in per_second.items():
            while sent[p] < rate * elapsed:
                producer.produce(
                    topic, value=value, key=b"%d-%d" % (p, before[p] + sent[p]), partition=p,
                    on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
                )
                sent[p] += 1
        producer.poll(0)
        time.sleep(0.02)
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    return before + sent


def epochs(server: Tidegate, topic: str) -> list[list[tuple[float, float]]]:
    """The topic's epochs, oldest first, each as its segments' key ranges."""
    url = f"http://127.0.0.1:{server.rest_port}/v1/scopes/kafka/streams/{topic}/scaling-events"
    body = httpx.get(url, timeout=10).json()
    return [
        [(s["keyStart"], s["keyEnd"]) for s in e["segmentList"]] for e in body["scalingEvents"]
    ]


def metrics(server: Tidegate) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The node's ``/metrics`` samples: (name, sorted labels) -> value."""
    text = httpx.get(f"http://127.0.0.1:{server.rest_port}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def partitions_of(ranges: list[tuple[float, float]], partitions: int) -> list[list[int]]:
    """The partitions each segment holds."""
    return [
        sorted(p for p in range(partitions) if a <= partition_point(p) < b) for a, b in ranges
    ]


def wait_until(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def read_back(bootstrap: str, topic: str, expected: Counter[int]) -> None:
    """Every partition read from the start holds exactly the records sent: dense
    offsets from 0, each key once, in the order sent."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in expected])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in got.values()) < sum(expected.values()):
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append((msg.offset(), msg.key()))
    finally:
        consumer.close()
    for p, records in got.items():
        assert [o for o, _ in records] == list(range(expected[p])), p
        keys = [k for _, k in records]
        want = [b"%d-%d" % (p, n) for n in range(expected[p])]
        if keys != want:
            i = next(i for i, (a, b) in enumerate(zip(keys, want, strict=True)) if a != b)
            raise AssertionError(f"partition {p} at offset {i}: {keys[i - 2:i + 8]}")
