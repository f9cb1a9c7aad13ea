"""Hostile logins and names against a real server with the authorizer on (issue 35): empty
and oversized ids and names are checked and refused with a non-retriable error, SCRAM
refuses a foreign authorization id and answers unknown users like known ones, failed
logins are answered late and limited per address."""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import scramp
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.clients.requests import Conn, frame
from tests.security import clients
from tests.security.conftest import USERS, Secure, start_secure

NONE, INVALID_REQUEST, SASL_AUTHENTICATION_FAILED = 0, 42, 58
TXN_DENIED, GROUP_DENIED, UNACCEPTABLE_CREDENTIAL, CLUSTER_DENIED = 53, 30, 93, 31


class Login(Conn):
    """A raw connection to the SASL_PLAINTEXT listener, logged in with PLAIN."""

    def __init__(self, s: Secure, user: str) -> None:
        super().__init__(s.ports["SASL_PLAINTEXT"])
        answer = self.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert answer.error_code == 0, answer
        token = f"\0{user}\0{USERS[user]}".encode()
        answer = self.call(SaslAuthenticateRequest(auth_bytes=token), 2, SaslAuthenticateResponse)
        assert answer.error_code == 0, answer


@pytest.fixture(scope="module")
def txn_acls(secure: Secure) -> Secure:
    """alice may WRITE transactional ids starting ``alice-tx``; bob has no ACL."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(clients.librdkafka_conf(secure, "SASL_PLAINTEXT", "SCRAM-SHA-256", "admin"))
    binding = AclBinding(ResourceType.TRANSACTIONAL_ID, "alice-tx", ResourcePatternType.PREFIXED,
                         "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(15)
    return secure


def _init_producer_id(conn: Conn, tid: str | None) -> Any:
    return conn.call(InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1,
    ), 4, InitProducerIdResponse)


def test_empty_and_oversized_transactional_ids(txn_acls: Secure) -> None:
    alice, bob, admin = (Login(txn_acls, u) for u in ("alice", "bob", "admin"))
    try:
        # Granted ``alice-tx*`` only: the empty id is another id, checked like it.
        assert _init_producer_id(alice, "alice-tx-1").error_code == NONE
        assert _init_producer_id(alice, "").error_code == TXN_DENIED
        assert _init_producer_id(bob, "").error_code == TXN_DENIED
        # Allowed everything: still not a transactional id (Kafka's INVALID_REQUEST),
        # nor one of 30k characters (not COORDINATOR_NOT_AVAILABLE, retried forever).
        assert _init_producer_id(admin, "").error_code == INVALID_REQUEST
        assert _init_producer_id(admin, "t" * 30_000).error_code == INVALID_REQUEST
        assert _init_producer_id(admin, None).error_code == NONE
        # The empty group id is checked too.
        join = JoinGroupRequest(
            group_id="", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        assert bob.call(join, 5, JoinGroupResponse).error_code == GROUP_DENIED
    finally:
        for c in (alice, bob, admin):
            c.close()


def test_oversized_scram_user_and_salt_are_unacceptable(secure: Secure) -> None:
    R = AlterUserScramCredentialsRequest
    admin = Login(secure, "admin")
    try:
        for name, salt in (("u" * 30_000, b"s" * 32), ("big-salt", b"s" * 1_000_000)):
            answer = admin.call(R(deletions=[], upsertions=[R.ScramCredentialUpsertion(
                name=name, mechanism=1, iterations=4096, salt=salt, salted_password=b"p" * 32,
            )]), 0, AlterUserScramCredentialsResponse)
            (result,) = answer.results
            assert result.error_code == UNACCEPTABLE_CREDENTIAL, result
        # Still serving, and nothing failed inside.
        assert _init_producer_id(admin, None).error_code == NONE
        log = secure.server.tail(2000)
        assert "failed (" not in log, log
    finally:
        admin.close()


def _scram(s: Secure, first: bytes, final: Any = None) -> tuple[Any, Any]:
    """SCRAM-SHA-256's two steps on a new connection: each answer (None once closed);
    ``final`` makes the second token from the first answer."""
    conn = Conn(s.ports["SASL_PLAINTEXT"])
    try:
        answer = conn.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse)
        assert answer.error_code == 0
        one = conn.call(SaslAuthenticateRequest(auth_bytes=first), 2, SaslAuthenticateResponse)
        if one.error_code != 0 or final is None:
            return one, None
        two = conn.call(SaslAuthenticateRequest(auth_bytes=final(one.auth_bytes)), 2,
                        SaslAuthenticateResponse)
        return one, two
    finally:
        conn.close()


def test_scram_refuses_another_authzid_and_hides_unknown_users(secure: Secure) -> None:
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", USERS["alice"])
    bare = client.get_client_first().split(",", 2)[2]
    one, _ = _scram(secure, f"n,a=admin,{bare}".encode())
    assert one.error_code == SASL_AUTHENTICATION_FAILED
    assert "authorization id" in one.error_message, one

    def wrong_proof(server_first: bytes) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        return f"c=biws,r={attrs['r']},p={base64.b64encode(b'x' * 32).decode()}".encode()

    answers = {}
    for user in ("alice", "nobody", "nobody"):
        one, two = _scram(secure, f"n,,n={user},r=abcdef".encode(), wrong_proof)
        # An unknown user gets a salt (the same each time) and fails at the last step,
        # with the same message as a known user's wrong password.
        assert one.error_code == NONE, (user, one)
        assert two is not None and two.error_code == SASL_AUTHENTICATION_FAILED, (user, two)
        salt = dict(a.split("=", 1) for a in one.auth_bytes.decode().split(","))["s"]
        assert answers.setdefault(user, (salt, two.error_message)) == (salt, two.error_message)
    assert answers["alice"][1] == answers["nobody"][1]
    assert answers["alice"][0] != answers["nobody"][0]
    assert len(base64.b64decode(answers["nobody"][0])) == 32


def _plain_refused_in_s(port: int, user: str, password: str) -> tuple[float, Any]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(frame(SaslHandshakeRequest(mechanism="PLAIN"), 1, 1))
        _read(sock)
        start = time.monotonic()
        sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()),
                           2, 2))
        body = _read(sock)
        elapsed = time.monotonic() - start
        answer = None if body is None else SaslAuthenticateResponse.decode(body[5:], version=2)
        return elapsed, answer
    finally:
        sock.close()


def _read(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    s = start_secure(tmp_path_factory.mktemp("strict"), extra=(
        '"connection.failed.authentication.delay.ms" = 500\n'
        '"connection.failed.authentications.per.ip.max" = 6\n'
    ))
    try:
        yield s
    finally:
        s.server.close()


def test_failed_logins_are_answered_late_and_limited_per_address(strict: Secure) -> None:
    port = strict.ports["SASL_PLAINTEXT"]
    # Each failure is answered only after the delay, so one connection guesses slowly...
    for _ in range(2):
        elapsed, answer = _plain_refused_in_s(port, "alice", "guess")
        assert answer is not None and answer.error_code == SASL_AUTHENTICATION_FAILED
        assert elapsed >= 0.45, elapsed
    # ... and many in parallel stop at the address's limit: past it, even the right
    # password is refused for the rest of the minute.
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(
        _plain_refused_in_s(port, "alice", "guess")[1])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8 and all(
        a is not None and a.error_code == SASL_AUTHENTICATION_FAILED for a in results)
    _, answer = _plain_refused_in_s(port, "alice", USERS["alice"])
    assert answer is not None and answer.error_code == SASL_AUTHENTICATION_FAILED
    assert "too many failed logins" in answer.error_message, answer


def test_plain_hashes_a_password_for_unknown_users_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same work whether the user exists: one password salted and hashed."""
    import asyncio

    from tidegate.gateway.security import credentials, sasl

    known = credentials.new_credential("SCRAM-SHA-256", "pw")
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counted(*args: Any) -> bytes:
        calls.append(1)
        return real(*args)

    class Store:
        async def get(self, user: str, mechanism: str) -> credentials.ScramCredential | None:
            return known if user == "alice" and mechanism == "SCRAM-SHA-256" else None

    monkeypatch.setattr(credentials.hashlib, "pbkdf2_hmac", counted)
    for user in ("alice", "nobody"):
        calls.clear()
        with pytest.raises(sasl.AuthenticationError) as refused:
            asyncio.run(sasl.PlainExchange(Store()).step(f"\0{user}\0wrong".encode()))
        assert len(calls) == 1, user
        assert "invalid credentials" in str(refused.value)


