"""ACLs through Kafka's admin APIs, and the authorizer granting and denying produce,
consume, group and admin operations for each client family (alice has ACLs on some
topics and one group; admin is a super user)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from tests.security import clients
from tests.security.conftest import Secure

#: The round trips of ``clients`` use group ``g-<topic>``: alice's groups start ``g-acl-``.
ALLOWED, PREFIX, DENIED, GROUP = "acl-ok", "acl-pre-", "acl-no", "g-acl-"


@pytest.fixture(scope="module")
def acls(secure: Secure) -> Secure:
    """Topics made by the super user; alice may write and read ``acl-ok``, do anything to
    topics starting ``acl-pre-``, and read (join, commit in) groups starting ``g-acl-``."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(clients.librdkafka_conf(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin"))
    for f in admin.create_topics([NewTopic(t, 1) for t in (ALLOWED, DENIED, PREFIX + "x", PREFIX + "secret")]).values():
        f.result(15)
    alice = "User:alice"
    bindings = [
        AclBinding(ResourceType.TOPIC, ALLOWED, ResourcePatternType.LITERAL, alice, "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, ALLOWED, ResourcePatternType.LITERAL, alice, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, PREFIX, ResourcePatternType.PREFIXED, alice, "*",
                   AclOperation.ALL, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.PREFIXED, alice, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        # A DENY wins over the prefixed ALLOW.
        AclBinding(ResourceType.TOPIC, PREFIX + "secret", ResourcePatternType.LITERAL, alice,
                   "*", AclOperation.READ, AclPermissionType.DENY),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    return secure


def test_admin_creates_describes_and_deletes_acls(acls: Secure) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(clients.librdkafka_conf(acls, "SASL_SSL", "SCRAM-SHA-512", "admin"))
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(every).result(15)
    assert {(b.name, b.operation) for b in found} >= {
        (ALLOWED, AclOperation.WRITE), (ALLOWED, AclOperation.READ), (PREFIX, AclOperation.ALL),
        (GROUP, AclOperation.READ),
    }
    # MATCH finds the prefixed binding that applies to a named topic.
    match = AclBindingFilter(ResourceType.TOPIC, PREFIX + "abc", ResourcePatternType.MATCH,
                             None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert [b.name for b in admin.describe_acls(match).result(15)] == [PREFIX]
    extra = AclBinding(ResourceType.TOPIC, "gone", ResourcePatternType.LITERAL, "User:bob",
                       "*", AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([extra])[extra].result(15)
    gone = AclBindingFilter(ResourceType.TOPIC, "gone", ResourcePatternType.LITERAL, None,
                            None, AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([gone])[gone].result(15)
    assert [(b.name, b.principal) for b in deleted] == [("gone", "User:bob")]
    assert admin.describe_acls(gone).result(15) == []
    # A non-super user may not manage ACLs (CLUSTER ALTER) nor list them (DESCRIBE).
    alice = AdminClient(clients.librdkafka_conf(acls, "SASL_SSL", "PLAIN", "alice"))
    with pytest.raises(KafkaException) as info:
        alice.create_acls([extra])[extra].result(15)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as PyResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    kp = KafkaAdminClient(**clients.kafka_python_conf(acls, "SASL_PLAINTEXT", "PLAIN", "alice"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(
                    PyResourceType.ANY, None, ACLResourcePatternType.ANY),
            ))
    finally:
        kp.close()


def test_confluent_grants_and_denies(acls: Secure) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = clients.librdkafka_conf(acls, "SASL_SSL", "SCRAM-SHA-256", "alice")
    clients.confluent_round_trip(conf, ALLOWED)
    producer = Producer({**conf, "message.timeout.ms": 5000})
    outcome: list[Any] = []
    producer.produce(DENIED, b"x", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    assert outcome and outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome
    # Reading with a group alice may not use.
    consumer = Consumer({**conf, "group.id": "g-bad", "auto.offset.reset": "earliest"})
    consumer.subscribe([ALLOWED])
    try:
        error = None
        deadline = time.monotonic() + 15
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error():
                error = msg.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    finally:
        consumer.close()
    admin = AdminClient(conf)
    metadata = admin.list_topics(timeout=10)
    visible = set(metadata.topics)
    assert ALLOWED in visible and PREFIX + "x" in visible and DENIED not in visible, visible
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("acl-new", 1)])["acl-new"].result(15)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin.create_topics([NewTopic(PREFIX + "new", 1)])[PREFIX + "new"].result(15)


def test_kafka_python_grants_and_denies(acls: Secure) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import (
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    conf = clients.kafka_python_conf(acls, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice")
    clients.kafka_python_round_trip(conf, PREFIX + "kp")
    producer = KafkaProducer(**conf, max_block_ms=5000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(DENIED, b"x").get(timeout=10)
    finally:
        producer.close()
    consumer = KafkaConsumer(**conf, group_id="g-bad", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(ALLOWED, 0)])
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.commit({TopicPartition(ALLOWED, 0): _offset(0)})
    finally:
        consumer.close()
    # The DENY on acl-pre-secret wins over the prefixed ALLOW: its fetch is refused.
    reader = KafkaConsumer(**conf, group_id=None, enable_auto_commit=False)
    try:
        reader.assign([TopicPartition(PREFIX + "secret", 0)])
        reader.seek(TopicPartition(PREFIX + "secret", 0), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(20):
                reader.poll(timeout_ms=500)
    finally:
        reader.close()
    admin = KafkaAdminClient(**conf)
    try:
        topics = set(admin.list_topics())
        assert ALLOWED in topics and DENIED not in topics, topics
    finally:
        admin.close()


def _offset(n: int) -> Any:
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(n, "", -1)


def test_aiokafka_grants_and_denies(acls: Secure) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError

    conf = clients.kafka_python_conf(acls, "SASL_PLAINTEXT", "PLAIN", "alice")
    clients.aiokafka_round_trip(conf, PREFIX + "aio")

    async def denied() -> None:
        producer = AIOKafkaProducer(**conf, request_timeout_ms=5000)
        try:
            await producer.start()
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send_and_wait(DENIED, b"x")
        finally:
            await producer.stop()

    asyncio.run(denied())


def test_kcat_grants_and_denies(acls: Secure) -> None:
    conf = clients.librdkafka_conf(acls, "SASL_SSL", "SCRAM-SHA-512", "alice")
    clients.kcat_round_trip(conf, PREFIX + "kcat")
    out = clients.kcat(conf, "-P", "-t", DENIED, "-p", "0", stdin=b"x\n")
    assert out.returncode != 0 and b"uthorization" in out.stderr, out.stderr
    listing = clients.kcat(conf, "-L")
    assert listing.returncode == 0 and DENIED.encode() not in listing.stdout, listing.stdout
    assert ALLOWED.encode() in listing.stdout


def test_mutual_tls_principal_is_the_certificate_subject(acls: Secure) -> None:
    """alice's certificate gives User:CN=alice,...: no ACL names it, so it is denied."""
    from confluent_kafka import KafkaError, Producer

    conf = clients.librdkafka_conf(acls, "SSL", None, None, cert="alice")
    producer = Producer({**conf, "message.timeout.ms": 5000})
    outcome: list[Any] = []
    producer.produce(ALLOWED, uuid.uuid4().bytes, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    assert outcome and outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcome
