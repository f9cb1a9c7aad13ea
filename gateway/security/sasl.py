"""SASL exchanges on the server side: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
KIP-84, the message work done by ``scramp``).

An exchange takes the client's tokens one by one (``step``) and returns the server's
answer; it raises ``AuthenticationError`` with the message the client is shown (the
same for an unknown user and a wrong password, so names cannot be probed). ``principal``
is set once it succeeded.
"""

from __future__ import annotations

from typing import Protocol

import scramp
from tidegate.gateway.security.credentials import (
    MECHANISMS,
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
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username", user,
            )
        for mechanism in MECHANISMS:
            credential = await self._credentials.get(user, mechanism)
            if credential is not None:
                if not password_matches(credential, password):
                    break
                self.principal = "User:" + user
                return b""
        raise _failed(self.mechanism, user)


class ScramExchange:
    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self.mechanism = mechanism
        self._credentials = credentials
        self._scram = scramp.ScramMechanism(mechanism)
        self._server: scramp.ScramServer | None = None
        self._user = ""
        self.principal: str | None = None

    async def step(self, token: bytes) -> bytes:
        try:
            message = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationError(f"Invalid {self.mechanism} message: not UTF-8") from None
        try:
            if self._server is None:
                return await self._first(message)
            if self.principal is None:
                self._server.set_client_final(message)
                final = str(self._server.get_server_final())
                self.principal = "User:" + self._user
                return final.encode()
        except scramp.ScramException:
            raise _failed(self.mechanism, self._user) from None
        raise AuthenticationError(f"Unexpected {self.mechanism} message after authentication")

    async def _first(self, message: str) -> bytes:
        self._user = _scram_user(message)
        credential = await self._credentials.get(self._user, self.mechanism)
        if credential is None:
            raise _failed(self.mechanism, self._user)
        auth_info = (
            credential.salt, credential.stored_key, credential.server_key, credential.iterations
        )
        self._server = self._scram.make_server(lambda _user: auth_info)
        self._server.set_client_first(message)
        return str(self._server.get_server_first()).encode()


def _scram_user(client_first: str) -> str:
    """The ``n=`` attribute of a client-first message, its ``=2C``/``=3D`` decoded."""
    _, _, bare = client_first.partition(",")
    _, _, bare = bare.partition(",")  # past the GS2 header (``n,,``)
    for attribute in bare.split(","):
        if attribute.startswith("n="):
            return attribute[2:].replace("=2C", ",").replace("=3D", "=")
    raise AuthenticationError("Invalid SCRAM client-first message: no user name")


def exchange(mechanism: str, credentials: Credentials) -> Exchange:
    if mechanism == "PLAIN":
        return PlainExchange(credentials)
    return ScramExchange(mechanism, credentials)
