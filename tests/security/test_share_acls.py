"""Share groups (KIP-932) on a node with the ACL authorizer, with kafka-clients 4.3 over
SASL_SSL: a share consumer needs READ on its group and on the topic (Kafka's rules for
ShareGroupHeartbeat and ShareFetch), describing a share group needs DESCRIBE on it, and a
group's configs need ALTER_CONFIGS / DESCRIBE_CONFIGS on it (the super user has them)."""

from __future__ import annotations

import pytest

from tests.java.conftest import Java
from tests.security import clients
from tests.security.conftest import USERS, Secure

TOPIC_OK, TOPIC_NO = "sq-ok", "sq-no"
#: alice may READ groups starting ``sg-ok``; bob may only DESCRIBE ``sg-ok-1``.
GROUP_PREFIX, COUNT = "sg-ok", 10


def _java(java: Java, s: Secure, user: str, *args: str) -> str:
    return java.run("ShareSecured", s.bootstrap("SASL_SSL"), str(s.certs.ca), user, USERS[user],
                    *args)


@pytest.fixture(scope="module")
def share_acls(secure: Secure, java: Java) -> Secure:
    """Two topics of COUNT records each made by the super user, the ACLs above, and the
    groups alice consumes with set to start at the earliest offset."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    conf = clients.librdkafka_conf(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin")
    admin = AdminClient(conf)
    for f in admin.create_topics([NewTopic(t, 1) for t in (TOPIC_OK, TOPIC_NO)]).values():
        f.result(15)
    producer = Producer(conf)
    for topic in (TOPIC_OK, TOPIC_NO):
        for i in range(COUNT):
            producer.produce(topic, value=b"v-%d" % i)
    assert producer.flush(30) == 0
    allow = AclPermissionType.ALLOW
    bindings = [
        AclBinding(ResourceType.TOPIC, TOPIC_OK, ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, allow),
        AclBinding(ResourceType.GROUP, GROUP_PREFIX, ResourcePatternType.PREFIXED, "User:alice",
                   "*", AclOperation.READ, allow),
        AclBinding(ResourceType.GROUP, "sg-ok-1", ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.DESCRIBE, allow),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    for group in ("sg-ok-1", "sg-ok-2", "sg-no"):
        out = _java(java, secure, "admin", "configs", group)
        assert "CONFIG share.auto.offset.reset earliest DYNAMIC_GROUP_CONFIG" in out, out
    return secure


def test_share_consumer_with_read_on_group_and_topic_gets_every_record(
        java: Java, share_acls: Secure) -> None:
    out = _java(java, share_acls, "alice", "consume", "sg-ok-1", TOPIC_OK, str(COUNT), "60000")
    assert "ERR" not in out, out
    values = sorted(line.split()[2] for line in out.splitlines() if line.startswith("R "))
    assert values == sorted(f"v-{i}" for i in range(COUNT)), out


def test_share_consumer_without_read_on_group_is_refused(java: Java, share_acls: Secure) -> None:
    out = _java(java, share_acls, "alice", "consume", "sg-no", TOPIC_OK, str(COUNT), "30000")
    assert "ERR GroupAuthorizationException" in out, out
    assert "DONE 0" in out, out


def test_share_consumer_without_read_on_topic_is_refused(java: Java, share_acls: Secure) -> None:
    out = _java(java, share_acls, "alice", "consume", "sg-ok-2", TOPIC_NO, str(COUNT), "30000")
    assert "ERR TopicAuthorizationException" in out, out
    assert "DONE 0" in out, out


def test_share_group_describe_needs_describe_on_the_group(java: Java, share_acls: Secure) -> None:
    # bob holds DESCRIBE only (not READ): Kafka's rule for ShareGroupDescribe.
    out = _java(java, share_acls, "bob", "describe", "sg-ok-1")
    assert "DESCRIBE " in out and "ERR" not in out, out
    out = _java(java, share_acls, "bob", "describe", "sg-no")
    assert "ERR GroupAuthorizationException" in out, out


def test_group_configs_need_the_group_config_acls(java: Java, share_acls: Secure) -> None:
    # alice may READ the group, which is not ALTER_CONFIGS.
    out = _java(java, share_acls, "alice", "configs", "sg-ok-1")
    assert "ERR GroupAuthorizationException" in out, out
    out = _java(java, share_acls, "admin", "configs", "sg-ok-1")
    assert "CONFIG share.record.lock.duration.ms 30000 DEFAULT_CONFIG" in out, out
