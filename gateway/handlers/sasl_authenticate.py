"""SaslAuthenticate (key 36), v0-2: one token of the exchange SaslHandshake chose.

A failed login answers SASL_AUTHENTICATION_FAILED with a message after
``connection.failed.authentication.delay.ms``, is logged (principal and client address,
rate-limited) and closes the connection once answered, as Kafka does; an address with
too many failed logins in the last minute is refused unchecked (``FailedLogins``). A re-authentication must keep the principal. With ``connections.max.reauth.ms``
set, the answer that completes a login carries the session's lifetime (v1+, KIP-368);
once it is over, only a new SaslHandshake/SaslAuthenticate is served."""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.sasl import TOKEN_BYTES_MAX, AuthenticationError
from tidegate.gateway.security.session import RawToken
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2)


def _answer(error: ErrorCode, message: str | None, token: bytes = b"", lifetime_ms: int = 0) -> Any:
    return SaslAuthenticateResponse(
        error_code=error, error_message=message, auth_bytes=token,
        session_lifetime_ms=lifetime_ms,
    )


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    session, security = req.session, ctx.security
    if session is None or security is None or session.exchange is None:
        if session is not None:
            session.closing = True
        return _answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate without SaslHandshake")
    exchange = session.exchange
    token = bytes(request.auth_bytes or b"")
    host = session.client_host
    try:
        if security.failed_logins.locked(host):
            raise AuthenticationError(
                f"Authentication failed: too many failed logins from {host}; try again later"
            )
        if len(token) > TOKEN_BYTES_MAX:
            raise AuthenticationError(f"SASL token of {len(token)} bytes is too large")
        answer = await exchange.step(token)
        principal = exchange.principal
        if principal is not None and session.authenticated and session.principal != principal:
            raise AuthenticationError("Cannot change principals during re-authentication")
    except AuthenticationError as exc:
        session.exchange, session.closing = None, True
        security.failed_logins.failed(host)
        security.login_log.failed(exc.user, req.peer, exchange.mechanism, str(exc))
        return _answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    if principal is None:
        return _answer(ErrorCode.NONE, None, answer)  # more rounds (SCRAM)
    session.exchange = None
    session.principal, session.authenticated = principal, True
    lifetime_ms = security.reauth_ms if req.api_version >= 1 else 0
    session.expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
    return _answer(ErrorCode.NONE, None, answer, lifetime_ms)


async def raw_token(ctx: HandlerContext, req: RequestContext, token: bytes) -> RawToken | None:
    """A bare token after SaslHandshake v0: answered bare; a failure closes the
    connection without an answer (v0 has no way to carry an error)."""
    session = req.session
    request = SaslAuthenticateRequest(auth_bytes=token)
    answer = await handle(ctx, req, request)
    if answer.error_code != ErrorCode.NONE:
        return None
    if session is not None and session.authenticated and session.exchange is None:
        session.raw_tokens = False
    return RawToken(bytes(answer.auth_bytes))
