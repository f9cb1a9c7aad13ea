"""The admin REST API and the controller gRPC of ``tidegate serve``: started while the
node still waits for its peers when they need no stored credentials (``/health`` then
says what it waits for), else once the gateway has loaded them."""

from __future__ import annotations

import contextlib
from typing import Any

from tidegate.gateway.config import GatewayConfig, parse_host_port


def enabled(address: str) -> bool:
    return address not in ("", "off", "none")


class AdminServers:
    def __init__(
        self, config: GatewayConfig, admin: Any, front: Any, controller: Any, store: Any,
        gateway: Any, grpc_tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        """``admin`` the controller as the admin APIs may use it, ``front`` the one that
        forwards to the leader, ``controller`` this node's own (writes forwarded here)."""
        self.config = config
        self.admin = admin
        self.front = front
        self.controller = controller
        self.store = store
        self.gateway = gateway
        #: The gRPC server's PEM key (decrypted) and chain, with ``admin.tls``.
        self.grpc_tls = grpc_tls
        self.rest: tuple[Any, Any] | None = None
        self.grpc: Any = None

    async def start(self) -> None:
        config, gateway = self.config, self.gateway
        admin_auth = None
        if config.admin_authentication and gateway.ctx and gateway.ctx.security:
            from tidegate.gateway.security.admin_auth import AdminAuth

            security = gateway.ctx.security
            admin_auth = AdminAuth(security.credentials, security.authorizer, config.scope)
        if enabled(config.rest):
            from tidegate.gateway.admin.rest import create_app, serve_rest

            host, port = parse_host_port(config.rest)
            state = gateway.state
            app = create_app(
                self.admin, metrics=gateway.metrics, kafka_overview=gateway.kafka_overview,
                auth=admin_auth, ready=lambda: bool(state.ready), waiting_for=state.waiting_for,
            )
            self.rest = await serve_rest(app, host, port, tls=_rest_tls(config))
        if enabled(config.grpc):
            from tidegate.gateway.admin.grpc_auth import AuthInterceptor
            from tidegate.gateway.admin.grpc_segments import segment_service
            from tidegate.gateway.admin.grpc_service import start_grpc_server

            host, port = parse_host_port(config.grpc)
            self.grpc = await start_grpc_server(
                self.admin, host, port, forwarded=self.controller,
                interceptors=[AuthInterceptor(admin_auth)] if admin_auth else [],
                tls=self.grpc_tls,
                # Reads are routed to each segment's owner: every node answers.
                services=[segment_service(self.front, self.store, config.scope)],
            )

    async def close(self) -> None:
        if self.grpc is not None:
            await self.grpc.stop(2)
        if self.rest is not None:
            from tidegate.gateway.admin.rest import stop_rest

            with contextlib.suppress(Exception):
                await stop_rest(*self.rest)


def _rest_tls(config: GatewayConfig) -> tuple[str, str, str | None] | None:
    if not config.admin_tls:
        return None
    chain = config.ssl_keystore_certificate_chain or config.ssl_keystore_location
    return chain, config.ssl_keystore_location, config.ssl_key_password or None


def grpc_tls_pem(config: GatewayConfig) -> tuple[bytes, bytes] | None:
    """The gRPC server's PEM key and chain. gRPC takes no key password: a key encrypted
    with ``ssl.key.password`` is handed over decrypted (kept in memory only)."""
    if not config.admin_tls:
        return None
    from cryptography.hazmat.primitives import serialization

    chain = config.ssl_keystore_certificate_chain or config.ssl_keystore_location
    try:
        with open(config.ssl_keystore_location, "rb") as key, open(chain, "rb") as certs:
            key_pem, chain_pem = key.read(), certs.read()
    except OSError as exc:
        raise ValueError(f"admin.tls: {exc.filename}: {exc.strerror}") from None
    password = config.ssl_key_password.encode() or None
    try:
        try:
            private = serialization.load_pem_private_key(key_pem, password)
        except TypeError:  # a password given for a key that has none, as ssl allows
            private = serialization.load_pem_private_key(key_pem, None)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"admin.tls: the key in {config.ssl_keystore_location} cannot be read with the "
            f"ssl.key.password given ({exc})"
        ) from None
    plain = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return plain, chain_pem
