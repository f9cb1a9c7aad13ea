"""The admin APIs against the Kafka API on one ``tidegate serve`` (issue 22, finding 7):
the streams under Kafka topics cannot be sealed, deleted, truncated or updated over REST or gRPC
(409 / FAILED_PRECONDITION naming the Kafka way), the topic keeps working, and what
Kafka's DeleteTopics does both APIs then agree on."""

from __future__ import annotations

import grpc
import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.rest.test_served import Served, served  # noqa: F401  (the fixture)

TOPIC = "guarded"


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000})
    failed: list[object] = []
    for value in values:
        producer.produce(TOPIC, value, on_delivery=lambda e, _m: e and failed.append(e))
    assert producer.flush(20) == 0 and not failed, failed


def _consume(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    out = []
    while len(out) < count:
        msg = consumer.poll(10)
        assert msg is not None and not msg.error(), msg and msg.error()
        out.append(msg.value())
    consumer.close()
    return out


def test_admin_apis_cannot_break_kafka_topics(served: Served) -> None:  # noqa: F811
    bootstrap = f"127.0.0.1:{served.kafka_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1)]).values():
        f.result(timeout=30)
    _produce(bootstrap, [b"a", b"b"])
    rest = f"http://127.0.0.1:{served.rest_port}/v1/scopes/kafka"
    stream = f"{rest}/streams/{TOPIC}"
    refusals = [
        httpx.put(f"{stream}/state", json={"streamState": "SEALED"}, timeout=10),
        httpx.delete(stream, timeout=10),
        httpx.post(f"{stream}/truncate", json={"streamCut": {"0": 1}}, timeout=10),
        httpx.delete(rest, timeout=10),
        httpx.put(stream, json={"retentionPolicy": {"type": "LIMITED_DAYS", "value": 1}},
                  timeout=10),
    ]
    for answer, way in zip(refusals, ["DeleteTopics", "DeleteTopics", "DeleteRecords",
                                      "DeleteTopics", "AlterConfigs"], strict=True):
        assert answer.status_code == 409 and way in answer.json()["message"], answer.text
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        stub = pb2_grpc.ControllerServiceStub(channel)
        for call in (stub.SealStream, stub.DeleteStream):
            try:
                call(pb2.StreamRequest(scope="kafka", stream=TOPIC), timeout=10)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "DeleteTopics" in (exc.details() or "")
            else:
                raise AssertionError(f"{call} was not refused")
        try:
            stub.UpdateStream(pb2.UpdateStreamRequest(
                scope="kafka", stream=TOPIC, config=pb2.StreamConfig()), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "AlterConfigs" in (exc.details() or "")
        else:
            raise AssertionError("UpdateStream was not refused")
    assert httpx.get(stream, timeout=10).json()["streamState"] == "ACTIVE"
    _produce(bootstrap, [b"c"])  # the topic still takes records
    assert _consume(bootstrap, 3) == [b"a", b"b", b"c"]
    for f in admin.delete_topics([TOPIC]).values():
        f.result(timeout=30)
    assert httpx.get(stream, timeout=10).status_code == 404  # both APIs agree it is gone
    assert TOPIC not in admin.list_topics(timeout=10).topics
