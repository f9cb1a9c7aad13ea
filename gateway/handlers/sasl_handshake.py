"""SaslHandshake (key 17), v0-1: picks the mechanism of the SaslAuthenticate exchange that
follows (KIP-152); after v0 the tokens follow as bare size-prefixed frames instead
(``Connection`` hands them to ``sasl_authenticate.raw_token``).

On a listener without SASL, or for a mechanism not in ``sasl.enabled.mechanisms``, the
answer is UNSUPPORTED_SASL_MECHANISM with the enabled list (empty without SASL). Sent
again on an authenticated connection it starts a re-authentication (KIP-368)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse
from tidegate.gateway.handlers import HandlerContext, RequestContext
from tidegate.gateway.security.sasl import exchange
from tidegate.protocol.apis import ApiSpec
from tidegate.protocol.errors import ErrorCode

SPEC = ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1)


async def handle(ctx: HandlerContext, req: RequestContext, request: Any) -> Any:
    session, security = req.session, ctx.security
    if session is None or security is None or not session.listener.sasl:
        return SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[]
        )
    if request.mechanism not in security.mechanisms:
        return SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=security.mechanisms
        )
    session.exchange = exchange(request.mechanism, security.credentials)
    session.raw_tokens = req.api_version == 0
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=security.mechanisms)
