"""kafka-clients (Java) over SASL_SSL: the AdminClient creates and lists SCRAM users and
ACLs; the new user produces and consumes where the ACLs allow it, and is refused where
not; and every SASL mechanism logs in."""

from __future__ import annotations

import pytest

from tests.java.conftest import Java
from tests.security.conftest import USERS, Secure


def test_java_admin_users_acls_and_scram_clients(java: Java, secure: Secure) -> None:
    out = java.run("SecurityScenario", secure.bootstrap("SASL_SSL"), str(secure.certs.ca),
                   USERS["admin"], "java-sec")
    assert "OK security" in out, out


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_java_admin_logs_in_with_each_mechanism(java: Java, secure: Secure, mechanism: str) -> None:
    out = java.run("SecurityLogin", secure.bootstrap("SASL_SSL"), str(secure.certs.ca), mechanism,
                   "admin", USERS["admin"])
    assert "OK login" in out, out
    out = java.run("SecurityLogin", secure.bootstrap("SASL_SSL"), str(secure.certs.ca), mechanism,
                   "alice", "wrong")
    assert "AUTH_FAILED" in out, out
