"""Real clients (librdkafka through confluent-kafka and kcat, kafka-python, aiokafka)
log in with SASL PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL, and with
client certificates over SSL; a wrong password, an expired or foreign certificate, or
none, are refused with the right error."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.security import clients
from tests.security.conftest import MECHANISMS, Secure

FAMILIES: dict[str, tuple[Callable[..., Any], Callable[[Any, str], None]]] = {
    "confluent": (clients.librdkafka_conf, clients.confluent_round_trip),
    "kcat": (clients.librdkafka_conf, clients.kcat_round_trip),
    "kafka-python": (clients.kafka_python_conf, clients.kafka_python_round_trip),
    "aiokafka": (clients.kafka_python_conf, clients.aiokafka_round_trip),
}


def _topic(*parts: str) -> str:
    return "sec-" + "-".join(re.sub(r"[^a-z0-9]", "", p.lower()) for p in parts)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_login_round_trip(secure: Secure, family: str, protocol: str, mechanism: str) -> None:
    make_conf, round_trip = FAMILIES[family]
    round_trip(make_conf(secure, protocol, mechanism, "admin"), _topic(family, protocol, mechanism))


@pytest.mark.parametrize("family", FAMILIES)
def test_mutual_tls_round_trip(secure: Secure, family: str) -> None:
    make_conf, round_trip = FAMILIES[family]
    # The certificate's principal User:CN=admin is a super user.
    round_trip(make_conf(secure, "SSL", None, None, cert="admin"), _topic(family, "mtls"))


def test_wrong_password_refused_with_sasl_authentication_failed(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka.errors import KafkaConnectionError
    from confluent_kafka import KafkaError, Producer
    from kafka import KafkaConsumer, TopicPartition

    errors: list[Any] = []
    conf = clients.librdkafka_conf(secure, "SASL_SSL", "SCRAM-SHA-256", "alice", "wrong")
    producer = Producer({**conf, "error_cb": errors.append})
    producer.poll(3)
    producer.flush(0)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "Authentication failed" in str(errors[0]), errors

    out = clients.kcat(clients.librdkafka_conf(secure, "SASL_PLAINTEXT", "PLAIN", "bob", "nope"), "-L",
                       metadata_timeout_s=3)
    assert out.returncode != 0 and b"Authentication failed" in out.stderr, out.stderr

    # kafka-python retries its bootstrap with back-off; what it logged says why it failed.
    consumer = KafkaConsumer(**clients.kafka_python_conf(
        secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "wrong"), api_version=(3, 0))
    try:
        consumer.assign([TopicPartition("x", 0)])
        with caplog.at_level(logging.ERROR, logger="kafka"):
            consumer.poll(timeout_ms=3000)
    finally:
        consumer.close()
    assert "SaslAuthenticationFailedError" in caplog.text and "Authentication failed" in caplog.text

    caplog.clear()
    with pytest.raises(KafkaConnectionError), caplog.at_level(logging.ERROR, logger="aiokafka"):
        clients.aiokafka_round_trip(
            clients.kafka_python_conf(secure, "SASL_SSL", "SCRAM-SHA-512", "alice", "wrong"), "x"
        )
    assert "SaslAuthenticationFailed: Authentication failed" in caplog.text, caplog.text
    log = secure.server.tail(400)
    assert "failed authentication of alice from 127.0.0.1:" in log, log


@pytest.mark.parametrize("cert", ["expired", "foreign", None])
def test_bad_client_certificate_refused(secure: Secure, cert: str | None) -> None:
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    conf = clients.librdkafka_conf(secure, "SSL", None, None, cert=cert)
    admin = AdminClient({**conf, "error_cb": errors.append})
    metadata_error = None
    try:
        admin.list_topics(timeout=2)
    except Exception as exc:
        metadata_error = exc
    assert metadata_error is not None, "the handshake should fail"
    out = clients.kcat(conf, "-L", metadata_timeout_s=2)
    assert out.returncode != 0, out.stdout
    assert re.search(rb"SSL|handshake|certificate|Disconnected|broker", out.stderr), out.stderr


def test_sasl_listener_refuses_requests_before_login(secure: Secure) -> None:
    """A client that speaks no SASL to a SASL listener is disconnected, not served."""
    out = clients.kcat({"bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT")}, "-L",
                       metadata_timeout_s=2)
    assert out.returncode != 0
    log = secure.server.tail(200)
    assert "before SASL authentication" in log, log
