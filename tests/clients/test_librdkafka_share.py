"""librdkafka's share consumer (confluent-kafka's ``ShareConsumer``, KIP-932) against a
real ``tidegate serve``: two members of one share group get each record of a partition
once between them, and RELEASE and REJECT in explicit acknowledgement mode."""

from __future__ import annotations

import threading
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from tests.clients.requests import Conn
from tests.clients.server import Tidegate

QUIET = {"log_level": 3}
GROUP_CONFIG_RESOURCE = 32
_Res = IncrementalAlterConfigsRequest.AlterConfigsResource



def _setup(tidegate: Tidegate, topic: str, group: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": tidegate.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    conn = Conn(tidegate.port)
    try:  # share.auto.offset.reset=earliest: the records are produced before anyone joins
        resp = conn.call(IncrementalAlterConfigsRequest(resources=[_Res(
            resource_type=GROUP_CONFIG_RESOURCE, resource_name=group,
            configs=[_Res.AlterableConfig(name="share.auto.offset.reset", config_operation=0,
                                          value="earliest")],
        )], validate_only=False), 1, IncrementalAlterConfigsResponse)
        assert resp.responses[0].error_code == 0, resp
    finally:
        conn.close()
    producer = Producer({"bootstrap.servers": tidegate.bootstrap, **QUIET})
    for i in range(count):
        producer.produce(topic, value=b"v-%d" % i, partition=0)
    assert producer.flush(30) == 0


def _consume(tidegate: Tidegate, group: str, topic: str, decide: object, idle_s: float,
             out: list[tuple[int, int | None, bytes, str]], deadline_s: float = 60) -> None:
    """Poll until ``idle_s`` without records (once some came) or ``deadline_s``; each
    record's (offset, delivery count, value, acknowledgement) goes to ``out``."""
    consumer = ShareConsumer({"bootstrap.servers": tidegate.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", **QUIET})
    consumer.subscribe([topic])
    start = last = time.monotonic()
    try:
        while time.monotonic() - start < deadline_s:
            if out and time.monotonic() - last > idle_s:
                break
            messages = consumer.poll(0.5)
            got = False
            for m in messages:
                if m.error() is not None:
                    continue
                kind = decide(m)  # type: ignore[operator]
                consumer.acknowledge(m, kind)
                out.append((m.offset(), m.delivery_count(), m.value(), kind.name))
                got = True
            if got:
                consumer.commit_sync(30)
                last = time.monotonic()
    finally:
        consumer.close()


def test_two_share_consumers_get_each_record_once(tidegate: Tidegate) -> None:
    _setup(tidegate, "lq", "lg", 200)
    a: list[tuple[int, int | None, bytes, str]] = []
    b: list[tuple[int, int | None, bytes, str]] = []
    threads = [
        threading.Thread(target=_consume, args=(tidegate, "lg", "lq", lambda m: AcknowledgeType.ACCEPT, 4.0, out))
        for out in (a, b)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    values = [r[2] for r in a + b]
    # Each record once between them (librdkafka acquires up to 500 records a fetch, so
    # one member may well take them all: the Java test checks the split).
    assert sorted(values) == sorted(b"v-%d" % i for i in range(200)), "lost or duplicated"


def test_release_and_reject(tidegate: Tidegate) -> None:
    _setup(tidegate, "lr", "lrg", 10)

    def decide(m: object) -> AcknowledgeType:
        count = m.delivery_count()  # type: ignore[attr-defined]
        if int(m.value()[2:]) % 2:  # type: ignore[attr-defined]
            return AcknowledgeType.REJECT
        return AcknowledgeType.RELEASE if count == 1 else AcknowledgeType.ACCEPT

    out: list[tuple[int, int | None, bytes, str]] = []
    _consume(tidegate, "lrg", "lr", decide, 4.0, out)
    seen: dict[bytes, list[int | None]] = {}
    for _, count, value, _ in out:
        seen.setdefault(value, []).append(count)
    expected = {b"v-%d" % i: ([1] if i % 2 else [1, 2]) for i in range(10)}
    assert seen == expected, seen
