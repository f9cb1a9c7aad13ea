"""Hostile SASL exchanges against a real server: truncated, oversized, malformed and
replayed tokens, a wrong nonce, bare tokens after SaslHandshake v0, requests before
logging in. Each is refused (an error answer or a closed connection); nothing crashes
and the server keeps serving logins. Random tokens (seeded) widen the net."""

from __future__ import annotations

import base64
import random
import socket
import struct

import scramp
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.clients.requests import frame
from tests.security import clients
from tests.security.conftest import USERS, Secure

SASL_AUTHENTICATION_FAILED = 58


def _connect(s: Secure) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", s.ports["SASL_PLAINTEXT"]), timeout=5)
    return sock


def _read(sock: socket.socket) -> bytes | None:
    """One size-prefixed answer without its prefix, or None once the server closed."""
    head = b""
    try:
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
    except (ConnectionResetError, TimeoutError):
        return None


def _handshake(sock: socket.socket, mechanism: str, version: int = 1) -> None:
    sock.sendall(frame(SaslHandshakeRequest(mechanism=mechanism), version, 1))
    body = _read(sock)
    assert body is not None
    answer = SaslHandshakeResponse.decode(body[4:], version=version)
    assert answer.error_code == 0, answer


def _authenticate(sock: socket.socket, token: bytes, correlation_id: int = 2) -> object | None:
    sock.sendall(frame(SaslAuthenticateRequest(auth_bytes=token), 2, correlation_id))
    body = _read(sock)
    if body is None:
        return None
    return SaslAuthenticateResponse.decode(body[5:], version=2)  # v2 header: id + tags


def _refused(token_steps: list[bytes], s: Secure, mechanism: str = "SCRAM-SHA-256",
             *, certain: bool = True) -> None:
    """The exchange is refused (``certain``) or at least never completes a login."""
    sock = _connect(s)
    try:
        _handshake(sock, mechanism)
        answer = None
        for i, token in enumerate(token_steps):
            answer = _authenticate(sock, token, 2 + i)
            if answer is None or answer.error_code != 0:  # type: ignore[attr-defined]
                break
        if answer is not None and answer.error_code == 0:  # type: ignore[attr-defined]
            assert not certain, answer
            return  # a random first token that parsed: the exchange waits for more
        assert answer is None or answer.error_code == SASL_AUTHENTICATION_FAILED, answer  # type: ignore[attr-defined]
        assert _read(sock) is None  # the connection is closed after a refusal
    finally:
        sock.close()


def _scram_first(user: str) -> tuple[scramp.ScramClient, bytes]:
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, USERS.get(user, "x"))
    return client, client.get_client_first().encode()


def test_scram_wrong_nonce_and_replayed_final_refused(secure: Secure) -> None:
    sock = _connect(secure)
    try:
        _handshake(sock, "SCRAM-SHA-256")
        client, first = _scram_first("alice")
        answer = _authenticate(sock, first)
        client.set_server_first(answer.auth_bytes.decode())  # type: ignore[union-attr]
        final = client.get_client_final()
        attrs = dict(a.split("=", 1) for a in final.split(","))
        wrong = final.replace("r=" + attrs["r"], "r=" + attrs["r"][:-4] + "AAAA")
        answer = _authenticate(sock, wrong.encode(), 3)
        assert answer is None or answer.error_code == SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
    finally:
        sock.close()
    # A final message replayed on a new exchange (new server nonce) is refused too.
    _refused([first, final.encode()], secure)


def test_malformed_tokens_refused(secure: Secure) -> None:
    _, first = _scram_first("alice")
    cases: list[tuple[str, list[bytes]]] = [
        ("PLAIN", [b""]),
        ("PLAIN", [b"\0alice"]),
        ("PLAIN", [b"a\0b\0c\0d"]),
        ("PLAIN", [b"\xff\xfe\0alice\0pw"]),
        ("PLAIN", [b"\0alice\0" + b"x" * 200_000]),  # oversized
        ("SCRAM-SHA-256", [first[:8]]),  # truncated before the nonce
        ("SCRAM-SHA-256", [b"p=tls-unique,,n=alice,r=abc"]),  # channel binding asked
        ("SCRAM-SHA-256", [b"n,,n=nobody,r=abc", b"c=biws,r=abc,p=AAAA"]),  # unknown user
        ("SCRAM-SHA-256", [first, b"c=biws,r=x"]),  # no proof
        ("SCRAM-SHA-256", [first, b"c=biws,r=x,p=" + base64.b64encode(b"short")]),
        ("SCRAM-SHA-256", [first, b"\xff" * 64]),
        ("SCRAM-SHA-512", [b"n,,n=alice,r=abc", b"c=Zm9v,r=abc,p=AAAA"]),  # bad binding
    ]
    for mechanism, tokens in cases:
        _refused(tokens, secure, mechanism)


def test_requests_before_login_and_bare_v0_tokens(secure: Secure) -> None:
    from kafka.protocol.metadata import MetadataRequest

    sock = _connect(secure)
    try:
        sock.sendall(frame(MetadataRequest(topics=None), 4, 1))
        assert _read(sock) is None  # closed: not served before authentication
    finally:
        sock.close()
    # SaslHandshake v0, then a bare (header-less) garbage token: closed, no answer.
    sock = _connect(secure)
    try:
        _handshake(sock, "PLAIN", version=0)
        sock.sendall(struct.pack(">i", 5) + b"\0\0\0\0\0")
        assert _read(sock) is None
    finally:
        sock.close()
    # SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, closed.
    sock = _connect(secure)
    try:
        answer = _authenticate(sock, b"\0admin\0admin-secret")
        assert answer is not None and answer.error_code == 34  # type: ignore[attr-defined]
        assert _read(sock) is None
    finally:
        sock.close()


def test_random_tokens_crash_nothing(secure: Secure) -> None:
    rng = random.Random(27)
    for i in range(60):
        mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        tokens = [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 64, 300])))
                  for _ in range(rng.choice([1, 2]))]
        if mechanism != "PLAIN" and i % 2:
            tokens[0] = b"n,,n=alice,r=" + tokens[0].hex().encode()
        _refused(tokens, secure, mechanism, certain=len(tokens) == 2 or mechanism == "PLAIN")
    # Still serving, and nothing failed inside.
    clients.kcat_round_trip(
        clients.librdkafka_conf(secure, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin"), "fuzz-after"
    )
    log = secure.server.tail(5000)
    assert "failed (" not in log and "Traceback" not in log, log
