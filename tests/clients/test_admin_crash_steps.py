"""CreateTopics, DeleteRecords and AlterConfigs survive ``kill -9`` (issue 22, finding 6),
against a real ``tidegate serve``: killed between their steps (the test hook
``TIDEGATE_FAILPOINTS``, ``gateway/failpoints.py``), at random points, and right after
their answer. After a restart each is as before the operation or as after it, never half
done, and whatever was answered holds."""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from tests.clients import requests as kreq
from tests.clients.server import Tidegate

DAY_MS = 86_400_000


@pytest.fixture
def server(tmp_path: Path) -> Any:
    s = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", rest=True)
    yield s
    s.close()


def _start(server: Tidegate, monkeypatch: pytest.MonkeyPatch, failpoint: str | None) -> None:
    if failpoint is None:
        monkeypatch.delenv("TIDEGATE_FAILPOINTS", raising=False)
    else:
        monkeypatch.setenv("TIDEGATE_FAILPOINTS", failpoint)
    server.start()


def _killed_itself(server: Tidegate, timeout_s: float = 60) -> None:
    assert server.proc is not None
    try:
        code = server.proc.wait(timeout_s)
    except Exception:
        raise AssertionError(f"the failpoint was never reached:\n{server.tail()}") from None
    assert code == -9, (code, server.tail())
    server.proc = None


def _admin(server: Tidegate) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def _partitions(server: Tidegate, topic: str) -> int | None:
    meta = _admin(server).list_topics(timeout=20).topics.get(topic)
    return None if meta is None else len(meta.partitions)


def _configs(server: Tidegate, topic: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = _admin(server)
    (f,) = admin.describe_configs([res]).values()
    return {k: v.value for k, v in f.result(timeout=30).items()}


def _stream(server: Tidegate, topic: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.rest_port}/v1/scopes/kafka/streams/{topic}"
    with urllib.request.urlopen(url, timeout=10) as r:
        out: dict[str, Any] = json.load(r)
        return out


def _retention_ms(stream: dict[str, Any]) -> int | None:
    policy = stream["retentionPolicy"]
    if policy is None:
        return None
    assert policy["type"] == "LIMITED_DAYS", policy
    return round(policy["value"] * DAY_MS)


def _produce(server: Tidegate, topic: str, partitions: int, per_partition: int = 1) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 20_000,
                         "enable.idempotence": True, "linger.ms": 5})
    failed: list[object] = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, b"%d-%d" % (p, i), key=b"k%d" % i, partition=p,
                             on_delivery=lambda e, _m: e is not None and failed.append(e))
    assert producer.flush(40) == 0 and not failed, failed[:3]


def _offsets_read(server: Tidegate, topic: str, partition: int, end: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "steps",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not got or got[-1] < end - 1):
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.offset())
    consumer.close()
    return got


def _create(server: Tidegate, topic: str, partitions: int, **configs: str) -> None:
    new = NewTopic(topic, num_partitions=partitions, config=dict(configs))
    admin = _admin(server)  # its futures fail once it is collected
    for f in admin.create_topics([new]).values():
        f.result(timeout=60)


# -- CreateTopics -----------------------------------------------------------------------


def test_create_topics_killed_after_its_record(
    server: Tidegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(server, monkeypatch, "create_topics.entry_stored")
    new = NewTopic("made", num_partitions=8, config={"retention.ms": str(2 * DAY_MS)})
    admin = _admin(server)
    admin.create_topics([new], request_timeout=5)  # the answer never comes
    _killed_itself(server)
    del admin
    _start(server, monkeypatch, None)
    # The record was stored: the start completes the topic (stream, configs, partitions).
    assert _partitions(server, "made") == 8
    assert _configs(server, "made")["retention.ms"] == str(2 * DAY_MS)
    assert _retention_ms(_stream(server, "made")) == 2 * DAY_MS
    _produce(server, "made", 8, 3)
    assert _offsets_read(server, "made", 7, 3) == [0, 1, 2]
    assert "Traceback" not in server.tail(400)


def test_create_topics_killed_anywhere(server: Tidegate, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(19)
    _start(server, monkeypatch, None)
    for round_ in range(3):
        topic = f"born-{round_}"
        new = NewTopic(topic, num_partitions=300, config={"retention.ms": str(DAY_MS)})
        admin = _admin(server)
        admin.create_topics([new], request_timeout=60)
        time.sleep(rng.uniform(0.0, 0.5))
        server.kill9()
        del admin  # gone before the restart: it would send its request again
        server.start()
        count = _partitions(server, topic)
        if count is None:  # before: the name is free
            _create(server, topic, 300, **{"retention.ms": str(DAY_MS)})
        assert _partitions(server, topic) == 300
        assert _retention_ms(_stream(server, topic)) == DAY_MS
        _produce(server, topic, 300)
    assert "Traceback" not in server.tail(400)


# -- DeleteRecords -----------------------------------------------------------------------


def _delete_records(server: Tidegate, topic: str, offsets: dict[int, int]) -> socket.socket:
    request = DeleteRecordsRequest(topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
            partition_index=p, offset=o) for p, o in offsets.items()])], timeout_ms=30_000)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(kreq.frame(request, 1))
    return sock


def _answer(sock: socket.socket) -> Any:
    sock.settimeout(30)
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        assert chunk, "connection closed without an answer"
        data += chunk
    sock.close()
    return DeleteRecordsResponse.decode(data[8:], version=1)