def test_large_frames_before_login_close_the_connection(secure: Secure) -> None:
    """Over Kafka's ``sasl.server.max.receive.size`` (512 KiB) before the login: closed
    at the size prefix, before any of the body is held."""
    for size in (600 * 1024, 99 * 1024 * 1024):
        with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]),
                                      timeout=30) as sock:
            sock.sendall(struct.pack(">i", size) + b"\0" * 4096)
            try:
                assert sock.recv(4) == b""
            except ConnectionResetError:
                pass
    # Logged in, a frame that large is read (and answered).
    admin = Login(secure, "admin")
    try:
        R = AlterUserScramCredentialsRequest
        answer = admin.call(R(deletions=[], upsertions=[R.ScramCredentialUpsertion(
            name="big", mechanism=1, iterations=4096, salt=b"s" * 600_000,
            salted_password=b"p" * 32,
        )]), 0, AlterUserScramCredentialsResponse)
        assert answer.results[0].error_code == UNACCEPTABLE_CREDENTIAL
    finally:
        admin.close()


def test_denials_are_carried_where_old_versions_have_room(secure: Secure) -> None:
    """AddPartitionsToTxn v0-3 and DescribeLogDirs v1-2 have no top-level error field:
    the refusal is on each partition, or on a log dir result, not an empty answer."""
    Q = AddPartitionsToTxnRequest
    bob = Login(secure, "bob")
    try:
        for version in (0, 3):
            answer = bob.call(Q(
                v3_and_below_transactional_id="bob-tx", v3_and_below_producer_id=1,
                v3_and_below_producer_epoch=0, transactions=[],
                v3_and_below_topics=[Q.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])],
            ), version, AddPartitionsToTxnResponse)
            (topic,) = answer.results_by_topic_v3_and_below
            assert [p.partition_error_code for p in topic.results_by_partition] == [
                TXN_DENIED, TXN_DENIED], answer
        for version in (1, 2):
            answer = bob.call(DescribeLogDirsRequest(topics=None), version, DescribeLogDirsResponse)
            assert [r.error_code for r in answer.results] == [CLUSTER_DENIED], answer
        answer = bob.call(DescribeLogDirsRequest(topics=None), 3, DescribeLogDirsResponse)
        assert answer.error_code == CLUSTER_DENIED and not answer.results, answer
    finally:
        bob.close()


