"""Admin APIs through kafka-python's ``KafkaAdminClient`` against a real ``tidegate
serve`` (one server for the module; each test uses its own topics)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from tests.clients.server import Tidegate


def _admin(tidegate: Tidegate) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=tidegate.bootstrap, request_timeout_ms=20_000)


def _produce(tidegate: Tidegate, topic: str, per_partition: dict[int, int]) -> None:
    producer = KafkaProducer(bootstrap_servers=tidegate.bootstrap, acks="all", linger_ms=0)
    futures = [
        producer.send(topic, key=f"k{p}".encode(), value=f"{p}-{i}".encode(), partition=p)
        for p, n in per_partition.items()
        for i in range(n)
    ]
    producer.flush()
    for f in futures:
        f.get(timeout=20)
    producer.close()


def _consume(tidegate: Tidegate, topic: str, partition: int, count: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=tidegate.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=300).values():
            got += [(m.offset, m.value) for m in msgs]
    consumer.close()
    return got


def _topic_configs(admin: KafkaAdminClient, topic: str) -> dict[str, dict[str, object]]:
    answer = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
    )
    configs: dict[str, dict[str, object]] = answer["topic"][topic]
    return configs


def test_create_topics_configs_validate_only_and_errors(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    # validate_only: checked, not created.
    admin.create_topics([NewTopic("kpa-v", 2, 1, topic_configs={"retention.ms": "60000"})],
                        validate_only=True)
    assert "kpa-v" not in admin.list_topics()
    admin.create_topics([NewTopic("kpa-c", 3, 1, topic_configs={
        "retention.ms": "3600000", "cleanup.policy": "delete", "max.message.bytes": "2000000",
    })])
    assert "kpa-c" in admin.list_topics()
    configs = _topic_configs(admin, "kpa-c")
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["value"] == "1073741824"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kpa-c", 3, 1)])
    with pytest.raises(InvalidConfigurationError, match="retention.ms"):
        admin.create_topics([NewTopic("kpa-bad", 1, 1, topic_configs={"retention.ms": "soon"})])
    with pytest.raises(InvalidConfigurationError, match="no.such.config"):
        admin.create_topics([NewTopic("kpa-bad", 1, 1, topic_configs={"no.such.config": "1"})])
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        admin.create_topics([NewTopic("kpa-bad", 1, 1, topic_configs={"cleanup.policy": "x"})])
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic("kpa-bad", 0, 1)])
    assert "kpa-bad" not in admin.list_topics()
    admin.close()


def test_describe_alter_and_incremental_alter_configs(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    admin.create_topics([NewTopic("kpa-cfg", 1, 1)])
    resource = ConfigResource(ConfigResourceType.TOPIC, "kpa-cfg")
    # Only modified configs by default: none yet.
    assert admin.describe_configs([resource])["topic"]["kpa-cfg"] == {}
    # IncrementalAlterConfigs (the client's choice when the broker offers it).
    answer = admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg",
        configs={"retention.ms": "120000", "cleanup.policy": ("APPEND", "compact")},
    )])
    assert answer["topic"]["kpa-cfg"] == "OK"
    configs = _topic_configs(admin, "kpa-cfg")
    assert configs["retention.ms"]["value"] == "120000"
    assert configs["cleanup.policy"]["value"] == "delete,compact"
    admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg",
        configs={"cleanup.policy": ("SUBTRACT", "delete"), "retention.ms": ("DELETE", None)},
    )])
    configs = _topic_configs(admin, "kpa-cfg")
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["retention.ms"]["value"] == "604800000"
    assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    # APPEND on a non-list config and bad values are INVALID_CONFIG, nothing applied.
    answer = admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg", configs={"retention.ms": ("APPEND", "5")},
    )])
    assert "InvalidConfigurationError" in answer["topic"]["kpa-cfg"]
    answer = admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg", configs={"min.cleanable.dirty.ratio": "2"},
    )], raise_on_unknown=False)
    assert "InvalidConfigurationError" in answer["topic"]["kpa-cfg"]
    # AlterConfigs replaces the whole set (kafka-python re-sends the other modified keys).
    answer = admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg", configs={"segment.ms": "1000"},
    )], incremental=False)
    assert answer["topic"]["kpa-cfg"] == "OK"
    modified = admin.describe_configs([resource])["topic"]["kpa-cfg"]
    assert {k: v["value"] for k, v in modified.items()} == {
        "segment.ms": "1000", "cleanup.policy": "compact"}
    # validate_only changes nothing.
    admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg", configs={"segment.ms": "2000"},
    )], validate_only=True)
    assert _topic_configs(admin, "kpa-cfg")["segment.ms"]["value"] == "1000"
    # Synonyms: the topic value, then the broker default it overrides.
    answer = admin.describe_configs([ConfigResource(
        ConfigResourceType.TOPIC, "kpa-cfg", configs={"segment.ms": None},
    )], include_synonyms=True, config_filter="all")
    synonyms = answer["topic"]["kpa-cfg"]["segment.ms"]["synonyms"]
    assert [(s["name"], s["value"]) for s in synonyms] == [
        ("segment.ms", "1000"), ("log.roll.ms", "604800000")]
    # The broker resource: read-only node settings.
    broker = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
    )["broker"]["0"]
    assert broker["num.partitions"]["value"] == "1"
    assert broker["auto.create.topics.enable"]["read_only"] is True
    # Unknown topics.
    answer = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kpa-none")], config_filter="all")
    assert answer["topic"]["kpa-none"] == {} or "UnknownTopicOrPartition" in str(answer)
    admin.close()


def test_create_partitions_then_produce_and_consume(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    admin.create_topics([NewTopic("kpa-parts", 2, 1)])
    _produce(tidegate, "kpa-parts", {0: 5, 1: 5})
    admin.create_partitions({"kpa-parts": 5}, validate_only=True)
    assert len(admin.describe_topics(["kpa-parts"])[0]["partitions"]) == 2
    admin.create_partitions({"kpa-parts": 5})
    assert len(admin.describe_topics(["kpa-parts"])[0]["partitions"]) == 5
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"kpa-parts": 3})
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"kpa-parts": 5})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({"kpa-nope": 5})
    _produce(tidegate, "kpa-parts", {p: 3 for p in range(5)})
    for p in range(5):
        want = 8 if p < 2 else 3
        got = _consume(tidegate, "kpa-parts", p, want)
        assert [o for o, _ in got] == list(range(want)), p
        assert got[-1][1] == f"{p}-2".encode()
    admin.close()


def test_delete_records_moves_log_start_durably(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    admin.create_topics([NewTopic("kpa-dr", 2, 1)])
    _produce(tidegate, "kpa-dr", {0: 10, 1: 4})
    tp0, tp1 = TopicPartition("kpa-dr", 0), TopicPartition("kpa-dr", 1)
    answer = admin.delete_records({tp0: 6, tp1: -1})
    assert answer[tp0]["low_watermark"] == 6 and answer[tp0]["error_code"] == 0
    assert answer[tp1]["low_watermark"] == 4
    # Never backwards; beyond the high watermark is OFFSET_OUT_OF_RANGE.
    assert admin.delete_records({tp0: 2})[tp0]["low_watermark"] == 6
    with pytest.raises(Exception, match="OffsetOutOfRange"):
        admin.delete_records({tp0: 11})
    admin.close()  # no client may be left reconnecting while the server restarts
    tidegate.restart()
    consumer = KafkaConsumer(bootstrap_servers=tidegate.bootstrap, group_id=None)
    assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 6, tp1: 4}
    assert consumer.end_offsets([tp0, tp1]) == {tp0: 10, tp1: 4}
    consumer.close()
    assert [o for o, _ in _consume(tidegate, "kpa-dr", 0, 4)] == [6, 7, 8, 9]


def test_delete_topics_and_recreate_fresh(tidegate: Tidegate) -> None:
    admin = _admin(tidegate)
    admin.create_topics([NewTopic("kpa-del", 2, 1, topic_configs={"retention.ms": "5000"})])
    _produce(tidegate, "kpa-del", {0: 3, 1: 3})
    admin.delete_topics(["kpa-del"])
    assert "kpa-del" not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kpa-del"])
    admin.create_topics([NewTopic("kpa-del", 1, 1)])
    assert _topic_configs(admin, "kpa-del")["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    _produce(tidegate, "kpa-del", {0: 2})
    assert [o for o, _ in _consume(tidegate, "kpa-del", 0, 2)] == [0, 1]
    admin.close()
    tidegate.restart()
    assert [v for _, v in _consume(tidegate, "kpa-del", 0, 2)] == [b"0-0", b"0-1"]


def test_describe_cluster_and_sasl_handshake(
    tidegate: Tidegate, caplog: pytest.LogCaptureFixture
) -> None:
    admin = _admin(tidegate)
    cluster = admin.describe_cluster()
    assert cluster["cluster_id"] == "tidegate"
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(0, tidegate.port)]
    admin.close()
    # No authentication yet: every SASL mechanism is refused at the handshake.
    with pytest.raises(KafkaTimeoutError):
        KafkaAdminClient(
            bootstrap_servers=tidegate.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username="u", sasl_plain_password="p",
            request_timeout_ms=3_000, bootstrap_timeout_ms=3_000,
        ).list_topics()
    assert "SaslHandshake failed: UnsupportedSaslMechanismError" in caplog.text


def test_retention_ms_truncates_and_log_start_follows(tmp_path: Path) -> None:
    """retention.ms on a topic: the controller's retention truncates the stream and the
    gateway's log start follows (``[controller] retention_period_ms`` sets both paces)."""
    config = tmp_path / "tidegate.toml"
    config.write_text("[controller]\nretention_period_ms = 200\n")
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config=config)
    server.start()
    try:
        admin = _admin(server)
        admin.create_topics([NewTopic("kpa-ret", 2, 1, topic_configs={"retention.ms": "300"}),
                             NewTopic("kpa-keep", 1, 1)])
        admin.close()
        _produce(server, "kpa-ret", {0: 5, 1: 3})
        _produce(server, "kpa-keep", {0: 4})
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=None)
        tps = [TopicPartition("kpa-ret", 0), TopicPartition("kpa-ret", 1)]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if consumer.beginning_offsets(tps) == {tps[0]: 5, tps[1]: 3}:
                break
            time.sleep(0.2)
        assert consumer.beginning_offsets(tps) == {tps[0]: 5, tps[1]: 3}, server.tail()
        assert consumer.end_offsets(tps) == {tps[0]: 5, tps[1]: 3}
        keep = TopicPartition("kpa-keep", 0)  # default retention.ms: 7 days
        assert consumer.beginning_offsets([keep]) == {keep: 0}
        consumer.close()
        _produce(server, "kpa-ret", {0: 1})
        assert [o for o, _ in _consume(server, "kpa-ret", 0, 1)] == [5]
    finally:
        server.close()
