"""KIP-368: with ``connections.max.reauth.ms`` set, a login's answer carries the session
lifetime; librdkafka re-authenticates on the same connection and keeps producing, and a
client that does not is disconnected at its next request."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from tests.clients.requests import frame
from tests.security import clients
from tests.security.conftest import USERS, Secure, start_secure
from tests.security.test_sasl_fuzz import _handshake, _read

LIFETIME_MS = 1500


@pytest.fixture
def short_sessions(tmp_path: Path) -> Iterator[Secure]:
    s = start_secure(tmp_path, authorizer=False,
                     extra=f'"connections.max.reauth.ms" = {LIFETIME_MS}\n')
    try:
        yield s
    finally:
        s.server.close()


def test_librdkafka_reauthenticates_and_keeps_producing(short_sessions: Secure) -> None:
    from confluent_kafka import Producer

    conf = clients.librdkafka_conf(short_sessions, "SASL_SSL", "SCRAM-SHA-256", "alice")
    producer = Producer({**conf, "message.timeout.ms": 10000})
    outcomes: list[Any] = []
    for _ in range(3):
        producer.produce("reauth", b"v", on_delivery=lambda err, msg: outcomes.append(err))
        producer.flush(10)
        time.sleep(LIFETIME_MS / 1000 + 0.5)
    producer.produce("reauth", b"v", on_delivery=lambda err, msg: outcomes.append(err))
    producer.flush(10)
    assert outcomes == [None] * 4, outcomes


def test_expired_session_is_disconnected(short_sessions: Secure) -> None:
    sock = socket.create_connection(("127.0.0.1", short_sessions.ports["SASL_PLAINTEXT"]), timeout=5)
    try:
        _handshake(sock, "PLAIN")
        sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=f"\0alice\0{USERS['alice']}".encode()), 1, 2))
        body = _read(sock)
        assert body is not None
        answer = SaslAuthenticateResponse.decode(body[4:], version=1)
        assert answer.error_code == 0 and answer.session_lifetime_ms == LIFETIME_MS, answer
        sock.sendall(frame(MetadataRequest(topics=[]), 4, 3))
        assert _read(sock) is not None  # served within the session
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        sock.sendall(frame(MetadataRequest(topics=[]), 4, 4))
        assert _read(sock) is None  # closed: the session is over
    finally:
        sock.close()
