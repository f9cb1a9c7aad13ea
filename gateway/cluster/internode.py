"""Connections one cluster node opens to another's Kafka listener (WriteTxnMarkers), as
Kafka brokers use ``inter.broker.listener.name``: the other node's address on that
listener, TLS if the listener has it (the keystore presented as client certificate, the
trust store checking the server's), and a SASL login with the node credentials
(``admin.forward.user`` / ``admin.forward.password``, a super user) if it is a SASL
listener, so an authorizer that wants CLUSTER_ACTION lets the call through.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass
from typing import Any

from kafka.net.sasl.scram import ScramClient
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from tidegate.gateway.security.listeners import Listener
from tidegate.protocol.errors import ErrorCode

#: Longest answer read during the login (SASL tokens are small).
_LOGIN_ANSWER_BYTES_MAX = 1 << 16
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 2


class LoginFailed(Exception):
    """The other node refused the node credentials."""


@dataclass(frozen=True, slots=True)
class InterNode:
    """How this node reaches the others' Kafka listeners."""

    #: The listener name looked up in the other nodes' announced listeners (None: their
    #: first listener, as registered before listeners were announced).
    listener: str | None = None
    tls: ssl.SSLContext | None = None
    #: (user, password, mechanism) on a SASL listener.
    sasl: tuple[str, str, str] | None = None

    async def open(self, address: tuple[str, int]) -> tuple[asyncio.StreamReader,
                                                            asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(
            *address, ssl=self.tls, server_hostname=address[0] if self.tls else None)
        if self.sasl is not None:
            try:
                await _login(reader, writer, *self.sasl)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def request(self, address: tuple[str, int], frame: bytes, response_type: Any,
                      version: int, bytes_max: int) -> Any:
        """One framed request on a connection of its own, its answer decoded as
        ``response_type`` at ``version``; an answer over ``bytes_max`` is a ValueError."""
        reader, writer = await self.open(address)
        try:
            writer.write(frame)
            await writer.drain()
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 0 <= size <= bytes_max:
                raise ValueError(f"{address}: a {size}-byte answer ({response_type.__name__})")
            body = await reader.readexactly(size)
        finally:
            writer.close()
        return response_type.decode(
            struct.pack(">i", size) + body, version=version, header=True, framed=True,
        )


def inter_node(listener: Listener | None, *, user: str, password: str, mechanisms: list[str],
               keystore: str, chain: str, key_password: str, truststore: str) -> InterNode:
    """The inter-node settings for ``listener`` (None: the first listener, plaintext)."""
    if listener is None:
        return InterNode()
    tls = None
    if listener.tls:
        tls = ssl.create_default_context(cafile=truststore or None)
        if keystore:
            tls.load_cert_chain(chain or keystore, keystore, key_password or None)
    sasl = None
    if listener.sasl:
        if not user:
            raise ValueError(f"inter-node calls over the SASL listener {listener.name} need "
                             "admin.forward.user and admin.forward.password")
        mechanism = next((m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
                          if m in mechanisms), None)
        if mechanism is None:
            raise ValueError("inter-node SASL needs PLAIN or SCRAM in sasl.enabled.mechanisms")
        sasl = (user, password, mechanism)
    return InterNode(listener.name, tls, sasl)


_correlation = itertools.count(1)


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: Any,
                version: int, response: Any) -> Any:
    request.API_VERSION = version
    request.with_header(correlation_id=next(_correlation), client_id="tidegate-node")
    writer.write(bytes(request.encode(version=version, header=True, framed=True)))
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    if not 0 <= size <= _LOGIN_ANSWER_BYTES_MAX:
        raise LoginFailed(f"a {size}-byte answer during the login")
    body = await reader.readexactly(size)
    return response.decode(struct.pack(">i", size) + body, version=version, header=True,
                           framed=True)


async def _login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, user: str,
                 password: str, mechanism: str) -> None:
    shake = await _call(reader, writer, SaslHandshakeRequest(mechanism=mechanism),
                        _HANDSHAKE_VERSION, SaslHandshakeResponse)
    if shake.error_code != ErrorCode.NONE:
        raise LoginFailed(f"SaslHandshake {mechanism}: error {shake.error_code}")

    async def token(data: bytes) -> bytes:
        answer = await _call(reader, writer, SaslAuthenticateRequest(auth_bytes=data),
                             _AUTHENTICATE_VERSION, SaslAuthenticateResponse)
        if answer.error_code != ErrorCode.NONE:
            raise LoginFailed(f"as {user}: {answer.error_message}")
        return bytes(answer.auth_bytes or b"")

    if mechanism == "PLAIN":
        await token(b"\0" + user.encode() + b"\0" + password.encode())
        return
    scram = ScramClient(user, password, mechanism)
    scram.process_server_first_message(await token(scram.first_message()))
    scram.process_server_final_message(await token(scram.final_message()))
