"""A real ``tidegate serve`` with every kind of listener, SCRAM users from
``[sasl.users]``, the ACL authorizer on, and a throwaway CA (``trustme``) with server and
client certificates (one expired, one from a foreign CA)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tidegate.protocol  # noqa: F401  (loads kafka-python's schemas with their warning silenced)
import trustme

from tests.clients.server import Tidegate
from tests.conftest import free_port
from tests.java.conftest import java  # noqa: F401  (the compiled Java programs, for test_java)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Certs:
    ca: Path
    #: The principal Kafka derives from the admin client certificate (RFC 4514 subject).
    admin_principal: str
    #: Client key and certificate (PEM files) per name: admin, alice, expired, foreign.
    keys: dict[str, Path]
    certs: dict[str, Path]


@dataclass
class Secure:
    server: Tidegate
    ports: dict[str, int]
    certs: Certs

    def bootstrap(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"


def make_certs(tmp: Path) -> Certs:
    ca, foreign = trustme.CA(), trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp / "server.pem")
    )
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    issued = {
        "admin": ca.issue_cert("admin", common_name="admin"),
        "alice": ca.issue_cert("alice", common_name="alice"),
        "expired": ca.issue_cert(
            "old", common_name="old", not_before=past,
            not_after=past + datetime.timedelta(days=1),
        ),
        "foreign": foreign.issue_cert("mallory", common_name="mallory"),
    }
    keys, certs = {}, {}
    for name, leaf in issued.items():
        keys[name], certs[name] = tmp / f"{name}-key.pem", tmp / f"{name}-cert.pem"
        leaf.private_key_pem.write_to_path(str(keys[name]))
        leaf.cert_chain_pems[0].write_to_path(str(certs[name]))
    from cryptography import x509

    subject = x509.load_pem_x509_certificate(certs["admin"].read_bytes()).subject
    return Certs(tmp / "ca.pem", "User:" + subject.rfc4514_string(), keys, certs)


def start_secure(tmp: Path, *, authorizer: bool = True,
                 extra: str | Callable[[dict[str, int]], str] = "") -> Secure:
    certs = make_certs(tmp)
    server = Tidegate(tmp / "data", tmp / "tidegate.log", tmp / "tidegate.toml", rest=True,
                      grpc=True)
    ports = {
        "PLAINTEXT": server.port, "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port(),
        "SSL": free_port(),
    }
    listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    if callable(extra):
        extra = extra(ports)
    users = "\n".join(f'{u} = "{p}"' for u, p in USERS.items())
    authz = (
        '"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"\n'
        f'"super.users" = "User:admin;{certs.admin_principal}"\n'
    ) if authorizer else ""
    (tmp / "tidegate.toml").write_text(
        f'listeners = "{listeners}"\n'
        f'"ssl.keystore.location" = "{tmp / "server.pem"}"\n'
        f'"ssl.truststore.location" = "{certs.ca}"\n'
        '"ssl.client.auth" = "required"\n'
        '"num.partitions" = 1\n'
        '"admin.authentication" = true\n"admin.tls" = true\n'
        f"{authz}{extra}"
        "[groups]\ninitial_rebalance_delay_ms = 0\n"
        f"[sasl.users]\n{users}\n"
    )
    server.start()
    return Secure(server, ports, certs)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    s = start_secure(tmp_path_factory.mktemp("secure"))
    try:
        yield s
    finally:
        s.server.close()
