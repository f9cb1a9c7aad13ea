"""SCRAM users through Kafka's admin APIs (KIP-554): created, described, used to log in,
deleted; and DescribeAcls answering SECURITY_DISABLED when no authorizer is configured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.security import clients
from tests.security.conftest import Secure


def test_confluent_admin_creates_describes_and_deletes_scram_users(secure: Secure) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(clients.librdkafka_conf(secure, "SASL_SSL", "SCRAM-SHA-512", "admin"))
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-secret"
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(15)
    futures = admin.describe_user_scram_credentials(["carol", "alice"])
    described = {user: f.result(15) for user, f in futures.items()}
    infos = described["carol"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    assert {i.mechanism for i in described["alice"].scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512,
    }
    # carol logs in with the new credential (no ACLs name her: she sees no topics).
    meta = AdminClient(clients.librdkafka_conf(
        secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret")).list_topics(timeout=10)
    assert meta.brokers
    for f in admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
    ).values():
        f.result(15)
    with pytest.raises(KafkaException) as info:
        admin.describe_user_scram_credentials(["carol"])["carol"].result(15)
    assert info.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    # Iterations below Kafka's minimum are refused.
    bad = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"x"
    )
    with pytest.raises(KafkaException) as info:
        admin.alter_user_scram_credentials([bad])["dave"].result(15)
    assert info.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[Tidegate]:
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_describe_acls_without_authorizer_is_security_disabled(plain_server: Tidegate) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import SecurityDisabledError

    admin = KafkaAdminClient(bootstrap_servers=plain_server.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
            ))
    finally:
        admin.close()
