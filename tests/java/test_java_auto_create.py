"""kafka-clients 4.3's consumer subscribing to a topic that does not exist: it asks with
``allow_auto_topic_creation`` as its ``allow.auto.create.topics`` says, and the topic is
created (``num.partitions``) only when the broker's ``auto.create.topics.enable`` allows it
too, as in Kafka's ``KafkaApis.getTopicMetadata``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.clients.server import Tidegate, serving
from tests.java.conftest import Java

#: Long enough for a group join after the topic appears.
ASSIGN_WAIT_MS = 60_000
#: How long a consumer that must not create the topic keeps polling.
NO_CREATE_WAIT_MS = 4_000


@pytest.fixture(params=[True, False], ids=["broker-auto-create", "broker-no-auto-create"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tidegate]:
    with serving(tmp_path, f'"auto.create.topics.enable" = {str(request.param).lower()}\n'
                      '"num.partitions" = 2\n[groups]\ninitial_rebalance_delay_ms = 500\n') as server:
        yield server


def test_java_consumer_subscribes_to_missing_topic(java: Java, server: Tidegate) -> None:
    assert server.config is not None
    creates = "= true" in server.config.read_text()
    for allow in (True, False):
        expect = allow and creates
        topic = f"jv-{'allow' if allow else 'deny'}"
        out = java.run("SubscribeMissing", server.bootstrap, topic, str(allow).lower(),
                       str(ASSIGN_WAIT_MS if expect else NO_CREATE_WAIT_MS))
        assert ("ASSIGNED 2" if expect else "UNASSIGNED") in out, (allow, creates, out)
        listed = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=30).topics
        assert (topic in listed) == expect, sorted(listed)