@pytest.fixture(scope="module")
def regex_acls(secure: Secure) -> Secure:
    """Topics ``rx-open`` and ``rx-secret``; alice may READ groups ``rx-*`` and DESCRIBE
    ``rx-open`` only."""
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
    for f in admin.create_topics([NewTopic(t, 1) for t in ("rx-open", "rx-secret")]).values():
        f.result(15)
    alice = "User:alice"
    bindings = [
        AclBinding(ResourceType.GROUP, "rx-", ResourcePatternType.PREFIXED, alice, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "rx-open", ResourcePatternType.LITERAL, alice, "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    return secure


def _heartbeat(conn: Conn, group: str, member: str, **subscription: Any) -> Any:
    from tidegate.protocol.consumer_group import (
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )

    fields: dict[str, Any] = dict(
        group_id=group, member_id=member, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30_000, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[],
    )
    fields.update(subscription)
    return conn.call(ConsumerGroupHeartbeatRequest(**fields), 1, ConsumerGroupHeartbeatResponse)


def _describe(conn: Conn, group: str) -> Any:
    from tidegate.protocol.consumer_group import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
    )

    answer = conn.call(ConsumerGroupDescribeRequest(
        group_ids=[group], include_authorized_operations=False), 1, ConsumerGroupDescribeResponse)
    (described,) = answer.groups
    return described


def test_regex_subscriptions_resolve_to_describable_topics_only(regex_acls: Secure) -> None:
    alice, admin = Login(regex_acls, "alice"), Login(regex_acls, "admin")
    try:
        joined = _heartbeat(alice, "rx-g", "m-alice", subscribed_topic_regex="rx-.*")
        assert joined.error_code == NONE, joined
        described = _describe(alice, "rx-g")
        assert described.error_code == NONE, described
        (member,) = described.members
        shown = {tp.topic_name for a in (member.assignment, member.target_assignment)
                 for tp in a.topic_partitions}
        assert shown == {"rx-open"}, described
        # A group of another principal's member assigned a topic alice may not
        # DESCRIBE: not shown to her (Kafka's TOPIC_AUTHORIZATION_FAILED, no members).
        joined = _heartbeat(admin, "rx-admin", "m-admin", subscribed_topic_names=["rx-secret"])
        assert joined.error_code == NONE, joined
        assert _describe(admin, "rx-admin").members
        hidden = _describe(alice, "rx-admin")
        assert hidden.error_code == 29 and not hidden.members, hidden
    finally:
        alice.close()
        admin.close()
