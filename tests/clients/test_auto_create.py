"""A consumer subscribing to a topic that does not exist, for each combination of the
consumer's ``allow.auto.create.topics`` (Metadata v4+ ``allow_auto_topic_creation``) and the
broker's ``auto.create.topics.enable``: as in Kafka's ``KafkaApis.getTopicMetadata``, the topic
is created only when both allow it, with ``num.partitions``; otherwise Metadata answers
UNKNOWN_TOPIC_OR_PARTITION, which librdkafka reports to the application and kafka-python and
the Java consumer wait on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from tests.clients.server import Tidegate, serving

DEADLINE_S = 60.0
#: How long a consumer that must not create the topic keeps polling before the check.
NO_CREATE_POLLS_S = 3.0


@pytest.fixture(params=[True, False], ids=["broker-auto-create", "broker-no-auto-create"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tidegate]:
    with serving(tmp_path, f'"auto.create.topics.enable" = {str(request.param).lower()}\n'
                      '"num.partitions" = 2\n') as server:
        yield server


def _broker_creates(server: Tidegate) -> bool:
    assert server.config is not None
    return "= true" in server.config.read_text()


def _topics(bootstrap: str) -> dict[str, int]:
    # All topics: a Metadata request for every topic never creates one.
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def _confluent_subscribe(bootstrap: str, topic: str, allow: bool) -> list[KafkaError]:
    """Subscribe to ``topic`` and poll a while; the errors the consumer reported."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
        "allow.auto.create.topics": allow, "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 500,
    })
    errors: list[KafkaError] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + NO_CREATE_POLLS_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
    finally:
        consumer.close()
    return errors


def test_confluent_consumer(server: Tidegate) -> None:
    """librdkafka's consumer asks for its subscription with ``allow_auto_topic_creation``
    false whatever ``allow.auto.create.topics`` says (librdkafka issue 3395, still so in
    2.16), so against Kafka as here the topic is never created and the application is told."""
    for allow in (True, False):
        topic = f"cf-{'allow' if allow else 'deny'}"
        errors = _confluent_subscribe(server.bootstrap, topic, allow)
        assert topic not in _topics(server.bootstrap), (allow, errors)
        assert any(e.code() == KafkaError.UNKNOWN_TOPIC_OR_PART for e in errors), errors


def test_kafka_python_consumer(server: Tidegate) -> None:
    """kafka-python 3.0.12 always asks with ``allow_auto_topic_creation`` true: its
    ``allow_auto_create_topics`` never reaches ``ClusterMetadata`` (``net/manager.py``), so
    only the broker's setting decides, as it would with Kafka."""
    creates = _broker_creates(server)
    topic = "kp-subscribed"
    consumer = KafkaConsumer(
        topic, bootstrap_servers=server.bootstrap, group_id="g-kp",
        metadata_max_age_ms=500, request_timeout_ms=30000,
    )
    try:
        deadline = time.monotonic() + (DEADLINE_S if creates else NO_CREATE_POLLS_S)
        while time.monotonic() < deadline and topic not in _topics(server.bootstrap):
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    found = _topics(server.bootstrap)
    assert (topic in found) == creates
    if creates:
        assert found[topic] == 2  # num.partitions
