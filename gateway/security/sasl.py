"""SASL exchanges on the server side: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
KIP-84).

An exchange takes the client's tokens one by one (``step``) and returns the server's
answer; it raises ``AuthenticationError`` with the message the client is shown. ``principal``
is set once it succeeded.

User names cannot be probed: an unknown user is answered like a known one with a wrong
password — SCRAM sends a salt (the same one each time for a name, from a per-process
key) and fails at the last message, PLAIN salts and hashes the password all the same —
so the messages, the step that fails and the work done are the same.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from typing import Protocol

from tidegate.gateway.security.credentials import (
    DEFAULT_ITERATIONS,
    HASHES,
    MECHANISMS,
    USER_BYTES_MAX,
    ScramCredential,
    password_matches,
)

SUPPORTED = ("PLAIN", *MECHANISMS)

#: Longest token accepted: a SCRAM message or a PLAIN name and password is far smaller.
TOKEN_BYTES_MAX = 64 * 1024


class AuthenticationError(Exception):
    """The login failed; ``user`` is who the client claimed to be (for the log line)."""

    def __init__(self, message: str, user: str = "") -> None:
        super().__init__(message)
        self.user = user


class Credentials(Protocol):
    async def get(self, user: str, mechanism: str) -> ScramCredential | None: ...


class Exchange(Protocol):
    mechanism: str
    principal: str | None

    async def step(self, token: bytes) -> bytes: ...


#: Keys the stand-in salts of unknown users: stable for a name while the process runs.
_FAKE_SALT_KEY = os.urandom(32)


def stand_in(user: str, mechanism: str) -> ScramCredential:
    """The credential an unknown user is checked against: a salt that looks stored and
    keys no password can match (random, and the check fails whatever they are)."""
    salt = hmac.digest(_FAKE_SALT_KEY, f"{mechanism}/{user}".encode(), "sha256")
    size = hashlib.new(HASHES[mechanism]).digest_size
    return ScramCredential(mechanism, salt, DEFAULT_ITERATIONS, os.urandom(size),
                           os.urandom(size))


async def _lookup(credentials: Credentials, user: str, mechanism: str) -> ScramCredential | None:
    if len(user.encode()) > USER_BYTES_MAX:
        return None  # no such user can be stored
    return await credentials.get(user, mechanism)


def _authzid_refused(user: str) -> AuthenticationError:
    return AuthenticationError(
        "Authentication failed: Client requested an authorization id that is "
        "different from username", user,
    )


def _failed(mechanism: str, user: str) -> AuthenticationError:
    return AuthenticationError(
        f"Authentication failed: invalid credentials with SASL mechanism {mechanism}", user
    )


class PlainExchange:
    mechanism = "PLAIN"

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self.principal: str | None = None

    async def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationError("Invalid SASL/PLAIN request: expected 3 tokens")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationError("Invalid SASL/PLAIN request: not UTF-8") from None
        if not user:
            raise AuthenticationError("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise _authzid_refused(user)
        # Both looked up and one password hashed whether the user exists or not.
        found = [await _lookup(self._credentials, user, m) for m in MECHANISMS]
        credential = next((c for c in found if c is not None), None)
        known = credential is not None
        if credential is None:
            credential = stand_in(user, next(iter(MECHANISMS)))
        if password_matches(credential, password) and known:
            self.principal = "User:" + user
            return b""
        raise _failed(self.mechanism, user)


class ScramExchange:
    """RFC 5802's server side. The client-final nonce must *end with* the server-first
    nonce, Kafka's own rule (``ScramSaslServer``): librdkafka before 1.x's fix sends its
    client nonce once more in front, and Kafka brokers accept it. Hence not ``scramp``,
    whose server insists on equality."""

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._credentials = credentials
        self._credential: ScramCredential | None = None
        self._known = False
        self._user = ""
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.principal: str | None = None

    async def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationError(f"Invalid {self.mechanism} message: not UTF-8") from None
        if self._credential is None:
            return await self._first(message)
        if self.principal is None:
            return self._final(message)
        raise AuthenticationError(f"Unexpected {self.mechanism} message after authentication")

    async def _first(self, message: str) -> bytes:
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            # "p" asks for channel binding, which Kafka's SCRAM does not offer.
            raise AuthenticationError(f"Invalid {self.mechanism} client-first message")
        if parts[1] and not parts[1].startswith("a="):
            raise AuthenticationError(f"Invalid {self.mechanism} client-first message")
        self._gs2_header = parts[0] + "," + parts[1] + ","
        self._client_first_bare = parts[2]
        attributes = _attributes(parts[2])
        user, client_nonce = attributes.get("n"), attributes.get("r")
        if not user or not client_nonce:
            raise AuthenticationError(f"Invalid {self.mechanism} client-first message")
        self._user = _saslname(user)
        authzid = _saslname(parts[1][2:])
        if authzid and authzid != self._user:
            raise _authzid_refused(self._user)  # Kafka's ScramSaslServer rule
        credential = await _lookup(self._credentials, self._user, self.mechanism)
        self._known = credential is not None
        if credential is None:
            credential = stand_in(self._user, self.mechanism)
        self._credential = credential
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        credential = self._credential
        assert credential is not None
        without_proof, sep, proof_part = message.rpartition(",p=")
        attributes = _attributes(without_proof) if sep else {}
        try:
            proof = base64.b64decode(proof_part, validate=True)
            binding = base64.b64decode(attributes.get("c", ""), validate=True)
        except ValueError:
            raise _failed(self.mechanism, self._user) from None
        nonce = attributes.get("r", "")
        if binding != self._gs2_header.encode() or not nonce.endswith(self._nonce):
            raise _failed(self.mechanism, self._user)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise _failed(self.mechanism, self._user)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(),
                                   credential.stored_key) or not self._known:
            raise _failed(self.mechanism, self._user)
        self.principal = "User:" + self._user
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)


def _saslname(value: str) -> str:
    """RFC 5802's escaping of ``,`` and ``=`` in names undone."""
    return value.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for attribute in message.split(","):
        key, sep, value = attribute.partition("=")
        if sep and len(key) == 1:
            found.setdefault(key, value)
    return found


def exchange(mechanism: str, credentials: Credentials) -> Exchange:
    if mechanism == "PLAIN":
        return PlainExchange(credentials)
    return ScramExchange(mechanism, credentials)
