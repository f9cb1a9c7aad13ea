"""Metadata advertises the listener a client came in on (each listener's own port), and
``advertised.listeners`` where it is set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security import clients
from tests.security.conftest import Secure, start_secure


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"])
def test_metadata_names_the_listener_the_client_came_in_on(secure: Secure, protocol: str) -> None:
    from confluent_kafka.admin import AdminClient

    sasl = protocol.startswith("SASL")
    conf = clients.librdkafka_conf(secure, protocol, "PLAIN" if sasl else None,
                                   "admin" if sasl else None,
                                   cert="admin" if protocol == "SSL" else None)
    brokers = AdminClient(conf).list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secure.ports[protocol])]


@pytest.fixture
def advertised(tmp_path: Path) -> Iterator[Secure]:
    # another host name for the same port: a client that follows it can still connect
    s = start_secure(tmp_path, authorizer=False, extra=lambda ports: (
        f'"advertised.listeners" = "SASL_SSL://localhost:{ports["SASL_SSL"]}"\n'))
    try:
        yield s
    finally:
        s.server.close()


def test_advertised_listeners(advertised: Secure) -> None:
    from confluent_kafka.admin import AdminClient

    for protocol, expected in (("SASL_SSL", ("localhost", advertised.ports["SASL_SSL"])),
                               ("SASL_PLAINTEXT", ("127.0.0.1", advertised.ports["SASL_PLAINTEXT"]))):
        conf = clients.librdkafka_conf(advertised, protocol, "PLAIN", "alice")
        brokers = AdminClient(conf).list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [expected]