def _earliest(server: Tidegate, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "steps"})
    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
    consumer.close()
    return int(low)


def test_delete_records_durable_before_the_answer(
    server: Tidegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(server, monkeypatch, "delete_records.log_start_stored")
    _create(server, "trim", 2)
    _produce(server, "trim", 2, 100)
    sock = _delete_records(server, "trim", {0: 60, 1: 30})
    _killed_itself(server)
    sock.close()
    _start(server, monkeypatch, None)
    # Stored before the kill: the log starts hold, the truncation is caught up with.
    assert (_earliest(server, "trim", 0), _earliest(server, "trim", 1)) == (60, 30)
    assert _offsets_read(server, "trim", 0, 100) == list(range(60, 100))
    # Answered, then kill -9 at once: the answer holds after the restart.
    answer = _answer(_delete_records(server, "trim", {0: 90}))
    assert answer.topics[0].partitions[0].low_watermark == 90, answer
    server.kill9()
    server.start()
    assert _earliest(server, "trim", 0) == 90
    assert _offsets_read(server, "trim", 0, 100) == list(range(90, 100))
    _produce(server, "trim", 2, 1)
    assert _offsets_read(server, "trim", 0, 101) == list(range(90, 101))
    assert "Traceback" not in server.tail(400)


# -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------


def _alter(server: Tidegate, topic: str, wait: bool, **configs: str) -> AdminClient:
    """IncrementalAlterConfigs SET; the client (keep it: its futures fail once it goes)."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin = _admin(server)
    (f,) = admin.incremental_alter_configs([res]).values()
    if wait:
        f.result(timeout=30)
    return admin


def test_alter_configs_killed_between_its_steps(
    server: Tidegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(server, monkeypatch, "alter_configs.configs_stored")
    _create(server, "tuned", 2)
    admin = _alter(server, "tuned", False, **{"retention.ms": str(3 * DAY_MS),
                                              "tidegate.scaling.type": "BY_RATE_IN_EVENTS_PER_SEC",
                                              "tidegate.scaling.target.rate": "1000"})
    _killed_itself(server)
    del admin
    _start(server, monkeypatch, None)
    # Before (nothing changed) or after (configs and stream policies both), never mixed;
    # the configs were stored before the kill, so here it is after.
    configs = _configs(server, "tuned")
    stream = _stream(server, "tuned")
    state = (configs["retention.ms"], configs["tidegate.scaling.type"], _retention_ms(stream),
             stream["scalingPolicy"]["type"], stream["scalingPolicy"]["targetRate"])
    before = (str(7 * DAY_MS), "FIXED_NUM_SEGMENTS", 7 * DAY_MS, "FIXED_NUM_SEGMENTS")
    after = (str(3 * DAY_MS), "BY_RATE_IN_EVENTS_PER_SEC", 3 * DAY_MS,
             "BY_RATE_IN_EVENTS_PER_SEC", 1000)
    assert state[:4] == before or state == after, state
    assert state == after, state


def test_alter_configs_answered_survives_kill9(
    server: Tidegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(server, monkeypatch, None)
    _create(server, "kept", 2, **{"retention.ms": str(DAY_MS)})
    assert _retention_ms(_stream(server, "kept")) == DAY_MS
    _alter(server, "kept", True, **{"cleanup.policy": "compact"})
    server.kill9()
    server.start()
    assert _configs(server, "kept")["cleanup.policy"] == "compact"
    assert _stream(server, "kept")["retentionPolicy"] is None  # compact: no retention
    _alter(server, "kept", True, **{"cleanup.policy": "delete"})
    server.kill9()
    server.start()
    assert _configs(server, "kept")["cleanup.policy"] == "delete"
    assert _retention_ms(_stream(server, "kept")) == DAY_MS
    assert "Traceback" not in server.tail(400)


# -- killed at random points -------------------------------------------------------------


def test_alter_configs_and_delete_records_killed_anywhere(
    server: Tidegate, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(33)
    _start(server, monkeypatch, None)
    _create(server, "spin", 2, **{"retention.ms": str(DAY_MS),
                                  "tidegate.scaling.type": "BY_RATE_IN_EVENTS_PER_SEC",
                                  "tidegate.scaling.target.rate": "1000"})
    _produce(server, "spin", 1, 100)
    days, rate, start = 1, 1000, 0
    for round_ in range(4):
        new_days, new_rate, new_start = days + 1, rate + 1, start + 10
        admin = _alter(server, "spin", False, **{"retention.ms": str(new_days * DAY_MS),
                                                 "tidegate.scaling.target.rate": str(new_rate)})
        sock = _delete_records(server, "spin", {0: new_start})
        time.sleep(rng.uniform(0.0, 0.05))
        server.kill9()
        sock.close()
        del admin
        server.start()
        configs, stream = _configs(server, "spin"), _stream(server, "spin")
        state = (int(configs["retention.ms"]) // DAY_MS, int(configs["tidegate.scaling.target.rate"]))
        assert state in ((days, rate), (new_days, new_rate)), (round_, state)
        assert (_retention_ms(stream), stream["scalingPolicy"]["targetRate"]) == (
            state[0] * DAY_MS, state[1]), (round_, state, stream)
        earliest = _earliest(server, "spin", 0)
        assert earliest in (start, new_start), (round_, earliest)
        assert _offsets_read(server, "spin", 0, 100)[:1] == [earliest]
        days, rate, start = state[0], state[1], earliest
    assert "Traceback" not in server.tail(400)
